"""benchmarks/long_rollouts.py: its workloads as its docstring states them, and its --tiny run as a
user runs it (the static sampler, the slot engine and HF `generate` on the same prompts and
lengths, a table with ratios against the static sampler of the same run, the machine and date)."""
import importlib.util
import json
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest

from _util import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "long_rollouts.py")


def _load(monkeypatch):
  monkeypatch.syspath_prepend(os.path.dirname(SCRIPT))     # its _machine.py
  spec = importlib.util.spec_from_file_location("long_rollouts_bench", SCRIPT)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_workloads_share_prompts_and_clip_the_drawn_lengths(monkeypatch):
  bench = _load(monkeypatch)
  args = SimpleNamespace(seed=0, tiny=False, prompts=32, samples=8, prompt_len=32, median=96.0,
                         sigma=0.9, min_len=8, max_len=512, budgets=[256, 1024], fixed_prompts=64,
                         fixed_len=128)
  w256, w1024, fixed = bench.workloads(args)
  assert w256["prompts"] == w1024["prompts"] and np.asarray(w1024["prompts"]).shape == (32, 32)
  l256, l1024 = np.asarray(w256["lengths"]), np.asarray(w1024["lengths"])
  assert l1024.shape == (256,) and l1024.min() >= 8 and l1024.max() <= 512
  np.testing.assert_array_equal(l256, np.minimum(l1024, 256))
  assert 60 < np.median(l1024) < 140                        # log-normal of median 96
  assert l1024.sum() / (256 * l1024.max()) < 0.5            # skewed: lockstep wastes most steps
  assert fixed["n"] == 1 and fixed["lengths"] == [128] * 64 and fixed["budget"] == 128
  assert bench.workloads(args)[1]["lengths"] == w1024["lengths"]          # seeded


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_tiny_run_prints_machine_table_and_ratios(tmp_path):
  out = tmp_path / "results.json"
  r = run_script(SCRIPT, "--tiny", f"--json={out}", timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  assert re.search(r"^machine: .+, \d+ cores visible, .+ \d{4}-\d\d-\d\d \d\d:\d\d UTC$",
                   r.stdout, re.M), r.stdout[:2000]
  results = json.loads(out.read_text())
  assert set(results) == {"skewed, budget 32", "skewed, budget 64", "fixed 8 x 16"}
  for name, sides in results.items():
    assert set(sides) == {"static", "engine", "hf"}, name
    for side, e in sides.items():
      assert len(e["times"]) == 1 and e["tokens_per_s"][0] > 0 and 0 < e["util"] <= 1, (name, e)
      if side != "static":
        assert e["ratio_vs_static"] == [sides["static"]["times"][0] / e["times"][0]]
      assert re.search(rf"^{re.escape(name)}\s+{side}\s+\d+ \(", r.stdout, re.M), r.stdout
    if name.startswith("skewed"):      # the slots keep busier than a lockstep decode
      assert sides["engine"]["util"] > sides["static"]["util"] + 0.2, sides
      assert 0 < sides["engine"]["programs"] <= 16
    else:
      assert sides["engine"]["util"] == sides["static"]["util"] == 1.0
