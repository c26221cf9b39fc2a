r"""Paper-style figures from run directories (the `metrics.jsonl` every run writes).

  python experiments/plot.py --runs=runs/quickstart/grpo-seed0,runs/quickstart/bot_grpo-seed0 \
      --metric=eval/accuracy --thresholds=0.3,0.4 --out=accuracy.png
  python experiments/plot.py --kind=passk --runs=runs/aime --out=passk.png
  python experiments/plot.py --kind=winrate --runs=runs/cmp-seed0,runs/cmp-seed1   # compare.json
  python experiments/plot.py --runs=runs/react/bot_grpo,runs/react/grpo --metric=eval/compile_rate \
      --thresholds=0.8

--kind=metric: one metric against step, one line per run, with dotted lines where each run first
  reaches each threshold (paper Figs. 1, 3). Runs are named by directory basename; a `-seedN`
  suffix is stripped, so `grpo-seed0` and `grpo-seed1` are averaged into one `grpo` line with a
  min-max (--band=minmax) or ±std (--band=std) band. Also prints the summary table of
  `botjax.train.report` (start/final/best, steps to each threshold). A run's `eval.json`
  history (experiments/aime.py, experiments/react.py) joins its records as `eval/<key>`.
--kind=passk: Pass@k against step, one panel per k, from `eval/pass@k` in metrics.jsonl or the
  `history` of an `eval.json` (experiments/aime.py).
--kind=winrate: pairwise win-rate bars with tie rates from JSON files of the React evaluation
  (`botjax.rewards.react.evaluate.win_rate` / `pairwise_win_rate` dicts, e.g. the compare.json
  of `experiments/react.py --compare=A,B`, labelled `A vs B`); results whose labels differ only
  by `-seedN` are pooled (their wins, losses and ties summed).

A run directory, a `metrics.jsonl` or an `eval.json` can be named in --runs. Errors a user can fix
(a missing directory, a metric no run logs, a malformed JSON) exit 2 and name what is valid.
The functions are importable (`load_runs`, `mean_curve`, `threshold_crossings`, `draw_metric`,
`plot_metric`, `plot_passk`, `load_win_rates`, `plot_win_rates`); flags are only defined when
this file runs as a script.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Mapping, Sequence

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from botjax.train import report  # noqa: E402
from botjax.train.writer import read_jsonl  # noqa: E402

# Runs: run name -> one list of records per seed (the shape `botjax.train.report` takes).
Runs = dict[str, list[list[dict]]]

SEED_SUFFIX = re.compile(r"-seed\d+$")
PASSK = re.compile(r"^eval/pass@(\d+)$")
WIN_RATE_KEYS = ("win_rate", "tie_rate", "wins", "n")


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
  if base in ("metrics.jsonl", "eval.json"):
    base = os.path.basename(os.path.dirname(os.path.abspath(path)))
  elif os.path.isfile(path):
    base = os.path.splitext(base)[0]
  return SEED_SUFFIX.sub("", base)


def _eval_json_records(path: str) -> list[dict]:
  """`eval.json` (`{"latest": ..., "history": [{"step": s, "pass@1": ...}, ...]}`) as records
  with `eval/`-prefixed keys, like the ones the trainer logs."""
  try:
    with open(path) as f:
      blob = json.load(f)
  except json.JSONDecodeError as e:
    raise PlotError(f"{path} is not valid JSON: {e}") from None
  history = blob.get("history") if isinstance(blob, dict) else None
  if not isinstance(history, list) or not all(isinstance(h, dict) and "step" in h for h in history):
    raise PlotError(f"{path} has no `history` list of {{'step': ..., 'pass@k': ...}} entries "
                    "(the eval.json format of experiments/aime.py)")
  return [{"step": h["step"], **{k if k.startswith("eval/") else f"eval/{k}": v
                                 for k, v in h.items() if k != "step"}} for h in history]


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
    files = [os.path.join(path, f) for f in ("metrics.jsonl", "eval.json")
             if os.path.isfile(os.path.join(path, f))]
    if not files:
      raise PlotError(f"run directory {path} holds neither metrics.jsonl nor eval.json")
  elif os.path.isfile(path):
    files = [path]
  else:
    raise PlotError(f"no such run directory or file: {path}")
  rows: list[dict] = []
  for f in files:
    if f.endswith(".json"):
      rows += _eval_json_records(f)
    else:
      try:
        rows += read_jsonl(f)
      except json.JSONDecodeError as e:
        raise PlotError(f"{f} is not JSONL (one JSON record per line): {e}") from None
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

def mean_curve(seeds: Sequence[Sequence[Mapping]], key: str, *, band: str = "minmax"
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Mean of `key` over seeds at the steps every seed logged, with a band.

  Args:
    seeds: S lists of records (one per seed) of one run.
    key: the metric.
    band: "minmax" (min and max over seeds), "std" (mean ± population std) or "none".

  Returns:
    (steps [N], mean [N], lo [N], hi [N]); N = 0 when no seed logs `key`. Seeds that have not
    logged a step yet (a run still going) cut the curve at their last common step.
  """
  if band not in ("minmax", "std", "none"):
    raise PlotError(f"band must be minmax, std or none, got {band!r}")
  curves = []
  for recs in seeds:
    by_step = dict(zip(*(a.tolist() for a in report.series(recs, key))))   # a repeated step: last wins
    if by_step:
      s = np.asarray(sorted(by_step))
      curves.append((s, np.asarray([by_step[x] for x in s.tolist()], dtype=float)))
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
  else:
    lo, hi = mean, mean
  return steps.astype(int), mean, lo, hi


