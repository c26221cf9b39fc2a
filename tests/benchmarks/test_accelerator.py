"""benchmarks/accelerator.py --tiny as a user runs it: a subprocess on CPU, the table, the JSON."""
import json
import math
import os

import pytest

from _util import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "accelerator.py")


def _run(*args, timeout=300):
  return run_script(SCRIPT, *args, timeout=timeout)


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_tiny_run_prints_the_table_and_writes_json(tmp_path):
  path = tmp_path / "out" / "accel.json"
  r = _run("--tiny", "--skewed", f"--json={path}")
  assert r.returncode == 0, r.stderr[-3000:]
  for row in ("rollout 4 prompts x 2 samples x 16 new tokens", "train step 8 x 64 tokens, 2 micro",
              "FLOPs per train step", "MFU", "peak device memory", "compile: sampler",
              "compile: train step"):
    assert row in r.stdout, r.stdout
  assert "machine:" in r.stdout and "config:" in r.stdout
  report = json.loads(path.read_text())
  res = report["results"]
  for key in ("rollout_tokens_per_s", "rollout_s", "train_step_s", "train_tokens_per_s",
              "flops_per_step", "flops_6nt", "compile_init_s", "rollout_first_call_s",
              "compile_train_step_s"):
    assert math.isfinite(res[key]) and res[key] > 0, (key, res[key])
  assert res["compile_sampler_s"] >= 0
  # --skewed: the lockstep sampler and the slot engine on the same forced, spread lengths
  assert "skewed rollout: slot engine (4 slots)" in r.stdout, r.stdout
  lengths = res["skewed_useful_tokens"]
  assert 4 * 2 <= lengths < 4 * 2 * 16 and res["skewed_max_len"] <= 16
  for key in ("skewed_static_tokens_per_s", "skewed_engine_tokens_per_s",
              "skewed_engine_vs_static", "skewed_engine_kv_bytes", "skewed_static_kv_bytes"):
    assert math.isfinite(res[key]) and res[key] > 0, (key, res[key])
  assert 0 < res["skewed_static_utilisation"] < 1 and 0 < res["skewed_engine_utilisation"] <= 1
  assert res["skewed_engine_utilisation"] > res["skewed_static_utilisation"]
  assert 2 <= res["skewed_engine_programs"] <= 8
  assert res["rollout_tokens"] == 4 * 2 * 16 and res["train_tokens"] == 8 * 64
  # the layers are scanned (the 3B presets' default); XLA counts a loop body once, so the
  # FLOPs come from the unrolled twin: hardware FLOPs of a rematerialised step, ~8·N·tokens
  assert report["config"]["scan_layers"] is True
  assert res["flops_source"].startswith("XLA cost analysis (lowered, the unrolled twin")
  assert 1.2 < res["flops_per_step"] / res["flops_6nt"] < 1.8, res
  assert res["mfu"] is None                                # no peak FLOP/s for a CPU
  assert report["config"]["model"] == "tiny" and report["config"]["micro"] == 2


def test_bad_sizes_exit_2_naming_the_flag():
  r = _run("--tiny", "--micro=3", timeout=120)
  assert r.returncode == 2
  assert "--micro=3" in r.stderr and "Traceback" not in r.stderr
  r = _run("--tiny", "--skewed", "--slots=0", timeout=120)
  assert r.returncode == 2 and "--slots=0" in r.stderr and "Traceback" not in r.stderr
