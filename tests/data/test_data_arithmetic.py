"""Tests of the synthetic arithmetic task: generator, worked solutions, splits, parser."""

import collections
import math
import random
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from botjax.data import arithmetic as ar
from botjax.data import templates
from _util import imported

_STEP = re.compile(r"<step (\d+)>(-?\d+) ([-+*/]) (\d+) = (-?\d+)</step>")
_FINAL = re.compile(r"<final>(-?\d+)</final>")


def _check_worked(text):
  """Independent checker: (all steps well-formed, numbered and exact, chained, final value)."""
  lines = text.split("\n")
  steps = [_STEP.fullmatch(line) for line in lines[:-1]]
  final = _FINAL.fullmatch(lines[-1])
  ok = all(steps) and final is not None
  prev = None
  for i, m in enumerate(steps, 1):
    if not m:
      ok = False
      continue
    n, a, op, b, c = int(m[1]), int(m[2]), m[3], int(m[4]), int(m[5])
    ok &= n == i
    ok &= (prev is None or a == prev)
    try:
      ok &= ar.evaluate_expression(f"{a} {op} {b}") == c
    except ValueError:
      ok = False
    prev = c
  return ok, (int(final[1]) if final else None)


def test_problems_are_deterministic_and_seeded():
  task = ar.ArithmeticTask(seed=3)
  a = task.problems(50)
  b = ar.ArithmeticTask(seed=3).problems(50)
  c = ar.ArithmeticTask(seed=4).problems(50)
  assert a == b
  assert [r["expression"] for r in a] != [r["expression"] for r in c]
  assert task.problem(17) == a[17]
  assert task.problems(5, start=10) == a[10:15]
  # A few golden values pin the stream across machines and Python versions.
  assert [r["expression"] for r in ar.ArithmeticTask(seed=0).problems(3)] == [
      "((3 * 2) * 2) - 6", "(((5 + 9) - 2) - 4) + 6", "7 * 7"]


@pytest.mark.parametrize("num_ops,operand_range,ops", [
    ((1, 1), (0, 5), ("+",)),
    ((4, 4), (1, 9), ("+", "-", "*")),
    ((2, 3), (2, 20), ("*", "/")),
    ((1, 4), (1, 9), ("+", "-", "*", "/")),
])
def test_difficulty_is_respected(num_ops, operand_range, ops):
  task = ar.ArithmeticTask(num_ops=num_ops, operand_range=operand_range, ops=ops,
                           max_abs_value=500, seed=1)
  seen_ops = collections.Counter()
  counts = collections.Counter()
  for r in task.problems(300):
    assert num_ops[0] <= r["num_ops"] == len(r["step_exprs"]) == len(r["step_values"]) <= num_ops[1]
    counts[r["num_ops"]] += 1
    for expr, value in zip(r["step_exprs"], r["step_values"]):
      a, op, b = expr.split(" ")
      assert op in ops
      assert operand_range[0] <= int(b) <= operand_range[1]
      assert abs(value) <= 500
      seen_ops[op] += 1
    first = int(r["step_exprs"][0].split(" ")[0])
    assert operand_range[0] <= first <= operand_range[1]
  assert set(seen_ops) == set(ops)  # every allowed operator occurs
  assert set(counts) == set(range(num_ops[0], num_ops[1] + 1))


@given(seed=st.integers(0, 2**31 - 1), index=st.integers(0, 10**6))
def test_reference_solution_is_exactly_correct(seed, index):
  task = ar.ArithmeticTask(num_ops=(1, 4), ops=("+", "-", "*", "/"), seed=seed)
  r = task.problem(index)
  text = ar.reference_solution(r)
  ok, final = _check_worked(text)
  assert ok, text
  assert final == ar.evaluate_expression(r["expression"]) == int(r["answer"])
  assert final == r["step_values"][-1]
  assert r["problem"] == f"What is {r['expression']}?"


def test_record_from_operands_and_negative_values():
  r = ar.record_from_operands([3, 7, 2, 4], ["-", "*", "/"], record_id="x")
  assert r["expression"] == "((3 - 7) * 2) / 4"
  assert r["step_exprs"] == ["3 - 7", "-4 * 2", "-8 / 4"]
  assert r["step_values"] == [-4, -8, -2]
  assert r["answer"] == "-2"
  assert ar.reference_solution(r) == (
      "<step 1>3 - 7 = -4</step>\n<step 2>-4 * 2 = -8</step>\n<step 3>-8 / 4 = -2</step>\n"
      "<final>-2</final>")
  with pytest.raises(ValueError, match="not an exact integer division"):
    ar.record_from_operands([7, 2], ["/"])
  with pytest.raises(ValueError, match="len\\(operands\\) == len\\(ops\\) \\+ 1"):
    ar.record_from_operands([7, 2], ["+", "+"])


