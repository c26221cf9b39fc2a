"""Markdown tables from run records (the JSONL rows `MetricsWriter` writes); the figures are in
`botjax.plotting`."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np



def first_crossing(steps: np.ndarray, values: np.ndarray, threshold: float) -> int | None:
  """First step with `values >= threshold` (steps [N], values [N]), or None."""
  hit = np.flatnonzero(np.asarray(values) >= threshold)
  return int(steps[hit[0]]) if hit.size else None


def series(records: Sequence[Mapping], key: str) -> tuple[np.ndarray, np.ndarray]:
  """(steps [N], values [N]) of the records that carry a number under `key`, in record order."""
  pts = [(r["step"], r[key]) for r in records
         if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
  if not pts:
    return np.zeros((0,)), np.zeros((0,))
  s, v = zip(*pts)
  return np.asarray(s), np.asarray(v, dtype=float)


def steps_to_threshold(records: Sequence[Mapping], key: str, threshold: float) -> int | None:
  """First step at which `key` reaches `threshold` (value >= threshold), or None."""
  s, v = series(records, key)
  return first_crossing(s, v, threshold)


def standard_error(xs: Sequence[float]) -> float:
  """Standard error of the mean of N >= 2 values [N]: sample std (ddof=1) / sqrt(N)."""
  xs = np.asarray(xs, dtype=float)
  if xs.size < 2:
    raise ValueError(f"the standard error needs at least 2 values, got {xs.size}")
  return float(xs.std(ddof=1) / np.sqrt(xs.size))


def mean_se(xs: Sequence[float], digits: int = 3) -> str:
  """'mean ± standard error' of values [N] (`standard_error`); the value alone when N = 1."""
  if len(xs) == 0:
    raise ValueError("no values")
  if len(xs) == 1:
    return f"{float(xs[0]):.{digits}f}"
  return f"{float(np.mean(xs)):.{digits}f} ± {standard_error(xs):.{digits}f}"


def last_mean(recs: Sequence[Mapping], key: str = "eval/accuracy", k: int = 5) -> float:
  """Mean of the last `k` values of `key` in one run's records (fewer if it has fewer); the
  criterion of a learning-rate sweep, less noisy than the final value alone."""
  _, v = series(recs, key)
  if not v.size:
    raise ValueError(f"no {key!r} in the records")
  return float(np.mean(v[-k:]))


def summary_table(runs: Mapping[str, Sequence[Sequence[Mapping]]], *, key: str = "eval/accuracy",
                  thresholds: Sequence[float] = (), baseline: float | None = None) -> str:
  """Markdown table: per algorithm, start/final/best `key` and the gain (mean ± standard error
  over its N seeds, the `seeds` column; the value alone for one seed) and steps to each threshold
  (median over seeds; '—' when a seed never reaches it). A line under the table says so."""
  head = ["algorithm", "seeds", "start", "final", "best", "gain"]
  head += [f"steps to {t:g}" for t in thresholds]
  rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  counts: set[int] = set()
  for name, seeds in runs.items():
    starts, finals, bests, reach = [], [], [], {t: [] for t in thresholds}
    for recs in seeds:
      _, v = series(recs, key)
      if not v.size:
        continue
      starts.append(v[0])
      finals.append(v[-1])
      bests.append(v.max())
      for t in thresholds:
        reach[t].append(steps_to_threshold(recs, key, t))
    if not finals:
      continue
    fmt = mean_se
    gain = [f - s for f, s in zip(finals, starts)]
    cells = [name, str(len(finals)), fmt(starts), fmt(finals), fmt(bests), fmt(gain)]
    for t in thresholds:
      hits = [r for r in reach[t] if r is not None]
      cell = f"{int(np.median(hits))}" if len(hits) == len(reach[t]) and hits else (
          f"{int(np.median(hits))} ({len(hits)}/{len(reach[t])} seeds)" if hits else "—")
      cells.append(cell)
    rows.append("| " + " | ".join(cells) + " |")
    counts.add(len(finals))
  if not counts:
    return "\n".join(rows)
  n = f"{counts.pop()}" if len(counts) == 1 else "N (the seeds column)"
  note = ("one seed per row: values of that seed, no error bars" if n == "1" else
          f"start / final / best / gain: mean ± standard error over {n} seeds "
          "(sample std, ddof=1, / √N; a row with one seed shows its value alone); steps to a "
          "threshold: median over seeds")
  return "\n".join(rows) + f"\n\n{note}."


__all__ = ["last_mean", "mean_se", "series", "standard_error", "steps_to_threshold", "summary_table"]
