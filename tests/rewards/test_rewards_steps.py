"""Step windows, judging strategies, the exact arithmetic judge, MathReward (eq. 8),
local judges."""
import numpy as np
import pytest

from botjax.data import arithmetic
from botjax.rewards import (JudgeRequest, JudgeUnavailable, LocalModelJudge,
                            MathReward, RewardPool, judge_steps, segment_steps,
                            spans_to_token_values, step_scores, step_token_spans, windows)
from botjax.testbeds.arith_judge import ExactArithmeticJudge, parse_equation
from botjax.rewards.steps import propagate_errors

RIGHT = ["3 + 4 = 7", "7 * 2 = 14", "14 - 5 = 9", "9 + 1 = 10", "10 * 3 = 30"]
VALUES = [7, 14, 9, 10, 30]
META = {"answer": "30", "step_values": VALUES,
        "step_exprs": ["3 + 4", "7 * 2", "14 - 5", "9 + 1", "10 * 3"]}


class RecordingJudge(ExactArithmeticJudge):
  """The exact judge, keeping the requests it was sent."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.requests = []

  def _verdicts(self, requests):
    self.requests.extend(requests)
    return super()._verdicts(requests)


def test_windows():
  assert windows(5, 1) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
  assert windows(5, 3) == [(0, 3), (1, 4), (2, 5)]
  assert windows(2, 3) == [(0, 2)]
  assert windows(0, 3) == []
  with pytest.raises(ValueError, match="window"):
    windows(3, 0)


def test_propagate_errors():
  assert propagate_errors([1, -1, 1, -1, 0]) == [1, -1, 0, 0, 0]
  assert propagate_errors([1, 0, 1]) == [1, 0, 1]


@pytest.mark.parametrize("text,index,values,division,expected", [
    ("3 + 4 = 7", 0, [7], "exact", True),
    ("7 * 2 = 15", 0, [15], "exact", False),  # false equation
    ("7 * 2 = 14", 0, [15], "exact", False),  # true equation, not the reference value
    ("7 * 2 = 14", 1, [14], "exact", False),  # beyond the reference
    ("hello", 0, [7], "exact", False),
    ("8 / 2 = 4", 0, [4], "exact", True),
    ("7 / 2 = 3", 0, [3], "exact", False),
    ("7 / 2 = 3", 0, [3], "floor", True),
    ("-7 / 2 = -4", 0, [-4], "floor", True),
    ("-7 / 2 = -3", 0, [-3], "trunc", True),
    ("3 × 4 = 12", 0, [12], "exact", True),
    ("8 // 2 = 4", 0, [4], "exact", True),
    ("5 / 0 = 0", 0, [0], "floor", False),
    ("3 + 4 = 7 + 0", 0, [7], "exact", False),
])
def test_exact_step_check(text, index, values, division, expected):
  judge = ExactArithmeticJudge(division=division)
  assert judge.step_correct(text, index, values) is expected


def test_parser_is_not_eval():
  assert parse_equation("__import__('os') = 1") is None
  assert parse_equation(" 12 - 30 = -18 .") == (12, "-", 30, -18)
  assert ExactArithmeticJudge(division="exact").step_correct("7 / 2 = 3", 0, [3]) is False


def test_exact_judge_agrees_with_the_task_reference():
  task = arithmetic.ArithmeticTask(num_ops=(2, 4), ops=("+", "-", "*", "/"), seed=3)
  judge = ExactArithmeticJudge()
  for record in task.problems(20):
    steps = [s.text for s in segment_steps(arithmetic.reference_solution(record))]
    assert judge_steps(judge, record["problem"], steps, record) == [1] * len(steps)


STEPS = ["3 + 4 = 7", "7 * 2 = 15", "15 - 5 = 10", "10 + 0 = 10", "10 * 3 = 30"]


@pytest.mark.parametrize("strategy,window,expected", [
    ("error_propagation", 1, [1, -1, 0, 0, 0]),
    # the exact judge's rule follows the strategy (ExactArithmeticJudge docstring): the
    # independent rule checks each equation alone, the context-aware one the reference operation
    # applied to the solution's own previous result ("10 + 0" should have been "+ 1")
    ("independent", 1, [1, -1, 1, 1, 1]),
    ("context_aware", 1, [1, -1, 1, -1, 1]),
    ("error_propagation", 3, [-1, 0, 0]),  # windows (0,3), (1,4), (2,5)
    ("independent", 3, [-1, -1, 1]),
    ("error_propagation", 2, [-1, 0, 0, 0]),
])
def test_strategies(strategy, window, expected):
  judge = RecordingJudge()
  assert judge_steps(judge, "p", STEPS, META, strategy=strategy, window=window) == expected
  units = windows(len(STEPS), window)
  assert [(r.first, r.last) for r in judge.requests] == units
  for r in judge.requests:
    if strategy == "independent":
      assert r.context == () and r.prior_verdicts is None
    else:
      assert r.context == tuple(STEPS[:r.first])
  if strategy == "context_aware":
    assert [r.prior_verdicts for r in judge.requests] == [tuple(expected[:i])
                                                          for i in range(len(units))]


def test_max_units_caps_judge_calls():
  judge = RecordingJudge()
  many = ["3 + 4 = 7"] * 1000  # a runaway completion
  verdicts = judge_steps(judge, "p", many, META, strategy="independent", max_units=4)
  # each "3 + 4 = 7" is a true equation on its own (the independent rule)
  assert len(judge.requests) == 4 and verdicts == [1, 1, 1, 1] + [0] * 996
  r = MathReward(judge, max_judged_units=3).score("p", solution(many[:10], 7), META)
  assert len(judge.requests) == 4 + 3
  assert [s for _, _, s in r.steps] == [1.0, -1.0, 0.0] + [0.0] * 7  # error propagation


def test_spans_and_scores_over_windows():
  spans = [(0, 5), (6, 10), (11, 15), (16, 20), (21, 25)]
  verdicts = [1, -1, -1, 1]  # W = 2: units (0,2) (1,3) (2,4) (3,5)
  # per-step sums: 1, 1-1, -1-1, -1+1, 1 -> 1, 0, -2, 0, 1; scaled by w_s/|S| = 0.5/4
  assert step_token_spans(spans, verdicts, window=2, weight=0.5) == [
      (0, 5, 0.125), (11, 15, -0.25), (21, 25, 0.125)]
  assert step_scores(verdicts, 5, window=2) == [1.0, 0.0, -1.0, 0.0, 1.0]
  with pytest.raises(ValueError, match="units"):
    step_token_spans(spans, [1], window=2)


def solution(steps, final):
  body = "".join(f"<step {i}>{s}</step>\n" for i, s in enumerate(steps, 1))
  return body + f"<final>{final}</final>"


def test_math_reward_eq8_golden():
  reward = MathReward(ExactArithmeticJudge())  # w_g = 3, w_s = 0.5, W = 1, error propagation
  good, bad = solution(RIGHT, 30), solution(STEPS, 30)
  r_good, r_bad, r_fmt = reward(["p"] * 3, [good, bad, "<step 1>3 + 4 = 7"], [META] * 3)
  assert r_good.reward == pytest.approx(3.0 + 0.2)
  assert r_good.components == {"answer": 1.0, "format": 0.2, "steps": 1.0, "num_steps": 5.0,
                               "judge_failures": 0.0}
  steps = segment_steps(good)
  assert r_good.token_spans == [(s.start, s.end, pytest.approx(0.5 / 5)) for s in steps]
  assert r_good.steps == [(s.start, s.end, 1.0) for s in steps]
  # Step 2 is wrong: verdicts 1, -1, 0, 0, 0; the final answer 30 is still right.
  assert r_bad.reward == pytest.approx(3.2)
  assert [v for _, _, v in r_bad.token_spans] == pytest.approx([0.1, -0.1])
  assert [s for _, _, s in r_bad.steps] == [1.0, -1.0, 0.0, 0.0, 0.0]
  assert r_bad.components["steps"] == pytest.approx(0.0)
  # Unclosed step: mismatched tags (-1) and no answer.
  assert r_fmt.reward == -1.0 and r_fmt.components["answer"] == 0.0
  # Token values through character offsets (one token per character here).
  offsets = [(i, i + 1) for i in range(len(bad))]
  values = spans_to_token_values(r_bad.token_spans, offsets, len(bad))
  s = segment_steps(bad)
  assert values[s[0].start] == pytest.approx(0.1) and values[s[1].end - 1] == pytest.approx(-0.1)
  assert values[s[2].start] == 0.0 and values[-1] == 0.0


def test_math_reward_without_judge_and_bad_args():
  r = MathReward()(["p"], ["\\boxed{30}"], [META])[0]
  assert r.reward == 3.0 and r.token_spans == [] and r.steps is None
  with pytest.raises(KeyError, match="answer"):
    MathReward().score("p", "x", {})
  with pytest.raises(ValueError, match="strategy"):
    MathReward(strategy="greedy")


def test_judge_noise_is_seeded():
  n = 400
  reqs = [JudgeRequest(problem=f"p{i}", steps=("3 + 4 = 7",), first=0, last=1,
                       metadata={"step_values": [7]}) for i in range(n)]
  assert ExactArithmeticJudge().judge(reqs) == [1] * n
  assert ExactArithmeticJudge(noise=1.0).judge(reqs) == [-1] * n
  a = ExactArithmeticJudge(noise=0.3, seed=1).judge(reqs)
  assert a == ExactArithmeticJudge(noise=0.3, seed=1).judge(reqs)  # reproducible
  assert a != ExactArithmeticJudge(noise=0.3, seed=2).judge(reqs)
  assert 0.22 < a.count(-1) / n < 0.38  # binomial(400, 0.3): 4 standard deviations


def test_local_judge_thresholds_and_failures():
  reqs = [JudgeRequest(problem="p", steps=("a", "b", "c"), first=i, last=i + 1) for i in range(3)]
  judge = LocalModelJudge(lambda texts: [0.9, 0.5, 0.1][:len(texts)])
  assert judge.judge(reqs) == [1, 0, -1]
  broken = LocalModelJudge(lambda texts: [float("nan")] * len(texts), max_consecutive_failures=5)
  assert broken.judge(reqs) == [0, 0, 0]
  assert broken.metrics() == {"judge_calls": 3, "judge_failures": 3,
                              "judge_consecutive_failures": 3}
  pattern = r"LocalModelJudge.*6 times in a row \(max_consecutive_failures=5\).*nan"
  with pytest.raises(JudgeUnavailable, match=pattern):
    broken.judge(reqs)
  with pytest.raises(ValueError, match="incorrect_at"):
    LocalModelJudge(lambda t: t, correct_at=0.2, incorrect_at=0.4)
  MathReward(judge).check_reachable()
  with pytest.raises(JudgeUnavailable, match="cannot score.*nan"):
    MathReward(broken).check_reachable()


def test_failures_reach_the_result_and_a_dead_judge_stops_the_pool():
  flaky = iter([[0.9], [float("nan")], [0.9], [0.9]])
  judge = LocalModelJudge(lambda texts: next(flaky))
  r = MathReward(judge, strategy="context_aware").score("p", solution(RIGHT[:3], 9), META)
  assert r.components["judge_failures"] == 1.0
  assert [s for _, _, s in r.steps] == [1.0, 0.0, 1.0]
  dead = LocalModelJudge(lambda texts: [2.0] * len(texts), max_consecutive_failures=4)
  pool = RewardPool(MathReward(dead), num_workers=1, timeout_s=10.0, kind="thread")
  with pytest.raises(JudgeUnavailable, match="in a row"):
    pool(["p"] * 2, [solution(RIGHT, 30)] * 2, [META] * 2)
  pool.close()


def test_local_model_judge_runs_a_botjax_model():
  import jax.numpy as jnp
  from flax import nnx

  from botjax.models import Decoder, get_config

  import jax

  # Random weights put straight into the abstract model (the module's own init is slow here).
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Decoder(get_config("tiny"), rngs=nnx.Rngs(0))))
  rng = np.random.default_rng(0)
  state = jax.tree.map(lambda s: jnp.asarray(0.5 * rng.normal(size=s.shape), s.dtype), state)
  model = nnx.merge(graphdef, state)
  encode = lambda s: list(s.encode("utf-8"))  # bytes are ids < 256 of the tiny 512-token vocab
  yes, no = ord("y"), ord("n")
  render = lambda r: f"{r.problem}\n{r.unit[0]}\nok?"
  judge = LocalModelJudge.from_model(model, encode, yes_id=yes, no_id=no, bucket=16,
                                     correct_at=0.5001, incorrect_at=0.4999, render=render)
  reqs = [JudgeRequest(problem="2+2", steps=(s,), first=0, last=1)
          for s in ("2 + 2 = 4", "2 + 2 = 5")]
  texts = [render(r) for r in reqs]
  assert len(texts[0]) == len(texts[1])  # one unpadded oracle shape, one compile
  probs = judge.score_fn(texts)
  # Oracle: each text alone, unpadded, straight through the model.
  forward = nnx.jit(lambda m, ids, pos: m(ids, pos)[0][0, -1])
  for text, p in zip(texts, probs):
    ids = jnp.asarray([encode(text)], jnp.int32)
    last = np.asarray(forward(model, ids, jnp.arange(ids.shape[1], dtype=jnp.int32)[None, :]))
    expected = 1.0 / (1.0 + np.exp(last[no] - last[yes]))
    np.testing.assert_allclose(p, expected, atol=1e-5)
  expected_verdicts = [1 if p >= 0.5001 else -1 if p <= 0.4999 else 0 for p in probs]
  assert judge.judge(reqs) == expected_verdicts
  assert judge.metrics()["judge_failures"] == 0
