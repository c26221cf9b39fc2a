"""benchmarks/gemm_floor.py: the products it times are those of the benchmark model, and it runs."""
import importlib.util
import os
import re

import pytest

from _util import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "gemm_floor.py")


def _load(monkeypatch):
  monkeypatch.syspath_prepend(os.path.dirname(SCRIPT))     # its rl_step.py and _machine.py
  spec = importlib.util.spec_from_file_location("gemm_floor_bench", SCRIPT)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


@pytest.mark.parametrize("size,vocab", [("wide", 1024), ("tiny", 313)])
def test_weight_shapes_are_the_matrices_of_the_transformers_model(monkeypatch, size, vocab):
  """Every 2-D weight of the Qwen2 model that rl_step.py builds, the tied embedding once as the
  output embedding: same count and same shapes (as (in, out))."""
  pytest.importorskip("torch")
  import transformers
  bench = _load(monkeypatch)
  dims = dict(bench.MODEL_SIZES[size])
  dims.pop("vocab_size")
  model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
      vocab_size=vocab, **dims, tie_word_embeddings=True))
  hf = sorted(tuple(p.shape[::-1]) for p in model.parameters() if p.ndim == 2)   # [out, in]
  assert sorted(bench.weight_shapes(size, vocab)) == hf
  assert bench.weight_shapes(size, vocab)[-1] == (dims["hidden_size"], vocab)


def test_small_run_prints_both_floors_and_the_numpy_ratio():
  r = run_script(SCRIPT, "--model", "tiny", "--vocab", "313", "--prompts", "2", "--group", "2",
                 "--new-tokens", "4", "--prompt-len", "8", "--repeats", "1", timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  assert re.search(r"^decode products: [\d.]+ GFLOP in [\d.]+ s", r.stdout, re.M), r.stdout
  m = re.search(r"^update products: .* NumPy ([\d.]+) s .* NumPy / XLA ([\d.]+)x", r.stdout, re.M)
  assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, r.stdout
  assert "floor of one iteration's products" in r.stdout


def test_odd_prompt_count_and_missing_vocabulary_exit_2_naming_the_flag():
  r = run_script(SCRIPT, "--prompts", "3", timeout=120)
  assert r.returncode == 2 and "--prompts" in r.stderr, r.stderr
  r = run_script(SCRIPT, "--model", "tiny", timeout=120)
  assert r.returncode == 2 and "--vocab" in r.stderr, r.stderr
