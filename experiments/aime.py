r"""AIME with BoT-GRPO: the paper's recipe on a Hugging Face checkpoint.

  python experiments/aime.py --model=qwen2.5-3b --judge=http://127.0.0.1:8000/v1 --judge_model=J
  python experiments/aime.py --model=qwen2.5-3b --mesh=fsdp:8 --dry_run     # plan only, no weights
  python experiments/aime.py --model=qwen2.5-3b --algo=grpo --offline       # HF cache only
  python experiments/aime.py --model=tiny --steps=2 --warm=warm_steps=20     # CPU, end to end
  python experiments/aime.py --model=qwen2.5-3b --eval_only                  # Pass@k of the workdir

Defaults follow the BoT-GRPO paper (arXiv 2610.09804): BoT-GRPO, 8 prompts x 8 samples, lr 5e-7,
w_g 3.0, w_s 0.5, error propagation, window 3, trained on the AIME 1983–2024 problem set (933
problems, Hugging Face Hub dataset di-zhang-fdu/AIME_1983_2024) with a seeded random 80/20
train/eval split (--split=year holds out --eval_years instead). The weights are
botjax.models.HF_REPOS[--model] (or --checkpoint=DIR); weights and data missing from the HF cache
are downloaded into it, unless --offline or HF_HUB_OFFLINE=1. The data source and split a run
used are printed and saved with its config. `--model=tiny` instead builds (or reuses) the
arithmetic warm start under --workdir (`botjax.testbeds.arith.prepare`, shrink it with --warm)
and judges steps exactly (ExactArithmeticJudge), with the quick-start's CPU-sized settings. A run
resumes from its workdir; --resume=false refuses a workdir that already holds a run. Pass@k
(k = 1, 2, 4), avg@n and maj@k go to `<workdir>/eval.json` every --eval_every steps, after
training, and with --eval_only.
Errors a user can fix (missing weights, unreachable judge, bad --set) exit 2 without a traceback.
"""

import dataclasses
import json
import os
import sys

from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _cli  # noqa: E402  experiments/_cli.py (this script's directory is on sys.path)
from _cli import UserError, user as _user  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "qwen2.5-3b", "Preset of botjax.models.PRESETS, or `tiny` (CPU).")
flags.DEFINE_string("algo", "bot_grpo", "Recipe of botjax.algorithms.RECIPES.")
flags.DEFINE_string("mesh", "fsdp:-1", "Mesh spec, e.g. fsdp:8 or data:2,fsdp:4 (-1: the rest).")
flags.DEFINE_string("checkpoint", "", "Local HF checkpoint dir (default: HF_REPOS[model], from the "
                    "HF cache or downloaded into it; --offline: cache only).")
flags.DEFINE_string("train_data", "hf:di-zhang-fdu/AIME_1983_2024", "botjax.data.load_source spec "
                    "of the problems (default: AIME 1983-2024; builtin:aime_sample is a 15-problem "
                    "sample for tests; unused with --model=tiny).")
flags.DEFINE_string("eval_data", "", "load_source spec of eval problems (default: split "
                    "--train_data by --split).")
flags.DEFINE_enum("split", "random", ["random", "year"], "Train/eval split of --train_data: a "
                  "seeded random split (--eval_fraction, --split_seed) or by year (--eval_years).")
