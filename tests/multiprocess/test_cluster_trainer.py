"""The trainer as a user runs it (`experiments/aime.py --model=tiny`) on a 2-process loopback
cluster (2 x 4 CPU devices, gloo collectives) against 1 process x 8 devices on the same mesh
`data:2,fsdp:4`: the same metrics at every step and the same evaluation, only process 0 writing,
resume (also on another layout) and a lost process.

What is equal, and why not everything bit for bit: the rollouts (sampling, rewards, advantages,
every `reward*` / `accuracy` / `adv_*` / `local/*` value) and the evaluation are computed from
the same host values on both layouts and are compared exactly. The update's reductions
(gradient, loss, entropy) sum the 8 devices' partial results in another order across two
processes (gloo) than within one, so `loss`, `entropy`, `grad_norm`, `abs_logp_diff`, `kl` and
`clip_fraction` agree to float32 rounding (rtol 1e-5, atol 1e-6; measured: |Δ| <= 1.2e-8 on
values of 1e-8 to 6). Timings (`*_s`, `*_per_s`) are wall-clock and not compared.
"""
import json
import os
import signal
import time

import numpy as np
import pytest

from _cluster import Cluster, check, describe, run_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("multiprocess")]

AIME = "experiments/aime.py"
MESH = "data:2,fsdp:4"
WARM = ["--warm=warm_steps=10", "--warm=num_train=64", "--warm=num_eval=8"]
COMMON = ["--model=tiny", *WARM, "--eval_every=2", "--eval_n=2",
          "--set=rollout.prompts_per_step=4", "--set=rollout.group_size=4",
          "--set=rollout.max_new_tokens=16", "--set=checkpoint_every=1"]
JOIN = ["--distributed", "--coordinator={coordinator}", "--num_processes={num_processes}",
        "--process_id={process_id}"]
DEVICE_REDUCED = {"loss", "entropy", "grad_norm", "abs_logp_diff", "kl", "clip_fraction"}
TIMEOUT = 600


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
  """The tiny warm start (`--warm` above) for the collector test. (A run builds its own in its
  workdir: its cache key holds the numerics environment, which names the device count.)"""
  from botjax.testbeds import arith
  from botjax.train.config import apply_overrides
  setup = apply_overrides(arith.ArithmeticSetup(), [w.split("=", 1)[1] for w in WARM])
  return arith.prepare(str(tmp_path_factory.mktemp("warm")), setup, verbose=False).checkpoint


def aime(workdir, *, processes, steps, mesh=MESH, extra=(), timeout=TIMEOUT):
  """Runs aime.py --model=tiny on `processes` x (8 / processes) devices; returns the results."""
  args = [*COMMON, f"--workdir={workdir}", f"--steps={steps}", f"--mesh={mesh}", *extra]
  if processes > 1:
    args += JOIN
  with Cluster(script=AIME, args=args, num_processes=processes,
               devices_per_process=8 // processes, timeout=timeout) as c:
    return c.wait()


def rows(workdir) -> list[dict]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f if line.strip()]


def evals(workdir) -> list[dict]:
  with open(os.path.join(workdir, "eval.json")) as f:
    return json.load(f)["history"]


def assert_same_metrics(got: list[dict], want: list[dict]) -> None:
  """Every logged metric equal at every step (device reductions to float32 rounding)."""
  assert [r["step"] for r in got] == [r["step"] for r in want]
  for g, w in zip(got, want):
    assert g.keys() == w.keys(), (g["step"], set(g) ^ set(w))
    for k in w:
      if k.endswith("_s") or k.endswith("_per_s"):
        continue
      if k in DEVICE_REDUCED:
        np.testing.assert_allclose(g[k], w[k], rtol=1e-5, atol=1e-6, err_msg=f"step {w['step']} {k}")
      else:
        assert g[k] == w[k], (w["step"], k, g[k], w[k])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """4 steps on 1 process x 8 devices, mesh data:2,fsdp:4 (evaluation at steps 0, 2, 4)."""
  workdir = str(tmp_path_factory.mktemp("one"))
  check(aime(workdir, processes=1, steps=4))
  return workdir


def test_two_processes_train_and_resume_as_one_process(reference, tmp_path):
  workdir = str(tmp_path / "two")
  first = check(aime(workdir, processes=2, steps=2))
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2"]
  second = check(aime(workdir, processes=2, steps=4))    # resumes from step 2
  want = rows(reference)
  assert [r["step"] for r in want] == [0, 1, 2, 3, 4]
  # metrics.jsonl and eval.json hold each step once: one process wrote them
  assert_same_metrics(rows(workdir), want)
  assert evals(workdir) == evals(reference)
  assert [r["step"] for r in want if "eval/accuracy" in r] == [0, 2, 4]
  for run in (first, second):
    zero, one = run
    assert "[botjax] bot_grpo on tiny" in zero.stdout and "[botjax] done: " in zero.stdout
    assert "agree on the run config" in zero.stdout
    # process 1 prints only its start-up line (gloo's own lines, printed from several threads
    # and sometimes interleaved, aside)
    said = [line for line in one.stdout.splitlines() if "[botjax]" in line or "[aime]" in line]
    assert said == ["[botjax] jax.distributed: process 1 of 2, 4 local / 8 global devices"], \
        describe(run)
  assert "resuming at step 2" in second[0].stdout


