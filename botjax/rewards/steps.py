"""Step-level scoring: judged units (windows), judging strategies, and spreading verdicts over text.

Judged units [INFERRED reading of the "step evaluation window" W of BoT-GRPO, arXiv 2610.09804]:
unit u_i covers the W consecutive steps i, …, i+W−1, for i = 0, …, n−W (n < W: one unit of all n steps;
n = 0: none). A token of step k lies in every unit containing k:

  S(t) = {u_i : i ≤ k(t) ≤ i+W−1},   local(t) = w_s·(1/|S_k|)·Σ_{s ∈ S(t)} e_s

with |S_k| the number of units of the rollout (= n for W = 1) and e_s ∈ {+1, 0, −1}.

Strategies (paper App. A; how each calls the judge):
  "error_propagation" (default): every unit is judged with all earlier steps of the solution as
    context (one batch of requests); after the first unit judged −1, every later unit scores 0 (the
    wrong unit keeps −1).
  "context_aware": units are judged one at a time, in order; each request carries the earlier
    steps and the judge's own verdicts on the earlier units; verdicts are used as returned.
  "independent": every unit is judged in isolation (no earlier steps, no verdicts); as returned.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botjax.rewards.judges import JudgeRequest, JudgeStats, StepJudge

STRATEGIES = ("error_propagation", "context_aware", "independent")


def windows(num_steps: int, window: int) -> list[tuple[int, int]]:
  """Judged units: step ranges [i, i+W), i = 0..n−W; [(0, n)] if 0 < n < W; [] if n = 0."""
  if window < 1 or num_steps < 0:
    raise ValueError(f"need window >= 1 and num_steps >= 0, got window={window}, "
                     f"num_steps={num_steps}")
  if num_steps == 0:
    return []
  if num_steps <= window:
    return [(0, num_steps)]
  return [(i, i + window) for i in range(num_steps - window + 1)]


def propagate_errors(verdicts: Sequence[int]) -> list[int]:
  """Error propagation: e'_j = e_j up to and including the first −1, then 0."""
  out, seen_error = [], False
  for v in verdicts:
    out.append(0 if seen_error else int(v))
    seen_error = seen_error or v == -1
  return out


def judge_steps(judge: StepJudge, problem: str, step_texts: Sequence[str],
                metadata: Mapping[str, Any], *, strategy: str = "error_propagation",
                window: int = 1, stats: JudgeStats | None = None,
                max_units: int | None = None) -> list[int]:
  """Verdicts e ∈ {+1, 0, −1}, one per judged unit (see the module docstring).

  A unit whose judge call fails scores 0 and is counted in `stats` (and in the judge's metrics);
  the judge raises JudgeUnavailable after too many consecutive failures. Units past `max_units`
  are not sent to the judge and score 0 (a runaway completion must not cost thousands of calls).

  Args:
    judge: the StepJudge.
    problem: the problem statement.
    step_texts: the n step contents, in order.
    metadata: the problem record (e.g. "step_values" for the exact judge).
    strategy: one of STRATEGIES.
    window: W, steps per unit.
    stats: optional per-call counters.
    max_units: judge at most this many units (None: all).

  Returns:
    list of len(windows(n, window)) ints.
  """
  if strategy not in STRATEGIES:
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
  if max_units is not None and max_units < 0:
    raise ValueError(f"max_units must be >= 0 or None, got {max_units}")
  steps = tuple(step_texts)
  units = windows(len(steps), window)
  unjudged = [0] * max(0, len(units) - (len(units) if max_units is None else max_units))
  units = units[:len(units) - len(unjudged)]

  def request(first, last, prior):
    context = () if strategy == "independent" else steps[:first]
    return JudgeRequest(problem=problem, steps=steps, first=first, last=last, context=context,
                        prior_verdicts=prior, metadata=metadata, strategy=strategy)

  if strategy == "context_aware":
    verdicts: list[int] = []
    for first, last in units:
      verdicts.extend(judge.judge([request(first, last, tuple(verdicts))], stats=stats))
    return verdicts + unjudged
  verdicts = judge.judge([request(first, last, None) for first, last in units], stats=stats)
  if strategy == "error_propagation":
    verdicts = propagate_errors(verdicts)
  return list(verdicts) + unjudged


def _unit_sums(verdicts: Sequence[int], num_steps: int,
               window: int) -> tuple[list[float], list[int]]:
  units = windows(num_steps, window)
  if len(verdicts) != len(units):
    raise ValueError(f"{num_steps} steps with window {window} make {len(units)} units, got "
                     f"{len(verdicts)} verdicts")
  sums, counts = [0.0] * num_steps, [0] * num_steps
  for (first, last), v in zip(units, verdicts):
    for k in range(first, last):
      sums[k] += float(v)
      counts[k] += 1
  return sums, counts


def step_token_spans(step_spans: Sequence[tuple[int, int]], verdicts: Sequence[int], *,
                     window: int = 1, weight: float = 0.5) -> list[tuple[int, int, float]]:
  """Spreads unit verdicts over step character spans: value_k = w_s·(1/|S_k|)·Σ_{units ∋ k} e_s.

  Every token whose first character lies in step k's span then receives value_k
  (`spans_to_token_values`); steps with value 0 are left out.

  Args:
    step_spans: n (char_start, char_end) spans of the steps.
    verdicts: one verdict per unit of windows(n, window).
    window: W.
    weight: w_s.

  Returns:
    (char_start, char_end, value) triples.
  """
  sums, _ = _unit_sums(verdicts, len(step_spans), window)
  if not verdicts:
    return []
  scale = float(weight) / len(verdicts)
  return [(int(a), int(b), scale * s) for (a, b), s in zip(step_spans, sums) if s != 0.0]


def step_scores(verdicts: Sequence[int], num_steps: int, *, window: int = 1) -> list[float]:
  """Per-step score: the mean verdict of the units containing the step (the verdict when W = 1)."""
  sums, counts = _unit_sums(verdicts, num_steps, window)
  return [s / c if c else 0.0 for s, c in zip(sums, counts)]
