"""Paper-style figures from run records and evaluation results: the one home of botjax's plotting.

  from botjax import plotting
  runs = plotting.load_runs(["runs/q/grpo-seed0", "runs/q/grpo-seed1", "runs/q/bot_grpo-seed0"])
  plotting.plot_metric(runs, "eval/accuracy", "accuracy.png", thresholds=[0.3, 0.4])
  plotting.plot_runs(runs, "curves.png")                  # one panel per metric
  plotting.plot_passk(runs, "passk.png")                  # Pass@k against step, one panel per k
  plotting.plot_win_rates(plotting.load_win_rates(["runs/cmp-seed0"]), "winrate.png")
  plotting.plot_compile_rate({"bot_grpo": [(0, 0.2), (50, 0.85)]}, "compile.png")

Runs are `{name: [records of seed 0, records of seed 1, ...]}`, each record a metrics.jsonl row
`{"step": int, key: value, ...}`. Curves are seed means at the steps every seed logged, with a
min–max, ± standard error or ±std band (per-step metrics optionally as rolling means); thresholds mark where each run's mean first reaches them. The figures
follow BoT-GRPO (arXiv 2610.09804): metric against step with threshold crossings (Figs. 1, 3),
win-rate bars split into wins and ties (Fig. 2).

Draws only: a run's files are read through `botjax.train.rundir` (their one owner). Light to
import: numpy and the standard library; matplotlib is imported on the first figure, with the
non-interactive Agg backend.
"""

from __future__ import annotations

import json
import os
import re
from typing import Mapping, Sequence

import numpy as np

from botjax.train.report import first_crossing, series, steps_to_threshold
from botjax.train.rundir import EVAL, METRICS, RunDir, RunDirError, read_eval_history, read_jsonl

# Runs: run name -> one list of records per seed.
Runs = dict[str, list[list[dict]]]

SEED_SUFFIX = re.compile(r"-seed\d+$")
PASSK = re.compile(r"^eval/pass@(\d+)$")
WIN_RATE_KEYS = ("win_rate", "tie_rate", "wins", "n")
BANDS = {"minmax": "min–max over seeds", "se": "± standard error over seeds",
         "std": "± std over seeds", "none": "no band"}
class PlotError(ValueError):
  """Bad input a user can fix (missing run, unknown metric, malformed file)."""


# -- loading -----------------------------------------------------------------------------------

def run_name(path: str) -> str:
  """The run name of a directory or file: its basename without a `-seedN` suffix.

  `runs/q/grpo-seed1` -> `grpo`; `runs/aime/metrics.jsonl` and `runs/aime/eval.json` -> `aime`;
  `vs_grpo-seed0.json` -> `vs_grpo`.
  """
  path = os.path.normpath(path)
  base = os.path.basename(path)
  if base in (METRICS, EVAL):
    base = os.path.basename(os.path.dirname(os.path.abspath(path)))
  elif os.path.isfile(path):
    base = os.path.splitext(base)[0]
  return SEED_SUFFIX.sub("", base)


def _eval_json_records(path: str) -> list[dict]:
  """`eval.json` (`RunDir.append_eval`'s history) as records with `eval/`-prefixed keys, like the
  ones the trainer logs."""
  history = _read(read_eval_history, path)
  return [{"step": h["step"], **{k if k.startswith("eval/") else f"eval/{k}": v
                                 for k, v in h.items() if k != "step"}} for h in history]


def _read(reader, path: str):
  """`reader(path)` (a `botjax.train.rundir` reader), its errors as `PlotError`."""
  try:
    return reader(path)
  except RunDirError as e:
    raise PlotError(str(e)) from None


