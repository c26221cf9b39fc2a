"""Step judges: one interface, verdicts in {+1 correct, 0 uncertain, −1 incorrect} per judged unit.

  ExactArithmeticJudge  exact checks for the synthetic arithmetic task (optional seeded noise)
  OpenAIStepJudge       an LLM behind an OpenAI-compatible chat-completions endpoint
  LocalModelJudge       a local scorer (a botjax model on the host accelerator, or any callable)

A judge that cannot be reached or answers nonsense never stops training by itself: the unit scores
0 and the failure is counted. After `max_consecutive_failures` failures in a row the judge raises
`JudgeUnavailable` (a `RewardUnavailable`, which `RewardPool` lets through) rather than let a run
train on no signal. `check_reachable()` is the start-up check.
"""
from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
import os
import re
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from botjax.data import arithmetic
from botjax.rewards.base import RewardUnavailable

VERDICTS = (-1, 0, 1)


class JudgeError(Exception):
  """One judge call failed (transport error, timeout, unparseable reply); the unit scores 0."""


class JudgeUnavailable(RewardUnavailable):
  """The judge failed `max_consecutive_failures` times in a row, or failed its start-up check."""


@dataclasses.dataclass(frozen=True)
class JudgeRequest:
  """One judged unit: steps[first:last] of a solution, with what the strategy lets the judge see.

  Attributes:
    problem: the problem statement.
    steps: all step contents of the solution.
    first, last: the unit is steps[first:last] (0-based, half-open).
    context: the earlier steps shown to the judge (empty for the "independent" strategy).
    prior_verdicts: for "context_aware", the judge's verdicts on the earlier units; else None.
    metadata: the problem record.
    strategy: the judging strategy that built the request (botjax.rewards.steps.STRATEGIES);
      LLM judges read what they are shown, the exact judge also changes its rule (see there).
  """
  problem: str
  steps: tuple[str, ...]
  first: int
  last: int
  context: tuple[str, ...] = ()
  prior_verdicts: tuple[int, ...] | None = None
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  strategy: str = "error_propagation"

  @property
  def unit(self) -> tuple[str, ...]:
    return self.steps[self.first:self.last]


@dataclasses.dataclass
class JudgeStats:
  """Counters of one scoring call (mutable)."""
  calls: int = 0
  failures: int = 0


class StepJudge(abc.ABC):
  """Base class: subclasses implement `_verdicts`; `judge` adds failure handling and counters.

  Args:
    max_consecutive_failures: failed units in a row before JudgeUnavailable is raised.
  """

  def __init__(self, *, max_consecutive_failures: int = 32):
    if int(max_consecutive_failures) < 1:
      raise ValueError(f"max_consecutive_failures must be >= 1, got {max_consecutive_failures}")
    self.max_consecutive_failures = int(max_consecutive_failures)
    self._lock = threading.Lock()
    self._calls = self._failures = self._consecutive = 0
    self._last_error = ""

  @abc.abstractmethod  # abstract: each judge defines how it reaches its verdicts
  def _verdicts(self, requests: Sequence[JudgeRequest]) -> list[int | Exception]:
    """One verdict (or the Exception that prevented it) per request, in order."""

  def check_reachable(self) -> None:
    """Raises JudgeUnavailable if the judge cannot answer (default: always reachable)."""

  def judge(self, requests: Sequence[JudgeRequest], *,
            stats: JudgeStats | None = None) -> list[int]:
    """Verdicts for the requests; a failed request gives 0 and is counted.

    Raises:
      JudgeUnavailable: after max_consecutive_failures failures in a row.
    """
    if not requests:
      return []
    try:
      raw = list(self._verdicts(requests))
      if len(raw) != len(requests):
        raise JudgeError(f"{type(self).__name__} gave {len(raw)} verdicts for {len(requests)} "
                         f"requests")
    except Exception as e:  # a judge failing as a whole fails every unit
      raw = [e] * len(requests)
    out = []
    with self._lock:
      for v in raw:
        self._calls += 1
        if isinstance(v, Exception) or v not in VERDICTS:
          self._failures += 1
          self._consecutive += 1
          self._last_error = (f"{type(v).__name__}: {v}" if isinstance(v, Exception)
                              else f"verdict {v!r} not in {VERDICTS}")
          out.append(0)
        else:
          self._consecutive = 0
          out.append(int(v))
      consecutive, last_error = self._consecutive, self._last_error
    if stats is not None:
      stats.calls += len(out)
      stats.failures += sum(isinstance(v, Exception) or v not in VERDICTS for v in raw)
    if consecutive >= self.max_consecutive_failures:
      raise JudgeUnavailable(
          f"{self!r} failed {consecutive} times in a row (max_consecutive_failures="
          f"{self.max_consecutive_failures}); last error: {last_error}")
    return out

  def metrics(self) -> dict[str, int]:
    """Cumulative counters of this judge object: judge_calls, judge_failures, consecutive."""
    with self._lock:
      return {"judge_calls": self._calls, "judge_failures": self._failures,
              "judge_consecutive_failures": self._consecutive}

  def __getstate__(self):  # locks do not pickle (process pools)
    state = self.__dict__.copy()
    state.pop("_lock", None)
    return state

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._lock = threading.Lock()


