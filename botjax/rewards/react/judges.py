"""LLM code judge, VLM screenshot judge and the pairwise VLM judge, over a chat API
(`botjax.rewards.llm`: an OpenAI-compatible server or Anthropic's Messages API).

Reply formats (BoT-GRPO, arXiv 2610.09804, App. D; the prompts below are written for botjax):

- code judge: sees the request and the code (fence-free, each line prefixed `i: `, 0-indexed),
  never a rendering. Replies `SCORE: <0..10>` (or the non-React sentinel `SCORE: -3`) and
  `LINE_ANALYSIS:` with at most three entries `<line>: <code> | DESC: <text> | IMPACT: <-1..-3>`,
  or `LINE_ANALYSIS: NON_REACT_CODE`.
- VLM judge: sees the request and the screenshot only. Replies `SCORE: <0..10>` and
  `JUSTIFICATION: <text>`. Line variants: "one_turn" (code + screenshot in one call, score from the
  screenshot, then LINE_ANALYSIS or NONE) and "two_turn" (turn 1 is the screenshot-only call; turn 2
  gets turn 1's score and justification, the screenshot and the numbered code and returns only
  LINE_ANALYSIS; turn 1's score is kept).
- pairwise judge: the request and two screenshots labelled A and B; replies one letter.

Parsing: scores are clipped to [0, 10] and divided by 10; a missing score gives 0 and no
attributions; the code judge's −3 sentinel gives −0.3; malformed attribution entries are dropped;
impacts are divided by 10.

Prompts: each judge takes its prompts as text or from a file (pathlib.Path), e.g. the paper's
App. D prompts, with the built-in prompts below as defaults. User prompts are str.format
templates (`{{` / `}}` are literal braces) whose placeholders are checked when the judge is built:

  CodeJudge(prompt=)                     {prompt}, {code} required
  VLMJudge(prompt=)                      {prompt} required          (the screenshot call)
  VLMJudge(one_turn_prompt=)             {prompt}, {code} required
  VLMJudge(second_turn_prompt=)          {code} required; {prompt}, {score}, {justification}
  PairwiseJudge(prompt=)                 {prompt} required

{prompt} is the user's request, {code} the numbered code (`number_lines`), {score} and
{justification} turn 1's. Every judge also takes a `system_prompt` (none by default), sent as it
is. Replies must keep the formats above (SCORE / JUSTIFICATION / LINE_ANALYSIS, one letter).
"""
from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections.abc import Sequence
from typing import Any

from botjax.rewards import llm

NON_REACT_SENTINEL = -3
NON_REACT_SCORE = -0.3
MAX_ATTRIBUTIONS = 3


def _line_analysis_reply(desc: str) -> str:
  """The end of every line-attributing judge prompt: the LINE_ANALYSIS reply format (`desc` says
  what DESC holds), then the `{prompt}` and the numbered `{code}` placeholders."""
  return ("LINE_ANALYSIS:\n"
          f"<line number>: <the code on that line> | DESC: <{desc}> | IMPACT: <-1, -2 or -3>\n\n"
          "Request:\n{prompt}\n\nCode (each line starts with its 0-based number):\n{code}\n")


CODE_JUDGE_PROMPT = """\
You review a single-file React + TypeScript component (styled with Tailwind CSS) that a model wrote
for the request below. You only see the code; nobody has run it.

Rate it from 0 to 10, weighing equally:
- whether it would run: valid TSX, imports limited to react, react-dom and lucide-react, one
  default-exported component, no missing identifiers;
- whether it does what the request asks;
- the care given to layout and looks (sensible Tailwind classes, spacing, hierarchy).
If the answer is not a React component at all (plain HTML, another framework, prose), reply with
SCORE: -3 and LINE_ANALYSIS: NON_REACT_CODE.

Then name at most three lines that hurt the component most, by their number in the listing, with
an impact of -1 (minor), -2 (serious) or -3 (breaks the component). Name none if nothing is wrong.

Reply in exactly this format and nothing else:
SCORE: <integer 0-10>
""" + _line_analysis_reply("what is wrong")

VLM_JUDGE_PROMPT = """\
The image is a 1280x800 screenshot of a React + Tailwind CSS component that a model built for the
request below. Judge only what you can see.

Rate it from 0 to 10: does the page visibly fulfil the request (the expected parts are present
and legible), and is it well laid out and pleasant to look at? An empty or broken page gets 0.

Reply in exactly this format:
SCORE: <integer 0-10>
JUSTIFICATION: <one or two sentences>

Request:
{prompt}
"""

