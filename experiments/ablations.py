r"""BoT-GRPO ablations on the CPU arithmetic testbed, after the paper's (arXiv 2610.09804).

  python experiments/ablations.py                          # every ablation, 3 seeds
  python experiments/ablations.py --ablation=noise --seeds=3
  python experiments/ablations.py --ablation=all --shard=0/2 & \
  python experiments/ablations.py --ablation=all --shard=1/2   # two processes share the runs
  python experiments/ablations.py --report_only            # tables and plots of finished runs

Ablations (each a set of BoT-GRPO variants on the same warm start; docs/ablations.md):
  strategy  local reward strategy: error propagation, context-aware, independent (Fig. 7); on the
            exact judge each strategy changes what a step is checked against
            (`botjax.testbeds.arith_judge.ExactArithmeticJudge`).
  w_s       the local weight w_s in {0.1, 0.5, 1.0} (Fig. 8).
  window    the step window W (Fig. 9); this task's solutions have 2–3 steps, so the default
            values are W in {1, 2, 3} (W = 3 is one unit of the whole solution, as W >= 3 is).
  noise     judge noise: each step verdict flipped with probability p; reports final accuracy and
            the peak-to-final drop. Not the paper's Fig. 10, which varies the weight of the VLM
            line reward; this testbed has no VLM line, so it perturbs the step verdicts instead.
  stack     global reward only (w_s = 0) against global + local reward (w_s = 0.5); alias
            --ablation=global_local. Not the paper's Fig. 4 reward stack: only whether the
            step-level local term is present changes.
Every variant not named by an ablation keeps the base values (w_s 0.5, error propagation, W 1,
no noise). Runs shared by several ablations (the base) run once. Each ablation writes
`<workdir>/<ablation>.png` (held-out accuracy, and mean reward as a rolling mean over 10 steps;
mean over seeds with a ± standard-error band) and `<workdir>/<ablation>.md` (a table of start /
final / best accuracy and peak-to-final drop as mean ± standard error over seeds, steps to
thresholds, run times). Runs resume from their metrics when finished.
Wiring only: the pipeline lives in `botjax.testbeds.arith`.
"""

import dataclasses
import os
import sys
import time

from absl import app, flags, logging

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _cli  # noqa: E402  experiments/_cli.py (this script's directory is on sys.path)
from botjax import plotting as plot_lib  # noqa: E402

FLAGS = flags.FLAGS
ABLATIONS = ("strategy", "w_s", "window", "noise", "stack")
ALIASES = {"global_local": "stack"}      # clearer name of the stack ablation
TITLES = {
    "strategy": "local reward strategy (after the paper's Fig. 7)",
    "w_s": "local weight w_s (after the paper's Fig. 8)",
    "window": "step window W (after the paper's Fig. 9)",
    "noise": ("judge noise: step verdicts flipped with probability p (the paper's Fig. 10 varies "
              "the VLM line weight instead)"),
    "stack": "global reward only vs global + local reward",
}
REWARD_SMOOTHING = 10                    # rolling-mean window (steps) of the per-step reward curve
flags.DEFINE_list("ablation", ["all"], f"Ablations to run: all or some of {list(ABLATIONS)} "
                  f"(aliases: {ALIASES}).")
flags.DEFINE_integer("seeds", 3, "Seeds per variant.")
flags.DEFINE_integer("steps", 60, "RL steps per run.")
flags.DEFINE_integer("eval_every", 10, "Held-out evaluation every N steps.")
flags.DEFINE_string("workdir", "runs/ablations", "Output directory (warm start cached here).")
flags.DEFINE_list("w_s_values", ["0.1", "0.5", "1.0"], "w_s values of the w_s ablation.")
flags.DEFINE_list("windows", ["1", "2", "3"], "W values of the window ablation.")
flags.DEFINE_list("noise_values", ["0.0", "0.1", "0.2", "0.3"], "Flip rates of the noise ablation.")
flags.DEFINE_string("shard", "0/1", "i/n: run only the runs j with j % n == i (parallel processes).")
flags.DEFINE_bool("report_only", False, "Only write tables and plots of the runs on disk.")
flags.DEFINE_multi_string("set", [], "TrainConfig override for every run, e.g. --set=optim.learning_rate=1e-4.")
flags.DEFINE_multi_string("warm", [], "ArithmeticSetup override, e.g. --warm=warm_steps=100.")