# ---- exact arithmetic ----------------------------------------------------------------------------

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
  unit is +1 when all its steps are correct, else −1. With `noise` = p > 0, each unit verdict is negated with probability p, from
  an RNG seeded by (seed, the solution's text, the unit), so a given unit of a given solution always
  gets the same flip, and distinct solutions get independent flips.

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


# ---- LLM judge over the OpenAI chat-completions API ----------------------------------------------

JUDGE_SYSTEM_PROMPT = """\
You are a meticulous grader of step-by-step mathematical solutions.
You are shown a problem, possibly the earlier steps of a solution, and the step(s) to grade.
Grade ONLY the step(s) under "Steps to grade", taking the earlier steps as given.
A step is correct when every claim and computation in it is mathematically valid and it follows
from the problem and the earlier steps. It does not need to finish the solution.
Reply with one short sentence of reasoning, then a last line of exactly one of:
VERDICT: +1   (definitely correct)
VERDICT: 0    (cannot tell, or correct but irrelevant)
VERDICT: -1   (definitely incorrect: an error in computation, logic or use of the problem)"""

_VERDICT_LINE = re.compile(
    r"verdict\s*[:=]?\s*\**\s*(\+\s*1|-\s*1|−\s*1|1|0|correct|incorrect|uncertain)\b",
    re.IGNORECASE)
_BARE = {"+1": 1, "1": 1, "0": 0, "-1": -1, "−1": -1, "correct": 1, "incorrect": -1,
         "uncertain": 0}


def parse_verdict(reply: str | None) -> int:
  """The verdict in a judge reply: the last `VERDICT: +1|0|-1` (or CORRECT/UNCERTAIN/INCORRECT).

  A reply that is only a bare verdict ("+1", "-1", "0", "correct", …) is accepted too.

  Raises:
    JudgeError: when no verdict can be read.
  """
  if not reply or not reply.strip():
    raise JudgeError("empty judge reply")
  found = _VERDICT_LINE.findall(reply)
  token = found[-1] if found else reply.strip().strip(".*` ")
  token = re.sub(r"\s+", "", token).lower()
  if token not in _BARE:
    raise JudgeError(f"no verdict in judge reply {reply[:120]!r}")
  return _BARE[token]


def render_request(req: JudgeRequest) -> str:
  """The user message for one judged unit (see JUDGE_SYSTEM_PROMPT).

  Layout: the problem; the earlier steps (unless the strategy hides them); for "context_aware",
  the judge's earlier verdicts (beside each step when units are single steps, else one line per
  earlier unit, unit j covering steps j+1..j+W); the steps to grade, numbered as in the solution.
  """
  width = req.last - req.first
  prior = req.prior_verdicts or ()
  lines = [f"Problem:\n{req.problem.strip()}", ""]
  if req.context:
    lines.append("Earlier steps:")
    for i, text in enumerate(req.context, 1):
      verdict = ""
      if width == 1 and i <= len(prior):
        verdict = f"   [your earlier verdict: {prior[i - 1]:+d}]"
      lines.append(f"Step {i}: {text.strip()}{verdict}")
    lines.append("")
  if width > 1 and prior:
    lines.append("Your earlier verdicts:")
    lines.extend(f"Steps {j + 1}-{j + width}: {v:+d}" for j, v in enumerate(prior))
    lines.append("")
  lines.append("Steps to grade:")
  lines.extend(f"Step {i + 1}: {req.steps[i].strip()}" for i in range(req.first, req.last))
  lines.append("")
  lines.append("Grade the step(s) above as one unit and end with the VERDICT line.")
  return "\n".join(lines)


# ---- OpenAI-compatible chat endpoint -------------------------------------------------------------

def resolve_api_key(api_key: str | None) -> str:
  """The API key sent to an OpenAI-compatible server: `api_key` when given, else $OPENAI_API_KEY
  when set, else "EMPTY" (local servers such as vLLM and SGLang accept any key)."""
  return api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"


class OpenAIChat:
  """One OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, vLLM, SGLang, a local server):
  `chat(messages)` returns the reply text. Every LLM and VLM judge of botjax talks through it.

  Transport errors, HTTP 408/429/5xx and timeouts are retried by the `openai` client
  (`max_retries`, exponential backoff). Thread-safe; it pickles without its connection, which is
  rebuilt on first use in the receiving process.

  Args:
    model: the model name sent with each request.
    base_url: the API root, e.g. "http://127.0.0.1:8000/v1"; None uses api.openai.com.
    api_key: see `resolve_api_key`.
    timeout_s: per-request timeout in seconds, > 0.
    max_retries: client retries per request, >= 0.
    temperature, max_tokens: sampling of the judge.
  """

  def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
               timeout_s: float = 60.0, max_retries: int = 2, temperature: float = 0.0,
               max_tokens: int = 256):
    if not model:
      raise ValueError(f"model must name the judge model, got {model!r}")
    if timeout_s <= 0 or max_retries < 0:
      raise ValueError(f"need timeout_s > 0 and max_retries >= 0, got timeout_s={timeout_s}, "
                       f"max_retries={max_retries}")
    self.model, self.base_url, self.api_key = model, base_url, resolve_api_key(api_key)
    self.timeout_s, self.max_retries = float(timeout_s), int(max_retries)
    self.temperature, self.max_tokens = temperature, max_tokens
    self._client = None
    self._lock = threading.Lock()

  def __getstate__(self):
    state = self.__dict__.copy()
    state["_client"] = state["_lock"] = None
    return state

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._lock = threading.Lock()

  @property
  def client(self):
    """The `openai.OpenAI` client, built on first use."""
    with self._lock:
      if self._client is None:
        try:
          import openai  # optional dependency (botjax[math])
        except ImportError as e:
          raise ImportError("the OpenAI-compatible judges need the openai client: "
                            "pip install 'openai>=1.50'") from e
        self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key,
                                     timeout=self.timeout_s, max_retries=self.max_retries)
      return self._client

  def chat(self, messages: list[dict[str, Any]], *, max_tokens: int | None = None) -> str:
    """The text of the first choice of one chat completion (raises on transport errors, and
    JudgeError for a reply without choices)."""
    response = self.client.chat.completions.create(
        model=self.model, temperature=self.temperature,
        max_tokens=max_tokens or self.max_tokens, messages=messages)
    if not getattr(response, "choices", None):
      raise JudgeError(f"reply without choices: {str(response)[:120]}")
    return response.choices[0].message.content or ""

  def close(self) -> None:
    with self._lock:
      if self._client is not None:
        self._client.close()
        self._client = None

  def __repr__(self):
    return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"


