"""RewardPool: exceptions, hangs past the timeout, NaN, dead workers fall back; the batch completes.

The scorers live at module level so that spawned worker processes can unpickle them; this module
imports nothing heavy, since every spawned worker imports it.
"""
import math
import os
import time

import pytest

from botjax.rewards import RewardPool, RewardResult, RewardUnavailable, batched


def _behave(prompt, completion, meta):
  """Scores len(completion) unless the completion asks for a failure."""
  if completion == "raise":
    raise ValueError("bad item")
  if completion == "hang":
    time.sleep(30)
  if completion == "nan":
    return float("nan")
  if completion == "exit":
    os._exit(3)
  if completion == "gone":
    raise RewardUnavailable("judge is gone")
  return RewardResult(reward=float(len(completion)), components={"len": float(len(completion))})


SCORER = batched(_behave, name="behave")
BATCH = ["ab", "raise", "abcd", "hang", "nan", "abc"]


def _check_batch(results, fallback):
  assert [r.reward for r in results] == [2.0, fallback, 4.0, fallback, fallback, 3.0]
  assert [r.failed for r in results] == [False, True, False, True, True, False]
  # none of these is the model's fault: flagged for the trainer to keep out of the loss
  assert [r.infra_failure for r in results] == [False, True, False, True, True, False]
  assert "ValueError: bad item" in results[1].error
  assert "timed out" in results[3].error
  assert "non-finite" in results[4].error
  assert results[2].components == {"len": 4.0}


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_failures_fall_back_and_are_counted(kind):
  with RewardPool(SCORER, num_workers=2, timeout_s=1.0, fallback_reward=-0.5, kind=kind) as pool:
    n = len(BATCH)
    start = time.monotonic()
    results = pool(["p"] * n, BATCH, [{}] * n)
    elapsed = time.monotonic() - start
    _check_batch(results, -0.5)
    # The hung item costs one timeout, not the 30 s it sleeps (a generous bound for a loaded CPU
    # that also covers spawning two worker processes, which the item timeouts do not count).
    assert elapsed < 15.0, elapsed
    m = pool.metrics()
    assert (m["failures"], m["timeouts"], m["exceptions"], m["nonfinite"]) == (3, 1, 1, 1)
    assert m["worker_restarts"] == 1
    # The replaced worker serves the next batch normally.
    again = pool(["p"] * 2, ["x", "yy"], [{}] * 2)
    assert [r.reward for r in again] == [1.0, 2.0] and not any(r.failed for r in again)
    pool.reset_metrics()
    assert pool.metrics()["failures"] == 0


def test_dead_process_worker_is_replaced():
  with RewardPool(SCORER, num_workers=1, timeout_s=5.0, kind="process") as pool:
    results = pool(["p"] * 3, ["a", "exit", "abc"], [{}] * 3)
    assert [r.reward for r in results] == [1.0, 0.0, 3.0]
    assert "died" in results[1].error and "3" in results[1].error
    assert pool.metrics()["exceptions"] == 1 and pool.metrics()["worker_restarts"] == 1


@pytest.mark.parametrize("kind", ["inline", "thread"])
def test_reward_unavailable_propagates(kind):
  pool = RewardPool(SCORER, num_workers=2, timeout_s=2.0, kind=kind)
  with pytest.raises(RewardUnavailable, match="judge is gone"):
    pool(["p"] * 3, ["a", "gone", "b"], [{}] * 3)
  pool.close()


def test_inline_and_mapping_of_fns():
  pool = RewardPool({"len": SCORER, "one": batched(lambda p, c, m: 1.0)}, weights={"len": 2.0},
                    kind="inline")
  results = pool(["p", "p"], ["abc", "raise"], [{}, {}])
  assert results[0].reward == 7.0 and results[0].components["len/len"] == 3.0
  assert results[1].failed and results[1].reward == 0.0
  assert pool.metrics()["exceptions"] == 1


def test_bad_arguments():
  with pytest.raises(ValueError, match="kind"):
    RewardPool(SCORER, kind="fiber")
  with pytest.raises(ValueError, match="timeout_s"):
    RewardPool(SCORER, timeout_s=math.inf)
  with pytest.raises(ValueError, match="num_workers"):
    RewardPool(SCORER, num_workers=0)
  with pytest.raises(TypeError, match="cannot be pickled"):
    RewardPool(batched(lambda p, c, m: 1.0), kind="process")
  with pytest.raises(ValueError, match="same length"):
    RewardPool(SCORER, kind="inline")(["p"], ["a", "b"], [{}])


def test_math_reward_in_process_workers():
  """math-verify runs in each worker's main thread (its signal timers work); adversarial answers
  are screened, correct ones verified."""
  from botjax.rewards import MathReward
  from botjax.testbeds.arith_judge import ExactArithmeticJudge

  good = "<step 1>3 + 4 = 7</step>\n<step 2>7 * 2 = 14</step>\n<final>\\frac{28}{2}</final>"
  completions = [good, "\\boxed{9^{9^{9^{9}}}}", "<final>9**9**9**9</final>", "\\boxed{014}"]
  meta = [{"answer": "14", "step_values": [7, 14]}] * 4
  with RewardPool(MathReward(ExactArithmeticJudge()), num_workers=1, timeout_s=5.0,
                  kind="process") as pool:
    results = pool(["p"] * 4, completions, meta)
  assert [r.reward for r in results] == pytest.approx([3.2, 0.0, 0.0, 3.0])
  assert [r.components["answer"] for r in results] == [1.0, 0.0, 0.0, 1.0]
  assert results[0].token_spans == [(0, 24, 0.25), (25, 50, 0.25)]  # w_s / 2 steps
  assert pool.metrics()["failures"] == 0


def test_idle_process_worker_killed_between_batches():
  with RewardPool(SCORER, num_workers=1, timeout_s=5.0, kind="process") as pool:
    assert pool(["p"], ["ab"], [{}])[0].reward == 2.0
    worker = pool._workers[0].proc
    worker.kill()
    worker.join()
    results = pool(["p"] * 2, ["abc", "a"], [{}] * 2)
    assert [r.reward for r in results] == [3.0, 1.0] and not any(r.failed for r in results)
    assert pool.metrics()["worker_restarts"] == 1


def test_pool_gives_its_functions_spec():
  from botjax.rewards import MathReward, RewardSpec
  with RewardPool(MathReward(None), kind="inline") as pool:
    assert pool.spec == MathReward(None).spec
  with RewardPool(SCORER, kind="inline") as pool:
    assert pool.spec == RewardSpec()