flags.DEFINE_float("eval_fraction", 0.2, "--split=random: share of problems held out for eval.")
flags.DEFINE_integer("split_seed", 0, "--split=random: seed of the split.")
flags.DEFINE_list("eval_years", ["2024", "2025"], "--split=year: years held out for eval.")
flags.DEFINE_string("judge", "", "OpenAI-compatible base URL of the step judge (default: none).")
flags.DEFINE_string("judge_model", "judge", "Model name sent to --judge.")
flags.DEFINE_integer("steps", 200, "RL steps.")
flags.DEFINE_string("workdir", "runs/aime", "Output dir: checkpoints, metrics.jsonl, eval.json.")
flags.DEFINE_bool("resume", True, "Resume from --workdir; false refuses a workdir holding a run.")
flags.DEFINE_multi_string("set", [], "TrainConfig override, e.g. --set=rollout.group_size=4.")
flags.DEFINE_multi_string("warm", [], "tiny only: ArithmeticSetup override, e.g. --warm=warm_steps=20.")
flags.DEFINE_bool("eval_only", False, "Only evaluate (the latest checkpoint in --workdir, if any).")
flags.DEFINE_integer("eval_every", 10, "Evaluate every N steps (0: only after training).")
flags.DEFINE_integer("eval_n", 8, "Samples per eval problem (avg@n, pass@k, maj@k).")
flags.DEFINE_integer("eval_limit", 0, "Evaluate only the first N problems (0: all).")
flags.DEFINE_float("w_g", 3.0, "Weight of answer correctness (BoT-GRPO eq. 8).")
flags.DEFINE_float("w_s", 0.5, "Weight of the step-level local reward.")
flags.DEFINE_string("strategy", "error_propagation", "Step-judging strategy (botjax.rewards.STRATEGIES).")
flags.DEFINE_integer("window", 3, "Steps per judged unit.")
flags.DEFINE_bool("dry_run", False, "Print the config and the memory/FLOPs plan, then exit.")
_cli.define_distributed_flags()
_cli.define_memory_flags()
_cli.define_offline_flag()
_cli.define_verbose_flag()
flags.DEFINE_string("thinking", "auto", "Reasoning mode: auto (the model's default), on or off; "
                    "SmolLM3 switches with /think and /no_think, Phi-4-mini-reasoning always "
                    "thinks, Qwen2.5 never.")

KS = (1, 2, 4)



def train_config(tiny):
  from botjax.testbeds import arith
  from botjax.train import config as config_lib
  if tiny:
    cfg = arith.quickstart_config(FLAGS.algo, workdir=FLAGS.workdir, steps=FLAGS.steps)
  else:
    cfg = config_lib.TrainConfig(
        recipe=FLAGS.algo, steps=FLAGS.steps, workdir=FLAGS.workdir,
        optim=config_lib.OptimConfig(learning_rate=5e-7),
        rollout=config_lib.RolloutConfig(prompts_per_step=8, group_size=8, max_prompt_tokens=384,
                                         max_new_tokens=1024),
        # fits a v5e-8 (16 GiB per chip, fsdp:8) and one 80 GB GPU: see --dry_run's plan;
        # scanned layers compile the 36-layer update 4-7x faster on CPU (docs/scaling.md)
        remat=True, micro_batch_size=8, scan_layers=True)
  from botjax import algorithms
  # The paper's GRPO: eq. 1's population std in every group z-score (algorithms.PAPER_PROTOCOL),
  # so that BoT-GRPO with w_s = 0 is exactly GRPO; --set=recipe.grpo_ddof=1 for Bessel's.
  overrides = {**dict(algorithms.PAPER_PROTOCOL), **dict(cfg.recipe_overrides)}
  cfg = dataclasses.replace(cfg, eval_every=FLAGS.eval_every,
                            recipe_overrides=tuple(overrides.items()))
  return config_lib.apply_overrides(_cli.memory_settings(cfg, FLAGS), FLAGS.set)


def data_config(tiny):
  """Which problems a run trains and evaluates on, and how they are split (printed and saved)."""
  if tiny:
    return {"source": "arithmetic testbed (botjax.testbeds.arith, its own train/eval problems)"}
  from botjax import data
  out = {"train_data": FLAGS.train_data, "source": data.describe_source(FLAGS.train_data)}
  if FLAGS.eval_data:
    out.update(eval_data=FLAGS.eval_data, eval_source=data.describe_source(FLAGS.eval_data),
               split=f"none: train on all of {FLAGS.train_data}, evaluate on {FLAGS.eval_data}")
  elif FLAGS.split == "random":
    f = FLAGS.eval_fraction
    if not 0.0 < f < 1.0:
      raise ValueError(f"--eval_fraction={f}: must lie strictly between 0 and 1")
    out.update(split=f"random {round(100 * (1 - f))}/{round(100 * f)} train/eval, seed "
                     f"{FLAGS.split_seed}", eval_fraction=f, split_seed=FLAGS.split_seed)
  else:
    years = [int(y) for y in FLAGS.eval_years]
    out.update(split=f"by year: eval years {years}", eval_years=years)
  return out