class OpenAIStepJudge(StepJudge):
  """An LLM judge behind an OpenAI-compatible `/v1/chat/completions` endpoint.

  One chat request per judged unit (system: JUDGE_SYSTEM_PROMPT; user: `render_request`), at most
  `max_concurrency` in flight per judge object; the verdict is the reply's last `VERDICT:` line.
  Transport errors, HTTP 408/429/5xx and timeouts are retried by the `openai` client
  (`max_retries`, exponential backoff); an unparseable reply is asked again `parse_retries` times.
  A request that still fails scores 0 (see StepJudge).

  Args:
    model: the model name sent to the server.
    base_url: e.g. "http://127.0.0.1:8000/v1" (vLLM, SGLang) or None for api.openai.com.
    api_key: the key; None sends $OPENAI_API_KEY when set, else "EMPTY" (`resolve_api_key`).
    timeout_s: per-request timeout in seconds.
    max_retries: client retries per request.
    parse_retries: extra requests after an unparseable reply.
    max_concurrency: requests in flight at once.
    temperature, max_tokens: sampling of the judge.
    system_prompt: replaces JUDGE_SYSTEM_PROMPT.
  """

  def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
               timeout_s: float = 60.0, max_retries: int = 2, parse_retries: int = 1,
               max_concurrency: int = 8, temperature: float = 0.0, max_tokens: int = 256,
               system_prompt: str = JUDGE_SYSTEM_PROMPT, max_consecutive_failures: int = 32):
    super().__init__(max_consecutive_failures=max_consecutive_failures)
    if int(max_concurrency) < 1 or timeout_s <= 0 or max_retries < 0 or parse_retries < 0:
      raise ValueError(f"need max_concurrency >= 1, timeout_s > 0, retries >= 0; got "
                       f"max_concurrency={max_concurrency}, timeout_s={timeout_s}, "
                       f"max_retries={max_retries}, parse_retries={parse_retries}")
    self.endpoint = OpenAIChat(model, base_url=base_url, api_key=api_key, timeout_s=timeout_s,
                               max_retries=max_retries, temperature=temperature,
                               max_tokens=max_tokens)
    self.model, self.base_url = model, base_url
    self.parse_retries = int(parse_retries)
    self.max_concurrency = int(max_concurrency)
    self.system_prompt = system_prompt
    self._executor = None

  def __getstate__(self):  # the executor is rebuilt in the receiving process
    state = super().__getstate__()
    state["_executor"] = None
    return state

  def complete(self, user: str, *, max_tokens: int | None = None) -> str:
    """One chat completion (system prompt + `user`); returns the reply text (raises on transport
    errors)."""
    return self.endpoint.chat([{"role": "system", "content": self.system_prompt},
                               {"role": "user", "content": user}], max_tokens=max_tokens)

  def _one(self, req: JudgeRequest) -> int | Exception:
    error: Exception = JudgeError("no attempt")
    for _ in range(1 + self.parse_retries):
      try:
        return parse_verdict(self.complete(render_request(req)))
      except JudgeError as e:
        error = e
      except Exception as e:  # openai.APIError and friends, already retried by the client
        return JudgeError(f"{type(e).__name__}: {e}")
    return error

  def _verdicts(self, requests):
    with self._lock:
      if self._executor is None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.max_concurrency, thread_name_prefix="openai-judge")
      executor = self._executor
    return list(executor.map(self._one, requests))

  def check_reachable(self) -> None:
    """One short request; raises JudgeUnavailable naming the endpoint if it fails."""
    try:
      self.complete("Reply with the single word OK.", max_tokens=8)
    except Exception as e:
      raise JudgeUnavailable(f"judge {self.model!r} at {self.base_url or 'api.openai.com'} is not "
                             f"reachable: {type(e).__name__}: {e}") from e

  def __repr__(self):
    return f"OpenAIStepJudge(model={self.model!r}, base_url={self.base_url!r})"


