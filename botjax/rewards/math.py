"""MATH / AIME rewards: answer extraction, bounded verification, the format term, step segmentation.

Text format (docs/CONTRACTS.md):

  <step 1>3 + 4 = 7</step>
  <step 2>7 * 2 = 14</step>
  <final>14</final>

Model text is never given to eval or sympify directly. An extracted answer is first screened
(length, bracket depth, digit runs, power towers, big factorials), then parsed and compared by
Hugging Face `math-verify` under a time limit (a SIGALRM interval timer in the main thread, 1 s by
default; in other threads the caller's pool timeout is the guard, see `botjax.rewards.pool`).
Screened-out answers cost microseconds to milliseconds. Anything that fails the screen, the
parser or the clock scores as wrong.

`MathReward` is the AIME reward of BoT-GRPO (arXiv 2610.09804, eq. 8).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from botjax.rewards.base import RewardResult, RewardSpec, Signal, check_batch
from botjax.rewards.judges import JudgeStats, StepJudge
from botjax.rewards.steps import STRATEGIES, judge_steps, step_token_spans, step_scores

PERFECT_FORMAT_BONUS = 0.2
MISMATCHED_TAGS_PENALTY = -1.0


# ---- extraction ----------------------------------------------------------------------------------

def _balanced_group(text: str, open_pos: int, max_chars: int) -> int | None:
  """Index of the bracket closing text[open_pos] ('{' or '('), scanning at most max_chars."""
  opening = text[open_pos]
  closing = "}" if opening == "{" else ")"
  depth = 0
  for i in range(open_pos, min(len(text), open_pos + max_chars + 2)):
    ch = text[i]
    if ch == opening:
      depth += 1
    elif ch == closing:
      depth -= 1
      if depth == 0:
        return i
  return None


def extract_boxed(text: str, *, max_chars: int = 256) -> str | None:
  """Content of the last `\\boxed{...}` (nested braces allowed), or None.

  Every scan is bounded: the closing brace is looked for in the next max_chars characters, at
  most 8 spaces may precede the brace, and only the last 64 occurrences of `\\boxed` are tried; so
  a megabyte of braces or of `\\boxed` costs microseconds and yields None.
  """
  pos = text.rfind("\\boxed")
  for _ in range(64):
    if pos < 0:
      break
    brace = pos + len("\\boxed")
    limit = min(len(text), brace + 8)
    while brace < limit and text[brace] == " ":
      brace += 1
    if brace < len(text) and text[brace] == "{":
      end = _balanced_group(text, brace, max_chars)
      return None if end is None else text[brace + 1:end].strip()
    pos = text.rfind("\\boxed", 0, pos)
  return None


def extract_answer(completion: str, *, max_chars: int = 256) -> str | None:
  """The final answer of a completion, or None.

  Order: the content of the last `<final>...</final>` (a `\\boxed{}` inside it is unwrapped; an
  unclosed `<final>` at the end counts up to the end of the text); else the last `\\boxed{...}`.
  Answers longer than max_chars are None.
  """
  start = completion.rfind("<final>")
  if start >= 0:
    body_start = start + len("<final>")
    end = completion.find("</final>", body_start)
    body = completion[body_start:] if end < 0 else completion[body_start:end]
    if len(body) > 4 * max_chars:
      return None
    boxed = extract_boxed(body, max_chars=max_chars)
    answer = boxed if boxed is not None else body.strip()
  else:
    answer = extract_boxed(completion, max_chars=max_chars)
  if answer is None or not answer or len(answer) > max_chars:
    return None
  return answer


# ---- screening and bounded verification ---------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class AnswerLimits:
  """What an answer may contain before it reaches the parser.

  Attributes:
    max_chars: longest answer string.
    max_depth: deepest nesting of (), [] and {}.
    max_digits: longest run of digits in one number.
    max_exponent_digits: longest literal exponent (a^123 has 3); an exponent that itself contains
      a power, or a chained power a^b^c, is rejected outright (power towers).
    max_powers: most ^ / ** operators.
    max_factorial: largest n in n!; a factorial of anything but a literal is rejected.
    time_limit_s: wall-clock limit of parse + verify (main thread only, SIGALRM timer).
  """
  max_chars: int = 256
  max_depth: int = 12
  max_digits: int = 64
  max_exponent_digits: int = 4
  max_powers: int = 6
  max_factorial: int = 200
  time_limit_s: float = 1.0


_POWER = re.compile(r"\^|\*\*")
_OPERAND = re.compile(r"\s*([A-Za-z0-9.]+|\\[A-Za-z]+)")
_DIGITS = re.compile(r"\d+")
_FACTORIAL = re.compile(r"(\d*)\s*!")


def screen_answer(answer: str, limits: AnswerLimits = AnswerLimits()) -> str | None:
  """Why an answer must not be parsed (a short reason), or None when it may be.

  Linear in len(answer) (the length check comes first).
  """
  if len(answer) > limits.max_chars:
    return f"answer longer than {limits.max_chars} characters"
  depth = deepest = 0
  for ch in answer:
    if ch in "([{":
      depth += 1
      deepest = max(deepest, depth)
    elif ch in ")]}":
      depth -= 1
  if deepest > limits.max_depth:
    return f"brackets nested deeper than {limits.max_depth}"
  if any(len(m) > limits.max_digits for m in _DIGITS.findall(answer)):
    return f"a number with more than {limits.max_digits} digits"
  powers = list(_POWER.finditer(answer))
  if len(powers) > limits.max_powers:
    return f"more than {limits.max_powers} powers"
  for m in powers:
    pos = m.end()
    while pos < len(answer) and answer[pos] == " ":
      pos += 1
    if pos < len(answer) and answer[pos] in "{(":
      end = _balanced_group(answer, pos, limits.max_chars)
      if end is None:
        return "unbalanced exponent"
      operand, after = answer[pos + 1:end], end + 1
    else:
      op = _OPERAND.match(answer, pos)
      if op is None:
        return "malformed exponent"
      operand, after = op.group(1), op.end()
    if _POWER.search(operand) or _POWER.match(answer[after:].lstrip()):
      return "power tower"
    if any(len(d) > limits.max_exponent_digits for d in _DIGITS.findall(operand)):
      return f"exponent with more than {limits.max_exponent_digits} digits"
  for m in _FACTORIAL.finditer(answer):
    if not m.group(1) or int(m.group(1)) > limits.max_factorial:
      return f"factorial of anything but a literal <= {limits.max_factorial}"
  return None


class _OutOfTime(Exception):
  pass


@contextlib.contextmanager
def _time_limit(seconds: float):
  """Raises _OutOfTime after `seconds` of wall time (main thread with SIGALRM only; else no-op)."""
  if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
    yield
    return

  def on_alarm(signum, frame):
    # Re-arm first: if this exception lands in code that swallows it (a gc callback), the next
    # one fires 10 ms later; the finally below disarms the timer once the block is left.
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    raise _OutOfTime()

  start = time.monotonic()
  previous_handler = signal.signal(signal.SIGALRM, on_alarm)
  previous_timer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous_handler)
    if previous_timer > 0:  # re-arm an outer timer with what is left of it
      signal.setitimer(signal.ITIMER_REAL, max(1e-3, previous_timer - (time.monotonic() - start)))


_INTEGER = re.compile(r"[+-]?\d+")


@functools.cache
def _math_verify():
  """Imports math-verify (and sympy, ~1 s) and warms its regex caches, outside any time limit.

  The time limit is ours (`AnswerLimits.time_limit_s`), so math-verify's warning that its own
  timeout is disabled says nothing to the user and is silenced.
  """
  import logging
  import math_verify
  for name in ("math_verify", "math_verify.parser", "math_verify.grader"):
    logging.getLogger(name).setLevel(logging.ERROR)
  math_verify.parse("\\boxed{1}", parsing_timeout=None)
  math_verify.parse("1", extraction_config=[math_verify.ExprExtractionConfig()],
                    parsing_timeout=None)
  return math_verify


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> tuple:
  """math-verify parse of an answer as LaTeX (`\\boxed{text}`), then as a plain expression."""
  parse, ExprExtractionConfig = _math_verify().parse, _math_verify().ExprExtractionConfig
  parsed = parse(f"\\boxed{{{text}}}", parsing_timeout=None)
  if not parsed or isinstance(parsed[0], str):
    parsed = parse(text, extraction_config=[ExprExtractionConfig()], parsing_timeout=None)
  return tuple(parsed)


def _is_integer_gold(gold: str) -> bool:
  return _INTEGER.fullmatch(gold.strip()) is not None


def answers_match(answer: str | None, gold: str, *, integer: bool | None = None,
                  limits: AnswerLimits = AnswerLimits()) -> bool:
  """Whether an extracted answer equals the reference answer.

  Integer references (AIME; `integer=None` decides from the reference text) are compared exactly:
  an integer literal by value (leading zeros and a + sign allowed: "007" == "7"), any other answer
  through math-verify's exact value ("\\frac{408}{2}" == 204, "204.5" != 204). Other references go
  through math-verify `verify(gold, answer)`. A screened-out, unparseable or timed-out answer is
  wrong. Never raises for model text.

  Args:
    answer: the extracted answer (see `extract_answer`), or None.
    gold: the reference answer (trusted text).
    integer: force (True) or disable (False) exact integer comparison; None: automatic.
    limits: screening and time limits for the answer.

  Returns:
    True iff the answer is correct.
  """
  if answer is None:
    return False
  answer = answer.strip()
  integer = _is_integer_gold(gold) if integer is None else integer
  if integer and _INTEGER.fullmatch(answer):
    return len(answer) <= limits.max_digits and int(answer) == int(gold.strip())
  if screen_answer(answer, limits) is not None:
    return False
  verify = _math_verify().verify
  try:
    with _time_limit(limits.time_limit_s):
      predicted = _parse(answer)
      if not predicted:
        return False
      if integer:
        import sympy
        value = predicted[0]
        if isinstance(value, sympy.Number):
          return bool(sympy.Rational(value) == sympy.Integer(int(gold.strip())))
      return bool(verify(list(_parse(gold.strip())), list(predicted), timeout_seconds=None))
  except Exception:  # _OutOfTime, sympy/latex errors: model text that cannot be checked is wrong
    return False


def is_correct(completion: str, gold: str, *, integer: bool | None = None,
               limits: AnswerLimits = AnswerLimits()) -> bool:
  """`answers_match(extract_answer(completion), gold)`."""
  return answers_match(extract_answer(completion, max_chars=limits.max_chars), gold,
                       integer=integer, limits=limits)


# ---- format term and step segmentation -----------------------------------------------------------

_TAG = re.compile(r"<(/?)(step|final)\b([^<>]{0,16})>")


@dataclasses.dataclass(frozen=True)
class StepSpan:
  """One reasoning step: [start, end) covers the tags; `text` is the step's content."""
  start: int
  end: int
  text: str


