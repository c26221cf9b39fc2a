"""The notebooks run end to end on CPU with tiny settings, and are committed without outputs.

Each notebook is executed with nbclient after a cell that overrides its "parameters" cell
(few steps, a tiny warm start, a small eval, a work directory under tmp_path).
"""
import base64
import io
import os
import re
import subprocess
import sys

import pytest

from _util import one_device_xla_flags

nbformat = pytest.importorskip("nbformat", reason="nbformat is in the `test` extra")
nbclient = pytest.importorskip("nbclient", reason="nbclient is in the `test` extra")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
NAMES = ("quickstart.ipynb", "tpu_aime.ipynb")
TINY_WARM = {"warm_steps": 10, "num_train": 64, "num_eval": 8}
TINY_SET = ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=32",
            "progress=false"]


def _read(name):
  return nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)


def _kernel_name():
  """The python3 kernelspec, installed for this interpreter when it is missing."""
  try:
    import ipykernel  # noqa: F401
  except ImportError:
    pytest.skip("ipykernel is not installed (it is in the `test` extra): cannot run notebooks")
  from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
  try:
    KernelSpecManager().get_kernel_spec("python3")
  except NoSuchKernel:
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user", "--name", "python3"],
                   check=True, capture_output=True)
  return "python3"


def _execute(name, overrides, tmp_path, monkeypatch):
  """Runs the notebook with `overrides` (source) right after its parameters cell."""
  nb = _read(name)
  index = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
  assert len(index) == 1, f"{name} needs exactly one cell tagged 'parameters'"
  cell = nbformat.v4.new_code_cell(overrides)
  cell.metadata["tags"] = ["injected-parameters"]
  nb.cells.insert(index[0] + 1, cell)
  # The kernel inherits this environment: one CPU device (not conftest's 8 fake ones), no Hub.
  monkeypatch.setenv("XLA_FLAGS", one_device_xla_flags())
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  client = nbclient.NotebookClient(nb, kernel_name=_kernel_name(), timeout=600,
                                   resources={"metadata": {"path": str(tmp_path)}})
  client.execute()
  return nb


def _tagged(nb, tag):
  cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
  assert len(cells) == 1, f"one cell tagged {tag!r} expected"
  return cells[0]


def _text(cell):
  return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _png_size(cell):
  from PIL import Image
  pngs = [o.data["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
  assert pngs, f"no image/png output in cell {cell.source[:60]!r}"
  with Image.open(io.BytesIO(base64.b64decode(pngs[0]))) as img:
    return img.size


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name):
  nb = _read(name)
  nbformat.validate(nb)
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert code
  for c in code:
    assert c.outputs == [] and c.execution_count is None, f"{name}: outputs in {c.source[:60]!r}"
  params = _tagged(nb, "parameters")
  assert "WORKDIR" in params.source and "STEPS" in params.source
  install = [c for c in code if "%pip install" in c.source]
  assert len(install) == 1 and "import botjax" in install[0].source   # guarded: skipped if installed


@pytest.mark.parametrize("name", NAMES)
def test_paired_markdown_matches_the_notebook(name):
  """Each notebook has a jupytext MyST twin (`notebooks/<name>.md`) for review;
  after an edit run `jupytext --sync notebooks/*.ipynb`."""
  jupytext = pytest.importorskip("jupytext")
  nb = _read(name)
  md = jupytext.read(os.path.join(NOTEBOOKS, name.replace(".ipynb", ".md")))
  assert nb.metadata["jupytext"]["formats"] == "ipynb,md:myst"
  pairs = [(c.cell_type, c.source.strip()) for c in nb.cells]
  assert [(c.cell_type, c.source.strip()) for c in md.cells] == pairs


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_quickstart_notebook_runs(tmp_path, monkeypatch):
  workdir = tmp_path / "qs"
  nb = _execute("quickstart.ipynb", f"STEPS = 2\nSEEDS = 1\nEVAL_N = 2\nWORKDIR = {str(workdir)!r}\n"
                f"WARM = {TINY_WARM!r}\nSET = {TINY_SET!r}", tmp_path, monkeypatch)
  install = next(c for c in nb.cells if "%pip install" in c.source)
  assert install.outputs == []                         # botjax importable: no pip call
  w, h = _png_size(_tagged(nb, "advantages-heatmap"))
  assert w >= 600 and h >= 200
  # The toy batch: BoT-GRPO gives a right answer's penalised tokens less than its clean ones,
  # where GRPO gives every token of the rollout one value.
  toy = _text(next(c for c in nb.cells if "bot_grpo(token_rewards" in c.source))
  m = re.search(r"row 0 .*GRPO ([+-][\d.]+) on every token \| BoT-GRPO ([+-][\d.]+) on clean "
                r"tokens, ([+-][\d.]+) on penalised ones", toy)
  assert m, toy
  grpo, clean, penalised = map(float, m.groups())
  assert grpo > 0 and clean > penalised
  plot = _tagged(nb, "quickstart-plot")
  w, h = _png_size(plot)
  assert w >= 600 and h >= 300
  final = re.search(r"final held-out accuracy: \{'grpo': ([\d.]+), 'bot_grpo': ([\d.]+)\}",
                    _text(plot))
  assert final, _text(plot)
  assert all(0.0 <= float(v) <= 1.0 for v in final.groups())
  for algo in ("grpo", "bot_grpo"):
    assert (workdir / f"{algo}-seed0" / "metrics.jsonl").exists()
  assert (workdir / "quickstart.png").exists()


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_tpu_aime_notebook_runs_tiny(tmp_path, monkeypatch):
  workdir = tmp_path / "aime"
  nb = _execute("tpu_aime.ipynb",
                f"TINY = True\nSTEPS = 2\nEVAL_EVERY = 2\nEVAL_N = 4\nEVAL_LIMIT = 8\n"
                f"PLAN_FLOPS = False\nWORKDIR = {str(workdir)!r}\nWARM = {TINY_WARM!r}\n"
                f"SET = {TINY_SET!r}", tmp_path, monkeypatch)
  install = next(c for c in nb.cells if "%pip install" in c.source)
  assert install.outputs == []
  plan = _text(_tagged(nb, "plan"))
  assert "qwen2.5-3b" in plan and "3,085.9 M" in plan and "batch 64 x 1408 tokens" in plan
  passk_cell = next(c for c in nb.cells if "passk = {" in c.source)
  m = re.search(r"step (\d+): pass@1 = ([\d.]+), pass@2 = ([\d.]+), pass@4 = ([\d.]+)",
                _text(passk_cell))
  assert m, _text(passk_cell)
  assert int(m.group(1)) == 2
  p1, p2, p4 = map(float, m.groups()[1:])
  assert 0.0 <= p1 <= p2 <= p4 <= 1.0
  w, h = _png_size(_tagged(nb, "passk-plot"))
  assert w >= 400 and h >= 250
  assert (workdir / "metrics.jsonl").exists()
