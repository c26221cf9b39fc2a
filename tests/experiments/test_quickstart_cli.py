"""experiments/quickstart.py as a user runs it (tiny settings): outputs, and reuse of finished runs."""
import json
import os

import numpy as np
import pytest

from _util import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "quickstart.py")
TINY = ["--steps=2", "--warm=warm_steps=5", "--warm=num_train=64", "--warm=num_eval=8",
        "--set=rollout.prompts_per_step=2", "--set=rollout.group_size=4",
        "--set=rollout.max_new_tokens=32", "--set=eval_every=1", "--set=progress=false"]


def _run(*args, timeout=600):
  return run_script(SCRIPT, *args, timeout=timeout)


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_two_recipes_then_reuse_and_one_more(tmp_path):
  r = _run("--algos=grpo,bot_grpo", f"--workdir={tmp_path}", *TINY)
  assert r.returncode == 0, r.stderr[-3000:]
  for algo in ("grpo", "bot_grpo"):
    with open(tmp_path / f"{algo}-seed0" / "metrics.jsonl") as f:
      recs = [json.loads(line) for line in f if line.strip()]
    assert [x["step"] for x in recs] == [0, 1, 2]
  table = (tmp_path / "quickstart.md").read_text()
  assert "| grpo | 1 |" in table and "| bot_grpo | 1 |" in table
  assert ("ppo_epochs=1, mini_batches=1. One on-policy update per rollout batch, so the PPO ratio "
          "is exactly 1: clip-higher (DAPO), sequence clipping (GSPO) and ReCo's variance ratio had "
          "nothing to act on.") in table
  assert (tmp_path / "quickstart.png").stat().st_size > 10_000
  env = json.loads((tmp_path / "environment.json").read_text())
  assert env["backend"] == "cpu" and env["jax"] and "Numerics environment" in table
  # the warm start is keyed on that environment too
  [warm] = [d for d in os.listdir(tmp_path) if d.startswith("warmstart-")]
  assert len(warm.split("-")) == 3
  setup = json.loads((tmp_path / warm / "setup.json").read_text())
  assert setup["environment"] == env
  report = _run("--algos=grpo,bot_grpo,rloo", "--report_only", f"--workdir={tmp_path}", *TINY)
  assert report.returncode == 0, report.stderr[-3000:]
  assert "rloo-seed0: not finished, left out" in report.stdout
  assert not (tmp_path / "rloo-seed0").exists()
  # a second call (e.g. the rest of the comparison in another process) reuses finished runs
  again = _run("--algos=grpo,bot_grpo", f"--workdir={tmp_path}", *TINY)
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout.count("reusing it") == 2 and "| grpo | 1 |" in again.stdout
  # another config is not "finished": two mini-batches per rollout batch train again, and the
  # table no longer calls the ratio mechanisms inert. A learning-rate sweep runs each rate on
  # seed 0 and the best (mean of the last evaluations) on every seed.
  third = _run("--algos=grpo", f"--workdir={tmp_path}", *TINY, "--mini_batches=2",
               "--lrs=3e-4,1e-9", "--seeds=2")
  assert third.returncode == 0 and "reusing it" not in third.stdout, third.stderr[-3000:]
  cfg = json.loads((tmp_path / "grpo-lr1e-09-seed0" / "config.json").read_text())
  assert cfg["train"]["mini_batches"] == 2 and cfg["train"]["optim"]["learning_rate"] == 1e-9
  table = (tmp_path / "quickstart.md").read_text()
  assert "ppo_epochs=1, mini_batches=2." in table and "nothing to act on" not in table
  acc = {lr: [json.loads(line) for line in open(tmp_path / f"grpo-lr{lr}-seed0" / "metrics.jsonl")]
         for lr in ("3e-04", "1e-09")}
  last = {lr: np.mean([r["eval/accuracy"] for r in recs if "eval/accuracy" in r][-5:])
          for lr, recs in acc.items()}
  best = max(last, key=last.get)
  # the rate is chosen on seed 0 and reported on seeds 1..2
  assert (tmp_path / f"grpo-lr{best}-seed1" / "seconds.json").exists()
  assert (tmp_path / f"grpo-lr{best}-seed2" / "seconds.json").exists()
  assert "reports seeds 1–2, which took no part in the choice" in table
  other = "1e-09" if best == "3e-04" else "3e-04"
  assert not (tmp_path / f"grpo-lr{other}-seed1").exists()
  assert f"| grpo (lr {float(best):g}) | 2 |" in table
  assert f"**{last[best]:.3f}**" in table and f"| {last[other]:.3f} |" in table.replace("| **", "| ")


def test_contrasts_must_name_two_recipes_of_algos(tmp_path):
  r = _run("--algos=grpo,bot_grpo", "--contrasts=bot_grpo:dapo", f"--workdir={tmp_path}", *TINY,
           timeout=120)
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert "--contrasts: 'bot_grpo:dapo' is not a:b with two different recipes of --algos " \
         "(grpo,bot_grpo)" in r.stderr


def test_engine_is_checked_before_the_warm_start(tmp_path):
  r = _run("--engine=foo", f"--workdir={tmp_path}", *TINY, timeout=120)
  assert r.returncode == 2 and "--engine='foo': not a rollout engine; valid: auto, jax, slots, vllm" in r.stderr
  # vLLM on CPU: the default tiny model's head size (96 / 4 = 24) has no CPU attention kernel
  r = _run("--engine=vllm", f"--workdir={tmp_path}", *TINY, timeout=120)
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
  assert "the tiny model's head size is 24" in r.stderr and "--warm=num_heads=3" in r.stderr
  assert not os.listdir(tmp_path)                       # refused before anything was written
