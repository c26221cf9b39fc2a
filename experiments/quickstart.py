r"""The embedded CPU quick-start: GRPO vs BoT-GRPO on the step-verified arithmetic task.

  python experiments/quickstart.py                        # grpo,bot_grpo, 1 seed (minutes on 2 cores)
  python experiments/quickstart.py --algos=grpo,bot_grpo,dapo,gspo,pure,dr_grpo,rloo,reco,bppo,verigate --seeds=3

  python experiments/quickstart.py --algos=dapo,gspo,reco --mini_batches=4   # off-policy updates
  python experiments/quickstart.py --algos=bot_grpo,bot_grpo_token,bot_grpo_row,grpo_stepmean \
      --lrs=3e-5,5e-5,1e-4 --seeds=3 --mini_batches=4     # the 1/L_k weighting (docs/quickstart.md)
  .venv-vllm/bin/python experiments/quickstart.py --algos=bot_grpo --engine=vllm \
      --warm=num_heads=3 --warm=num_kv_heads=1 --workdir=runs/quickstart-vllm   # vLLM generating

Writes to --workdir: the cached warm start, per-run metrics JSONL, `quickstart.png` (held-out
accuracy, and mean reward as a rolling mean over 10 steps, against step; mean over seeds with a
± standard-error band; split into step-reading and sequence-only panels beyond five recipes) and
`quickstart.md` (start / final / best accuracy as mean ± standard error over seeds, steps to
accuracy thresholds, Welch tests of the --contrasts with Holm-corrected p-values, the update
schedule and which mechanisms it left inert, and the numerics environment). With --lrs the rate
is chosen on seed 0 and the table reports seeds 1..N. Wiring only: the pipeline lives in `botjax.testbeds.arith`.
"""

import json
import os
import shutil
import sys
import time

from absl import flags, logging

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _cli  # noqa: E402  experiments/_cli.py (this script's directory is on sys.path)
from botjax import plotting  # noqa: E402
from botjax import xla_cpu  # noqa: E402
from botjax.testbeds import arith  # noqa: E402
from botjax.train import report  # noqa: E402
from botjax.train import config as config_lib  # noqa: E402
from botjax.train.rundir import load_metrics  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("algos", ["grpo", "bot_grpo"], "Recipes of botjax.algorithms to compare.")
flags.DEFINE_integer("seeds", 1, "Seeds per recipe.")
flags.DEFINE_integer("steps", 200, "RL steps per run (the docs' ten-recipe comparison used 120).")
flags.DEFINE_string("workdir", "runs/quickstart", "Output directory (warm start is cached here).")
flags.DEFINE_float("w_s", 0.5, "Weight of the step-level local reward (BoT-GRPO eq. 4/8).")
flags.DEFINE_float("judge_noise", 0.0, "Probability of flipping each step verdict.")
flags.DEFINE_integer("mini_batches", 1, "Optimizer updates per pass over each rollout batch "
                     "(TrainConfig.mini_batches); with 1 (and ppo_epochs=1) the PPO ratio is 1.")
flags.DEFINE_multi_string("set", [], "TrainConfig override, e.g. --set=optim.learning_rate=1e-3.")
flags.DEFINE_multi_string("warm", [], "ArithmeticSetup override, e.g. --warm=warm_steps=100.")
flags.DEFINE_string("engine", "auto", "Rollout engine of the runs and their evaluations: a name "
                    "of botjax.sampling.ENGINES (jax: botjax's sampler; slots: botjax's "
                    "continuous-batching engine; vllm: vLLM in this process, from "
                    "scripts/setup_vllm.sh's environment; auto: the faster of jax and slots "
                    "where measured: slots for the quick-start's 64-token budget on a small CPU "
                    "host, jax on GPU, TPU and several devices; docs/scaling.md).")
flags.DEFINE_list("lrs", [], "Learning rates to sweep, e.g. 3e-5,5e-5,1e-4,2e-4: every recipe runs "
                  "each on seed 0 (the selection seed), and its best (mean of its last five "
                  "held-out evaluations) runs on --seeds other seeds (1..N), so that the "
                  "reported means do not contain the run that chose the rate. Empty: every "
                  "recipe at the config's 3e-4 on seeds 0..N-1.")
flags.DEFINE_list("contrasts", [], "Pairs a:b of recipes whose difference is tested (Welch, Holm-"
                  "corrected over the pairs), e.g. bot_grpo:grpo. Empty: every recipe against the "
                  "first of --algos.")
flags.DEFINE_bool("report_only", False, "Only write the plot and table of the finished runs.")
flags.DEFINE_bool("fresh", False, "Delete earlier runs of these recipes instead of reusing finished ones.")


def recipe_flags(algo: str) -> list[str]:
  """Recipe overrides of this comparison: the step-mean control weighs the mean step verdict by
  the reward's --w_s (3·correct + format + w_s·mean verdict), as BoT-GRPO's local term does."""
  return [f"recipe.w_local={FLAGS.w_s!r}"] if algo == "grpo_stepmean" else []