def test_evaluate_expression():
  assert ar.evaluate_expression("2 + 3 * 4") == 14
  assert ar.evaluate_expression("(2 + 3) * 4") == 20
  assert ar.evaluate_expression("10 - 4 - 3") == 3
  assert ar.evaluate_expression("-(3 * -2) - 8 / 2") == 2
  assert ar.evaluate_expression("((3 * 2) * 2) - 6") == 6
  with pytest.raises(ValueError, match="position 4"):
    ar.evaluate_expression("2 + ")
  with pytest.raises(ValueError, match="unexpected character 'x' at position 2"):
    ar.evaluate_expression("2 x 3")
  with pytest.raises(ValueError, match="expected '\\)'"):
    ar.evaluate_expression("(2 + 3")
  with pytest.raises(ValueError, match="exact"):
    ar.evaluate_expression("7 / 2")
  with pytest.raises(ValueError, match="unexpected '\\)'"):
    ar.evaluate_expression("2 + 3)")


def test_imperfect_solutions_match_requested_statistics():
  task = ar.ArithmeticTask(num_ops=(2, 4), seed=5)
  records = task.problems(400)
  rng = random.Random(0)
  n, error_rate = 2000, 0.6
  kinds = collections.Counter()
  final_right = 0
  for i in range(n):
    r = records[i % len(records)]
    w = ar.imperfect_worked_solution(r, rng, error_rate)
    kinds[w.error] += 1
    ok, final = _check_worked(w.text)
    # The flag agrees with an independent reading of the text.
    assert w.final_correct == (final == int(r["answer"]))
    final_right += w.final_correct
    if w.error is None:
      assert w.text == ar.reference_solution(r)
    elif w.error in ("wrong_step", "wrong_final"):
      assert not ok or final != int(r["answer"])
      assert "<final>" in w.text
    elif w.error == "skipped_step":
      assert len(_STEP.findall(w.text)) == r["num_ops"] - 1
      assert ok  # a skipped step still reads as a well-formed, self-consistent chain
    else:
      assert w.error == "format_slip" and not ok
  # 3-sigma bounds: sd of a rate over 2000 draws is <= 0.011.
  assert abs(1 - kinds[None] / n - error_rate) < 0.035
  for kind, weight in ar.DEFAULT_ERROR_WEIGHTS.items():
    assert abs(kinds[kind] / n - error_rate * weight) < 0.035, (kind, kinds)
  # Perfect + format slips that keep the final answer: about 1 - 0.6 * (0.8 + 0.2 / 3).
  assert 0.40 < final_right / n < 0.53


def test_imperfect_solution_modes_and_rng_types():
  r = ar.record_from_operands([3, 4, 2, 5], ["+", "*", "-"])
  assert ar.imperfect_solution(r, 0, 0.0) == ar.reference_solution(r)
  for kind in ar.ERROR_KINDS:
    for seed in range(20):
      w = ar.imperfect_worked_solution(r, seed, 1.0, error_weights={kind: 1.0})
      assert w.error == kind and w.detail
  w = ar.imperfect_worked_solution(r, 1, 1.0, error_weights={"wrong_step": 1.0})
  # The error propagates: every line after the wrong one is computed from the wrong value.
  ok, final = _check_worked(w.text)
  assert final != 9 and w.text.count("<step") == 3
  a = ar.imperfect_solution(r, np.random.default_rng(7), 1.0)
  b = ar.imperfect_solution(r, np.random.default_rng(7), 1.0)
  assert a == b
  one = ar.record_from_operands([3, 4], ["+"])
  w = ar.imperfect_worked_solution(one, 0, 1.0, error_weights={"skipped_step": 1.0})
  assert w.text == "<final>3</final>" and not w.final_correct
  with pytest.raises(ValueError, match="error_rate=1.5"):
    ar.imperfect_solution(r, 0, 1.5)
  with pytest.raises(ValueError, match="error_weights"):
    ar.imperfect_solution(r, 0, 0.5, error_weights={"typo": 1.0})
  with pytest.raises(TypeError, match="rng="):
    ar.imperfect_solution(r, "seed", 0.5)
  with pytest.raises(ValueError, match="missing \\['step_exprs', 'step_values'\\]"):
    ar.reference_solution({"problem": "p", "answer": "1"})