@dataclasses.dataclass(frozen=True)
class Variant:
  """One reward/recipe setting of BoT-GRPO on the arithmetic task."""
  w_s: float = 0.5
  strategy: str = "error_propagation"
  window: int = 1
  noise: float = 0.0

  @property
  def key(self) -> str:
    short = {"error_propagation": "ep", "context_aware": "ca", "independent": "ind"}[self.strategy]
    return f"ws{self.w_s:g}-{short}-W{self.window}-p{self.noise:g}"


def variants(ablation: str) -> dict[str, Variant]:
  """Label -> Variant for one ablation (labels are what the plot legend shows)."""
  base = Variant()
  ablation = ALIASES.get(ablation, ablation)
  if ablation == "strategy":
    return {s.replace("_", " "): dataclasses.replace(base, strategy=s)
            for s in ("error_propagation", "context_aware", "independent")}
  if ablation == "w_s":
    return {f"w_s={v}": dataclasses.replace(base, w_s=float(v)) for v in FLAGS.w_s_values}
  if ablation == "window":
    return {f"W={v}": dataclasses.replace(base, window=int(v)) for v in FLAGS.windows}
  if ablation == "noise":
    return {f"p={v}": dataclasses.replace(base, noise=float(v)) for v in FLAGS.noise_values}
  if ablation == "stack":
    return {"global only": dataclasses.replace(base, w_s=0.0), "global + local": base}
  raise ValueError(f"unknown ablation {ablation!r}; valid: all, {', '.join(ABLATIONS)}, "
                   f"{', '.join(ALIASES)}")


def run_dir(variant: Variant, seed: int) -> str:
  return os.path.join(FLAGS.workdir, "runs", f"bot_grpo-{variant.key}-seed{seed}")


def train_config(seed: int, path: str):
  from botjax.testbeds import arith
  cfg = arith.quickstart_config("bot_grpo", seed=seed, workdir=path, steps=FLAGS.steps,
                                overrides=FLAGS.set)
  return dataclasses.replace(cfg, eval_every=FLAGS.eval_every)


def finished_seconds(variant: Variant, seed: int) -> float | None:
  """Wall time of a complete earlier run of this variant, seed and config, else None."""
  path = run_dir(variant, seed)
  return _cli.finished_seconds(path, train_config(seed, path))


def run_one(prepared, variant: Variant, seed: int) -> float:
  """Trains one run (from scratch: a half-finished run without checkpoints restarts)."""
  import shutil
  from botjax.testbeds import arith
  path = run_dir(variant, seed)
  if os.path.isdir(path):
    shutil.rmtree(path)
  cfg = train_config(seed, path)
  t0 = time.perf_counter()
  trainer = arith.make_trainer(prepared, cfg, w_s=variant.w_s, strategy=variant.strategy,
                               window=variant.window, noise=variant.noise,
                               run_config={"ablation_variant": dataclasses.asdict(variant)})
  try:
    trainer.run()
  finally:
    trainer.close()
  seconds = time.perf_counter() - t0
  _cli.save_seconds(path, seconds, trainer.cfg)   # the engine it ran ("auto" resolved)
  return seconds