VLM_ONE_TURN_PROMPT = """\
The image is a 1280x800 screenshot of a React + Tailwind CSS component that a model built for the
request below; its code follows. Score the screenshot alone from 0 to 10 (does the page visibly
fulfil the request, and is it well laid out?). Then, using the code, name at most three lines
responsible for what looks wrong, with an impact of -1, -2 or -3, or write NONE.

Reply in exactly this format:
SCORE: <integer 0-10>
JUSTIFICATION: <one or two sentences>
""" + _line_analysis_reply("what it breaks on screen")

VLM_SECOND_TURN_PROMPT = """\
You scored this screenshot {score}/10 for the request below, because: {justification}
Here is the code behind it. Do not score again. Name at most three lines responsible for what
looks wrong in the screenshot, with an impact of -1, -2 or -3, or write NONE.

Reply in exactly this format:
""" + _line_analysis_reply("what it breaks on screen")

PAIRWISE_PROMPT = """\
Two single-file React apps styled with Tailwind CSS were built for the request below. The first
image is app A, the second is app B (1280x800 screenshots). Which one better fulfils the request,
judging completeness, correctness of what is shown and visual quality? Ties are not allowed.

Answer with the single letter A or B and nothing else.

Request:
{prompt}
"""

_SCORE = re.compile(r"SCORE\s*[:=]\s*\**\s*(-?\d+)", re.IGNORECASE)
_JUSTIFICATION = re.compile(r"JUSTIFICATION\s*:\s*(.*)", re.IGNORECASE | re.DOTALL)
_ENTRY = re.compile(r"^\s*[-*]?\s*(\d+)\s*:.*\|\s*DESC\s*:.*\|\s*IMPACT\s*:\s*(-?\d+)\s*\.?\s*$",
                    re.IGNORECASE)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JudgeConfig:
  """A judge's chat endpoint: an OpenAI-compatible server (OpenAI, vLLM, SGLang) or Anthropic's
  Messages API.

  Attributes:
    model: the model name sent with each request.
    api: "openai" or "anthropic" (`botjax.rewards.llm.APIS`).
    base_url: the API root: e.g. "http://127.0.0.1:8000/v1" for an OpenAI-compatible server,
      "https://api.anthropic.com" for Anthropic; None uses the vendor's hosted API.
    api_key: the key; None reads $OPENAI_API_KEY (else "EMPTY", which local servers ignore) or
      $ANTHROPIC_API_KEY: `botjax.rewards.llm.resolve_api_key`.
    temperature: None: 0.0 for OpenAI-compatible servers; the Anthropic API takes none.
    max_tokens: the reply's token limit.
    timeout_s, max_retries: per request.
    concurrency: requests in flight at once.
  """
  model: str
  api: str = "openai"
  base_url: str | None = None
  api_key: str | None = None
  temperature: float | None = None
  max_tokens: int = 1024
  timeout_s: float = 120.0
  max_retries: int = 2
  concurrency: int = 8

  def client(self) -> llm.LLMClient:
    """The `botjax.rewards.llm` client of this endpoint."""
    return llm.make_client(self.api, self.model, base_url=self.base_url, api_key=self.api_key,
                           temperature=self.temperature, max_tokens=self.max_tokens,
                           timeout_s=self.timeout_s, max_retries=self.max_retries,
                           concurrency=self.concurrency)


def _client(config: JudgeConfig | llm.LLMClient) -> llm.LLMClient:
  if isinstance(config, llm.LLMClient):
    return config
  if not isinstance(config, JudgeConfig):
    raise TypeError(f"a judge needs a JudgeConfig or a botjax.rewards.llm.LLMClient, got "
                    f"{type(config).__name__}")
  return config.client()


class _Judge:
  """What the three judges share: the client, an optional system prompt and the counters."""

  def __init__(self, config: JudgeConfig | llm.LLMClient, system_prompt, what: str):
    self.client = _client(config)
    self.system_prompt = None if system_prompt is None else llm.load_prompt(
        system_prompt, what=f"the {what}'s system prompt", template=False)
    self._lock = threading.Lock()
    self._calls = self._failures = 0

  def _messages(self, content) -> list[dict[str, Any]]:
    system = [] if self.system_prompt is None else [{"role": "system",
                                                     "content": self.system_prompt}]
    return system + [{"role": "user", "content": content}]

  def _count(self, failed: bool) -> None:
    with self._lock:
      self._calls += 1
      self._failures += int(failed)

  def metrics(self) -> dict[str, int]:
    """Cumulative counters: judge_calls (items judged: components, screenshots, pairwise rounds)
    and judge_failures (those whose request failed or whose reply could not be read)."""
    with self._lock:
      return {"judge_calls": self._calls, "judge_failures": self._failures}

  def close(self) -> None:
    self.client.close()

  def __getstate__(self):
    state = self.__dict__.copy()
    state["_lock"] = None
    return state

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._lock = threading.Lock()


