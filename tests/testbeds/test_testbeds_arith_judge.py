"""The exact step judge of the arithmetic testbed: its rule per judging strategy."""
import pytest

from botjax.rewards import JudgeStats, judge_steps
from botjax.testbeds.arith_judge import ExactArithmeticJudge


@pytest.mark.parametrize("steps,expected", [
    # an arithmetic slip in step 1, later steps continue correctly from the wrong value
    (("3 + 4 = 7", "7 * 2 = 15", "15 - 5 = 10"),
     {"error_propagation": [1, -1, 0], "context_aware": [1, -1, 1], "independent": [1, -1, 1]}),
    # a copy error in step 1: a true equation on the wrong operand
    (("3 + 4 = 7", "8 * 2 = 16", "16 - 5 = 11"),
     {"error_propagation": [1, -1, 0], "context_aware": [1, -1, 1], "independent": [1, 1, 1]}),
    # the wrong operator / operand in step 2, and an unparseable step 0
    (("three plus four", "7 * 2 = 14", "14 + 5 = 19"),
     {"error_propagation": [-1, 0, 0], "context_aware": [-1, 1, -1], "independent": [-1, 1, 1]}),
    # a correct solution is +1 everywhere under every rule
    (("3 + 4 = 7", "7 * 2 = 14", "14 - 5 = 9"),
     {"error_propagation": [1, 1, 1], "context_aware": [1, 1, 1], "independent": [1, 1, 1]}),
])
def test_exact_judge_strategy_rules(steps, expected):
  meta = {"step_exprs": ["3 + 4", "7 * 2", "14 - 5"], "step_values": [7, 14, 9]}
  judge = ExactArithmeticJudge()
  for strategy, want in expected.items():
    got = judge_steps(judge, "What is ((3 + 4) * 2) - 5?", steps, meta, strategy=strategy)
    assert got == want, (strategy, got)
  # a window of 2 steps: a unit is +1 only when both of its steps pass the rule
  got = judge_steps(judge, "p", steps, meta, strategy="independent", window=2)
  assert got == [1 if a == b == 1 else -1 for a, b in zip(expected["independent"],
                                                         expected["independent"][1:])]


def test_exact_judge_context_rule_needs_step_exprs():
  stats = JudgeStats()
  got = judge_steps(ExactArithmeticJudge(), "p", ("3 + 4 = 7",), {"step_values": [7]},
                    strategy="context_aware", stats=stats)
  assert got == [0] and stats.failures == 1


def test_exact_judge_unpickles_without_jax():
  # process pools unpickle the judge in fresh workers: its module must stay light
  from _util import imported
  assert imported(["botjax.testbeds.arith_judge"], ["jax", "flax", "transformers"]) == []