def report(ablation: str) -> str | None:
  """Writes `<ablation>.png` and `<ablation>.md` from the finished runs; returns the table."""
  import numpy as np
  from botjax.train import report as report_lib
  from botjax.train.rundir import load_metrics
  runs, secs = {}, {}
  for label, v in variants(ablation).items():
    done = {s: t for s in range(FLAGS.seeds) if (t := finished_seconds(v, s)) is not None}
    if done:
      runs[label] = [load_metrics(run_dir(v, s)) for s in done]
      secs[label] = list(done.values())
  if not runs:
    return None
  start = float(np.mean([report_lib.series(r, "eval/accuracy")[1][0]
                         for recs in runs.values() for r in recs]))
  thresholds = [round(start + d, 2) for d in (0.05, 0.10, 0.15)]
  png = os.path.join(FLAGS.workdir, f"{ablation}.png")
  plt = plot_lib._pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  plot_lib.draw_metric(axes[0], runs, "eval/accuracy", thresholds=thresholds,
                       label="held-out accuracy", band="se")
  plot_lib.draw_metric(axes[1], runs, "reward_mean", label="mean reward", band="se",
                       smooth=REWARD_SMOOTHING)
  fig.suptitle(f"BoT-GRPO ablation: {TITLES[ablation]}\n(arithmetic task, CPU; mean of seeds "
               "± standard error)", fontsize=10)
  fig.tight_layout()
  fig.savefig(png, dpi=130)
  plt.close(fig)
  table = report_lib.summary_table(runs, thresholds=thresholds)
  rows = ["| variant | seeds | peak-to-final drop | run time per seed |", "|---|---|---|---|"]
  stability = {}
  for label, seeds in runs.items():
    drops, finals = [], []
    for recs in seeds:
      _, acc = report_lib.series(recs, "eval/accuracy")
      drops.append(float(acc.max() - acc[-1]))
      finals.append(float(acc[-1]))
    stability[label] = (finals, drops)
    t = secs.get(label) or [float("nan")]
    rows.append(f"| {label} | {len(seeds)} | {report_lib.mean_se(drops)} | "
                f"{np.mean(t):.0f} s |")
  if ablation == "noise":   # final accuracy and peak-to-final drop against the flip rate
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = np.arange(len(stability))
    for off, (i, name) in zip((-0.2, 0.2), enumerate(("final accuracy", "peak-to-final drop"))):
      vals = [np.asarray(v[i]) for v in stability.values()]
      ax.bar(xs + off, [v.mean() for v in vals], 0.4, capsize=3, label=name,
             yerr=[report_lib.standard_error(v) if v.size > 1 else 0.0 for v in vals])
    ax.set_xticks(xs, list(stability))
    ax.set_xlabel("probability p of flipping a step verdict")
    ax.set_title("Judge noise: flipped step verdicts (mean ± standard error over seeds)",
                 fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(FLAGS.workdir, "noise_stability.png"), dpi=130)
    plt.close(fig)
  md = os.path.join(FLAGS.workdir, f"{ablation}.md")
  first = next(iter(runs.values()))[0]
  problems = next((int(r["eval/num_problems"]) for r in first if "eval/num_problems" in r), "?")
  text = (f"# Ablation: {TITLES[ablation]}\n\nBoT-GRPO on the arithmetic task, {FLAGS.steps} "
          f"steps, held-out accuracy (avg@4, {problems} problems) every {FLAGS.eval_every} steps; "
          f"mean ± standard error over seeds. Thresholds: start + 0.05/0.10/0.15.\n\n{table}\n\n"
          + "\n".join(rows) + "\n")
  with open(md, "w") as f:
    f.write(text)
  print(f"wrote {png} and {md}", flush=True)
  return text


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from botjax import xla_cpu
  xla_cpu.tune_host_allocator()   # before any JAX work: reuse XLA:CPU buffers
  logging.set_verbosity(logging.WARNING)   # orbax and absl INFO noise
  names = list(ABLATIONS) if FLAGS.ablation == ["all"] else FLAGS.ablation
  bad = [a for a in names if a not in ABLATIONS and a not in ALIASES]
  if bad:
    print(f"error: --ablation={','.join(bad)} unknown; valid: all, {', '.join(ABLATIONS)} "
          f"(aliases: {', '.join(f'{k}={v}' for k, v in ALIASES.items())})", file=sys.stderr)
    sys.exit(2)
  names = list(dict.fromkeys(ALIASES.get(a, a) for a in names))
  try:
    i, n = (int(x) for x in FLAGS.shard.split("/"))
    assert 0 <= i < n
  except (ValueError, AssertionError):
    print(f"error: --shard={FLAGS.shard} must be i/n with 0 <= i < n", file=sys.stderr)
    sys.exit(2)
  todo = []                                  # unique (variant, seed) in a stable order
  for a in names:
    for v in variants(a).values():
      for s in range(FLAGS.seeds):
        if (v, s) not in todo:
          todo.append((v, s))
  mine = [x for j, x in enumerate(todo) if j % n == i]
  if not FLAGS.report_only:
    from botjax.testbeds import arith
    from botjax.train import config as config_lib
    setup = config_lib.apply_overrides(arith.ArithmeticSetup(), FLAGS.warm)
    prepared = arith.prepare(FLAGS.workdir, setup)
    left = [(v, s) for v, s in mine if finished_seconds(v, s) is None]
    print(f"[ablations] {len(todo)} runs in all for {names}; this shard ({i}/{n}): {len(mine)}, "
          f"{len(mine) - len(left)} already finished", flush=True)
    t_all = time.perf_counter()
    for k, (v, s) in enumerate(left):
      secs = run_one(prepared, v, s)
      print(f"[ablations] {k + 1}/{len(left)} {v.key} seed {s}: {secs:.0f} s "
            f"({time.perf_counter() - t_all:.0f} s so far)", flush=True)
  for a in names:
    text = report(a)
    if text:
      print(text)


if __name__ == "__main__":
  app.run(main)