# ---- local model judge ---------------------------------------------------------------------------

def render_yes_no(req: JudgeRequest) -> str:
  """Default text of LocalModelJudge: the grading instructions, the unit, a yes/no question."""
  return (f"{JUDGE_SYSTEM_PROMPT}\n\n{render_request(req)}\n"
          f"Is the graded step correct? Answer yes or no:")


class LocalModelJudge(StepJudge):
  """A judge / process reward model run locally: p = score_fn(texts) ∈ [0, 1] per unit.

  verdict = +1 if p ≥ correct_at, −1 if p ≤ incorrect_at, else 0. `score_fn` receives one rendered
  text per unit (`render_request` by default) and returns the probabilities that the units are
  correct; `from_model` builds it from a botjax decoder (P("yes") vs P("no") at the last token).

  Args:
    score_fn: list[str] -> sequence of floats in [0, 1].
    correct_at, incorrect_at: thresholds, 0 ≤ incorrect_at < correct_at ≤ 1.
    render: JudgeRequest -> str.
  """

  def __init__(self, score_fn: Callable[[list[str]], Sequence[float]], *,
               correct_at: float = 0.7, incorrect_at: float = 0.3,
               render: Callable[[JudgeRequest], str] | None = None,
               max_consecutive_failures: int = 32):
    super().__init__(max_consecutive_failures=max_consecutive_failures)
    if not 0.0 <= incorrect_at < correct_at <= 1.0:
      raise ValueError(f"need 0 <= incorrect_at < correct_at <= 1, got incorrect_at="
                       f"{incorrect_at}, correct_at={correct_at}")
    self.score_fn, self.correct_at, self.incorrect_at = score_fn, correct_at, incorrect_at
    self.render = render or render_yes_no

  def _verdicts(self, requests):
    probs = np.asarray(self.score_fn([self.render(r) for r in requests]), dtype=np.float64)
    if probs.shape != (len(requests),):
      raise JudgeError(f"score_fn returned shape {probs.shape} for {len(requests)} texts")
    out = []
    for p in probs:
      if not 0.0 <= p <= 1.0:  # also catches NaN
        out.append(JudgeError(f"score {p} outside [0, 1]"))
      else:
        out.append(1 if p >= self.correct_at else -1 if p <= self.incorrect_at else 0)
    return out

  def check_reachable(self) -> None:
    """Scores one short text; raises JudgeUnavailable unless a probability in [0, 1] comes back."""
    try:
      probs = np.asarray(self.score_fn(["Is 1 + 1 = 2 correct? Answer yes or no:"]), np.float64)
      if probs.shape != (1,) or not 0.0 <= probs[0] <= 1.0:
        raise JudgeError(f"score_fn returned {probs!r} for one text; expected one value in [0, 1]")
    except Exception as e:
      raise JudgeUnavailable(f"{self!r} cannot score: {type(e).__name__}: {e}") from e

  def __repr__(self):
    return (f"LocalModelJudge(score_fn={getattr(self.score_fn, '__name__', self.score_fn)!r}, "
            f"correct_at={self.correct_at}, incorrect_at={self.incorrect_at})")

  @classmethod
  def from_model(cls, model, encode: Callable[[str], Sequence[int]], *, yes_id: int, no_id: int,
                 pad_id: int = 0, bucket: int = 64, **kwargs) -> "LocalModelJudge":
    """A judge reading P(yes)/(P(yes)+P(no)) from a botjax decoder's next-token logits.

    The model is called as `model(input_ids, positions, attention_mask=mask)` -> (logits, _)
    (docs/CONTRACTS.md); texts are right-padded to a multiple of `bucket` tokens so shapes repeat.

    Args:
      model: a botjax.models.Decoder (or anything with that call signature).
      encode: text -> token ids (e.g. a tokenizer's `encode`).
      yes_id, no_id: token ids of the answers.
      pad_id: padding id.
      bucket: padding multiple.
      **kwargs: LocalModelJudge arguments (thresholds, render).
    """
    import jax  # the host accelerator; imported only when a model judge is built
    import jax.numpy as jnp

    def last_probs(m, ids, mask, last):
      positions = jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)
      logits, _ = m(ids, positions, attention_mask=mask)
      rows = jnp.take_along_axis(logits, last[:, None, None], axis=1)[:, 0, :]
      pair = jnp.stack([rows[:, yes_id], rows[:, no_id]], axis=-1).astype(jnp.float32)
      return jax.nn.softmax(pair, axis=-1)[:, 0]

    from flax import nnx
    call = nnx.jit(last_probs) if isinstance(model, nnx.Module) else last_probs

    def score_fn(texts: list[str]) -> np.ndarray:
      encoded = [list(encode(t)) for t in texts]
      if any(not e for e in encoded):
        raise JudgeError("a judge prompt encoded to zero tokens")
      width = -(-max(len(e) for e in encoded) // bucket) * bucket
      ids = np.full((len(encoded), width), pad_id, np.int32)
      mask = np.zeros((len(encoded), width), bool)
      for i, e in enumerate(encoded):
        ids[i, :len(e)], mask[i, :len(e)] = e, True
      last = np.asarray([len(e) - 1 for e in encoded], np.int32)
      return np.asarray(jax.device_get(call(model, ids, mask, last)))

    return cls(score_fn, **kwargs)