def test_splits_never_overlap():
  task = ar.ArithmeticTask(num_ops=(1, 2), seed=2)
  train, evals = ar.make_splits(task, 1500, 300)
  assert len(train) == 1500 and len(evals) == 300
  train_exprs = {r["expression"] for r in train}
  eval_exprs = {r["expression"] for r in evals}
  assert len(train_exprs) == 1500 and len(eval_exprs) == 300
  assert not train_exprs & eval_exprs
  assert ar.make_splits(task, 1500, 300) == (train, evals)
  assert len({r["id"] for r in train + evals}) == 1800
  tiny = ar.ArithmeticTask(num_ops=(1, 1), operand_range=(1, 2), ops=("+",))
  with pytest.raises(ValueError, match="distinct"):
    ar.make_splits(tiny, 3, 2)  # only 4 expressions exist


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_ops=(0, 2)), "num_ops"),
    (dict(num_ops=(3, 2)), "num_ops"),
    (dict(operand_range=(-1, 5)), "operand_range"),
    (dict(ops=("+", "%")), "unknown operator"),
    (dict(ops=()), "non-empty"),
    (dict(ops=("/",)), "division alone"),
    (dict(max_abs_value=5), "max_abs_value"),
])
def test_bad_config_is_rejected(kwargs, match):
  with pytest.raises(ValueError, match=match):
    ar.ArithmeticTask(**kwargs)


def test_prompt_templates():
  r = ar.ArithmeticTask().problem(0)
  text = templates.format_prompt(r, "arithmetic")
  assert text.endswith("\nWhat is ((3 * 2) * 2) - 6?")
  assert "<step i>a op b = c</step>" in text and "<final>c</final>" in text
  math = templates.format_prompt("Find $x^{2}$ if {x} = 3.")
  assert math.endswith("Problem: Find $x^{2}$ if {x} = 3.")
  assert "<step 1>" in math and "<final>" in math
  assert templates.chat_messages("p", "math", system="s") == [
      {"role": "system", "content": "s"},
      {"role": "user", "content": templates.MATH_TEMPLATE.replace("{problem}", "p")}]
  with pytest.raises(ValueError, match="no '\\{problem\\}' field"):
    templates.format_prompt("p", "no field here")


def test_warm_start_examples_hit_the_requested_accuracy():
  records = ar.ArithmeticTask(seed=8).problems(1500)
  examples = ar.warm_start_examples(records, error_rate=0.7, seed=1)
  assert examples == ar.warm_start_examples(records, error_rate=0.7, seed=1)
  assert examples != ar.warm_start_examples(records, error_rate=0.7, seed=2)
  acc = sum(e["final_correct"] for e in examples) / len(examples)
  expected = ar.final_accuracy_of_mix(0.7)
  assert abs(expected - (1 - 0.7 * (0.8 + 0.2 / 3))) < 1e-12
  assert abs(acc - expected) < 0.05  # 3 sd of a rate over 1500 draws is 0.038
  assert 0.2 <= acc <= 0.45
  e = examples[0]
  assert e["messages"] == templates.chat_messages(records[0], templates.ARITHMETIC_TEMPLATE)
  ok, final = _check_worked(e["completion"])
  assert (final == int(records[0]["answer"])) == e["final_correct"]


def test_data_package_imports_no_jax_flax_or_transformers():
  assert imported(["botjax.data", "botjax.data.dataset", "botjax.data.loaders"],
                  ["jax", "flax", "transformers", "tokenizers", "torch"]) == []


@given(st.integers(-50, 50), st.integers(-9, 9))
def test_apply_op_division_modes_match_exact_rational_division(a, b):
  for op, want in (("+", a + b), ("-", a - b), ("*", a * b)):
    for division in ar.DIVISIONS:
      assert ar.apply_op(a, op, b, division=division) == want
  if b == 0:
    for division in ar.DIVISIONS:
      with pytest.raises(ValueError, match="divides by zero"):
        ar.apply_op(a, "/", b, division=division)
    return
  q = Fraction(a, b)
  assert ar.apply_op(a, "/", b, division="floor") == math.floor(q)
  assert ar.apply_op(a, "/", b, division="trunc") == math.trunc(q)
  if q.denominator == 1:
    assert ar.apply_op(a, "/", b) == int(q)
  else:
    with pytest.raises(ValueError, match="not an exact integer division"):
      ar.apply_op(a, "/", b)


def test_apply_op_names_bad_operator_and_division():
  with pytest.raises(ValueError, match=r"unknown operator '\^'"):
    ar.apply_op(2, "^", 3)
  with pytest.raises(ValueError, match="unknown division 'round'.*exact"):
    ar.apply_op(4, "/", 2, division="round")
