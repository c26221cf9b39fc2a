"""Plots and Markdown tables from run records (the JSONL rows `MetricsWriter` writes)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def series(records: Sequence[Mapping], key: str) -> tuple[np.ndarray, np.ndarray]:
  """(steps, values) of the records that carry `key`."""
  pts = [(r["step"], r[key]) for r in records if key in r and isinstance(r[key], (int, float))]
  if not pts:
    return np.zeros((0,)), np.zeros((0,))
  s, v = zip(*pts)
  return np.asarray(s), np.asarray(v, dtype=float)


def steps_to_threshold(records: Sequence[Mapping], key: str, threshold: float) -> int | None:
  """First step at which `key` reaches `threshold`, or None."""
  s, v = series(records, key)
  hit = np.flatnonzero(v >= threshold)
  return int(s[hit[0]]) if hit.size else None


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


def plot_runs(runs: Mapping[str, Sequence[Sequence[Mapping]]], path: str, *,
              keys: Sequence[tuple[str, str]] = (("eval/accuracy", "held-out accuracy"),
                                                 ("reward_mean", "mean reward")),
              title: str = "", thresholds: Sequence[float] = ()) -> str:
  """One panel per key; mean over seeds with a min–max band; saves a PNG to `path`."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4), squeeze=False)
  for ax, (key, label) in zip(axes[0], keys):
    for name, seeds in runs.items():
      curves = [series(r, key) for r in seeds]
      curves = [c for c in curves if c[0].size]
      if not curves:
        continue
      steps = curves[0][0]
      n = min(len(c[1]) for c in curves)
      vals = np.stack([c[1][:n] for c in curves])
      mean = vals.mean(0)
      line, = ax.plot(steps[:n], mean, label=name, marker="o" if n < 20 else None, ms=3)
      if len(curves) > 1:
        ax.fill_between(steps[:n], vals.min(0), vals.max(0), alpha=0.2, color=line.get_color())
    if key == keys[0][0]:
      for t in thresholds:
        ax.axhline(t, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("RL step")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path
