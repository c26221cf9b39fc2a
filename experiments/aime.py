r"""AIME with BoT-GRPO: the paper's recipe on a Hugging Face checkpoint.

  python experiments/aime.py --model=qwen2.5-3b --judge=http://127.0.0.1:8000/v1 --judge_model=J
  python experiments/aime.py --model=qwen2.5-3b --mesh=fsdp:8 --dry_run     # plan only, no weights
  python experiments/aime.py --model=qwen2.5-3b --algo=grpo --offline       # HF cache only
  python experiments/aime.py --model=tiny --steps=2 --warm=warm_steps=20     # CPU, end to end
  python experiments/aime.py --model=qwen2.5-3b --eval_only                  # Pass@k of the workdir

Defaults follow the BoT-GRPO paper (arXiv 2610.09804) where it gives a value: BoT-GRPO, 8 x 8,
lr 5e-7, w_g 3.0, w_s 0.5, error propagation, window 3, trained on the AIME 1983–2024 set (933
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
The sources of these defaults, and the settings in which the backbone recipes (bot_gspo,
bot_dapo, bot_pure) differ from bot_grpo beyond the credit step (KL, clip, aggregation), are in
docs/defaults.md. Errors a user can fix (missing weights, unreachable judge, bad --set) exit 2
without a traceback.
"""

import json
import os
import sys

from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _cli  # noqa: E402  experiments/_cli.py (this script's directory is on sys.path)
from _cli import UserError, user as _user  # noqa: E402

FLAGS = flags.FLAGS
_cli.define_run_flags("aime", workdir="runs/aime", eval_n=8,
                      eval_help="Pass@k, avg@n and maj@k on the held-out problems",
                      warm_help="ArithmeticSetup override, e.g. --warm=warm_steps=20.")
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
flags.DEFINE_string("judge", "", "Base URL of the step judge, e.g. http://HOST:8000/v1 "
                    "(--judge_api; default: none).")
flags.DEFINE_string("judge_model", "judge", "Model name sent to --judge.")
# w_g, w_s, error propagation and window 3: the paper's AIME reward (eq. 8; docs/defaults.md)
flags.DEFINE_float("w_g", 3.0, "Weight of answer correctness (BoT-GRPO eq. 8).")
flags.DEFINE_float("w_s", 0.5, "Weight of the step-level local reward.")
flags.DEFINE_string("strategy", "error_propagation", "Step-judging strategy (botjax.rewards.STRATEGIES).")
flags.DEFINE_integer("window", 3, "Steps per judged unit.")
JUDGE_PROMPTS = {"system": "the step judge's system prompt",
                 "user": "its user template ({problem}, {steps}; optional {context}, {verdicts}, "
                         "{first}, {last})"}
_cli.define_judge_flags(["judge"], JUDGE_PROMPTS)
flags.DEFINE_string("thinking", "auto", "Reasoning mode: auto (the model's default), on or off; "
                    "SmolLM3 switches with /think and /no_think, Phi-4-mini-reasoning always "
                    "thinks, Qwen2.5 never.")

KS = (1, 2, 4)   # Pass@k of the paper's AIME table (§4)


def train_config(tiny):
  """The paper's AIME recipe (docs/defaults.md gives each value's source), or the quick-start's
  CPU-sized settings for tiny; then the paper protocol and the user's flags (`_cli.paper_config`)."""
  from botjax.testbeds import arith
  from botjax.train import config as config_lib
  if tiny:
    cfg = arith.quickstart_config(FLAGS.algo, workdir=FLAGS.workdir, steps=FLAGS.steps)
  else:
    cfg = config_lib.TrainConfig(
        recipe=FLAGS.algo, steps=FLAGS.steps, workdir=FLAGS.workdir,
        # lr 5e-7 and 8 x 8 rollouts: the paper's AIME run (§4); the token budgets are botjax's
        # choice (the paper gives none): docs/defaults.md
        optim=config_lib.OptimConfig(learning_rate=5e-7),
        rollout=config_lib.RolloutConfig(prompts_per_step=8, group_size=8, max_prompt_tokens=384,
                                         max_new_tokens=1024),
        # fits a v5e-8 (16 GiB per chip, fsdp:8) and one 80 GB GPU: see --dry_run's plan;
        # scanned layers compile the 36-layer update 4-7x faster on CPU (docs/scaling.md)
        remat=True, micro_batch_size=8, scan_layers=True)
  return _cli.config_from_flags(cfg, FLAGS)


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


