"""experiments/ablations.py as a user runs it: a tiny ablation end to end, reuse, errors."""
import json
import os

import pytest

from _util import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "ablations.py")
TINY = ["--seeds=1", "--steps=2", "--eval_every=1", "--warm=warm_steps=5", "--warm=num_train=64",
        "--warm=num_eval=8", "--set=rollout.prompts_per_step=2", "--set=rollout.group_size=4",
        "--set=rollout.max_new_tokens=32", "--set=progress=false"]


def _run(*args, timeout=600):
  return run_script(SCRIPT, *args, timeout=timeout)


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_stack_ablation_writes_plot_and_table_and_reuses_finished_runs(tmp_path):
  r = _run("--ablation=stack", f"--workdir={tmp_path}", *TINY)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "2 runs in all" in r.stdout and "0 already finished" in r.stdout
  runs = sorted(os.listdir(tmp_path / "runs"))
  assert runs == ["bot_grpo-ws0-ep-W1-p0-seed0", "bot_grpo-ws0.5-ep-W1-p0-seed0"]
  for name in runs:
    with open(tmp_path / "runs" / name / "metrics.jsonl") as f:
      recs = [json.loads(line) for line in f if line.strip()]
    assert [x["step"] for x in recs] == [0, 1, 2] and all("eval/accuracy" in x for x in recs)
    with open(tmp_path / "runs" / name / "config.json") as f:
      variant = json.load(f)["ablation_variant"]
    assert variant["w_s"] == (0.0 if "ws0-" in name else 0.5)
  table = (tmp_path / "stack.md").read_text()
  assert "| global only | 1 |" in table and "| global + local | 1 |" in table
  assert "peak-to-final drop" in table and "8 problems" in table
  assert (tmp_path / "stack.png").stat().st_size > 10_000
  assert table.startswith("# Ablation: global reward only vs global + local reward\n")
  assert "mean ± standard error over seeds" in table and "Fig. 4" not in table
  # the clearer alias reports the same ablation from the finished runs
  alias = _run("--ablation=global_local", "--report_only", f"--workdir={tmp_path}", *TINY)
  assert alias.returncode == 0, alias.stderr[-3000:]
  assert "global reward only vs global + local reward" in alias.stdout
  # a second call (another ablation sharing the base run) trains only what is missing
  again = _run("--ablation=w_s", "--w_s_values=0.5", f"--workdir={tmp_path}", *TINY)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "1 runs in all" in again.stdout and "1 already finished" in again.stdout
  assert (tmp_path / "w_s.md").exists()


def test_bad_flags_exit_2(tmp_path):
  r = _run("--ablation=colour", f"--workdir={tmp_path}", timeout=120)
  assert r.returncode == 2 and "colour" in r.stderr and "strategy" in r.stderr
  assert "global_local=stack" in r.stderr
  r = _run("--shard=2/2", f"--workdir={tmp_path}", timeout=120)
  assert r.returncode == 2 and "--shard=2/2" in r.stderr