def image_part(png: bytes) -> dict[str, Any]:
  """A PNG screenshot as a neutral image part (`botjax.rewards.llm.image_part`)."""
  return llm.image_part(png, "image/png")


def number_lines(code: str) -> str:
  """The code fence-free with each line prefixed by its 0-based number: "0: import ..."."""
  return "\n".join(f"{i}: {line}" for i, line in enumerate(code.split("\n")))


def parse_score(text: str) -> int | None:
  """The integer after the first `SCORE:`, or None."""
  m = _SCORE.search(text or "")
  return int(m.group(1)) if m else None


def score_to_reward(score: int | None) -> float:
  """Clip to [0, 10] and divide by 10; None gives 0."""
  return 0.0 if score is None else min(10, max(0, score)) / 10.0


def parse_line_analysis(text: str, num_lines: int, *,
                        max_entries: int = MAX_ATTRIBUTIONS) -> tuple[tuple[int, float], ...] | None:
  """Line attributions after `LINE_ANALYSIS:` as (0-based code line, impact/10).

  Entries must read `<line>: <code> | DESC: <text> | IMPACT: <-1..-3>` with a line inside the
  code; anything else is dropped; the first `max_entries` valid entries are kept.

  Returns:
    The attributions (possibly empty, also for NONE or a missing section), or None for the
    NON_REACT_CODE sentinel.
  """
  text = text or ""
  idx = text.upper().find("LINE_ANALYSIS")
  if idx < 0:
    return ()
  section = text[idx + len("LINE_ANALYSIS"):].lstrip(" :\t")
  if section.upper().startswith("NON_REACT_CODE"):
    return None
  out = []
  for line in section.splitlines():
    m = _ENTRY.match(line)
    if not m:
      continue
    code_line, impact = int(m.group(1)), int(m.group(2))
    if 0 <= code_line < num_lines and impact in (-1, -2, -3):
      out.append((code_line, impact / 10.0))
    if len(out) == max_entries:
      break
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class CodeVerdict:
  """The code judge's answer: `score` in [0, 1] (or −0.3 non-React, 0 unparseable) and up to
  three (code line, impact/10) attributions."""
  score: float
  lines: tuple[tuple[int, float], ...] = ()
  raw_score: int | None = None
  non_react: bool = False
  text: str = ""
  error: str | None = None


def parse_code_verdict(text: str, num_lines: int) -> CodeVerdict:
  """Applies the code judge's parsing rules to a reply."""
  raw = parse_score(text)
  lines = parse_line_analysis(text, num_lines)
  if raw == NON_REACT_SENTINEL or lines is None:
    return CodeVerdict(score=NON_REACT_SCORE, raw_score=raw, non_react=True, text=text)
  if raw is None:
    return CodeVerdict(score=0.0, text=text, error="no SCORE in the reply")
  return CodeVerdict(score=score_to_reward(raw), lines=lines, raw_score=raw, text=text)


@dataclasses.dataclass(frozen=True)
class VLMVerdict:
  """The screenshot judge's answer: `score` in [0, 1] (0 when unparseable), a justification, and
  (line variants) up to three (code line, impact/10) attributions."""
  score: float
  justification: str = ""
  lines: tuple[tuple[int, float], ...] = ()
  raw_score: int | None = None
  text: str = ""
  error: str | None = None


def parse_vlm_verdict(text: str, num_lines: int = 0) -> VLMVerdict:
  """Applies the screenshot judge's parsing rules (attributions only when num_lines > 0)."""
  raw = parse_score(text)
  m = _JUSTIFICATION.search(text or "")
  justification = ""
  if m:
    justification = m.group(1).split("LINE_ANALYSIS")[0].strip()[:1000]
  if raw is None:
    return VLMVerdict(score=0.0, justification=justification, text=text,
                      error="no SCORE in the reply")
  lines = parse_line_analysis(text, num_lines) if num_lines > 0 else ()
  return VLMVerdict(score=score_to_reward(raw), justification=justification,
                    lines=lines or (), raw_score=raw, text=text)


