"""The embedded synthetic task: step-verified integer arithmetic.

A problem asks for the value of a short expression such as `((3 + 4) * 2) - 5`. Evaluation order
is left to right and is written out with explicit parentheses, so operator precedence never
matters: operation `i` combines the running value with the next operand,

  v₀ = a₀,   vᵢ = vᵢ₋₁ opᵢ aᵢ   (i = 1..n),   answer = vₙ.

The worked solution uses the paper's text format (docs/CONTRACTS.md "Text format"), one step per
operation and the answer in a `<final>` tag:

  <step 1>3 + 4 = 7</step>
  <step 2>7 * 2 = 14</step>
  <step 3>14 - 5 = 9</step>
  <final>9</final>

Every step has an exact value (`step_values`), which makes this task a cheap, noise-free stand-in
for a step judge: the CPU quick-start learns it with exact step-level rewards.

Problems are a pure function of `(task, stream, index)`: the same task config gives the same
problems on every machine (Python's `random.Random` seeded with a string, which hashes the string
with SHA-512 and is stable across Python versions and platforms).
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from botjax.data import templates

OPS = ("+", "-", "*", "/")
ERROR_KINDS = ("wrong_step", "wrong_final", "skipped_step", "format_slip")
DEFAULT_ERROR_WEIGHTS = {"wrong_step": 0.4, "wrong_final": 0.2, "skipped_step": 0.2,
                         "format_slip": 0.2}
_MAX_DRAWS_PER_STEP = 32   # draws of (op, operand) before a step gives up and the problem restarts
_MAX_RESTARTS = 64


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArithmeticTask:
  """Difficulty and seed of the synthetic arithmetic task.

  Attributes:
    num_ops: inclusive range (lo, hi) of the number of operations per problem, 1 ≤ lo ≤ hi ≤ 8
      (e.g. (1, 4)); the count is drawn uniformly.
    operand_range: inclusive range (lo, hi) of the operands, 0 ≤ lo ≤ hi. Operands are never
      negative (so the text never shows `3 - -2`); intermediate values may be.
    ops: operators to draw from, a non-empty subset of `+ - * /`. Division is only drawn when it
      is exact (the operand divides the running value); otherwise another operator is drawn.
    max_abs_value: every intermediate value satisfies |v| ≤ max_abs_value (draws that would
      exceed it are redrawn), which keeps products of several operands small.
    seed: the seed of every problem stream of this task.
  """
  num_ops: tuple[int, int] = (1, 4)
  operand_range: tuple[int, int] = (1, 9)
  ops: tuple[str, ...] = ("+", "-", "*")
  max_abs_value: int = 999
  seed: int = 0

  def __post_init__(self):
    # Lists are accepted and stored as tuples, so the config stays hashable (a static arg).
    for name in ("num_ops", "operand_range", "ops"):
      value = getattr(self, name)
      if isinstance(value, list):
        object.__setattr__(self, name, tuple(value))
    lo, hi = _pair(self.num_ops, "num_ops")
    if not 1 <= lo <= hi <= 8:
      raise ValueError(f"num_ops={self.num_ops!r}: need 1 <= lo <= hi <= 8, e.g. (1, 4)")
    lo, hi = _pair(self.operand_range, "operand_range")
    if not 0 <= lo <= hi:
      raise ValueError(f"operand_range={self.operand_range!r}: need 0 <= lo <= hi, e.g. (1, 9)")
    if isinstance(self.ops, str) or not self.ops:
      raise ValueError(f"ops={self.ops!r}: need a non-empty tuple drawn from {OPS}")
    bad = [op for op in self.ops if op not in OPS]
    if bad:
      raise ValueError(f"ops={self.ops!r}: unknown operator(s) {bad}; valid operators are {OPS}")
    if set(self.ops) == {"/"}:
      raise ValueError(f"ops={self.ops!r}: division alone cannot always be exact; add + - or *")
    if self.max_abs_value < hi:
      raise ValueError(f"max_abs_value={self.max_abs_value} must be >= the largest operand {hi}")

  def problem(self, index: int, *, stream: str = "train") -> dict[str, Any]:
    """The problem at `index` of a named stream (a pure function of task, stream, index)."""
    if index < 0:
      raise ValueError(f"index={index}: must be >= 0")
    rng = random.Random(f"botjax-arithmetic:{self.seed}:{stream}:{index}")
    return _make_record(self, rng, record_id=f"arith-{stream}-{self.seed}-{index}")

  def problems(self, num: int, *, start: int = 0, stream: str = "train") -> list[dict[str, Any]]:
    """Problems `start .. start+num-1` of a stream (duplicates possible; see `make_splits`)."""
    return [self.problem(i, stream=stream) for i in range(start, start + num)]


def _pair(value, name: str) -> tuple[int, int]:
  if (not isinstance(value, (tuple, list)) or len(value) != 2
      or not all(isinstance(v, (int, np.integer)) for v in value)):
    raise ValueError(f"{name}={value!r}: need a pair of ints (lo, hi)")
  return int(value[0]), int(value[1])


DIVISIONS = ("exact", "floor", "trunc")


def apply_op(a: int, op: str, b: int, *, division: str = "exact") -> int:
  """One operation on ints: `a + b`, `a - b`, `a * b` or `a / b`.

  Args:
    a, b: the operands.
    op: one of OPS ("+", "-", "*", "/").
    division: how `/` rounds: "exact" (the remainder must be 0, as in the arithmetic task),
      "floor" (Python's `//`) or "trunc" (towards zero, as in C).

  Raises:
    ValueError: unknown operator or division mode, division by zero, or a remainder under
      division="exact".
  """
  if op == "+":
    return a + b
  if op == "-":
    return a - b
  if op == "*":
    return a * b
  if op != "/":
    raise ValueError(f"unknown operator {op!r}; valid operators are {OPS}")
  if division not in DIVISIONS:
    raise ValueError(f"unknown division {division!r}; valid: {DIVISIONS}")
  if b == 0:
    raise ValueError(f"{a} / {b} divides by zero")
  if division == "floor":
    return a // b
  if division == "trunc":
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q
  if a % b:
    raise ValueError(f"{a} / {b} is not an exact integer division")
  return a // b


def _draw_step(task: ArithmeticTask, rng: random.Random, value: int) -> tuple[str, int] | None:
  lo, hi = task.operand_range
  for _ in range(_MAX_DRAWS_PER_STEP):
    op = rng.choice(task.ops)
    if op == "/":
      divisors = [b for b in range(max(lo, 1), hi + 1) if value % b == 0]
      if not divisors:
        continue
      b = rng.choice(divisors)
    else:
      b = rng.randint(lo, hi)
    result = apply_op(value, op, b)
    if abs(result) <= task.max_abs_value:
      return op, b
  return None


def _make_record(task: ArithmeticTask, rng: random.Random, record_id: str) -> dict[str, Any]:
  lo, hi = task.operand_range
  for _ in range(_MAX_RESTARTS):
    num_ops = rng.randint(*task.num_ops)
    value = rng.randint(lo, hi)
    operands, ops = [value], []
    for _ in range(num_ops):
      drawn = _draw_step(task, rng, value)
      if drawn is None:
        break
      op, b = drawn
      ops.append(op)
      operands.append(b)
      value = apply_op(value, op, b)
    else:
      return record_from_operands(operands, ops, record_id=record_id)
  raise ValueError(f"{task!r} could not draw a problem within max_abs_value={task.max_abs_value}"
                   f" after {_MAX_RESTARTS} tries; widen max_abs_value or the operators")


def record_from_operands(operands: Sequence[int], ops: Sequence[str], *,
                         record_id: str = "") -> dict[str, Any]:
  """The record of the left-to-right expression `((a₀ op₁ a₁) op₂ a₂) …`.

  Args:
    operands: n+1 non-negative ints a₀..aₙ.
    ops: n operators op₁..opₙ from `+ - * /` (division must be exact).
    record_id: the record's `id`.

  Returns:
    A dict with `id`, `problem` (the question shown to the model), `expression`, `answer` (the
    final value as a decimal string), `step_exprs` (`["3 + 4", "7 * 2", ...]`), `step_values`
    (the value of each step) and `num_ops`.
  """
  if len(operands) != len(ops) + 1:
    raise ValueError(f"need len(operands) == len(ops) + 1, got {len(operands)} and {len(ops)}")
  if any(a < 0 for a in operands):
    raise ValueError(f"operands={list(operands)}: operands must be >= 0")
  expression = str(operands[0])
  value = operands[0]
  step_exprs, step_values = [], []
  for i, (op, b) in enumerate(zip(ops, operands[1:])):
    step_exprs.append(f"{value} {op} {b}")
    value = apply_op(value, op, b)
    step_values.append(value)
    inner = f"({expression})" if i > 0 else expression
    expression = f"{inner} {op} {b}"
  return {
      "id": record_id,
      "problem": f"What is {expression}?",
      "expression": expression,
      "answer": str(value),
      "step_exprs": step_exprs,
      "step_values": step_values,
      "num_ops": len(ops),
  }


def make_splits(task: ArithmeticTask, num_train: int, num_eval: int, *,
                unique_train: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
  """Train and held-out eval problems whose expressions never overlap.

  The eval set is drawn first from its own stream ("eval") with distinct expressions; train
  problems come from the "train" stream, skipping any expression of the eval set (and, with
  `unique_train`, any expression already in the train set).

  Args:
    task: the task config.
    num_train: number of training problems.
    num_eval: number of held-out problems.
    unique_train: make train expressions distinct too.

  Returns:
    (train, eval): lists of records of lengths num_train and num_eval.

  Raises:
    ValueError: when the task has too few distinct expressions for the requested sizes.
  """
  if num_train < 0 or num_eval < 0:
    raise ValueError(f"num_train={num_train}, num_eval={num_eval}: must be >= 0")
  eval_records, eval_exprs = _draw_distinct(task, num_eval, stream="eval", exclude=frozenset())
  train_records, _ = _draw_distinct(task, num_train, stream="train", exclude=eval_exprs,
                                    distinct=unique_train)
  return train_records, eval_records


def _draw_distinct(task, num, *, stream, exclude, distinct=True):
  records, seen = [], set()
  index, budget = 0, 50 * num + 1000
  while len(records) < num:
    if index >= budget:
      raise ValueError(f"{task!r}: found only {len(records)} of {num} distinct {stream} "
                       f"problems in {budget} draws; widen num_ops, operand_range or ops")
    record = task.problem(index, stream=stream)
    index += 1
    expr = record["expression"]
    if expr in exclude or (distinct and expr in seen):
      continue
    seen.add(expr)
    records.append(record)
  return records, frozenset(seen)


# -- A tiny exact parser (no eval) -------------------------------------------------------------

_TOKEN = re.compile(r"\d+|[-+*/()]")


def evaluate_expression(text: str) -> int:
  """Evaluates an integer expression with `+ - * /`, parentheses and unary minus.

  Usual precedence (`*` and `/` bind tighter, both left-associative); `/` must be exact. This is
  a recursive-descent parser, never Python's `eval`.

  Args:
    text: e.g. `"((3 + 4) * 2) - 5"`.

  Returns:
    The value as a Python int.

  Raises:
    ValueError: on a syntax error (naming the position), or an inexact division.
  """
  tokens, pos = [], 0
  while True:
    while pos < len(text) and text[pos].isspace():
      pos += 1
    if pos == len(text):
      break
    m = _TOKEN.match(text, pos)
    if m is None:
      raise ValueError(f"unexpected character {text[pos]!r} at position {pos} in {text!r}")
    tokens.append((int(m.group()) if m.group().isdigit() else m.group(), pos))
    pos = m.end()
  parser = _Parser(text, tokens)
  value = parser.expr()
  if parser.i != len(tokens):
    raise ValueError(f"unexpected {tokens[parser.i][0]!r} at position {tokens[parser.i][1]} "
                     f"in {text!r}")
  return value


class _Parser:
  """expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*;
  unary := '-' unary | atom; atom := INT | '(' expr ')'."""

  def __init__(self, text, tokens):
    self.text, self.tokens, self.i = text, tokens, 0

  def _peek(self):
    return self.tokens[self.i][0] if self.i < len(self.tokens) else None

  def _fail(self, what):
    where = self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)
    raise ValueError(f"expected {what} at position {where} in {self.text!r}")

  def _chain(self, ops, operand):
    """operand ((one of ops) operand)*, evaluated left to right."""
    value = operand()
    while self._peek() in ops:
      op = self._peek()
      self.i += 1
      value = apply_op(value, op, operand())
    return value

  def expr(self):
    return self._chain(("+", "-"), self.term)

  def term(self):
    return self._chain(("*", "/"), self.unary)

  def unary(self):
    if self._peek() == "-":
      self.i += 1
      return -self.unary()
    return self.atom()

  def atom(self):
    tok = self._peek()
    if isinstance(tok, int):
      self.i += 1
      return tok
    if tok == "(":
      self.i += 1
      value = self.expr()
      if self._peek() != ")":
        self._fail("')'")
      self.i += 1
      return value
    self._fail("a number or '('")


# -- Worked solutions -------------------------------------------------------------------------

def format_solution(step_exprs: Sequence[str], step_values: Sequence[int], final: int | str, *,
                    numbers: Sequence[int] | None = None) -> str:
  """Renders `<step i>expr = value</step>` lines and `<final>final</final>`, joined by newlines."""
  numbers = range(1, len(step_exprs) + 1) if numbers is None else numbers
  lines = [f"<step {n}>{e} = {v}</step>" for n, e, v in zip(numbers, step_exprs, step_values)]
  lines.append(f"<final>{final}</final>")
  return "\n".join(lines)


def reference_solution(record: Mapping[str, Any]) -> str:
  """The perfect worked solution of an arithmetic record, in the paper's step format."""
  _check_record(record)
  return format_solution(record["step_exprs"], record["step_values"], record["answer"])


def _check_record(record):
  missing = [k for k in ("answer", "step_exprs", "step_values") if k not in record]
  if missing:
    raise ValueError(f"record {record.get('id', '?')!r} is not an arithmetic record: missing "
                     f"{missing}; expected fields id, problem, expression, answer, step_exprs, "
                     "step_values")


@dataclasses.dataclass(frozen=True)
class WorkedSolution:
  """A worked solution and what is wrong with it.

  Attributes:
    text: the solution text.
    error: None for a perfect solution, else one of `ERROR_KINDS`.
    detail: a short description of the mistake ("" when perfect).
    final_correct: whether a `<final>` tag is present and holds the correct answer.
  """
  text: str
  error: str | None
  detail: str
  final_correct: bool


def _as_random(rng) -> random.Random:
  if isinstance(rng, random.Random):
    return rng
  if isinstance(rng, np.random.Generator):
    return random.Random(int(rng.integers(0, 2**63 - 1)))
  if isinstance(rng, (int, np.integer)):
    return random.Random(int(rng))
  raise TypeError(f"rng={rng!r}: need a random.Random, a numpy Generator or an int seed")


def _slip(value: int, rng: random.Random) -> int:
  """A plausible wrong value: off by one or two, a carry slip of ten, or a sign error."""
  deltas = [-2, -1, 1, 2, -10, 10]
  choices = [value + d for d in deltas] + ([-value] if value != 0 else [])
  return rng.choice(choices)


def _replay(first: int, ops: Sequence[str], operands: Sequence[int]):
  """Re-runs a chain from a (possibly wrong) start value; inexact division truncates."""
  exprs, values, value = [], [], first
  for op, b in zip(ops, operands):
    exprs.append(f"{value} {op} {b}")
    # inexact division truncates; a wrong value divided by 0 stays as it is
    value = value if op == "/" and b == 0 else apply_op(value, op, b, division="trunc")
    values.append(value)
  return exprs, values, value


def _ops_and_operands(record):
  ops, operands = [], []
  for e in record["step_exprs"]:
    lhs, op, rhs = e.rsplit(" ", 2)
    ops.append(op)
    operands.append(int(rhs))
  first = int(record["step_exprs"][0].rsplit(" ", 2)[0]) if ops else int(record["answer"])
  return first, ops, operands


def imperfect_worked_solution(record: Mapping[str, Any], rng, error_rate: float = 0.5, *,
                              error_weights: Mapping[str, float] | None = None) -> WorkedSolution:
  """A worked solution that is wrong with probability `error_rate`, with a realistic mistake.

  With probability 1 − error_rate the reference solution; otherwise one mistake whose kind is
  drawn with probabilities proportional to `error_weights`:

  - `wrong_step`: step k's result is off (±1, ±2, ±10 or a sign error) and later steps compute
    correctly from the wrong value, so the error propagates to the final answer.
  - `wrong_final`: every step is right but the final answer is copied wrongly.
  - `skipped_step`: step k's operation is left out; later steps continue from the value before
    it and are renumbered (with one operation: no steps, the first operand as final).
  - `format_slip`: correct arithmetic but broken format: a missing `</step>`, a wrong step
    number, or a final answer written without the `<final>` tag.

  The answers of `wrong_step` and `skipped_step` can coincide with the truth (e.g. a later
  `* 0`); `final_correct` reports what the text says.

  Args:
    record: an arithmetic record (see `ArithmeticTask.problem`).
    rng: `random.Random`, numpy `Generator` (one draw seeds a local generator) or int seed.
    error_rate: probability in [0, 1] of a mistake.
    error_weights: relative weights of `ERROR_KINDS`; default `DEFAULT_ERROR_WEIGHTS`.

  Returns:
    A `WorkedSolution(text, error, detail, final_correct)`.
  """
  _check_record(record)
  if not 0.0 <= error_rate <= 1.0:
    raise ValueError(f"error_rate={error_rate}: must lie in [0, 1]")
  weights = dict(DEFAULT_ERROR_WEIGHTS if error_weights is None else error_weights)
  unknown = sorted(set(weights) - set(ERROR_KINDS))
  if unknown or not weights or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
    raise ValueError(f"error_weights={weights!r}: need non-negative weights, not all zero, for "
                     f"kinds in {ERROR_KINDS}")
  rng = _as_random(rng)
  answer = int(record["answer"])
  if rng.random() >= error_rate:
    return WorkedSolution(reference_solution(record), None, "", True)
  kinds = [k for k in ERROR_KINDS if weights.get(k, 0.0) > 0]
  kind = rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
  first, ops, operands = _ops_and_operands(record)
  exprs, values = list(record["step_exprs"]), list(record["step_values"])
  n = len(ops)

  if kind == "wrong_step" and n:
    k = rng.randrange(n)
    wrong = _slip(values[k], rng)
    tail_exprs, tail_values, final = _replay(wrong, ops[k + 1:], operands[k + 1:])
    text = format_solution(exprs[:k + 1] + tail_exprs, values[:k] + [wrong] + tail_values, final)
    return WorkedSolution(text, kind, f"step {k + 1} gives {wrong} instead of {values[k]}",
                          final == answer)
  if kind == "skipped_step" and n:
    k = rng.randrange(n)
    start = first if k == 0 else values[k - 1]
    tail_exprs, tail_values, final = _replay(start, ops[k + 1:], operands[k + 1:])
    text = format_solution(exprs[:k] + tail_exprs, values[:k] + tail_values, final)
    return WorkedSolution(text, kind, f"step {k + 1} ({exprs[k]}) skipped", final == answer)
  if kind == "format_slip":
    slip = rng.choice(["missing_close", "bad_number", "untagged_final"] if n
                      else ["untagged_final"])
    if slip == "untagged_final":
      text = format_solution(exprs, values, answer).replace(f"<final>{answer}</final>",
                                                           f"Final answer: {answer}")
      return WorkedSolution(text, kind, "final answer without <final> tag", False)
    k = rng.randrange(n)
    lines = format_solution(exprs, values, answer).split("\n")
    if slip == "missing_close":
      lines[k] = lines[k].replace("</step>", "")
      detail = f"step {k + 1} has no </step>"
    else:
      wrong_number = k + 1 + rng.choice([-1, 1]) if k > 0 else k + 2
      lines[k] = lines[k].replace(f"<step {k + 1}>", f"<step {wrong_number}>", 1)
      detail = f"step {k + 1} numbered {wrong_number}"
    return WorkedSolution("\n".join(lines), kind, detail, True)
  # `wrong_final`, and the step kinds when there is no step to get wrong.
  wrong = _slip(answer, rng)
  return WorkedSolution(format_solution(exprs, values, wrong), "wrong_final",
                        f"final {wrong} instead of {answer}", False)


def imperfect_solution(record: Mapping[str, Any], rng, error_rate: float = 0.5, *,
                       error_weights: Mapping[str, float] | None = None) -> str:
  """The text of `imperfect_worked_solution` (same arguments); for supervised warm starts."""
  return imperfect_worked_solution(record, rng, error_rate, error_weights=error_weights).text


def final_accuracy_of_mix(error_rate: float,
                          error_weights: Mapping[str, float] | None = None) -> float:
  """Expected share of `imperfect_worked_solution` outputs with a correct `<final>` answer.

  acc = (1 − e) + e · (w_format / Σw) · 2/3, since `wrong_step`, `wrong_final` and
  `skipped_step` change the answer (up to rare coincidences, ignored here) and one of the three
  format slips drops the `<final>` tag. With the default weights, acc ≈ 1 − 0.867·e.
  """
  weights = dict(DEFAULT_ERROR_WEIGHTS if error_weights is None else error_weights)
  return (1.0 - error_rate) + error_rate * weights.get("format_slip", 0.0) / sum(
      weights.values()) * 2.0 / 3.0


def warm_start_examples(records: Sequence[Mapping[str, Any]], *, error_rate: float = 0.7,
                        seed: int = 0, template: str | None = None,
                        error_weights: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
  """Supervised warm-start pairs: a chat prompt and an imperfect worked solution per record.

  A model fitted to these pairs imitates their mix, so its final-answer accuracy is at most
  `final_accuracy_of_mix(error_rate)`: the default e = 0.7 gives ≈ 0.39, so RL starts from
  partial competence (a tiny model trained briefly lands lower, which is the point).

  Args:
    records: arithmetic records.
    error_rate: probability of a mistake per solution.
    seed: seed of the mistakes (the output is a pure function of records and arguments).
    template: prompt template (default `templates.ARITHMETIC_TEMPLATE`).
    error_weights: relative weights of `ERROR_KINDS`.

  Returns:
    A list of dicts `{"id", "messages": [{"role": "user", "content": prompt}], "completion",
    "error", "final_correct"}`; apply the tokenizer's chat template with
    `add_generation_prompt=True` to `messages` and append `completion` and the EOS token.
  """
  template = templates.ARITHMETIC_TEMPLATE if template is None else template
  rng = random.Random(f"botjax-warm-start:{seed}")
  out = []
  for record in records:
    worked = imperfect_worked_solution(record, rng, error_rate, error_weights=error_weights)
    out.append({"id": record.get("id", ""),
                "messages": templates.chat_messages(record, template),
                "completion": worked.text, "error": worked.error,
                "final_correct": worked.final_correct})
  return out