def make_eval_fn(records, correct_fn, prompt_fn, workdir, *, n):
  """`(trainer, step) -> metrics` that also appends them to the run's eval.json."""
  from botjax.rewards import answers_match, extract_answer
  from botjax.train.evaluate import evaluate
  from botjax.train.rundir import RunDir
  import jax
  run = RunDir(workdir)

  def fn(trainer, step):
    out = evaluate(trainer.engine, trainer.tokenizer, records, correct_fn=correct_fn,
                   n=n, key=jax.random.PRNGKey(1234), ks=KS, prompt_fn=prompt_fn,
                   answer_fn=extract_answer, answer_equal=lambda a, b: bool(answers_match(a, b)))
    out[f"avg@{n}"] = out["accuracy"]
    run.append_eval(step, out)
    shown = [k for k in sorted(out) if k.startswith(("pass@", "maj@"))]
    say(f"[aime] eval at step {step}: " + ", ".join(f"{k} {out[k]:.3f}" for k in shown)
          + f" ({out['num_problems']} problems; all figures in {run.eval_path})")
    return out
  return fn


def say(text):
  """Prints a line on the one process that writes (process 0 of a multi-process run)."""
  from botjax import distributed
  if distributed.is_writer():
    print(text, flush=True)


def _mesh_spec():
  """--mesh, checked against the cluster's devices (a clear error when it needs more)."""
  from botjax import distributed
  try:
    distributed.check_mesh(FLAGS.mesh)
  except distributed.ClusterError as e:
    raise UserError(f"--mesh={FLAGS.mesh}: {e}") from None
  return FLAGS.mesh


def _prepare_tiny(setup):
  """`arith.prepare` of the tiny warm start: built by process 0 while the others wait, then
  read by every process (a multi-process run shares its --workdir)."""
  from botjax import distributed
  from botjax.testbeds import arith
  if not distributed.is_multiprocess():
    return arith.prepare(FLAGS.workdir, setup)
  if distributed.is_writer():
    arith.prepare(FLAGS.workdir, setup)
  # the warm start's SFT takes minutes at the default setup: wait as long as the cluster would
  distributed.barrier("aime-warm-start", timeout_s=3600)
  return arith.prepare(FLAGS.workdir, setup, verbose=False)


def _check_same_config(run_config):
  """Every process of a multi-process run must run the same config (compared by hash)."""
  import jax

  from botjax import distributed
  try:
    digest = distributed.check_same_config(run_config)
  except distributed.ClusterError as e:
    raise UserError(f"--distributed: {e}") from None
  if distributed.is_multiprocess():
    say(f"[aime] {jax.process_count()} processes agree on the run config "
        f"(sha256 {digest[:12]})")


