"""The exact step judge of the arithmetic testbed: `ExactArithmeticJudge` and `parse_equation`.

The arithmetic task (`botjax.data.arithmetic`) knows every intermediate value of its reference
solutions, so its steps can be judged exactly, with or without seeded noise (the judge-noise
ablation). It implements the step-judge interface (`botjax.rewards.judges.StepJudge`) and plugs
into `botjax.rewards.MathReward` like any LLM judge. Plain Python + numpy (process pools unpickle
it without importing JAX).
"""
from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

from botjax.data import arithmetic
from botjax.rewards.judges import JudgeError, JudgeRequest, StepJudge

_EQUATION = re.compile(
    r"\s*(-?\d{1,30})\s*(//|[-+*/×÷x])\s*(-?\d{1,30})\s*=\s*(-?\d{1,60})\s*\.?\s*")


def parse_equation(text: str) -> tuple[int, str, int, int] | None:
  """`a op b = c` with integers and op in + - * / // × ÷ x (no eval), or None.

  Returns:
    (a, op, b, c) with op normalised to one of "+", "-", "*", "/".
  """
  m = _EQUATION.fullmatch(text)
  if m is None:
    return None
  op = {"×": "*", "x": "*", "÷": "/", "//": "/"}.get(m.group(2), m.group(2))
  return int(m.group(1)), op, int(m.group(3)), int(m.group(4))


def _value(a: int, op: str, b: int, division: str) -> int | None:
  """`arithmetic.apply_op(a, op, b, division=division)`, or None where it has no integer value
  (division by zero, a remainder under division="exact"): such a step is simply wrong."""
  try:
    return arithmetic.apply_op(a, op, b, division=division)
  except ValueError:
    return None


class ExactArithmeticJudge(StepJudge):
  """Exact step judge for the synthetic arithmetic task.

  What "correct" means follows the strategy of the request, as the exact analogue of what an LLM
  judge can check with what that strategy shows it (paper App. A; docs/ablations.md):
    "error_propagation" (reference check): step i is correct iff its text is `a op b = c`
      (integers; + − * and integer division under `division`), a op b == c, and
      c == metadata["step_values"][i]; steps_to_judge then zeroes every unit after the first −1.
    "context_aware" (correct given the solution so far): step i is correct iff it parses,
      a op b == c, op and b are the reference step's operator and operand
      (metadata["step_exprs"][i], "x op b"), and a is the result the solution itself stated in
      step i−1 (the reference's first operand for i = 0; the reference value when step i−1 does
      not parse). A step that correctly continues from an earlier wrong result is +1: the error
      is charged once, where it was made.
    "independent" (the step alone, no problem, no context): step i is correct iff it parses and
      a op b == c. A true equation with the wrong numbers is +1.
  A step beyond the reference (i ≥ len(step_values)) or one that does not parse is incorrect. A
  unit is +1 when all its steps are correct, else −1. With `noise` = p > 0, each unit verdict is
  negated with probability p, from an RNG seeded by (seed, the solution's text, the unit), so a
  given unit of a given solution always gets the same flip, and distinct solutions get
  independent flips.

  Args:
    division: "exact" (the arithmetic task: a remainder is wrong), "floor" (Python //) or
      "trunc" (toward zero).
    noise: flip probability p ∈ [0, 1] (the judge-noise ablation).
    seed: seed of the noise.
  """

  def __init__(self, *, division: str = "exact", noise: float = 0.0, seed: int = 0,
               max_consecutive_failures: int = 32):
    super().__init__(max_consecutive_failures=max_consecutive_failures)
    if division not in arithmetic.DIVISIONS:
      raise ValueError(f"division must be one of {arithmetic.DIVISIONS}, got {division!r}")
    if not 0.0 <= noise <= 1.0:
      raise ValueError(f"noise must be a probability in [0, 1], got {noise}")
    self.division, self.noise, self.seed = division, float(noise), int(seed)

  def step_correct(self, text: str, index: int, step_values: Sequence[int]) -> bool:
    """Whether step `index` (0-based) with this text is right."""
    parsed = parse_equation(text)
    if parsed is None or index >= len(step_values):
      return False
    a, op, b, c = parsed
    return _value(a, op, b, self.division) == c and c == int(step_values[index])

  def step_correct_in_context(self, steps: Sequence[str], index: int,
                              step_exprs: Sequence[str], step_values: Sequence[int]) -> bool:
    """Whether step `index` correctly applies the reference operation to the solution's own
    previous result (the "context_aware" rule)."""
    parsed = parse_equation(steps[index])
    if parsed is None or index >= len(step_exprs):
      return False
    a, op, b, c = parsed
    ref = parse_equation(f"{step_exprs[index]} = 0")
    if ref is None:
      raise JudgeError(f"metadata['step_exprs'][{index}]={step_exprs[index]!r} is not 'a op b'")
    ref_a, ref_op, ref_b, _ = ref
    if index == 0:
      expected_a = ref_a
    else:
      prev = parse_equation(steps[index - 1])
      expected_a = prev[3] if prev is not None else int(step_values[index - 1])
    return (op == ref_op and b == ref_b and a == expected_a
            and _value(a, op, b, self.division) == c)

  def step_true(self, text: str) -> bool:
    """Whether the step is a true equation on its own (the "independent" rule)."""
    parsed = parse_equation(text)
    if parsed is None:
      return False
    a, op, b, c = parsed
    return _value(a, op, b, self.division) == c

  def _verdict(self, req: JudgeRequest) -> int:
    if "step_values" not in req.metadata:
      raise JudgeError(f"ExactArithmeticJudge needs metadata['step_values']; got keys "
                       f"{sorted(req.metadata)}")
    values = req.metadata["step_values"]
    units = range(req.first, req.last)
    if req.strategy == "independent":
      ok = all(i < len(values) and self.step_true(req.steps[i]) for i in units)
    elif req.strategy == "context_aware":
      if "step_exprs" not in req.metadata:
        raise JudgeError(f"the context_aware rule needs metadata['step_exprs']; got keys "
                         f"{sorted(req.metadata)}")
      exprs = req.metadata["step_exprs"]
      ok = all(self.step_correct_in_context(req.steps, i, exprs, values) for i in units)
    else:
      ok = all(self.step_correct(req.steps[i], i, values) for i in units)
    verdict = 1 if ok else -1
    if self.noise > 0.0:
      key = zlib.crc32("\x1f".join((req.problem, *req.steps)).encode("utf-8", "replace"))
      rng = np.random.default_rng([self.seed, key, req.first, req.last])
      if rng.random() < self.noise:
        verdict = -verdict
    return verdict

  def _verdicts(self, requests):
    out = []
    for req in requests:
      try:
        out.append(self._verdict(req))
      except JudgeError as e:
        out.append(e)
    return out

  def __repr__(self):
    return f"ExactArithmeticJudge(division={self.division!r}, noise={self.noise}, seed={self.seed})"