def load_records(path: str) -> list[dict]:
  """One run's records, merged per step and sorted by step.

  Args:
    path: a run directory (its `metrics.jsonl` and, when present, `eval.json`), a `.jsonl` file
      of `MetricsWriter` records, or an `eval.json`.

  Returns:
    Records `{"step": int, key: value, ...}`, one per step in increasing order; a step logged
    twice (a resumed run rewrites the steps after its checkpoint) keeps the later values, and
    `eval.json` entries join the record of their step.

  Raises:
    PlotError: a missing path, a directory holding neither file, or a malformed file.
  """
  if os.path.isdir(path):
    run = RunDir(path)
    files = [f for f in (run.metrics_path, run.eval_path) if os.path.isfile(f)]
    if not files:
      raise PlotError(f"run directory {path} holds neither {METRICS} nor {EVAL}")
  elif os.path.isfile(path):
    files = [path]
  else:
    raise PlotError(f"no such run directory or file: {path}")
  rows: list[dict] = []
  for f in files:
    if f.endswith(".json"):
      rows += _eval_json_records(f)
    else:
      rows += _read(read_jsonl, f)
  merged: dict[int, dict] = {}
  for r in rows:
    if not isinstance(r, dict) or "step" not in r:
      raise PlotError(f"a record of {path} has no 'step': {str(r)[:80]}")
    merged.setdefault(int(r["step"]), {}).update(r)
  return [{**merged[s], "step": s} for s in sorted(merged)]


def load_runs(paths: Sequence[str]) -> Runs:
  """Loads every path and groups seeds by `run_name` (in order of first appearance).

  Args:
    paths: run directories or files (see `load_records`).

  Returns:
    {run name: [records of seed 0, records of seed 1, ...]}.
  """
  if not paths:
    raise PlotError("no runs given")
  runs: Runs = {}
  for p in paths:
    runs.setdefault(run_name(p), []).append(load_records(p))
  return runs


