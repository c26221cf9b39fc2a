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
  `botjax.train.report.summary_table` (start/final/best, steps to each threshold). A run's `eval.json`
  history (experiments/aime.py, experiments/react.py) joins its records as `eval/<key>`.
--kind=passk: Pass@k against step, one panel per k, from `eval/pass@k` in metrics.jsonl or the
  `history` of an `eval.json` (experiments/aime.py).
--kind=winrate: pairwise win-rate bars with tie rates from JSON files of the React evaluation
  (`botjax.rewards.react.evaluate.win_rate` / `pairwise_win_rate` dicts, e.g. the compare.json
  of `experiments/react.py --compare=A,B`, labelled `A vs B`); results whose labels differ only
  by `-seedN` are pooled (their wins, losses and ties summed).

A run directory, a `metrics.jsonl` or an `eval.json` can be named in --runs. Errors a user can fix
(a missing directory, a metric no run logs, a malformed JSON) exit 2 and name what is valid.
Wiring only: loading, curves and figures are `botjax.plotting` (`load_runs`, `mean_curve`,
`threshold_crossings`, `plot_metric`, `plot_passk`, `load_win_rates`, `plot_win_rates`); flags
are only defined when this file runs as a script.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from botjax import plotting  # noqa: E402
from botjax.plotting import PlotError  # noqa: E402
from botjax.train.report import summary_table  # noqa: E402


# -- command line ------------------------------------------------------------------------------

def define_flags():
  from absl import flags
  if "runs" in flags.FLAGS:    # defined by an earlier run of this script in the same interpreter
    return
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
    results = plotting.load_win_rates(FLAGS.runs)
    plotting.plot_win_rates(results, FLAGS.out, **({"title": title} if title else {}))
    for label, r in results.items():
      print(f"{label}: win rate {r['win_rate']:.3f}, tie rate {r['tie_rate']:.3f} "
            f"({r['wins']} wins, {r['ties']} ties, {r['losses']} losses of {r['n']})")
  elif FLAGS.kind == "passk":
    runs = plotting.load_runs(FLAGS.runs)
    ks = _numbers(FLAGS.ks, "ks", int)
    plotting.plot_passk(runs, FLAGS.out, ks=ks, band=FLAGS.band, title=title)
    for k in ks or plotting.passk_keys(runs):
      print(f"pass@{k}:\n" + summary_table(runs, key=f"eval/pass@{k}"))
  else:
    runs = plotting.load_runs(FLAGS.runs)
    thresholds = _numbers(FLAGS.thresholds, "thresholds", float)
    plotting.plot_metric(runs, FLAGS.metric, FLAGS.out, thresholds=thresholds, band=FLAGS.band, title=title)
    print(summary_table(runs, key=FLAGS.metric, thresholds=thresholds))
    for name, per_t in plotting.threshold_crossings(runs, FLAGS.metric, thresholds).items():
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
