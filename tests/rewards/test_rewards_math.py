"""MATH/AIME answer extraction and verification, adversarial inputs, format term, segmentation."""
import threading
import time

import pytest

from botjax.rewards import (AnswerLimits, answers_match, extract_answer, extract_boxed,
                            format_score, is_correct, screen_answer, segment_steps)
from botjax.rewards.math import _OutOfTime, _time_limit

PERFECT = ("<step 1>3 + 4 = 7</step>\n<step 2>7 * 2 = 14</step>\n"
           "<step 3>14 - 5 = 9</step>\n<final>9</final>")


@pytest.mark.parametrize("text,expected", [
    ("so \\boxed{42}.", "42"),
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),  # nested braces
    ("first \\boxed{1} then \\boxed {2}", "2"),  # the last box wins
    ("<step 1>x</step><final> 007 </final>", "007"),
    ("<final>the answer is \\boxed{\\frac{3}{4}}</final> \\boxed{9}", "\\frac{3}{4}"),
    ("<final>1</final> ... <final>5</final>", "5"),
    ("<step 1>2 + 3 = 5</step><final>5", "5"),  # unclosed final at the end
    ("no answer here", None),
    ("\\boxed{unclosed", None),
    ("<final></final>", None),
    ("\\boxed", None),
])
def test_extract_answer(text, expected):
  assert extract_answer(text) == expected


@pytest.mark.parametrize("answer,gold,expected", [
    ("204", "204", True),
    ("007", "7", True),  # AIME: leading zeros
    ("+0204", "204", True),
    ("\\frac{408}{2}", "204", True),
    ("2 \\cdot 102", "204", True),
    ("204.5", "204", False),
    ("\\frac{409}{2}", "204", False),
    ("205", "204", False),
    ("x", "204", False),
    ("\\frac{1}{2}", "0.5", True),
    ("0.5", "\\frac{1}{2}", True),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{\\sqrt{2}}", False),
    ("10^{3}", "1000", True),
    (None, "3", False),
])
def test_answers_match(answer, gold, expected):
  assert answers_match(answer, gold) is expected


def test_integer_mode_can_be_forced():
  assert answers_match("007", "7", integer=False)  # through math-verify instead of int()
  assert answers_match("204.0", "204", integer=True)
  assert not answers_match("204.000001", "204", integer=True)


ADVERSARIAL = [
    "<final>9**9**9**9</final>",
    "\\boxed{9^{9^{9^{9}}}}",
    "\\boxed{9^9^9}",
    "\\boxed{2^{2^{2^{2}}}}",
    "\\boxed{10^{100000}}",
    "\\boxed{100000!}",
    "\\boxed{(99)!!}",
    "\\boxed{" + "1" * 1_000_000 + "}",
    "\\boxed{" + "{" * 1_000_000,
    "\\boxed{" + "{" * 100 + "1" + "}" * 100 + "}",
    "<final>" + "(" * 200 + "1" + ")" * 200 + "</final>",
    "<final>" + "x" * 1_000_000 + "</final>",
    "x" * 1_000_000,
    "\\boxed" + " " * 1_000_000 + "{1}",
    "\\boxed" * 200_000,
    "<final>" * 200_000,
]


