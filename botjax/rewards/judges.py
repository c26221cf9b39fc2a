"""Step judges: one interface, verdicts in {+1 correct, 0 uncertain, −1 incorrect} per judged unit.

  StepJudge     the interface: `judge(requests)` with failure counting, `check_reachable()`,
                `metrics()`
  LLMStepJudge  an LLM behind a chat API (`botjax.rewards.llm`: OpenAI-compatible servers such as
                vLLM and SGLang, or the Anthropic Messages API)

The other judges: the exact judge of the arithmetic task (`botjax.testbeds.arith_judge`) and a
local model or process reward model (`botjax.rewards.local_judge`).

A judge that cannot be reached or answers nonsense never stops training by itself: the unit scores
0 and the failure is counted. After `max_consecutive_failures` failures in a row the judge raises
`JudgeUnavailable` (a `RewardUnavailable`, which `RewardPool` lets through) rather than let a run
train on no signal. `check_reachable()` is the start-up check.
"""
from __future__ import annotations

import abc
import dataclasses
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from botjax.rewards import llm
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


# ---- LLM judge ----------------------------------------------------------------------------------

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



# Placeholders of a step judge's user template (`LLMStepJudge(user_template=...)`).
USER_TEMPLATE_REQUIRED = ("problem", "steps")
USER_TEMPLATE_OPTIONAL = ("context", "verdicts", "first", "last")


def template_fields(req: JudgeRequest) -> dict[str, str | int]:
  """The values of a user template's placeholders for one judged unit.

    {problem}   the problem statement
    {steps}     the steps to grade, one "Step i: text" line each (numbered as in the solution)
    {context}   the earlier steps the strategy shows, "Step i: text" lines ("" when none)
    {verdicts}  for "context_aware", the judge's verdicts on the earlier units, one line each:
                "Step i: +1" for single steps, "Steps i-j: -1" for windows ("" when none)
    {first}, {last}  the 1-based numbers of the first and last step to grade
  """
  width = req.last - req.first
  prior = req.prior_verdicts or ()
  if width == 1:
    verdicts = [f"Step {j + 1}: {v:+d}" for j, v in enumerate(prior)]
  else:
    verdicts = [f"Steps {j + 1}-{j + width}: {v:+d}" for j, v in enumerate(prior)]
  return {"problem": req.problem.strip(),
          "steps": "\n".join(f"Step {i + 1}: {req.steps[i].strip()}"
                             for i in range(req.first, req.last)),
          "context": "\n".join(f"Step {i}: {t.strip()}" for i, t in enumerate(req.context, 1)),
          "verdicts": "\n".join(verdicts), "first": req.first + 1, "last": req.last}


class LLMStepJudge(StepJudge):
  """An LLM step judge behind a chat API: an OpenAI-compatible server or Anthropic's Messages API.

  One chat request per judged unit (system: `system_prompt`; user: `user_template` filled by
  `template_fields`, or `render_request`'s layout by default), at most `max_concurrency` in
  flight per judge object; the verdict is the reply's last `VERDICT:` line (or a bare verdict).
  Transport errors, timeouts and HTTP 408/429/5xx (and Anthropic's 529) are retried by the client
  (`max_retries`, exponential backoff); a reply without a verdict is asked again `parse_retries`
  times. A request that still fails scores 0 (see StepJudge).

  Args:
    model: the model name sent to the server.
    api: "openai" (chat completions) or "anthropic" (Messages API); `botjax.rewards.llm.APIS`.
    base_url: the API root: "http://127.0.0.1:8000/v1" (vLLM, SGLang) or None for api.openai.com;
      for anthropic "https://api.anthropic.com" (the default) or a compatible server.
    api_key: the key; None reads $OPENAI_API_KEY (else "EMPTY") or $ANTHROPIC_API_KEY
      (`botjax.rewards.llm.resolve_api_key`).
    timeout_s: per-request timeout in seconds.
    max_retries: client retries per request.
    parse_retries: extra requests after a reply without a verdict.
    max_concurrency: requests in flight at once.
    temperature: None: 0.0 for OpenAI-compatible servers; Anthropic's API takes none.
    max_tokens: the reply's token limit.
    system_prompt: the system prompt, as text or a file (pathlib.Path); default
      JUDGE_SYSTEM_PROMPT. Sent as it is (no placeholders).
    user_template: the user message, as text or a file (pathlib.Path), a str.format template with
      the placeholders of `template_fields` ({problem} and {steps} required); None: the layout of
      `render_request`.
  """

  def __init__(self, model: str, *, api: str = "openai", base_url: str | None = None,
               api_key: str | None = None, timeout_s: float = 60.0, max_retries: int = 2,
               parse_retries: int = 1, max_concurrency: int = 8,
               temperature: float | None = None, max_tokens: int = 256,
               system_prompt: str | os.PathLike = JUDGE_SYSTEM_PROMPT,
               user_template: str | os.PathLike | None = None,
               max_consecutive_failures: int = 32):
    super().__init__(max_consecutive_failures=max_consecutive_failures)
    if int(parse_retries) < 0:
      raise ValueError(f"parse_retries must be >= 0, got {parse_retries}")
    self.client = llm.make_client(api, model, base_url=base_url, api_key=api_key,
                                  timeout_s=timeout_s, max_retries=max_retries,
                                  temperature=temperature, max_tokens=max_tokens,
                                  concurrency=max_concurrency)
    self.parse_retries = int(parse_retries)
    self.system_prompt = llm.load_prompt(system_prompt, what="the step judge's system prompt",
                                         template=False)
    self.user_template = None if user_template is None else llm.load_prompt(
        user_template, what="the step judge's user template", required=USER_TEMPLATE_REQUIRED,
        optional=USER_TEMPLATE_OPTIONAL)

  @property
  def model(self) -> str:
    return self.client.model

  def render(self, req: JudgeRequest) -> str:
    """The user message of one judged unit."""
    if self.user_template is None:
      return render_request(req)
    return self.user_template.format(**template_fields(req))

  def complete(self, user: str, *, max_tokens: int | None = None) -> str:
    """One chat request (system prompt + `user`); returns the reply text (raises on transport
    errors)."""
    return self.client.chat([{"role": "system", "content": self.system_prompt},
                             {"role": "user", "content": user}], max_tokens=max_tokens)

  def _one(self, req: JudgeRequest) -> int | Exception:
    error: Exception = JudgeError("no attempt")
    for _ in range(1 + self.parse_retries):
      try:
        return parse_verdict(self.complete(self.render(req)))
      except (JudgeError, llm.ReplyError) as e:
        error = e if isinstance(e, JudgeError) else JudgeError(str(e))
      except Exception as e:  # openai.APIError, anthropic.APIError, ...: retried by the client
        return JudgeError(f"{type(e).__name__}: {e}")
    return error

  def _verdicts(self, requests):
    return self.client.map(self._one, requests)

  def check_reachable(self) -> None:
    """One short request; raises JudgeUnavailable naming the API, model and endpoint if it fails."""
    try:
      self.client.check_reachable()
    except llm.Unreachable as e:
      raise JudgeUnavailable(f"step judge: {e}") from e

  def close(self) -> None:
    self.client.close()

  def __repr__(self):
    return (f"LLMStepJudge(api={self.client.api!r}, model={self.model!r}, "
            f"base_url={self.client.base_url!r})")