def first_crossing(steps: np.ndarray, values: np.ndarray, threshold: float) -> int | None:
  """First step with `values >= threshold` (steps [N], values [N]), or None."""
  hit = np.flatnonzero(np.asarray(values) >= threshold)
  return int(steps[hit[0]]) if hit.size else None


def threshold_crossings(runs: Mapping[str, Sequence[Sequence[Mapping]]], key: str,
                        thresholds: Sequence[float]) -> dict[str, dict[float, dict]]:
  """Where each run first reaches each threshold.

  Args:
    runs: {name: per-seed records}.
    key: the metric.
    thresholds: values to reach (a run reaches t at the first step with value >= t).

  Returns:
    {name: {t: {"mean": first step of the seed-mean curve (what the figure marks) or None,
                "seeds": per-seed first steps (`report.steps_to_threshold`), None if never}}}.
  """
  out = {}
  for name, seeds in runs.items():
    steps, mean, _, _ = mean_curve(seeds, key, band="none")
    out[name] = {t: {"mean": first_crossing(steps, mean, t),
                     "seeds": [report.steps_to_threshold(recs, key, t) for recs in seeds]}
                 for t in thresholds}
  return out


# -- figures -----------------------------------------------------------------------------------

def _pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def draw_metric(ax, runs: Mapping[str, Sequence[Sequence[Mapping]]], key: str, *,
                thresholds: Sequence[float] = (), band: str = "minmax", label: str = "") -> None:
  """Draws `key` against step on a matplotlib axes: a mean line per run, its seed band, a grey
  dotted line per threshold, and per run a marker plus a dotted vertical line at the step where
  its mean first reaches each threshold (annotated with the step)."""
  for i, (name, seeds) in enumerate(runs.items()):
    steps, mean, lo, hi = mean_curve(seeds, key, band=band)
    if not steps.size:
      continue
    n_seeds = sum(1 for recs in seeds if report.series(recs, key)[0].size)
    tag = f"{name} ({n_seeds} seeds)" if n_seeds > 1 else name
    line, = ax.plot(steps, mean, label=tag, marker="o" if steps.size < 25 else None, ms=3)
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
  ax.set_ylabel(label or key)
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
  fig.tight_layout()
  fig.savefig(path, dpi=150)
  plt.close(fig)
  return path


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
  fig.tight_layout()
  fig.savefig(path, dpi=150)
  plt.close(fig)
  return path


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
      label = f"{_side_name(blob['a'])} vs {_side_name(blob['b'])}"   # experiments/react.py --compare
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
      or `name` key, else `A vs B` from the `a` and `b` paths that `experiments/react.py
      --compare` records (without `-seedN` and `hf_final`), else the file stem.

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