def load_data(spec):
  """(train, eval) records as `spec` (from `data_config`) says; adds their counts to `spec`."""
  from botjax import data
  offline = True if FLAGS.offline else None

  def load(source):
    try:
      return _user(lambda: data.load_source(source, offline=offline))
    except (RuntimeError, ImportError) as e:
      raise UserError(f"{e}\n(--train_data / --eval_data choose the problems: a local .csv, "
                      f".jsonl, .json or .parquet file works without the Hub.)") from None
  records = load(spec["train_data"])
  if "eval_data" in spec:
    train, evals = records, load(spec["eval_data"])
  elif "split_seed" in spec:
    train, evals = data.split_random(records, spec["eval_fraction"], seed=spec["split_seed"])
  else:
    train, evals = _user(lambda: data.split_by_year(records, spec["eval_years"]))
  if not train or not evals:
    raise UserError(f"the split of {spec['train_data']} ({spec['split']}) leaves {len(train)} "
                    f"train and {len(evals)} eval problems; both need at least one")
  spec.update(num_problems=len(records), num_train=len(train), num_eval=len(evals))
  return train, evals


def make_eval_fn(records, correct_fn, prompt_fn, workdir):
  """`(trainer, step) -> metrics` that also appends them to the run's eval.json."""
  from botjax.rewards import answers_match, extract_answer
  from botjax.train.evaluate import evaluate
  from botjax.train.rundir import RunDir
  import jax
  run = RunDir(workdir)

  def fn(trainer, step):
    out = evaluate(trainer.engine, trainer.tokenizer, records, correct_fn=correct_fn,
                   n=FLAGS.eval_n, key=jax.random.PRNGKey(1234), ks=KS, prompt_fn=prompt_fn,
                   answer_fn=extract_answer, answer_equal=lambda a, b: bool(answers_match(a, b)))
    out[f"avg@{FLAGS.eval_n}"] = out["accuracy"]
    run.append_eval(step, out)
    shown = [k for k in sorted(out) if k.startswith(("pass@", "maj@"))]
    print(f"[aime] eval at step {step}: " + ", ".join(f"{k} {out[k]:.3f}" for k in shown)
          + f" ({out['num_problems']} problems; all figures in {run.eval_path})", flush=True)
    return out
  return fn