def build(cfg, tiny, data_spec):
  """(trainer kwargs) for the tiny arithmetic task or a real checkpoint on AIME problems."""
  from botjax import data, models
  from botjax.models.sharding import make_mesh
  from botjax.rewards import JudgeUnavailable, LLMStepJudge, MathReward, is_correct
  from botjax.testbeds import arith
  from botjax.testbeds.arith_judge import ExactArithmeticJudge
  from botjax.train.rollouts import ListPrompts
  if tiny:
    from botjax.train.config import apply_overrides
    setup = _user(lambda: apply_overrides(arith.ArithmeticSetup(), FLAGS.warm))
    prepared = _prepare_tiny(setup)
    say(f"[aime] warm start {prepared.checkpoint} ({'cached' if prepared.cached else 'built'})")
    # one device unless a mesh is asked for (--mesh, or a multi-process run: fsdp:-1 by default)
    mesh = make_mesh(_mesh_spec()) if FLAGS["mesh"].present or FLAGS.distributed else None
    ckpt, judge = prepared.checkpoint, ExactArithmeticJudge(seed=cfg.seed)
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
    prompts = _cli.judge_prompts(FLAGS.judge_prompt, JUDGE_PROMPTS)
    kwargs = {arg: prompts[key] for key, arg in (("system", "system_prompt"),
                                                 ("user", "user_template")) if key in prompts}
    judge = _user(lambda: LLMStepJudge(FLAGS.judge_model, api=FLAGS.judge_api,
                                       base_url=FLAGS.judge, **kwargs)) if FLAGS.judge else None
    if judge is not None:
      try:
        judge.check_reachable()
      except JudgeUnavailable as e:
        raise UserError(f"judge at {FLAGS.judge} is unreachable: {e}") from None
    train, evals = load_data(data_spec)
    say(f"[aime] data: {data_spec['source']}: {len(train)} train / {len(evals)} eval problems "
          f"({data_spec['split']})")
    ckpt = ckpt or checkpoint()
    mesh = make_mesh(_mesh_spec())
    from botjax.data import templates
    thinking = templates.parse_thinking(FLAGS.thinking)
    prompt_fn = lambda r: templates.chat_messages(  # noqa: E731
        r, data.MATH_TEMPLATE, thinking=thinking, model=FLAGS.model)
    correct_fn = lambda c, r: bool(is_correct(c, str(r["answer"])))  # noqa: E731
  evals = evals[:FLAGS.eval_limit] if FLAGS.eval_limit else evals
  reward = MathReward(judge, w_g=FLAGS.w_g, w_s=FLAGS.w_s, strategy=FLAGS.strategy,
                      window=FLAGS.window)
  # the recipe the trainer will run, checked against the reward before any weights are loaded
  _cli.run_recipe(cfg, reward.spec, hint="" if judge is not None else (
      f"\n(--algo={cfg.recipe} needs step verdicts from a judge: pass --judge=URL "
      "--judge_model=NAME (an OpenAI-compatible server such as vLLM or SGLang, or Anthropic's "
      "API with --judge_api=anthropic), or train a sequence-level recipe such as --algo=grpo)"))
  eval_fn = make_eval_fn(evals, correct_fn, prompt_fn, FLAGS.workdir, n=FLAGS.eval_n)
  model = models.load_pretrained(ckpt, mesh=mesh, scan_layers=bool(cfg.scan_layers))
  tok = models.load_tokenizer(ckpt)
  return dict(model=model, tokenizer=tok,
              prompts=ListPrompts(train, seed=cfg.seed), reward_fn=reward, prompt_fn=prompt_fn,
              eval_fn=eval_fn, mesh=mesh, checkpoint=ckpt, stop_token_ids=_cli.turn_end_ids(tok))


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
    _cli.print_settings("aime", FLAGS, (
        "model", "algo", "mesh", "checkpoint", "engine", "judge", "judge_api", "judge_model",
        "w_g", "w_s", "strategy", "window", "eval_n", "thinking", "offline"), cfg, out=say)
  say("[aime] data: " + json.dumps(data_spec, sort_keys=True, ensure_ascii=False))
  if FLAGS.dry_run:
    print(_cli.plan_text(FLAGS.model, FLAGS.mesh, cfg, FLAGS.device_memory))
    return
  if not FLAGS.eval_only:
    _cli.refuse_rerun(cfg.workdir, FLAGS.resume)
  from botjax.train.loop import RLTrainer
  run_config = {"train": config_lib.to_dict(cfg), "model": FLAGS.model, "data": data_spec,
                "reward": {f: FLAGS[f].value for f in ("w_g", "w_s", "strategy", "window",
                                                        "judge_model")}}
  _check_same_config(run_config)
  kwargs = build(cfg, tiny, data_spec)
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