def test_a_two_process_checkpoint_resumes_on_one_process_and_back(reference, tmp_path):
  """2 processes (data:2,fsdp:4) -> 1 process (fsdp:8), and 1 process (fsdp:8) -> 2 processes
  (data:2,fsdp:4): the state is resharded on restore and the following steps match."""
  want = rows(reference)
  to_one = str(tmp_path / "to_one")
  check(aime(to_one, processes=2, steps=2))
  check(aime(to_one, processes=1, steps=4, mesh="fsdp:8"))
  assert_same_metrics(rows(to_one), want)
  to_two = str(tmp_path / "to_two")
  check(aime(to_two, processes=1, steps=2, mesh="fsdp:8"))
  check(aime(to_two, processes=2, steps=4))
  assert_same_metrics(rows(to_two), want)
  assert evals(to_one) == evals(reference) == evals(to_two)


def test_the_slot_engine_trains_on_two_processes_as_on_one(tmp_path):
  """`--engine=slots` on 2 processes: every process runs the engine's host loop over the same
  replicated tokens, so the run (rollouts, rewards, evaluation) is the one-process run's."""
  one, two = str(tmp_path / "one"), str(tmp_path / "two")
  slots = ["--engine=slots"]
  check(aime(one, processes=1, steps=2, extra=slots))
  run = check(aime(two, processes=2, steps=2, extra=slots))
  assert "rollouts on slots" in run[0].stdout
  assert_same_metrics(rows(two), rows(one))
  assert evals(two) == evals(one)


def test_a_lost_process_stops_the_run_and_a_restart_resumes_it(reference, tmp_path):
  """Process 1 is killed during step 3 (checkpoint 2 committed): process 0 stops within
  heartbeat/4 + one beat (5 s + 1 s here; 15 s + 3 s at the default 60 s) naming it, instead
  of waiting in the step's collective; the same command then resumes from the newest committed
  checkpoint and ends as the uninterrupted run."""
  workdir = str(tmp_path / "lost")
  args = [*COMMON, f"--workdir={workdir}", "--steps=4", f"--mesh={MESH}", *JOIN,
          "--heartbeat_timeout=20"]
  committed = os.path.join(workdir, "checkpoints", "2")
  with Cluster(script=AIME, args=args, timeout=TIMEOUT) as c:
    while not os.path.isdir(committed):
      assert c.remaining() > 0 and len(c.results()) == 0, describe(c.results())
      time.sleep(0.05)
    c.kill(1, signal.SIGKILL)
    killed_at = time.monotonic() - c._t0
    results = c.wait(timeout=120)
  survivor = results[0]
  assert survivor.returncode == 75 and not survivor.ended_by_helper, describe(results)
  assert "[botjax] process 0 of 2: lost process 1 of 2 (host " in survivor.stderr
  assert survivor.seconds - killed_at < 20, (survivor.seconds - killed_at, describe(results))
  steps = sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit())
  assert steps[-1] in (2, 3), steps
  again = check(aime(workdir, processes=2, steps=4))
  assert f"resuming at step {steps[-1]}" in again[0].stdout
  assert_same_metrics(rows(workdir), rows(reference))
  assert evals(workdir) == evals(reference)


def test_bad_set_ups_of_a_multi_process_run_get_clear_errors(tmp_path):
  """A mesh larger than the cluster, and processes started with different flags."""
  big = aime(str(tmp_path / "big"), processes=2, steps=1, mesh="fsdp:16", timeout=180)
  for r in big:
    assert r.returncode == 2, describe(big)
    assert "--mesh=fsdp:16" in r.stderr and "2 process(es) x 4 local devices" in r.stderr
  workdir = str(tmp_path / "differ")
  args = [*COMMON, f"--workdir={workdir}", "--steps=1", f"--mesh={MESH}", *JOIN,
          "--set=rollout.temperature={process_id}.5"]
  with Cluster(script=AIME, args=args, timeout=180) as c:
    differ = c.wait()
  for r in differ:
    assert r.returncode == 2, describe(differ)
    assert "the processes disagree on the run config" in r.stderr, describe(differ)
    assert ("train.rollout.temperature: process 0: 0.5, process 1: 1.5" in r.stderr), \
        describe(differ)
  assert not os.path.exists(os.path.join(workdir, "metrics.jsonl"))


def test_each_process_reads_its_share_of_prompts_and_scores_its_rows_once(warm):
  """`RolloutCollector.collect` on 2 processes: process p reads prompts 2p, 2p+1 of each step's
  4 and scores their 8 rows, no row twice and none left out; both return the rollouts that 1
  process x 8 devices returns (reward counted once: each row's reward and component appear once
  in every process's rollouts)."""
  from _workers import result
  two = [result(r.stdout) for r in run_cluster(
      script="tests/multiprocess/_workers.py", args=["collect_share", warm], timeout=TIMEOUT)]
  (one,) = [result(r.stdout) for r in run_cluster(
      script="tests/multiprocess/_workers.py", args=["collect_share", warm], num_processes=1,
      devices_per_process=8, timeout=TIMEOUT)]
  for s in range(2):
    assert one["steps"][s]["read"] == [4 * s + i for i in range(4)]
    assert one["steps"][s]["scored"] == list(range(16))
    for p in (0, 1):
      got = two[p]["steps"][s]
      assert got["read"] == [4 * s + 2 * p, 4 * s + 2 * p + 1]
      assert got["scored"] == list(range(8 * p, 8 * p + 8))
      assert got["position"] == 4 * (s + 1)
      for k in ("digest", "rewards", "completions", "lengths", "reward_failures"):
        assert got[k] == one["steps"][s][k], (s, p, k)
    assert len(set(one["steps"][s]["completions"])) > 1