def nondefault_settings(env: dict) -> str:
  """The settings of `xla_cpu.numerics_environment()` that differ from a plain user's shell
  (XLA_FLAGS set, the tuning switch not 'auto', more than one device), or ""."""
  out = [f"XLA_FLAGS={env['XLA_FLAGS']!r}"] if env["XLA_FLAGS"] else []
  if env[xla_cpu.ENV_VAR] != "auto":
    out.append(f"{xla_cpu.ENV_VAR}={env[xla_cpu.ENV_VAR]}")
  if env["devices"] != 1:
    out.append(f"{env['devices']} devices")
  return ", ".join(out)


def environment_note(env: dict) -> str:
  """The numerics environment of the runs, for the results file: the figures depend on it."""
  return ("Numerics environment (the figures depend on it; `environment.json`): "
          + ", ".join(f"{k} {v!r}" if isinstance(v, str) else f"{k} {v}" for k, v in env.items())
          + ".")


def inert_mechanisms(schedule: set[tuple[int, int]]) -> str:
  """The update schedule of the runs {(ppo_epochs, mini_batches)} and, when every run made one
  on-policy update per rollout batch, the mechanisms that acted on nothing."""
  text = "Update schedule: " + "; ".join(f"ppo_epochs={e}, mini_batches={m}"
                                          for e, m in sorted(schedule)) + "."
  if schedule == {(1, 1)}:
    text += (" One on-policy update per rollout batch, so the PPO ratio is exactly 1: clip-higher "
             "(DAPO), sequence clipping (GSPO) and ReCo's variance ratio had nothing to act on.")
  return text


def sweep_table(sweep: dict[str, dict[float, float]], lrs: list[float],
                best_lr: dict[str, float | None]) -> str:
  """Markdown table of the learning-rate sweep: per recipe, the mean of the last five held-out
  evaluations of seed 0 at each learning rate; the recipe's best (`best_lr`, the one it ran on
  every seed) in bold."""
  rows = ["| recipe | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |",
          "|---|" + "---|" * len(lrs)]
  for algo, acc in sweep.items():
    best = best_lr[algo]
    cells = [("—" if lr not in acc else f"**{acc[lr]:.3f}**" if lr == best else f"{acc[lr]:.3f}")
             for lr in lrs]
    rows.append(f"| {algo} | " + " | ".join(cells) + " |")
  return ("Learning-rate sweep (seed 0; mean held-out accuracy of the last five evaluations; "
          "bold: the rate each recipe ran on every seed):\n\n" + "\n".join(rows))


def check_vllm_head_size(setup) -> None:
  """A UserError before the warm start when vLLM's CPU attention has no kernels for the tiny
  model's head size (the default's is 96 / 4 = 24)."""
  from botjax.sampling import vllm
  head = setup.hidden_size // setup.num_heads
  if not vllm._has_cuda() and head not in vllm.CPU_HEAD_SIZES:
    raise _cli.UserError(
        f"--engine=vllm: the tiny model's head size is {head} (hidden_size {setup.hidden_size} / "
        f"num_heads {setup.num_heads}) and vLLM's CPU attention supports "
        f"{', '.join(map(str, vllm.CPU_HEAD_SIZES))}; e.g. --warm=num_heads=3 "
        f"--warm=num_kv_heads=1 (head size 32)")