def _tags(completion: str):
  """(start, end, closing, kind, number or None, well_formed) for each step/final tag."""
  out = []
  for m in _TAG.finditer(completion):
    closing, kind, rest = m.group(1) == "/", m.group(2), m.group(3).strip()
    number, ok = None, True
    if rest:
      ok = kind == "step" and rest.isdigit() and len(rest) <= 6
      number = int(rest) if ok else None
    out.append((m.start(), m.end(), closing, kind, number, ok))
  return out


def format_score(completion: str, *, perfect: float = PERFECT_FORMAT_BONUS,
                 mismatched: float = MISMATCHED_TAGS_PENALTY) -> float:
  """The format term b_format of eq. 8.

  b = perfect (+0.2) when the text is exactly
  `<step 1>…</step> … <step n>…</step> <final>…</final>`: n ≥ 1 steps numbered 1..n in order,
  each closed (a closing tag may repeat the number), then exactly one final, with only whitespace
  outside the tags. b = mismatched (−1.0) when the tags do not pair up: a closing tag with nothing
  (or something else) open, a tag opened inside another, a tag left open, a malformed tag
  (`<step x>`, `<final 2>`). b = 0 otherwise (no tags, wrong numbering, text between blocks, a
  missing or repeated final).

  Returns:
    The bonus as a float.
  """
  tags = _tags(completion)
  open_tag, blocks = None, []
  for start, end, closing, kind, number, ok in tags:
    if not ok:
      return mismatched
    if closing:
      if open_tag is None or open_tag[1] != kind or (number is not None and number != open_tag[2]):
        return mismatched
      blocks.append((open_tag[0], end, kind, open_tag[2]))
      open_tag = None
    else:
      if open_tag is not None or (kind == "step" and number is None):
        return mismatched
      open_tag = (start, kind, number)
  if open_tag is not None:
    return mismatched
  if len(blocks) < 2 or blocks[-1][2] != "final" or any(b[2] == "final" for b in blocks[:-1]):
    return 0.0
  if [b[3] for b in blocks[:-1]] != list(range(1, len(blocks))):
    return 0.0
  outside, pos = [], 0
  for start, end, _, _ in blocks:
    outside.append(completion[pos:start])
    pos = end
  outside.append(completion[pos:])
  return perfect if not "".join(outside).strip() else 0.0