class CodeJudge(_Judge):
  """LLM code judge: score 0–10 → /10 and up to three harmful lines (impact −1/−2/−3 → /10).

  Args:
    config: the endpoint (a JudgeConfig, or a ready `botjax.rewards.llm.LLMClient`).
    prompt: the user template, as text or a file (pathlib.Path): {prompt} and {code} required.
    system_prompt: an optional system prompt, as text or a file; sent as it is.

  References:
    BoT-GRPO (Yang et al.), §4 and App. D (no arXiv id found).
  """

  def __init__(self, config: JudgeConfig | llm.LLMClient, *,
               prompt: str | os.PathLike = CODE_JUDGE_PROMPT,
               system_prompt: str | os.PathLike | None = None):
    super().__init__(config, system_prompt, "code judge")
    self.prompt = llm.load_prompt(prompt, what="the code judge's prompt",
                                  required=("prompt", "code"))

  def messages(self, prompt: str, code: str) -> list[dict[str, Any]]:
    """The chat messages (neutral form) of one component."""
    return self._messages(self.prompt.format(prompt=prompt, code=number_lines(code)))

  def judge_one(self, prompt: str, code: str) -> CodeVerdict:
    """Judges one component; an API error gives score 0 and the error text."""
    num_lines = len(code.split("\n"))
    try:
      text = self.client.chat(self.messages(prompt, code))
    except Exception as e:  # noqa: BLE001 - a dead judge must not stop training
      verdict = CodeVerdict(score=0.0, error=f"code judge request failed: {e}"[:500])
    else:
      verdict = parse_code_verdict(text, num_lines)
    self._count(verdict.error is not None)
    return verdict

  def judge(self, prompts: Sequence[str], codes: Sequence[str]) -> list[CodeVerdict]:
    """Judges a batch concurrently."""
    return self.client.map(lambda pc: self.judge_one(*pc), list(zip(prompts, codes)))


VLM_MODES = ("screenshot", "one_turn", "two_turn")


class VLMJudge(_Judge):
  """VLM screenshot judge: prompt + screenshot (never the code) → 0–10 → /10.

  `mode="one_turn"` and `"two_turn"` add line attributions for the optional local VLM line
  signal; "two_turn" keeps turn 1's screenshot-only score (the paper's debiasing variant), and a
  failed turn 2 leaves that score unchanged with no attributions.

  Args:
    config: the endpoint (a JudgeConfig, or a ready `botjax.rewards.llm.LLMClient`).
    mode: one of VLM_MODES.
    prompt: the screenshot call's template ({prompt} required), as text or a file.
    one_turn_prompt: "one_turn"'s template ({prompt} and {code} required).
    second_turn_prompt: "two_turn"'s second template ({code} required; {prompt}, {score},
      {justification} optional).
    system_prompt: an optional system prompt, as text or a file; sent as it is.
  """

  def __init__(self, config: JudgeConfig | llm.LLMClient, *, mode: str = "screenshot",
               prompt: str | os.PathLike = VLM_JUDGE_PROMPT,
               one_turn_prompt: str | os.PathLike = VLM_ONE_TURN_PROMPT,
               second_turn_prompt: str | os.PathLike = VLM_SECOND_TURN_PROMPT,
               system_prompt: str | os.PathLike | None = None):
    if mode not in VLM_MODES:
      raise ValueError(f"VLMJudge mode must be one of {VLM_MODES}, got {mode!r}")
    super().__init__(config, system_prompt, "VLM judge")
    self.mode = mode
    self.prompt = llm.load_prompt(prompt, what="the VLM judge's prompt", required=("prompt",))
    self.one_turn_prompt = llm.load_prompt(
        one_turn_prompt, what="the VLM judge's one_turn prompt", required=("prompt", "code"))
    self.second_turn_prompt = llm.load_prompt(
        second_turn_prompt, what="the VLM judge's second-turn prompt", required=("code",),
        optional=("prompt", "score", "justification"))

  def _call(self, text: str, png: bytes) -> str:
    return self.client.chat(self._messages([llm.text_part(text), image_part(png)]))

  def judge_one(self, prompt: str, png: bytes, code: str | None = None) -> VLMVerdict:
    """Judges one screenshot; `code` is used only by the line variants."""
    verdict = self._judge_one(prompt, png, code)
    self._count(verdict.raw_score is None)
    return verdict

  def _judge_one(self, prompt, png, code):
    num_lines = len(code.split("\n")) if code else 0
    try:
      if self.mode == "one_turn" and code:
        text = self._call(self.one_turn_prompt.format(prompt=prompt, code=number_lines(code)),
                          png)
        return parse_vlm_verdict(text, num_lines)
      text = self._call(self.prompt.format(prompt=prompt), png)
    except Exception as e:  # noqa: BLE001 - a dead judge must not stop training
      return VLMVerdict(score=0.0, error=f"VLM judge request failed: {e}"[:500])
    first = parse_vlm_verdict(text)
    if self.mode != "two_turn" or not code or first.raw_score is None:
      return first
    try:
      second = self._call(self.second_turn_prompt.format(
          prompt=prompt, code=number_lines(code), score=first.raw_score,
          justification=first.justification or "(none given)"), png)
    except Exception as e:  # noqa: BLE001 - turn 2 failing keeps turn 1's score
      return dataclasses.replace(first, error=f"VLM turn 2 failed: {e}"[:500])
    lines = parse_line_analysis(second, num_lines)
    return dataclasses.replace(first, lines=lines or (), text=first.text + "\n---\n" + second)

  def judge(self, prompts: Sequence[str], pngs: Sequence[bytes],
            codes: Sequence[str | None] | None = None) -> list[VLMVerdict]:
    """Judges a batch concurrently."""
    codes = list(codes) if codes is not None else [None] * len(pngs)
    return self.client.map(lambda x: self.judge_one(*x), list(zip(prompts, pngs, codes)))