def plot_win_rates(results: Mapping[str, Mapping], path: str, *,
                   title: str = "Pairwise win rate") -> str:
  """Win-rate bars split into outright wins and ties (paper Fig. 2), by
  `botjax.rewards.react.evaluate.plot_win_rates`; returns `path`."""
  from botjax.rewards.react.evaluate import plot_win_rates as react_plot_win_rates
  if not results:
    raise PlotError("no win-rate results to plot")
  react_plot_win_rates(results, path, title=title)
  return path


# -- command line ------------------------------------------------------------------------------

def define_flags():
  from absl import flags
  flags.DEFINE_list("runs", [], "Run directories (or metrics.jsonl / eval.json / win-rate JSON files).")
  flags.DEFINE_enum("kind", "metric", ["metric", "passk", "winrate"], "Figure to draw.")
  flags.DEFINE_string("metric", "eval/accuracy", "--kind=metric: the metric against step.")
  flags.DEFINE_list("thresholds", [], "--kind=metric: values to mark where each run first reaches.")
  flags.DEFINE_list("ks", [], "--kind=passk: the k to draw (default: all logged).")
  flags.DEFINE_enum("band", "minmax", ["minmax", "std", "none"], "Band over seeds.")
  flags.DEFINE_string("title", "", "Figure title.")
  flags.DEFINE_string("out", "figure.png", "Output image (.png, .pdf, .svg).")


def _numbers(values, flag, cast):
  out = []
  for v in values:
    try:
      out.append(cast(v))
    except ValueError:
      raise PlotError(f"--{flag}: {v!r} is not a {cast.__name__}") from None
  return out


def run(FLAGS) -> None:
  """Draws the figure the flags ask for and prints what it shows."""
  if not FLAGS.runs:
    raise PlotError("--runs is empty: pass run directories, e.g. --runs=runs/q/grpo-seed0,runs/q/bot_grpo-seed0")
  out_dir = os.path.dirname(os.path.abspath(FLAGS.out))
  if not os.path.isdir(out_dir):
    raise PlotError(f"--out: directory {out_dir} does not exist")
  title = FLAGS.title
  if FLAGS.kind == "winrate":
    results = load_win_rates(FLAGS.runs)
    plot_win_rates(results, FLAGS.out, **({"title": title} if title else {}))
    for label, r in results.items():
      print(f"{label}: win rate {r['win_rate']:.3f}, tie rate {r['tie_rate']:.3f} "
            f"({r['wins']} wins, {r['ties']} ties, {r['losses']} losses of {r['n']})")
  elif FLAGS.kind == "passk":
    runs = load_runs(FLAGS.runs)
    ks = _numbers(FLAGS.ks, "ks", int)
    plot_passk(runs, FLAGS.out, ks=ks, band=FLAGS.band, title=title)
    for k in ks or passk_keys(runs):
      print(f"pass@{k}:\n" + report.summary_table(runs, key=f"eval/pass@{k}"))
  else:
    runs = load_runs(FLAGS.runs)
    thresholds = _numbers(FLAGS.thresholds, "thresholds", float)
    plot_metric(runs, FLAGS.metric, FLAGS.out, thresholds=thresholds, band=FLAGS.band, title=title)
    print(report.summary_table(runs, key=FLAGS.metric, thresholds=thresholds))
    for name, per_t in threshold_crossings(runs, FLAGS.metric, thresholds).items():
      for t, c in per_t.items():
        print(f"{name}: mean {FLAGS.metric} first >= {t:g} at step {c['mean']} "
              f"(per seed: {c['seeds']})")
  print(f"wrote {FLAGS.out}")


def main(argv):
  from absl import app, flags
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    run(flags.FLAGS)
  except PlotError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  from absl import app
  define_flags()
  app.run(main)
