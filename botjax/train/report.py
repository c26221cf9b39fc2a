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


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
  """Two-sided Welch t-test of mean(a) − mean(b), a [N] and b [M] with N, M >= 2.

    t = (ā − b̄) / √(s_a²/N + s_b²/M)          (sample variances, ddof = 1)
    ν = (s_a²/N + s_b²/M)² / ((s_a²/N)²/(N − 1) + (s_b²/M)²/(M − 1))   (Welch–Satterthwaite)
    p = P(|T_ν| >= |t|)

  Returns (difference of means, t, p). Two equal constant samples give (0, 0, 1); two distinct
  constant samples give (d, ±inf, 0).
  """
  from scipy import stats
  a, b = np.asarray(a, float), np.asarray(b, float)
  if a.size < 2 or b.size < 2:
    raise ValueError(f"a Welch test needs >= 2 values per side, got {a.size} and {b.size}")
  diff = float(a.mean() - b.mean())
  va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
  if va + vb == 0:
    return diff, (0.0 if diff == 0 else float(np.sign(diff) * np.inf)), float(diff == 0)
  t = diff / float(np.sqrt(va + vb))
  nu = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
  return diff, t, float(2 * stats.t.sf(abs(t), nu))


def holm(pvalues: Sequence[float]) -> np.ndarray:
  """Holm–Bonferroni adjusted p-values [m] of m raw p-values [m] (Holm 1979, Scand. J. Statist.
  6:65–70): sorted ascending, p_(i) · (m − i + 1) made monotone by a running maximum and capped
  at 1, returned in the input order. Rejecting where the adjusted p <= α controls the
  family-wise error rate at α for any dependence between the tests."""
  p = np.asarray(pvalues, float)
  if p.ndim != 1 or np.any((p < 0) | (p > 1)):
    raise ValueError(f"p-values must be a list of numbers in [0, 1], got {list(pvalues)}")
  m = p.size
  order = np.argsort(p, kind="stable")
  adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
  out = np.empty(m)
  out[order] = adj
  return out


def contrast_table(runs: Mapping[str, Sequence[Sequence[Mapping]]],
                   contrasts: Sequence[tuple[str, str]], *, key: str = "eval/accuracy",
                   k: int = 5, alpha: float = 0.05) -> str:
  """Markdown table of Welch tests (`welch`) of the mean of each run's last `k` values of `key`
  (`last_mean`), one row per contrast (a, b) of run names: the difference a − b, t, the raw p
  and the Holm-adjusted p over the contrasts of this table (`holm`); '✓' where the adjusted p is
  <= alpha. Contrasts with fewer than 2 seeds on a side are left out, and a line says so."""
  rows = ["| contrast | difference (last %d) | t | p (raw) | p (Holm, %d tests) | at %g |" % (
      k, 0, alpha), "|---|---|---|---|---|---|"]
  tests, skipped = [], []
  for a, b in contrasts:
    xa = [last_mean(r, key, k) for r in runs.get(a, []) if series(r, key)[1].size]
    xb = [last_mean(r, key, k) for r in runs.get(b, []) if series(r, key)[1].size]
    if len(xa) < 2 or len(xb) < 2:
      skipped.append(f"{a} − {b}")
      continue
    tests.append((a, b, *welch(xa, xb)))
  adj = holm([t[4] for t in tests]) if tests else []
  rows[0] = rows[0].replace("Holm, 0 tests", f"Holm, {len(tests)} tests")
  for (a, b, d, t, p), q in zip(tests, adj):
    rows.append(f"| {a} − {b} | {d:+.3f} | {t:.2f} | {p:.3f} | {q:.3f} | "
                f"{'✓' if q <= alpha else '—'} |")
  note = ("Two-sided Welch t-tests over the seeds of each side; p (Holm) is adjusted over the "
          "rows of this table (family-wise error rate at %g)." % alpha)
  if skipped:
    note += " Left out (fewer than 2 seeds on a side): " + ", ".join(skipped) + "."
  return "\n".join(rows) + "\n\n" + note


def ranking_note(runs: Mapping[str, Sequence[Sequence[Mapping]]], *, key: str = "eval/accuracy",
                 k: int = 5, alpha: float = 0.05) -> str:
  """One sentence on the run with the highest mean of the last `k` values: whether a Welch test
  against the runner-up rejects at `alpha` (a single pre-stated test), or that it does not, in
  which case "highest" is a statement about the means only."""
  means = {}
  for name, seeds in runs.items():
    xs = [last_mean(r, key, k) for r in seeds if series(r, key)[1].size]
    if xs:
      means[name] = xs
  if len(means) < 2:
    return ""
  (top, xt), (second, xs) = sorted(means.items(), key=lambda kv: -float(np.mean(kv[1])))[:2]
  text = (f"Highest mean of the last {k} evaluations: {top} ({np.mean(xt):.3f}), runner-up "
          f"{second} ({np.mean(xs):.3f})")
  if len(xt) < 2 or len(xs) < 2:
    return text + "; too few seeds to test the difference."
  d, t, p = welch(xt, xs)
  if p <= alpha:
    return text + f"; the difference {d:+.3f} is significant (Welch p = {p:.3f})."
  return text + (f"; the difference {d:+.3f} is within noise (Welch p = {p:.3f}), so the two "
                 "are not separated by these seeds.")


__all__ = ["contrast_table", "holm", "last_mean", "mean_se", "ranking_note", "series",
           "standard_error", "steps_to_threshold", "summary_table", "welch"]