def available_metrics(runs: Mapping[str, Sequence[Sequence[Mapping]]]) -> list[str]:
  """Sorted names of the numeric metrics any record of any run carries."""
  keys = {k for seeds in runs.values() for recs in seeds for r in recs for k, v in r.items()
          if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
  return sorted(keys)


def _require_metric(runs, key: str) -> None:
  if key not in available_metrics(runs):
    raise PlotError(f"no run logs metric {key!r}; metrics present: "
                    + ", ".join(available_metrics(runs)))


# -- curves and thresholds ---------------------------------------------------------------------

def rolling_mean(values: Sequence[float], window: int) -> np.ndarray:
  """Trailing rolling mean of values [N] -> [N]: out[i] = mean(values[max(0, i - window + 1):i + 1])
  (the first window - 1 points average the values so far). window = 1 returns the values."""
  if int(window) != window or window < 1:
    raise PlotError(f"the rolling-mean window must be a positive integer, got {window!r}")
  v = np.asarray(values, dtype=float)
  if window == 1 or not v.size:
    return v.copy()
  c = np.concatenate([[0.0], np.cumsum(v)])
  i = np.arange(1, v.size + 1)
  lo = np.maximum(i - int(window), 0)
  return (c[i] - c[lo]) / (i - lo)


def mean_curve(seeds: Sequence[Sequence[Mapping]], key: str, *, band: str = "minmax",
               smooth: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Mean of `key` over seeds at the steps every seed logged, with a band.

  Args:
    seeds: S lists of records (one per seed) of one run.
    key: the metric.
    band: "minmax" (min and max over seeds), "se" (mean ± standard error: sample std with
      ddof=1 / sqrt(S); no band for one seed), "std" (mean ± population std) or "none".
    smooth: each seed's values are first replaced by their trailing rolling mean over this many
      logged points (`rolling_mean`); 1 leaves them as logged.

  Returns:
    (steps [N], mean [N], lo [N], hi [N]); N = 0 when no seed logs `key`. Seeds that have not
    logged a step yet (a run still going) cut the curve at their last common step.
  """
  if band not in BANDS:
    raise PlotError(f"band must be one of {', '.join(BANDS)}, got {band!r}")
  curves = []
  for recs in seeds:
    by_step = dict(zip(*(a.tolist() for a in series(recs, key))))   # a repeated step: last wins
    if by_step:
      s = np.asarray(sorted(by_step))
      curves.append((s, rolling_mean([by_step[x] for x in s.tolist()], smooth)))
  if not curves:
    empty = np.zeros((0,))
    return empty, empty, empty, empty
  steps = curves[0][0]
  for s, _ in curves[1:]:
    steps = np.intersect1d(steps, s)
  vals = np.stack([v[np.searchsorted(s, steps)] for s, v in curves])   # [S, N]
  mean = vals.mean(0)
  if band == "minmax":
    lo, hi = vals.min(0), vals.max(0)
  elif band == "std":
    lo, hi = mean - vals.std(0), mean + vals.std(0)
  elif band == "se" and len(vals) > 1:
    se = vals.std(0, ddof=1) / np.sqrt(len(vals))
    lo, hi = mean - se, mean + se
  else:
    lo, hi = mean, mean
  return steps.astype(int), mean, lo, hi


def threshold_crossings(runs: Mapping[str, Sequence[Sequence[Mapping]]], key: str,
                        thresholds: Sequence[float]) -> dict[str, dict[float, dict]]:
  """Where each run first reaches each threshold.

  Args:
    runs: {name: per-seed records}.
    key: the metric.
    thresholds: values to reach (a run reaches t at the first step with value >= t).

  Returns:
    {name: {t: {"mean": first step of the seed-mean curve (what the figure marks) or None,
                "seeds": per-seed first steps (`steps_to_threshold`), None if never}}}.
  """
  out = {}
  for name, seeds in runs.items():
    steps, mean, _, _ = mean_curve(seeds, key, band="none")
    out[name] = {t: {"mean": first_crossing(steps, mean, t),
                     "seeds": [steps_to_threshold(recs, key, t) for recs in seeds]}
                 for t in thresholds}
  return out


# -- figures -----------------------------------------------------------------------------------

def _pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def _save(fig, path, *, dpi: int = 150):
  """Lays out `fig`, writes it to `path` (.png, .pdf, .svg), closes it; returns `path`."""
  fig.tight_layout()
  fig.savefig(path, dpi=dpi)
  _pyplot().close(fig)
  return path


def draw_metric(ax, runs: Mapping[str, Sequence[Sequence[Mapping]]], key: str, *,
                thresholds: Sequence[float] = (), band: str = "minmax", label: str = "",
                smooth: int = 1, colors: Mapping[str, str] | None = None) -> None:
  """Draws `key` against step on a matplotlib axes: a mean line per run, its seed band, a grey
  dotted line per threshold, and per run a marker plus a dotted vertical line at the step where
  its mean first reaches each threshold (annotated with the step). With smooth > 1 each seed's
  curve is a trailing rolling mean over `smooth` logged steps (`mean_curve`) and the y label
  says so. `colors` fixes a run's colour (the same recipe keeps its colour across panels)."""
  for i, (name, seeds) in enumerate(runs.items()):
    steps, mean, lo, hi = mean_curve(seeds, key, band=band, smooth=smooth)
    if not steps.size:
      continue
    n_seeds = sum(1 for recs in seeds if series(recs, key)[0].size)
    tag = f"{name} ({n_seeds} seeds)" if n_seeds > 1 else name
    line, = ax.plot(steps, mean, label=tag, marker="o" if steps.size < 25 else None, ms=3,
                    color=(colors or {}).get(name))
    color = line.get_color()
    if n_seeds > 1 and band != "none":
      ax.fill_between(steps, lo, hi, alpha=0.2, color=color, lw=0)
    for t in thresholds:
      s = first_crossing(steps, mean, t)
      if s is not None:
        ax.axvline(s, color=color, ls=":", lw=1)
        ax.plot([s], [mean[steps == s][0]], marker="D", ms=5, color=color, mec="black", mew=0.5)
        ax.annotate(str(s), (s, t), textcoords="offset points", xytext=(3, -10 - 8 * i), fontsize=7,
                    color=color)
  for t in thresholds:
    ax.axhline(t, color="grey", ls=":", lw=0.8)
  ax.set_xlabel("RL step")
  ax.set_ylabel((label or key) + (f"\n(rolling mean over {smooth} steps)" if smooth > 1 else ""))
  ax.grid(alpha=0.3)
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=8)


def plot_metric(runs: Mapping[str, Sequence[Sequence[Mapping]]], key: str, path: str, *,
                thresholds: Sequence[float] = (), band: str = "minmax", title: str = "") -> str:
  """One metric against step for several runs (see `draw_metric`); saves the figure to `path`
  (.png, .pdf or .svg) and returns it.

  Raises:
    PlotError: no run logs `key` (the message lists the metrics that exist).
  """
  _require_metric(runs, key)
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  draw_metric(ax, runs, key, thresholds=thresholds, band=band)
  if title:
    ax.set_title(title)
  return _save(fig, path)


def passk_keys(runs: Mapping[str, Sequence[Sequence[Mapping]]]) -> list[int]:
  """The k of every `eval/pass@k` any run logs, sorted."""
  return sorted({int(m.group(1)) for k in available_metrics(runs) if (m := PASSK.match(k))})


def plot_passk(runs: Mapping[str, Sequence[Sequence[Mapping]]], path: str, *,
               ks: Sequence[int] = (), band: str = "minmax", title: str = "") -> str:
  """Pass@k against step: one panel per k, one line per run (seed mean and band).

  Args:
    runs: {name: per-seed records} with `eval/pass@k` keys (`load_runs` converts eval.json).
    path: output image.
    ks: the k to draw (default: every k logged).
    band, title: as in `plot_metric`.

  Raises:
    PlotError: no run logs Pass@k, or a requested k is not logged.
  """
  have = passk_keys(runs)
  if not have:
    raise PlotError("no run logs Pass@k (eval/pass@k in metrics.jsonl or pass@k in eval.json); "
                    "metrics present: " + ", ".join(available_metrics(runs)))
  ks = list(ks) or have
  missing = [k for k in ks if k not in have]
  if missing:
    raise PlotError(f"pass@{missing[0]} is not logged; logged: "
                    + ", ".join(f"pass@{k}" for k in have))
  plt = _pyplot()
  fig, axes = plt.subplots(1, len(ks), figsize=(4.2 * len(ks), 3.8), squeeze=False, sharey=True)
  for ax, k in zip(axes[0], ks):
    draw_metric(ax, runs, f"eval/pass@{k}", band=band, label="Pass@k" if k == ks[0] else " ")
    ax.set_title(f"Pass@{k}")
    ax.set_ylim(-0.02, 1.02)
  if title:
    fig.suptitle(title)
  return _save(fig, path)


def _side_name(path: str) -> str:
  """`runs/react/bot_grpo-seed0` or `.../bot_grpo-seed0/hf_final` -> `bot_grpo`."""
  path = os.path.normpath(str(path))
  if os.path.basename(path) == "hf_final":
    path = os.path.dirname(path)
  return SEED_SUFFIX.sub("", os.path.basename(path))


def _is_win_rate(d) -> bool:
  return isinstance(d, dict) and all(k in d for k in WIN_RATE_KEYS)


def _win_rate_dicts(blob, stem: str, path: str) -> list[tuple[str, dict]]:
  if _is_win_rate(blob):
    if blob.get("label") or blob.get("name"):
      label = blob.get("label") or blob.get("name")
    elif isinstance(blob.get("a"), str) and isinstance(blob.get("b"), str):
      label = f"{_side_name(blob['a'])} vs {_side_name(blob['b'])}"   # experiments/react_compare.py
    else:
      label = stem
    return [(str(label), blob)]
  if isinstance(blob, dict) and blob and all(_is_win_rate(v) for v in blob.values()):
    return [(str(k), v) for k, v in blob.items()]
  raise PlotError(f"{path} is not a win-rate result: need a dict with keys "
                  f"{', '.join(WIN_RATE_KEYS)} (botjax.rewards.react.evaluate.win_rate), or a "
                  "dict of such dicts keyed by comparison label")


def _read_json(path: str):
  try:
    with open(path) as fh:
      return json.load(fh)
  except json.JSONDecodeError as e:
    raise PlotError(f"{path} is not valid JSON: {e}") from None


def load_win_rates(paths: Sequence[str]) -> dict[str, dict]:
  """Win-rate results by comparison label; labels that differ only by `-seedN` are pooled.

  Args:
    paths: JSON files, each one `win_rate` / `pairwise_win_rate` dict or a dict {label: such
      dict}; or directories, whose `*.json` files that hold win-rate results are read (others,
      such as `config.json` or `eval.json` of a run, are skipped). A dict's label is its `label`
      or `name` key, else `A vs B` from the `a` and `b` paths that `experiments/react_compare.py`
      records (without `-seedN` and `hf_final`), else the file stem.

  Returns:
    {label: {"win_rate", "tie_rate", "wins", "losses", "ties", "n"}}; a label seen in several
    files (seeds) sums wins, losses, ties and n, and recomputes win_rate = (wins + ties/2) / n
    and tie_rate = ties / n.
  """
  if not paths:
    raise PlotError("no win-rate files given")
  found: list[tuple[str, dict]] = []
  for p in paths:
    if os.path.isdir(p):
      names = sorted(f for f in os.listdir(p) if f.endswith(".json"))
      before = len(found)
      for f in names:
        blob = _read_json(os.path.join(p, f))
        try:
          found += _win_rate_dicts(blob, os.path.splitext(f)[0], os.path.join(p, f))
        except PlotError:
          continue
      if len(found) == before:
        raise PlotError(f"directory {p} holds no win-rate JSON (looked at: "
                        f"{', '.join(names) or 'no .json files'})")
    elif os.path.isfile(p):
      found += _win_rate_dicts(_read_json(p), os.path.splitext(os.path.basename(p))[0], p)
    else:
      raise PlotError(f"no such win-rate file or directory: {p}")
  grouped: dict[str, list[dict]] = {}
  for label, r in found:
    grouped.setdefault(SEED_SUFFIX.sub("", label), []).append(r)
  out = {}
  for label, rs in grouped.items():
    if len(rs) == 1:
      r = rs[0]
      ties = r.get("ties", round(r["tie_rate"] * r["n"]))
      out[label] = {"win_rate": float(r["win_rate"]), "tie_rate": float(r["tie_rate"]),
                    "wins": int(r["wins"]), "ties": int(ties),
                    "losses": int(r.get("losses", r["n"] - r["wins"] - ties)), "n": int(r["n"])}
      continue
    wins = sum(int(r["wins"]) for r in rs)
    ties = sum(int(r.get("ties", round(r["tie_rate"] * r["n"]))) for r in rs)
    n = sum(int(r["n"]) for r in rs)
    out[label] = {"win_rate": (wins + 0.5 * ties) / n if n else 0.0,
                  "tie_rate": ties / n if n else 0.0, "wins": wins, "ties": ties,
                  "losses": n - wins - ties, "n": n}
  return out


STEP_READING, SEQUENCE_ONLY, OTHER = ("step-reading recipes", "sequence-only recipes",
                                      "other recipes")


def recipe_families(names: Sequence[str]) -> dict[str, list[str]]:
  """Groups run names by what their recipe's advantage reads (`Recipe.granularity` of
  `botjax.algorithms.RECIPES`): "step-reading recipes" (token- and step-level) first, then
  "sequence-only recipes"; a family with no run is left out, names of no recipe go to "other
  recipes". A name is read up to its first space, so labelled runs such as "grpo (lr 0.0001)"
  group as their recipe."""
  from botjax import algorithms   # jax: imported when families are needed
  out: dict[str, list[str]] = {}
  for name in names:
    recipe = algorithms.RECIPES.get(name.split(" ", 1)[0])
    fam = (OTHER if recipe is None else SEQUENCE_ONLY
           if recipe.granularity is algorithms.Granularity.SEQUENCE else STEP_READING)
    out.setdefault(fam, []).append(name)
  return {f: out[f] for f in (STEP_READING, SEQUENCE_ONLY, OTHER) if f in out}


def runs_figure(runs: Mapping[str, Sequence[Sequence[Mapping]]], *,
                keys: Sequence[tuple[str, str]] = (("eval/accuracy", "held-out accuracy"),
                                                   ("reward_mean", "mean reward")),
                title: str = "", thresholds: Sequence[float] = (), band: str = "minmax",
                smooth: int = 10, max_per_panel: int = 5,
                families: Mapping[str, Sequence[str]] | None = None):
  """The figure of `plot_runs`, not yet saved: (matplotlib figure, axes [F, K]).

  One column per (key, label) of `keys`; one row per recipe family (`recipe_families`, or
  `families` {row title: run names}) when there are more than `max_per_panel` runs, else a single
  row. Per-step keys (any key not starting with "eval/") are trailing rolling means over `smooth`
  steps, the window named in the y label; held-out evaluations ("eval/...", every N steps) are
  drawn as logged. Bands as `band` (`BANDS`), named in the title. `thresholds` are marked on the
  first column of panels of at most `max_per_panel` runs (more would hide the curves; the
  report's table gives the steps). A run keeps its colour in every panel.
  """
  if families is None:
    families = (recipe_families(list(runs)) if len(runs) > max_per_panel
                else {"": list(runs)})
  unknown = [n for names in families.values() for n in names if n not in runs]
  if unknown:
    raise PlotError(f"families name runs that are not there: {unknown}; runs: {list(runs)}")
  # Matplotlib's ten cycle colours, then ten that differ from them (tab:olive is C8).
  palette = [f"C{i}" for i in range(10)] + ["black", "gold", "navy", "maroon", "lime", "teal",
                                            "orchid", "sienna", "darkkhaki", "slateblue"]
  colors = {n: palette[i % len(palette)] for i, n in enumerate(runs)}
  plt = _pyplot()
  rows = len(families)
  fig, axes = plt.subplots(rows, len(keys), figsize=(5.5 * len(keys), 4 * rows), squeeze=False,
                           sharex="col", sharey="col")
  for r, (family, names) in enumerate(families.items()):
    sub = {n: runs[n] for n in names}
    for c, (key, label) in enumerate(keys):
      ax = axes[r, c]
      marked = thresholds if c == 0 and len(names) <= max_per_panel else ()
      draw_metric(ax, sub, key, thresholds=marked, band=band, label=label,
                  smooth=1 if key.startswith("eval/") else smooth, colors=colors)
      if family:
        ax.set_title(family)
  n_seeds = {sum(1 for recs in seeds if recs) for seeds in runs.values()}
  what = ("one seed" if n_seeds == {1} else f"mean over seeds, band: {BANDS[band]}")
  fig.suptitle(f"{title} ({what})" if title else what)
  return fig, axes


def plot_runs(runs: Mapping[str, Sequence[Sequence[Mapping]]], path: str, *,
              keys: Sequence[tuple[str, str]] = (("eval/accuracy", "held-out accuracy"),
                                                 ("reward_mean", "mean reward")),
              title: str = "", thresholds: Sequence[float] = (), band: str = "minmax",
              smooth: int = 10, max_per_panel: int = 5,
              families: Mapping[str, Sequence[str]] | None = None) -> str:
  """Draws `runs_figure` (one column per key, one row per recipe family when there are more than
  `max_per_panel` runs; per-step keys as rolling means over `smooth` steps) and saves it to
  `path`; returns `path`. A key no run logs leaves its panel empty."""
  fig, _ = runs_figure(runs, keys=keys, title=title, thresholds=thresholds, band=band,
                       smooth=smooth, max_per_panel=max_per_panel, families=families)
  return _save(fig, path, dpi=120)


def plot_compile_rate(runs: Mapping[str, Sequence[tuple[int, float]]], path: str | os.PathLike, *,
                      threshold: float | None = 0.8, title: str = "Compile rate") -> str:
  """Compile rate against training step, one line per run (BoT-GRPO, arXiv 2610.09804, Fig. 1).

  Args:
    runs: run name -> (step, compile rate in [0, 1]) points.
    path: output image (.png, .pdf, .svg).
    threshold: a dashed horizontal reference line (the paper's 80%), or None.
    title: the figure title.

  Returns:
    `path`.
  """
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6.4, 4.0))
  for name, points in runs.items():
    points = sorted(points)
    ax.plot([s for s, _ in points], [100 * r for _, r in points], marker="o", ms=3, label=name)
  if threshold is not None:
    ax.axhline(100 * threshold, ls="--", c="gray", lw=1)
  ax.set_xlabel("training step")
  ax.set_ylabel("compile rate (%)")
  ax.set_ylim(0, 100)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  if ax.get_legend_handles_labels()[0]:
    ax.legend()
  return _save(fig, path)


