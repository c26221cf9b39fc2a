"""Line penalties of the React reward and the distance kernel that spreads them over lines.

BoT-GRPO's React reward (eq. 6–7) gives token t of rollout k

  r_t = r_global + w_ℓ · Σ_{ℓ ∈ E} p_ℓ · φ(|line(t) − ℓ|),   φ(d) = max(0, 1 − d/(w+1)),

where E holds the flagged code lines, p_ℓ < 0 merges (adds) compiler, ESLint and judge penalties of
line ℓ, and w = 3 lines. Tokens outside the code block get no local term.

Steps for step-level recipes (PURE, VeriGate, process GRPO): the completion is cut into
blank-line-separated blocks, the step segmentation PURE uses (its reference implementation,
CJReinforce/PURE, ends a step at every token whose text ends with "\n\n"; Cheng et al., arXiv
2504.15275). A block's step score is w_ℓ · Σ p_ℓ over the flagged code lines inside it (the raw
merged penalties, without φ: the step recipes aggregate steps their own way), 0 for prose blocks.
Code lines rather than blocks would make every line a PURE step; a blank line is the unit both
PURE and the code itself use to separate logical pieces (imports, state, handlers, markup).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from botjax.rewards.base import Span
from botjax.rewards.react.extract import ExtractedCode, line_spans

SEVERITIES = ("fatal", "error", "warning")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LintWeights:
  """Penalty per ESLint message by severity (the paper's values)."""
  fatal: float = -0.5
  error: float = -0.1
  warning: float = -0.02

  def of(self, severity: str) -> float:
    """Penalty of one message of `severity` ("fatal", "error" or "warning")."""
    if severity not in SEVERITIES:
      raise ValueError(f"unknown ESLint severity {severity!r}; valid: {SEVERITIES}")
    return float(getattr(self, severity))


def phi(d, *, window: int = 3):
  """Distance kernel φ(d) = max(0, 1 − |d|/(w+1)).

  Args:
    d: line distance(s), int or array.
    window: w, the number of lines on each side that still receive a share (w ≥ 0).

  Returns:
    φ(d), float or float64 array of d's shape: 1 at d = 0, 0 from |d| = w+1 on.

  References:
    BoT-GRPO (Yang et al.), eq. 7 (no arXiv id found).
  """
  if window < 0:
    raise ValueError(f"window must be >= 0, got {window}")
  out = np.maximum(0.0, 1.0 - np.abs(np.asarray(d, np.float64)) / (window + 1))
  return float(out) if out.ndim == 0 else out


def spread(penalties: Mapping[int, float], num_lines: int, *, window: int = 3) -> np.ndarray:
  """Per-line values v_j = Σ_ℓ p_ℓ φ(|j − ℓ|) over the code's lines.

  Args:
    penalties: code line ℓ (0-based) -> p_ℓ; lines outside [0, num_lines) are ignored.
    num_lines: N, the number of code lines.
    window: w of φ.

  Returns:
    float64[N] values (0 where no penalty reaches).
  """
  if num_lines < 0:
    raise ValueError(f"num_lines must be >= 0, got {num_lines}")
  j = np.arange(num_lines)
  values = np.zeros((num_lines,), np.float64)
  for line, p in penalties.items():
    if 0 <= int(line) < num_lines and p != 0.0:
      values += float(p) * phi(j - int(line), window=window)
  return values


def merge(*parts: Mapping[int, float]) -> dict[int, float]:
  """Adds line penalty maps: merge({1: -1}, {1: -0.1, 4: -0.02}) == {1: -1.1, 4: -0.02}."""
  out: dict[int, float] = {}
  for part in parts:
    for line, p in part.items():
      out[int(line)] = out.get(int(line), 0.0) + float(p)
  return out


def compile_line_penalties(lines: Iterable[int], *, per_line: float = -1.0,
                           renormalise: bool = False) -> dict[int, float]:
  """Compiler penalty: `per_line` on every distinct flagged line (−1/|E| each when renormalised).

  Args:
    lines: flagged code lines (0-based); negative lines (a diagnostic without location) are skipped.
    per_line: penalty of one flagged line.
    renormalise: divide by the number of flagged lines |E|, so the total is `per_line`.
  """
  flagged = sorted({int(x) for x in lines if int(x) >= 0})
  if not flagged:
    return {}
  value = per_line / len(flagged) if renormalise else per_line
  return {line: value for line in flagged}


def lint_line_penalties(messages: Sequence[tuple[int, str]],
                        weights: LintWeights = LintWeights()) -> dict[int, float]:
  """ESLint penalty per line: the sum of `weights.of(severity)` over the line's messages.

  Args:
    messages: (code line 0-based, severity) per message.
  """
  out: dict[int, float] = {}
  for line, severity in messages:
    if int(line) >= 0:
      out[int(line)] = out.get(int(line), 0.0) + weights.of(severity)
  return out


def lint_score(severities: Iterable[str], weights: LintWeights = LintWeights(), *,
               floor: float | None = None) -> float:
  """Aggregated (global) ESLint score: Σ over messages of the severity penalty, ≥ `floor` if set."""
  score = float(sum(weights.of(s) for s in severities))
  return score if floor is None else max(float(floor), score)


def line_spans_of(values: np.ndarray, extracted: ExtractedCode, *,
                  weight: float = 1.0) -> list[Span]:
  """Turns per-code-line values into completion character spans: (start, end, weight·v_j).

  Only code lines get a span, so tokens outside the code block receive no local reward; lines
  with value 0 are left out.

  Args:
    values: float[N] per code line (N = extracted.num_lines).
    extracted: the component and its position in the completion.
    weight: w_ℓ.

  Returns:
    Spans for `botjax.rewards.spans_to_token_values`.
  """
  values = np.asarray(values, np.float64)
  if values.shape != (extracted.num_lines,):
    raise ValueError(f"values must have shape ({extracted.num_lines},) (one per code line), got "
                     f"{values.shape}")
  spans: list[Span] = []
  for j, v in enumerate(values):
    if v != 0.0:
      start, end = extracted.code_line_span(j)
      spans.append((start, end, float(weight * v)))
  return spans


def text_blocks(text: str) -> list[tuple[int, int]]:
  """Blank-line-separated blocks of `text`: half-open ranges [a, b) of line indices (lines as in
  `extract.line_spans`) of maximal runs of lines holding a non-space character.

  Example: text_blocks("a\nb\n\n  \nc") == [(0, 2), (4, 5)].
  """
  lines = [text[a:b] for a, b in line_spans(text)]
  out, i = [], 0
  while i < len(lines):
    if not lines[i].strip():
      i += 1
      continue
    j = i
    while j < len(lines) and lines[j].strip():
      j += 1
    out.append((i, j))
    i = j
  return out


def step_spans_of(penalties: Mapping[int, float], completion: str,
                  extracted: ExtractedCode | None, *, weight: float = 1.0) -> list[Span]:
  """Steps of a completion with their scores: (char_start, char_end, w_ℓ · Σ_{ℓ in step} p_ℓ).

  Step k is the k-th blank-line-separated block of the completion (`text_blocks`) together with
  the blank lines after it; the first step also starts at character 0 (leading blank lines), so
  the steps tile the whole completion and every token lies in one. A penalised code line ℓ is
  completion line `extracted.first_line + ℓ`; its p_ℓ goes to the step holding that line.

  Args:
    penalties: code line ℓ (0-based) -> p_ℓ (merged line penalties); lines outside the code are
      ignored.
    completion: the completion text (S steps).
    extracted: its component (None when there is none: every step scores 0).
    weight: w_ℓ.

  Returns:
    S ≥ 1 spans in text order; a completion without any non-blank line is one step of score 0.

  Raises:
    ValueError: when `extracted` was not cut from `completion`.
  """
  spans = line_spans(completion)
  if extracted is not None and extracted.line_spans != spans:
    raise ValueError("extracted was not cut from this completion (its line spans differ)")
  blocks = text_blocks(completion)
  if not blocks:
    return [(0, len(completion), 0.0)]
  first_lines = np.asarray([a for a, _ in blocks], np.int64)
  starts = [0] + [spans[a][0] for a, _ in blocks[1:]]
  ends = starts[1:] + [len(completion)]
  scores = [0.0] * len(blocks)
  if extracted is not None:
    for line, p in penalties.items():
      if 0 <= int(line) < extracted.num_lines and p != 0.0:
        j = extracted.first_line + int(line)
        k = max(int(np.searchsorted(first_lines, j, side="right")) - 1, 0)
        scores[k] += float(weight * p)
  return [(a, b, v) for a, b, v in zip(starts, ends, scores)]
