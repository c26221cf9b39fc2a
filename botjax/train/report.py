"""Markdown tables from run records (the JSONL rows `MetricsWriter` writes); the figures are in
`botjax.plotting`."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from botjax.plotting import series, steps_to_threshold


def summary_table(runs: Mapping[str, Sequence[Sequence[Mapping]]], *, key: str = "eval/accuracy",
                  thresholds: Sequence[float] = (), baseline: float | None = None) -> str:
  """Markdown table: per algorithm, start/final/best `key` (mean ± std over seeds) and steps to
  each threshold (median over seeds; '—' when a seed never reaches it)."""
  head = ["algorithm", "seeds", "start", "final", "best", "gain"]
  head += [f"steps to {t:g}" for t in thresholds]
  rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
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
    fmt = lambda xs: f"{np.mean(xs):.3f} ± {np.std(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"
    gain = [f - s for f, s in zip(finals, starts)]
    cells = [name, str(len(finals)), fmt(starts), fmt(finals), fmt(bests), fmt(gain)]
    for t in thresholds:
      hits = [r for r in reach[t] if r is not None]
      cell = f"{int(np.median(hits))}" if len(hits) == len(reach[t]) and hits else (
          f"{int(np.median(hits))} ({len(hits)}/{len(reach[t])} seeds)" if hits else "—")
      cells.append(cell)
    rows.append("| " + " | ".join(cells) + " |")
  return "\n".join(rows)


__all__ = ["series", "steps_to_threshold", "summary_table"]