def build(cfg, tiny, data_spec):
  """(trainer kwargs) for the tiny arithmetic task or a real checkpoint on AIME problems."""
  from botjax import data, models
  from botjax.models.sharding import make_mesh
  from botjax.rewards import (ExactArithmeticJudge, JudgeUnavailable, MathReward, OpenAIStepJudge,
                              is_correct)
  from botjax.testbeds import arith
  from botjax.train.rollouts import ListPrompts
  if tiny:
    from botjax.train.config import apply_overrides
    setup = _user(lambda: apply_overrides(arith.ArithmeticSetup(), FLAGS.warm))
    prepared = arith.prepare(FLAGS.workdir, setup)
    print(f"[aime] warm start {prepared.checkpoint} ({'cached' if prepared.cached else 'built'})")
    ckpt, mesh, judge = prepared.checkpoint, None, ExactArithmeticJudge(seed=cfg.seed)
    train, evals = prepared.train, prepared.eval
    prompt_fn, correct_fn = arith.prompt_messages, arith.correct_fn
  else:
    # Cheapest checks first: a local --checkpoint, the judge, the problems (a small download),
    # then the weights from the Hub (from the cache, or a download of gigabytes).
    def checkpoint():
      return _cli.checkpoint_dir(FLAGS.checkpoint, FLAGS.model, models.HF_REPOS.get(FLAGS.model),
                                 offline=FLAGS.offline)
    local = FLAGS.checkpoint and (os.path.isdir(os.path.expanduser(FLAGS.checkpoint))
                                  or models.weights.looks_like_path(FLAGS.checkpoint))
    ckpt = checkpoint() if local else None
    judge = OpenAIStepJudge(FLAGS.judge_model, base_url=FLAGS.judge) if FLAGS.judge else None
    if judge is not None:
      try:
        judge.check_reachable()
      except JudgeUnavailable as e:
        raise UserError(f"judge at {FLAGS.judge} is unreachable: {e}") from None
    train, evals = load_data(data_spec)
    print(f"[aime] data: {data_spec['source']}: {len(train)} train / {len(evals)} eval problems "
          f"({data_spec['split']})", flush=True)
    ckpt = ckpt or checkpoint()
    mesh = make_mesh(FLAGS.mesh)
    from botjax.data import templates
    thinking = templates.parse_thinking(FLAGS.thinking)
    prompt_fn = lambda r: templates.chat_messages(  # noqa: E731
        r, data.MATH_TEMPLATE, thinking=thinking, model=FLAGS.model)
    correct_fn = lambda c, r: bool(is_correct(c, str(r["answer"])))  # noqa: E731
  from botjax import algorithms   # check the recipe against the reward before loading weights
  recipe = _user(lambda: algorithms.get_recipe(cfg.recipe, **dict(cfg.recipe_overrides),
                                               max_new_tokens=cfg.rollout.max_new_tokens))
  if judge is None and recipe.granularity is not algorithms.Granularity.SEQUENCE:
    raise UserError(f"--algo={cfg.recipe} needs step verdicts from a judge: pass --judge=URL "
                    f"--judge_model=NAME (any OpenAI-compatible server, e.g. vLLM or SGLang), or "
                    f"train a sequence-level recipe such as --algo=grpo")
  evals = evals[:FLAGS.eval_limit] if FLAGS.eval_limit else evals
  reward = MathReward(judge, w_g=FLAGS.w_g, w_s=FLAGS.w_s, strategy=FLAGS.strategy,
                      window=FLAGS.window)
  eval_fn = make_eval_fn(evals, correct_fn, prompt_fn, FLAGS.workdir)
  model = models.load_pretrained(ckpt, mesh=mesh, scan_layers=bool(cfg.scan_layers))
  return dict(model=model, tokenizer=models.load_tokenizer(ckpt),
              prompts=ListPrompts(train, seed=cfg.seed), reward_fn=reward, prompt_fn=prompt_fn,
              eval_fn=eval_fn, mesh=mesh, checkpoint=ckpt)




def run():
  tiny = FLAGS.model == "tiny"
  _cli.start_distributed(FLAGS)
  from botjax import models
  from botjax.train import config as config_lib
  _user(lambda: models.get_config(FLAGS.model))
  from botjax.data import templates
  _user(lambda: templates.check_thinking(FLAGS.model, templates.parse_thinking(FLAGS.thinking)))
  cfg = _user(lambda: train_config(tiny))
  data_spec = _user(lambda: data_config(tiny))
  if FLAGS.verbose or FLAGS.dry_run:    # always saved in <workdir>/config.json
    print("[aime] flags: " + json.dumps({f: FLAGS[f].value for f in (
        "model", "algo", "mesh", "checkpoint", "judge", "judge_model", "w_g", "w_s", "strategy",
        "window", "eval_n", "thinking", "offline")}, sort_keys=True))
    print("[aime] train config: " + json.dumps(config_lib.to_dict(cfg), sort_keys=True))
  print("[aime] data: " + json.dumps(data_spec, sort_keys=True, ensure_ascii=False), flush=True)
  if FLAGS.dry_run:
    print(_cli.plan_text(FLAGS.model, FLAGS.mesh, cfg, FLAGS.device_memory))
    return
  if not FLAGS.eval_only:
    _cli.refuse_rerun(cfg.workdir, FLAGS.resume)
  from botjax.train.loop import RLTrainer
  kwargs = build(cfg, tiny, data_spec)
  run_config = {"train": config_lib.to_dict(cfg), "model": FLAGS.model, "data": data_spec,
                "reward": {f: FLAGS[f].value for f in ("w_g", "w_s", "strategy", "window",
                                                        "judge_model")}}
  trainer = _user(lambda: RLTrainer(cfg, run_config=run_config, **kwargs))
  try:
    if not FLAGS.eval_only:
      trainer.run()
    if FLAGS.eval_only or not cfg.eval_every:
      trainer.eval_fn(trainer, trainer.host_step)
  finally:
    trainer.close()


if __name__ == "__main__":
  _cli.entry(__doc__, run)