def main(argv):
  del argv
  xla_cpu.tune_host_allocator()   # before any JAX work: reuse XLA:CPU buffers
  logging.set_verbosity(logging.WARNING)   # orbax logs every checkpoint operation at INFO
  for c in FLAGS.contrasts:
    a, sep, b = c.partition(":")
    if not sep or a not in FLAGS.algos or b not in FLAGS.algos or a == b:
      raise _cli.UserError(f"--contrasts: {c!r} is not a:b with two different recipes of --algos "
                           f"({','.join(FLAGS.algos)})")
  engine = _cli.check_engine(FLAGS.engine)
  setup = config_lib.apply_overrides(arith.ArithmeticSetup(), FLAGS.warm)
  if engine == "vllm":
    check_vllm_head_size(setup)
  t_start = time.perf_counter()
  env = xla_cpu.numerics_environment()
  os.makedirs(FLAGS.workdir, exist_ok=True)
  with open(os.path.join(FLAGS.workdir, "environment.json"), "w") as f:
    json.dump(env, f, indent=2)
  if unusual := nondefault_settings(env):
    print(f"note: {unusual}: the figures will differ from the documented ones (docs/quickstart.md)",
          flush=True)
  prepared = arith.prepare(FLAGS.workdir, setup)
  print(f"warm start: {prepared.checkpoint} ({'cached' if prepared.cached else 'built'} in "
        f"{prepared.seconds:.1f} s)", flush=True)
  timings, schedule = {}, set()

  def run(algo: str, seed: int, lr: float | None) -> list[dict] | None:
    """Trains (or reuses) one run and returns its metrics records; None if left out."""
    name = f"{algo}-seed{seed}" if lr is None else f"{algo}-lr{lr:.0e}-seed{seed}"
    workdir = os.path.join(FLAGS.workdir, name)
    if FLAGS.fresh and os.path.isdir(workdir) and name not in timings:
      shutil.rmtree(workdir)
    lr_flags = [] if lr is None else [f"optim.learning_rate={lr!r}"]
    cfg = arith.quickstart_config(algo, seed=seed, workdir=workdir, steps=FLAGS.steps,
                                  overrides=[f"rollout.engine={engine}", *recipe_flags(algo),
                                             f"mini_batches={FLAGS.mini_batches}", *FLAGS.set,
                                             *lr_flags])
    schedule.add((cfg.ppo_epochs, cfg.mini_batches))
    done = _cli.finished_seconds(workdir, cfg)
    if done is not None:       # e.g. trained by another process: --algos=a,b & --algos=c,d
      if name not in timings:
        print(f"{name}: finished earlier ({done:.0f} s), reusing it", flush=True)
      timings[name] = done
    elif FLAGS.report_only:
      print(f"{name}: not finished, left out of the report", flush=True)
      return None
    else:
      if os.path.isdir(workdir) and not os.path.isdir(os.path.join(workdir, "checkpoints")):
        shutil.rmtree(workdir)   # a partial run without checkpoints (the default) starts over
      t0 = time.perf_counter()
      trainer = arith.make_trainer(prepared, cfg, w_s=FLAGS.w_s, noise=FLAGS.judge_noise)
      try:
        trainer.run()
      finally:
        trainer.close()
      timings[name] = time.perf_counter() - t0
      _cli.save_seconds(workdir, timings[name], trainer.cfg)   # "auto" resolved
      print(f"{name}: {timings[name]:.0f} s", flush=True)
    return load_metrics(workdir)

  lrs = [float(x) for x in FLAGS.lrs]
  best_lr: dict[str, float | None] = {algo: None for algo in FLAGS.algos}
  sweep: dict[str, dict[float, float]] = {}
  for algo in FLAGS.algos:               # the sweep: every learning rate on seed 0
    sweep[algo] = {}
    for lr in lrs:
      recs = run(algo, 0, lr)
      if recs is not None:
        sweep[algo][lr] = report.last_mean(recs, "eval/accuracy", 5)
    if sweep[algo]:
      best_lr[algo] = max(sweep[algo], key=sweep[algo].get)
  runs, labels = {}, {}
  for algo in FLAGS.algos:
    if lrs and best_lr[algo] is None:
      continue                           # no sweep run of this recipe has finished
    label = algo if best_lr[algo] is None else f"{algo} (lr {best_lr[algo]:g})"
    labels[algo] = label
    seeds = range(1, FLAGS.seeds + 1) if lrs else range(FLAGS.seeds)   # selection seed 0 apart
    runs[label] = [r for seed in seeds if (r := run(algo, seed, best_lr[algo])) is not None]
  base = [r for recs in runs.values() for r in recs]
  start = next((r["eval/accuracy"] for recs in base for r in recs if "eval/accuracy" in r), 0.0)
  thresholds = [round(start + d, 2) for d in (0.10, 0.15, 0.25)]
  png = plotting.plot_runs(runs, os.path.join(FLAGS.workdir, "quickstart.png"),
                           title="Arithmetic quick-start (tiny Qwen2, CPU)", thresholds=thresholds,
                           band="se")
  table = report.summary_table(runs, thresholds=thresholds)
  pairs = ([tuple(c.split(":", 1)) for c in FLAGS.contrasts] if FLAGS.contrasts else
           [(a, FLAGS.algos[0]) for a in FLAGS.algos[1:]])
  tests = report.contrast_table(runs, [(labels[a], labels[b]) for a, b in pairs
                                       if a in labels and b in labels])
  ranking = report.ranking_note(runs)
  total = time.perf_counter() - t_start
  inert = inert_mechanisms(schedule)
  md = os.path.join(FLAGS.workdir, "quickstart.md")
  with open(md, "w") as f:
    f.write(f"# Quick-start results\n\nHeld-out accuracy (avg@4 of sampled completions, "
            f"{len(prepared.eval)} problems); thresholds are the warm start's accuracy "
            f"+0.10/+0.15/+0.25.\n\n{table}\n\n{inert}\n\nWall time of this call: {total:.0f} s "
            f"(warm start {prepared.seconds:.0f} s); run times (each measured when it ran), "
            f"sum {sum(timings.values()):.0f} s: "
            + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()) + ".\n")
    if FLAGS.seeds >= 2:
      f.write(f"\n{tests}\n\n{ranking}\n")
    if lrs:
      f.write("\n" + sweep_table(sweep, lrs, best_lr) + f"\n\nThe rate was chosen on seed 0; the "
              f"table above reports seeds 1–{FLAGS.seeds}, which took no part in the choice.\n")
    f.write(f"\n{environment_note(env)}\n")
  print(table)
  if FLAGS.seeds >= 2:
    print(tests)
    print(ranking)
  if lrs:
    print(sweep_table(sweep, lrs, best_lr))
  print(inert)
  print(f"wrote {png} and {md} in {total:.0f} s")


if __name__ == "__main__":
  _cli.entry(__doc__, lambda: main(None))