_BLANK_LINES = re.compile(r"\n[ \t]*\n\s*")


def segment_steps(completion: str) -> list[StepSpan]:
  """Splits a completion into steps with their character spans.

  With `<step …>` tags: one step per opening tag, from the tag to its `</step>` (included); an
  unclosed step runs to the next step or final tag or to the end of the text. Without step tags
  (free-form answers): paragraphs separated by blank lines, whitespace trimmed; a text without
  blank lines is one step, an empty text has none. A `<final>` block is not a step.

  Returns:
    StepSpan list in text order.
  """
  tags = [t for t in _tags(completion) if t[5]]
  opens = [i for i, t in enumerate(tags) if t[3] == "step" and not t[2]]
  if opens:
    steps = []
    for i in opens:
      start, body_start = tags[i][0], tags[i][1]
      nxt = tags[i + 1] if i + 1 < len(tags) else None
      if nxt is not None and nxt[3] == "step" and nxt[2]:
        body_end, end = nxt[0], nxt[1]
      else:
        body_end = end = nxt[0] if nxt is not None else len(completion)
        end = len(completion[:end].rstrip()) if nxt is None else end
      steps.append(StepSpan(start, end, completion[body_start:body_end].strip()))
    return steps
  steps, pos = [], 0
  for piece in [*_BLANK_LINES.finditer(completion), None]:
    stop = piece.start() if piece is not None else len(completion)
    chunk = completion[pos:stop]
    if chunk.strip():
      lead = len(chunk) - len(chunk.lstrip())
      steps.append(StepSpan(pos + lead, pos + len(chunk.rstrip()), chunk.strip()))
    pos = piece.end() if piece is not None else pos
  return steps