@pytest.mark.parametrize("completion", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_answers_are_wrong_and_fast(completion):
  start = time.perf_counter()
  assert not is_correct(completion, "1")
  assert time.perf_counter() - start < 0.5


def test_adversarial_answers_fail_the_screen():
  for answer in ["9**9**9**9", "9^{9^{9^{9}}}", "9^9^9", "10^{100000}", "100000!", "(99)!",
                 "1" * 100, "(" * 20 + "1" + ")" * 20, "a" * 300]:
    assert screen_answer(answer) is not None, answer
  for answer in ["\\frac{408}{2}", "10^{3}", "5!", "2^{10} - 1", "\\sqrt{2}/2", "(1, 2)"]:
    assert screen_answer(answer) is None, answer


def test_bounded_outside_the_main_thread():
  """In a worker thread there is no SIGALRM timer: the screen alone keeps it fast."""
  elapsed, results = [], []

  def work():
    for completion in ADVERSARIAL[:7]:
      start = time.perf_counter()
      results.append(is_correct(completion, "1"))
      elapsed.append(time.perf_counter() - start)
    results.append(is_correct("\\boxed{\\frac{408}{2}}", "204"))

  thread = threading.Thread(target=work)
  thread.start()
  thread.join(timeout=20)
  assert results == [False] * 7 + [True]
  assert max(elapsed) < 0.5


def test_time_limit_interrupts_python_code():
  start = time.perf_counter()
  with pytest.raises(_OutOfTime):
    with _time_limit(0.05):
      while True:
        pass
  assert time.perf_counter() - start < 0.5
  # The timer is disarmed afterwards: a later slow-ish block is not interrupted.
  with _time_limit(5.0):
    time.sleep(0.01)
  time.sleep(0.1)


def test_custom_limits():
  tight = AnswerLimits(max_chars=8)
  assert not is_correct("\\boxed{\\frac{408}{2}}", "204", limits=tight)
  assert is_correct("\\boxed{204}", "204", limits=tight)


@pytest.mark.parametrize("text,expected", [
    (PERFECT, 0.2),
    ("  <step 1>a</step>\n\n<step 2>b</step><final>1</final>\n", 0.2),
    ("<step 1>a</step 1><final>1</final>", 0.2),
    # mismatched tags
    ("<step 1>a</step><step 2>b<final>3</final>", -1.0),  # final opened inside an open step
    ("<step 1>a</step></step><final>1</final>", -1.0),  # stray closing tag
    ("<step 1>a</final>", -1.0),
    ("<step x>a</step><final>1</final>", -1.0),
    ("<step 1>a</step 2><final>1</final>", -1.0),
    ("<step 1>a</step><final>1", -1.0),  # final left open
    ("<step>a</step><final>1</final>", -1.0),  # step without its number
    # neither
    ("just text, \\boxed{3}", 0.0),
    ("<step 1>a</step><step 3>b</step><final>1</final>", 0.0),  # numbering
    ("<step 2>a</step><step 1>b</step><final>1</final>", 0.0),  # order
    ("<step 1>a</step><final>1</final><final>2</final>", 0.0),  # two finals
    ("<step 1>a</step><step 2>b</step>", 0.0),  # no final
    ("<final>1</final>", 0.0),  # no steps
    ("<step 1>a</step> so <final>1</final>", 0.0),  # text between blocks
    ("<step 1>a</step><final>1</final> done", 0.0),  # text after the final
    ("<final>1</final><step 1>a</step>", 0.0),  # final not at the end
])
def test_format_score(text, expected):
  assert format_score(text) == expected


def test_segment_tagged_steps():
  steps = segment_steps(PERFECT)
  assert [s.text for s in steps] == ["3 + 4 = 7", "7 * 2 = 14", "14 - 5 = 9"]
  assert PERFECT[steps[1].start:steps[1].end] == "<step 2>7 * 2 = 14</step>"
  # An unclosed step ends where the final starts; a truncated one at the end of the text.
  text = "<step 1>a</step> <step 2>b c <final>3</final>"
  steps = segment_steps(text)
  assert text[steps[1].start:steps[1].end] == "<step 2>b c " and steps[1].text == "b c"
  text = "<step 1>a</step><step 2>b c   "
  steps = segment_steps(text)
  assert text[steps[1].start:steps[1].end] == "<step 2>b c"


def test_segment_free_form():
  text = "First we add.\n\n  Then multiply\nit.\n\n\n\nDone: 9  "
  steps = segment_steps(text)
  assert [s.text for s in steps] == ["First we add.", "Then multiply\nit.", "Done: 9"]
  assert [text[s.start:s.end] for s in steps] == ["First we add.", "Then multiply\nit.", "Done: 9"]
  assert [s.text for s in segment_steps("one line only")] == ["one line only"]
  assert segment_steps("") == [] and segment_steps(" \n\n ") == []


def test_think_blocks_are_not_scored():
  from botjax.rewards import MathReward
  from botjax.testbeds.arith_judge import ExactArithmeticJudge
  from botjax.rewards.math import answer_offset
  meta = {"answer": "14", "problem": "What is (3 + 4) * 2?", "step_exprs": ["3 + 4", "7 * 2"],
          "step_values": [7, 14]}
  answer = "<step 1>3 + 4 = 7</step>\n<step 2>7 * 2 = 14</step>\n<final>14</final>"
  # the think block mentions a step tag and a wrong boxed answer: neither may count
  think = "<think>maybe <step 1>3 + 4 = 8</step> so \\boxed{16}?</think>\n"
  fn = MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5)
  plain, thought = fn.score("p", answer, meta), fn.score("p", think + answer, meta)
  assert thought.reward == plain.reward == 3.0 + 0.2
  assert thought.components["num_steps"] == 2.0
  assert [s for _, _, s in thought.steps] == [1.0, 1.0]
  shift = len(think)
  assert [(a - shift, b - shift) for a, b, _ in thought.steps] == [(a, b) for a, b, _ in plain.steps]
  assert thought.token_spans[0][0] == shift
  # cut off while thinking: no answer even though a boxed value appears
  cut = fn.score("p", "<think>the answer is \\boxed{14} I think", meta)
  assert cut.components["answer"] == 0.0 and cut.components["num_steps"] == 0.0
  assert answer_offset("no block") == 0 and answer_offset("<think>x") is None
  assert answer_offset("a</think>b</think>c") == len("a</think>b</think>")