def plot_win_rates(results: Mapping[str, Mapping[str, float]], path: str | os.PathLike, *,
                   title: str = "Pairwise win rate") -> str:
  """One bar per comparison, its win rate split into outright wins and ties (BoT-GRPO, arXiv
  2610.09804, Fig. 2).

  Args:
    results: comparison label (e.g. "vs GRPO") -> a dict with "wins", "n", "win_rate" and
      "tie_rate" (`botjax.rewards.react.pairwise_win_rate`, `load_win_rates`).
    path: output image.
    title: the figure title.

  Returns:
    `path`.

  Raises:
    PlotError: no results.
  """
  if not results:
    raise PlotError("no win-rate results to plot")
  plt = _pyplot()
  labels = list(results)
  wins = [100 * r["wins"] / max(r["n"], 1) for r in results.values()]
  ties = [100 * 0.5 * r["tie_rate"] for r in results.values()]
  fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(labels), 4.0))
  x = range(len(labels))
  ax.bar(x, wins, color="tab:blue", label="wins")
  ax.bar(x, ties, bottom=wins, color="tab:blue", alpha=0.35, hatch="//", label="ties (0.5 each)")
  for i, r in enumerate(results.values()):
    ax.text(i, 100 * r["win_rate"] + 1.5,
            f"{100 * r['win_rate']:.0f}%\n(ties {100 * r['tie_rate']:.0f}%)",
            ha="center", va="bottom", fontsize=8)
  ax.axhline(50, ls="--", c="gray", lw=1)
  ax.set_xticks(list(x), labels)
  ax.set_ylim(0, 115)
  ax.set_ylabel("win rate (%)")
  ax.set_title(title)
  ax.legend(loc="upper right", fontsize=8)
  return _save(fig, path)