# Rounds of the ABBA protocol: True when checkpoint A's screenshot is shown first.
ABBA_ORDER = (True, False, False, True)


def parse_letter(text: str) -> str | None:
  """'A' or 'B' when the reply is that single letter (quotes, bold or a period allowed)."""
  m = re.fullmatch(r"[\s*\"'`(\[]*([AB])[\s*\"'`)\].]*", text or "", re.IGNORECASE)
  return m.group(1).upper() if m else None


class PairwiseJudge(_Judge):
  """Pairwise VLM judge for evaluation: which of two screenshots better fulfils the prompt.

  Four rounds in the order AB, BA, BA, AB (first image labelled A in the prompt); each round's
  letter is mapped back to the checkpoint it names.

  Args:
    config: the endpoint (a JudgeConfig, or a ready `botjax.rewards.llm.LLMClient`).
    prompt: the template ({prompt} required), as text or a file.
    system_prompt: an optional system prompt, as text or a file; sent as it is.
  """

  def __init__(self, config: JudgeConfig | llm.LLMClient, *,
               prompt: str | os.PathLike = PAIRWISE_PROMPT,
               system_prompt: str | os.PathLike | None = None):
    super().__init__(config, system_prompt, "pairwise judge")
    self.prompt = llm.load_prompt(prompt, what="the pairwise judge's prompt",
                                  required=("prompt",))

  def round(self, prompt: str, first: bytes, second: bytes) -> str | None:
    """One comparison: 'A' when the first image wins, 'B' for the second, None if unparseable."""
    content = [llm.text_part(self.prompt.format(prompt=prompt)),
               llm.text_part("App A:"), image_part(first),
               llm.text_part("App B:"), image_part(second)]
    try:
      letter = parse_letter(self.client.chat(self._messages(content)))
    except Exception:  # noqa: BLE001 - an unanswered round votes for nobody
      letter = None
    self._count(letter is None)
    return letter

  def compare(self, prompt: str, png_a: bytes | None, png_b: bytes | None) -> list[float | None]:
    """Four ABBA verdicts for checkpoint A: 1.0 (A wins the round), 0.0 (B wins), None (no answer).

    A side without a screenshot (failed render) loses every round without a call; two missing
    screenshots are four unanswered rounds (a tie).
    """
    if png_a is None or png_b is None:
      if png_a is None and png_b is None:
        return [None] * len(ABBA_ORDER)
      return [1.0 if png_b is None else 0.0] * len(ABBA_ORDER)
    verdicts: list[float | None] = []
    for a_first in ABBA_ORDER:
      letter = self.round(prompt, png_a, png_b) if a_first else self.round(prompt, png_b, png_a)
      if letter is None:
        verdicts.append(None)
      else:
        a_won = (letter == "A") == a_first
        verdicts.append(1.0 if a_won else 0.0)
    return verdicts
