"""benchmarks/rl_step.py as a user runs it: a subprocess on CPU, its per-iteration lines, the table.

The botjax side runs everywhere; the comparison with TRL (each side in a fresh process, the two
in lockstep, the same model and tokenizer checked by digest) runs where the `bench` extra is
installed.
"""
import importlib.util
import os
import re

import pytest

from _util import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "rl_step.py")


def _run(*args, timeout=600):
  return run_script(SCRIPT, *args, timeout=timeout)


def _row(stdout, name):
  m = re.search(rf"^{name}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
                rf"([\d.]+)", stdout, re.M)
  assert m, stdout
  return [float(x) for x in m.groups()]


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_botjax_side_runs_and_reports_its_phases():
  r = _run("--side", "botjax", "--prompts", "4", "--group", "2", "--new-tokens", "16",
           "--warmup", "1", "--iters", "2")
  assert r.returncode == 0, r.stderr[-3000:]
  assert "host allocator: freed memory kept for reuse" in r.stdout
  assert "digest" in r.stdout and "botjax per-phase split" in r.stdout
  assert len(re.findall(r"^  botjax iter \d", r.stdout, re.M)) == 3
  s_iter, lo, hi, gen, reward, update, mean_len = _row(r.stdout, "botjax")
  assert 0 < lo <= s_iter <= hi and gen > 0 and update > 0
  assert gen + reward + update <= s_iter * 1.05
  assert mean_len > 15          # the embedding edit keeps EOS from ending completions early


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs the bench extra (trl)")
def test_both_sides_in_fresh_processes_print_the_ratio():
  r = _run("--prompts", "4", "--group", "2", "--new-tokens", "16", "--warmup", "1", "--iters", "2")
  assert r.returncode == 0, r.stderr[-3000:]
  # default: each side in a fresh process, the two in lockstep (one iteration at a time)
  assert "each in a fresh process, one iteration at a time, alternately" in r.stdout
  pairs = re.search(r"median of the paired ratios .*: ([\d.]+)x over (\d+) pairs", r.stdout)
  assert pairs and int(pairs.group(2)) == 2 and float(pairs.group(1)) > 0, r.stdout
  digests = set(re.findall(r"digest ([0-9a-f]{12})", r.stdout))
  assert len(digests) == 1, digests
  b, t = _row(r.stdout, "botjax")[0], _row(r.stdout, "TRL")[0]
  m = re.search(r"ratio TRL / botjax: ([\d.]+)x per iteration \(([\d.]+) s vs ([\d.]+) s\)",
                r.stdout)
  assert m, r.stdout
  ratio, t_med, b_med = (float(x) for x in m.groups())
  assert (t_med, b_med) == (t, b), r.stdout             # the table's medians
  # the ratio is computed before rounding: within the rounding of the printed 3 decimals
  assert abs(ratio - t / b) <= t / b * (0.0006 / b + 0.0006 / t) + 0.005, r.stdout


def test_wide_model_pads_its_vocabulary_and_never_samples_the_padding(tmp_path, monkeypatch):
  """--model=wide: 2.6 M parameters, 1024 vocabulary rows for the tokenizer's ids, and the rows
  past them (and the special ids) carry practically no probability under the edited weights."""
  torch = pytest.importorskip("torch")
  import transformers
  monkeypatch.syspath_prepend(os.path.dirname(SCRIPT))          # the script's own _machine.py
  spec = importlib.util.spec_from_file_location("rl_step_bench", SCRIPT)
  bench = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bench)
  model_dir, records, tok, n_params, special, digest = bench.build_setup(
      str(tmp_path), num_records=64, seed=0,
      special_logit_gap=bench.SPECIAL_LOGIT_GAP["wide"], size="wide")
  assert 2.5e6 < n_params < 2.7e6 and len(records) == 64 and len(digest) == 12
  model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
  cfg = model.config
  assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (1024, 256, 4)
  assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size) == (4, 2, 512)
  assert len(tok) < 1024
  ids = tok(records[0]["problem"], return_tensors="pt")["input_ids"]
  with torch.no_grad():
    probs = model(ids).logits.softmax(-1)[0]                     # [L, 1024]
  never = sorted(set(range(len(tok), 1024)) | set(special))
  assert float(probs[:, never].sum(-1).max()) < 1e-6
  assert float(probs[:, :len(tok)].sum(-1).min()) > 1 - 1e-6


def _vllm_python() -> str | None:
  """The interpreter of scripts/setup_vllm.sh's environment ($BOTJAX_VLLM_PYTHON, else .ci/run's
  default place), if it exists."""
  path = os.environ.get("BOTJAX_VLLM_PYTHON") or os.path.expanduser(
      "~/.cache/botjax/venv-vllm/bin/python")
  return path if os.access(path, os.X_OK) else None


def test_engine_vllm_refuses_the_tiny_model_and_a_missing_interpreter(tmp_path):
  r = _run("--engine", "vllm", timeout=120)
  assert r.returncode == 2 and "--engine vllm needs --model wide" in r.stderr, r.stderr[-2000:]
  r = _run("--engine", "vllm", "--model", "wide", "--vllm-python", str(tmp_path / "nope"),
           timeout=120)
  assert r.returncode == 2 and "is not an executable interpreter" in r.stderr, r.stderr[-2000:]


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
@pytest.mark.skipif(importlib.util.find_spec("trl") is None or _vllm_python() is None,
                    reason="needs the bench extra (trl) and scripts/setup_vllm.sh's environment "
                           "(BOTJAX_VLLM_PYTHON)")
def test_engine_vllm_runs_the_three_sides_in_lockstep():
  r = _run("--model", "wide", "--engine", "vllm", "--vllm-python", _vllm_python(),
           "--prompts", "4", "--group", "2", "--new-tokens", "16", "--warmup", "1", "--iters", "2",
           timeout=900)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "all sides, each in a fresh process, one iteration at a time, in turn" in r.stdout
  assert len(set(re.findall(r"digest ([0-9a-f]{12})", r.stdout))) == 1    # one model, 3 venvs
  assert len(re.findall(r"^  botjax\+vLLM iter \d", r.stdout, re.M)) == 3
  b, v, t = (_row(r.stdout, re.escape(n)) for n in ("botjax", "botjax+vLLM", "TRL"))
  assert all(row[6] == 16.0 for row in (b, v, t))                         # same tokens per side
  m = re.search(r"ratio botjax\+vLLM / botjax: ([\d.]+)x per iteration \(([\d.]+) s vs "
                r"([\d.]+) s\).*weight push and probe check ([\d.]+) s", r.stdout)
  assert m and (float(m.group(2)), float(m.group(3))) == (v[0], b[0]), r.stdout
  assert float(m.group(4)) > 0
  assert "ratio TRL / botjax" in r.stdout