def plot_win_rate_curve(curves: Mapping[str, Sequence[tuple[int, float, float]]],
                        path: str | os.PathLike, *,
                        title: str = "Pairwise win rate during training") -> str:
  """Win rate against training step, one line per run, with the share that comes from ties
  shaded (BoT-GRPO, arXiv 2610.09804, Fig. 2: win rate throughout training).

  Args:
    curves: run name -> (step, win rate in [0, 1] with ties counted 0.5, tie rate in [0, 1])
      points; the band under each line spans win rate − tie rate / 2 to win rate.
    path: output image.
    title: the figure title.

  Returns:
    `path`.

  Raises:
    PlotError: no points, or a rate outside [0, 1].
  """
  if not curves or not any(curves.values()):
    raise PlotError("no win-rate points to plot")
  for name, points in curves.items():
    for step, win, tie in points:
      if not (0.0 <= win <= 1.0 and 0.0 <= tie <= 1.0):
        raise PlotError(f"{name}: step {step} has win rate {win} and tie rate {tie}; both must "
                        "lie in [0, 1]")
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6.4, 4.0))
  for name, points in curves.items():
    points = sorted(points)
    steps = [p[0] for p in points]
    win = np.asarray([100 * p[1] for p in points])
    tie = np.asarray([100 * p[2] for p in points])
    line, = ax.plot(steps, win, marker="o", ms=3, label=name)
    ax.fill_between(steps, win - tie / 2, win, color=line.get_color(), alpha=0.2, lw=0,
                    label=f"{name}: ties (0.5 each)")
  ax.axhline(50, ls="--", c="gray", lw=1)
  ax.set_xlabel("training step")
  ax.set_ylabel("win rate (%)")
  ax.set_ylim(0, 100)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  return _save(fig, path)


__all__ = [
    "PlotError", "Runs", "series", "steps_to_threshold", "run_name", "load_records", "load_runs",
    "available_metrics", "rolling_mean", "mean_curve", "recipe_families", "runs_figure",
    "BANDS", "first_crossing", "threshold_crossings", "draw_metric",
    "plot_metric", "plot_runs", "passk_keys", "plot_passk", "load_win_rates", "plot_win_rates",
    "plot_compile_rate", "plot_win_rate_curve",
]