# ---- the AIME reward (eq. 8) ---------------------------------------------------------------------

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def answer_offset(completion: str) -> int | None:
  """Where the answer part of a completion starts, past a reasoning model's think block.

  Returns:
    the index after the last `</think>` when there is one; None when the completion opens a
    `<think>` block that never closes (cut off while thinking: no answer); else 0 (no block).
  """
  close = completion.rfind(THINK_CLOSE)
  if close >= 0:
    return close + len(THINK_CLOSE)
  if completion.lstrip().startswith(THINK_OPEN):
    return None
  return 0


class MathReward:
  """AIME / MATH reward of BoT-GRPO (eq. 8), a RewardFn.

    G_k = w_g·1[answer correct] + b_format                       (RewardResult.reward)
    local value of token t = w_s·(1/|S_k|)·Σ_{s ∈ S(t)} e_s       (RewardResult.token_spans)

  e_s ∈ {+1, 0, −1} are the judge's verdicts on the judged units (windows of `window` consecutive
  steps, see `botjax.rewards.steps`), |S_k| the number of units, S(t) the units containing token t.
  The sequence reward excludes the local term; the trainer adds token values to the broadcast G_k
  (`advantages.bot_token_rewards`). `steps` holds one (start, end, score) per step, the score being
  the mean verdict of the units containing the step (the verdict itself when window = 1), for
  PURE / VeriGate / process GRPO.

  Components: "answer" (1.0 if correct else 0.0), "format" (b_format), "steps" (mean verdict, 0
  with no steps or judge), "num_steps", "judge_failures" (units whose judge call failed and
  scored 0).

  Spec (`spec`): the sequence reward, plus token spans and steps with a judge; verifier
  "answer"; weighted (w_g and w_s are applied here, so a BoT-GRPO recipe uses w_global =
  w_local = 1, see `botjax.algorithms.recipe_for_reward`).

  Args:
    judge: a StepJudge (LLMStepJudge, LocalModelJudge, the arithmetic testbed's
      ExactArithmeticJudge), or None for the outcome-only reward (no token spans, steps None).
    w_g: weight of the correctness term (paper: 3.0).
    w_s: weight of the step term (paper: 0.5; 0 for the GRPO baseline).
    strategy: "error_propagation" (default), "context_aware" or "independent".
    window: W, steps per judged unit (paper ablation 1, 3, 5).
    perfect_format, mismatched_format: the format term's values (+0.2, −1.0).
    integer_answers: None decides per reference (AIME integers compared exactly), or force it.
    limits: screening and time limits of answer checking.
    max_judged_units: judge at most this many units per completion; later ones score 0.

  Metadata per item: "answer" (required), "problem" (optional; the prompt otherwise), plus whatever
  the judge reads (e.g. "step_values").

  Reasoning models (SmolLM3 think mode, Phi-4-mini-reasoning): only the text after the last
  `</think>` is scored (answer, format, steps); a completion cut off inside `<think>` has no answer
  and no steps, and its format term is that of an empty answer (`answer_offset`).

  References:
    Yang et al., BoT-GRPO, arXiv 2610.09804, eq. 8.
  """

  def __init__(self, judge: StepJudge | None = None, *, w_g: float = 3.0, w_s: float = 0.5,
               strategy: str = "error_propagation", window: int = 1,
               perfect_format: float = PERFECT_FORMAT_BONUS,
               mismatched_format: float = MISMATCHED_TAGS_PENALTY,
               integer_answers: bool | None = None, limits: AnswerLimits = AnswerLimits(),
               max_judged_units: int = 64):
    if strategy not in STRATEGIES:
      raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if int(window) < 1:
      raise ValueError(f"window must be >= 1, got {window}")
    self.judge = judge
    self.w_g, self.w_s = float(w_g), float(w_s)
    self.strategy, self.window = strategy, int(window)
    self.perfect_format, self.mismatched_format = float(perfect_format), float(mismatched_format)
    self.integer_answers = integer_answers
    self.limits = limits
    self.max_judged_units = int(max_judged_units)

  @property
  def spec(self) -> RewardSpec:
    """Sequence reward (+ token spans and steps with a judge), verifier "answer", weighted."""
    signals = {Signal.SEQUENCE} if self.judge is None else set(Signal)
    return RewardSpec(frozenset(signals), verifier="answer", weighted=True)

  def score(self, prompt: str, completion: str, meta: Mapping[str, Any]) -> RewardResult:
    """Scores one completion (see the class docstring)."""
    if "answer" not in meta:
      raise KeyError(f"MathReward needs metadata['answer']; got keys {sorted(meta)}")
    offset = answer_offset(completion)
    text = "" if offset is None else completion[offset:]
    offset = offset or 0
    correct = bool(text) and is_correct(text, str(meta["answer"]), integer=self.integer_answers,
                                        limits=self.limits)
    b_format = format_score(text, perfect=self.perfect_format, mismatched=self.mismatched_format)
    components = {"answer": float(correct), "format": b_format, "steps": 0.0,
                  "num_steps": 0.0, "judge_failures": 0.0}
    reward = self.w_g * float(correct) + b_format
    if self.judge is None:
      return RewardResult(reward=reward, components=components)
    steps = [StepSpan(st.start + offset, st.end + offset, st.text) for st in segment_steps(text)]
    stats = JudgeStats()
    verdicts = judge_steps(self.judge, str(meta.get("problem", prompt)), [s.text for s in steps],
                           meta, strategy=self.strategy, window=self.window, stats=stats,
                           max_units=self.max_judged_units)
    spans = [(s.start, s.end) for s in steps]
    components.update(
        steps=float(sum(verdicts) / len(verdicts)) if verdicts else 0.0,
        num_steps=float(len(steps)), judge_failures=float(stats.failures))
    return RewardResult(
        reward=reward, components=components,
        token_spans=step_token_spans(spans, verdicts, window=self.window, weight=self.w_s),
        steps=[(a, b, s) for (a, b), s in zip(spans, step_scores(verdicts, len(steps),
                                                                 window=self.window))])

  def __call__(self, prompts: Sequence[str], completions: Sequence[str],
               metadata: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
    check_batch(prompts, completions, metadata)
    return [self.score(p, c, m) for p, c, m in zip(prompts, completions, metadata)]

  def check_reachable(self) -> None:
    """Start-up check: loads math-verify and asks the judge (if any) to answer once.

    Raises:
      JudgeUnavailable: if the judge cannot answer.
    """
    self.warmup()
    if self.judge is not None:
      self.judge.check_reachable()

  @staticmethod
  def warmup() -> None:
    """Imports math-verify and sympy (about a second) now rather than inside the first item."""
    _math_verify()

  def __setstate__(self, state):
    # Unpickled in a RewardPool worker process: load math-verify while the worker starts, so the
    # import is not charged to the first item's timeout.
    self.__dict__.update(state)
    self.warmup()

  def __repr__(self):
    return (f"MathReward(judge={self.judge!r}, w_g={self.w_g}, w_s={self.w_s}, "
            f"strategy={self.strategy!r}, window={self.window})")
