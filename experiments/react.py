r"""React code generation with BoT-GRPO: the paper's first experiment (training and compile rate;
the pairwise win rates are experiments/react_compare.py).

  python experiments/react.py --judge=http://HOST:8000/v1 --judge_model=J \
      --vlm_judge=http://HOST:8001/v1 --vlm_judge_model=V            # the paper's React run
  python experiments/react.py --mesh=fsdp:8 --dry_run                  # plan, no weights
  python experiments/react.py --judges=off                             # deviation: no judges
  python experiments/react.py --model=tiny --steps=2 --judges=off      # CPU, end to end
  python experiments/react.py --eval_only --workdir=runs/react         # compile rate

Defaults follow the paper (BoT-GRPO, arXiv 2610.09804, §4.1; the source of every default is in
docs/defaults.md): the policy Qwen2.5-3B, the base (non-reasoning) model `Qwen/Qwen2.5-3B`,
prompted through its tokenizer's chat template; BoT-GRPO, 8 prompts x 8 rollouts per step; the
global reward of all four signals of §4.1: compile / render failure (−1), the ESLint score, the
LLM code judge (--judge) and the VLM screenshot judge (--vlm_judge). `--judges=all` (the default)
refuses to train without both judges; `--judges=code` (no VLM judge: the paper's minimal recipe)
and `--judges=off` (compiler and ESLint only, which the paper found reward-hackable) are named
deviations, printed at the start and saved in config.json. Line-level local penalties (compiler,
ESLint, judge lines) are spread over tokens with φ(d) = max(0, 1 − d/4). Prompts: the built-in
set split 80/20 within each category (`botjax.rewards.react.split_prompts`; --prompts for your
own). A blank page is not a render failure (--blank_is_failure makes it one).
The paper's baselines on its common backbone are --algo=grpo, bot_gspo, bot_dapo and bot_pure;
beyond the credit step they keep their own settings (bot_grpo and bot_pure: KL 0.04, clip
0.2 / 0.2; bot_gspo: KL 0, clip 3e-4 / 4e-4; bot_dapo: KL 0, clip 0.2 / 0.28, token-mean,
dynamic sampling), so a comparison of them compares those too (docs/defaults.md).
Step-level recipes (--algo=pure, verigate, process_grpo) read the same penalties per
blank-line-separated block of the completion (`botjax.rewards.react.penalties.step_spans_of`).
Model-written code is compiled, linted and rendered by the pinned Node toolchain and headless
Chromium in sandboxed workers (`botjax.rewards.react`), never in this process.

Outputs in --workdir: checkpoints/, metrics.jsonl (reward components as reward/compile,
reward/render, reward/lint, reward/judge, reward/vlm), eval.json every --eval_every steps with
compile_rate.png (compile rate on held-out prompts: transpiles and renders, a blank page counted,
as in the paper; visible_rate: renders something visible), judges.json (the training judges), and
hf_final/ (the trained policy as a Hugging Face checkpoint, for react_compare.py). Keep more
checkpoints for react_compare.py's curves with --set=checkpoint_every=N --set=keep_checkpoints=M.

`--model=tiny` builds (or reuses) a tiny model warm-started on template components
(`botjax.testbeds.react_tiny`; shrink it with --warm); its samples seldom make good apps, but every
reward component, the sandbox and the line -> token mapping run for real. Errors a user can fix
(missing weights, toolchain, unreachable judge, bad flags) exit 2 with what to do, and are checked
before any expensive work (the warm start, loading weights). $BOTJAX_REACT_TOOLCHAIN points at
another copy of the Node toolchain directory.
"""

import os
import sys
import time

from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _cli  # noqa: E402  experiments/_cli.py (this script's directory is on sys.path)
import _react  # noqa: E402  experiments/_react.py
from _cli import UserError, user as _user  # noqa: E402

FLAGS = flags.FLAGS
_cli.define_run_flags("react", workdir="runs/react", eval_n=4,
                      eval_help="the compile rate of the held-out prompts",
                      warm_help="TinyReactSetup override, e.g. --warm=warm_steps=20.")
flags.DEFINE_string("prompts", "", "React prompts: a .jsonl/.json of {id, prompt, category?}, or a "
                    "dataset name `datasets` opens offline (default: the built-in set).")
flags.DEFINE_float("test_fraction", 0.2, "Held-out share of each prompt category (a seeded split: "
                   "botjax.rewards.react.split_prompts).")
flags.DEFINE_enum("judges", "all", list(_react.JUDGE_MODES), "Judges of the training reward: "
                  + "; ".join(f"{k}: {v}" for k, v in _react.JUDGE_MODES.items()) + ".")
flags.DEFINE_string("judge", "", "Base URL of the LLM code judge (--judge_api).")
flags.DEFINE_string("judge_model", "judge", "Model name sent to --judge.")
flags.DEFINE_string("vlm_judge", "", "Base URL of the VLM screenshot judge (--vlm_judge_api).")
flags.DEFINE_string("vlm_judge_model", "vlm", "Model name sent to --vlm_judge.")
flags.DEFINE_enum("vlm_mode", "screenshot", ["screenshot", "one_turn", "two_turn"],
                  "VLM judge protocol; one_turn/two_turn add line attributions (see --vlm_line_weight).")
flags.DEFINE_float("vlm_line_weight", 0.0, "Weight of the VLM's line impacts (paper ablation: 1.0, 0.2).")
flags.DEFINE_bool("typecheck", False, "Add `tsc --strict` diagnostics as compiler line penalties.")
flags.DEFINE_bool("blank_is_failure", False, "Count a blank page (renders, nothing visible) as a "
                  "render failure in the reward (default: not, as in the paper). The compile rate "
                  "counts blank pages either way; eval.json also reports the visible rate.")
TRAINING_JUDGES = ("judge", "vlm_judge")
_cli.define_judge_flags(TRAINING_JUDGES, {k: v for k, v in _react.prompt_keys().items()
                                          if _react.JUDGE_PROMPTS[k][0] in TRAINING_JUDGES})


def train_config(tiny):
  """The paper's React recipe (8 prompts x 8 rollouts; docs/defaults.md gives each value's
  source), or CPU-sized settings for tiny; then the paper protocol and the user's flags."""
  from botjax.train import config as config_lib
  if tiny:
    cfg = config_lib.TrainConfig(
        recipe=FLAGS.algo, steps=FLAGS.steps, workdir=FLAGS.workdir,
        recipe_overrides=(("kl_coef", 0.0),),
        optim=config_lib.OptimConfig(learning_rate=1e-4, warmup_steps=2),
        rollout=config_lib.RolloutConfig(prompts_per_step=2, group_size=4, max_prompt_tokens=192,
                                         max_new_tokens=192, temperature=1.0),
        reward=config_lib.RewardConfig(workers=4, timeout_s=120.0, kind="thread"),
        checkpoint_every=10, tensorboard=False)
  else:
    cfg = config_lib.TrainConfig(
        recipe=FLAGS.algo, steps=FLAGS.steps, workdir=FLAGS.workdir,
        # 8 x 8 rollouts: the paper's (§4.1). lr 5e-7: the paper's AIME rate, borrowed (it gives
        # none for React); the token budgets are botjax's choice: docs/defaults.md
        optim=config_lib.OptimConfig(learning_rate=5e-7),
        rollout=config_lib.RolloutConfig(prompts_per_step=8, group_size=8, max_prompt_tokens=512,
                                         max_new_tokens=2048),
        reward=config_lib.RewardConfig(workers=8, timeout_s=300.0, kind="thread"),
        # fits a v5e-8 (16 GiB per chip, fsdp:8) and one 80 GB GPU: see --dry_run's plan;
        # scanned layers compile the 36-layer update 4-7x faster on CPU (docs/scaling.md)
        remat=True, micro_batch_size=8, scan_layers=True)
  return _cli.config_from_flags(cfg, FLAGS)


def judge_prompt_files():
  return _cli.judge_prompts(FLAGS.judge_prompt, _react.prompt_keys())


def make_judge(what: str):
  """The training judge of --<what> ("judge" or "vlm_judge") with its flags."""
  return _react.make_judge(what, url=FLAGS[what].value, model=FLAGS[f"{what}_model"].value,
                           api=FLAGS[f"{what}_api"].value, prompts=judge_prompt_files(),
                           vlm_mode=FLAGS.vlm_mode)


def check_prerequisites(*, judges: bool = True) -> None:
  """Everything a run needs that the user must provide, checked before any expensive work (the
  tiny warm start, loading weights): the React toolchain and, with `judges`, that the judge
  endpoints answer."""
  _react.check_toolchain()
  for what in TRAINING_JUDGES if judges else ():
    if FLAGS[what].value:
      _react.check_reachable(what, FLAGS[what].value, make_judge(what))


class RequestPrompts:
  """RewardFn adapter: gives the React reward the user's request (metadata["prompt"]) rather
  than the chat-templated prompt text, which the judges should not see. Its spec is the
  reward's."""

  def __init__(self, reward):
    self.reward = reward
    self.spec = reward.spec
    self.__name__ = "react"

  def __call__(self, prompts, completions, metadata):
    return self.reward([m.get("prompt", p) for p, m in zip(prompts, metadata)], completions,
                       metadata)


def make_reward():
  """The ReactReward of the flags (`check_prerequisites` has checked the toolchain and judges)."""
  return _react.make_reward(
      code_judge=make_judge("judge") if FLAGS.judge else None,
      vlm_judge=make_judge("vlm_judge") if FLAGS.vlm_judge else None,
      vlm_line_weight=FLAGS.vlm_line_weight, typecheck=FLAGS.typecheck,
      blank_is_failure=FLAGS.blank_is_failure)


def load_policy(tiny):
  """(checkpoint dir, train records, held-out records, mesh) for tiny or a real checkpoint (the
  preset's Hub repo: for qwen2.5-3b the base model Qwen/Qwen2.5-3B, the paper's policy)."""
  from botjax import models
  from botjax.models.sharding import make_mesh
  from botjax.rewards import react
  if tiny:
    from botjax.testbeds import react_tiny
    from botjax.train.config import apply_overrides
    setup = _user(lambda: apply_overrides(react_tiny.TinyReactSetup(
        test_fraction=FLAGS.test_fraction), FLAGS.warm))
    prompts = _user(lambda: react.load_prompts(FLAGS.prompts or None))
    prepared = react_tiny.prepare(FLAGS.workdir, setup, prompts=prompts)
    print(f"[react] warm start {prepared.checkpoint} ({'cached' if prepared.cached else 'built'} "
          f"in {prepared.seconds:.0f} s)", flush=True)
    return prepared.checkpoint, prepared.train, prepared.eval, None
  ckpt = _cli.checkpoint_dir(FLAGS.checkpoint, FLAGS.model, models.HF_REPOS.get(FLAGS.model),
                             offline=FLAGS.offline)
  train, test = _react.held_out_prompts(FLAGS.prompts, FLAGS.test_fraction)
  return ckpt, [p.to_record() for p in train], [p.to_record() for p in test], make_mesh(FLAGS.mesh)


def make_eval_fn(reward, records, workdir, *, n, label):
  """`(trainer, step) -> metrics`: compile rate (transpiles and renders, a blank page included, as
  in the paper) and visible rate (renders something visible) of `n` rollouts per held-out
  prompt; each evaluation is added to the run's eval.json and drawn in compile_rate.png (one line
  named `label`)."""
  import jax
  from botjax import plotting
  from botjax.rewards import react
  from botjax.train.rundir import RunDir
  run = RunDir(workdir)

  def fn(trainer, step):
    t0 = time.perf_counter()
    texts = _react.rollouts(trainer.engine, trainer.tokenizer, records, jax.random.PRNGKey(4321),
                            n)
    requests = [r["prompt"] for r in records for _ in range(n)]
    res = react.evaluate_compile_rate(reward, requests, texts)
    reasons = {}
    for item in res["items"]:
      if not item["ok"]:
        kind = item["reason"].split(":")[0]
        reasons[kind] = reasons.get(kind, 0) + 1
    blank = sum(1 for item in res["items"] if item["ok"] and not item["visible"])
    out = {"compile_rate": res["compile_rate"], "visible_rate": res["visible_rate"], "n": res["n"],
           "failures": reasons, "blank": blank, "seconds": time.perf_counter() - t0}
    run.append_eval(step, out)
    history = run.read_eval()
    curves = {label: [(h["step"], h["compile_rate"]) for h in history]}
    if all("visible_rate" in h for h in history):
      curves[f"{label} (visible)"] = [(h["step"], h["visible_rate"]) for h in history]
    plotting.plot_compile_rate(curves, run.file("compile_rate.png"))
    print(f"[react] eval at step {step}: compile rate {out['compile_rate']:.3f} (visible "
          f"{out['visible_rate']:.3f}, {blank} blank) of {out['n']} rollouts; failures {reasons}",
          flush=True)
    return {"compile_rate": out["compile_rate"], "visible_rate": out["visible_rate"]}
  return fn


def export(trainer, tokenizer, workdir):
  """Saves the policy as a Hugging Face checkpoint in <workdir>/hf_final (for react_compare.py)."""
  from botjax import models
  from botjax.train.rundir import RunDir
  out = RunDir(workdir).hf_final
  models.save_pretrained(trainer.model(), out)
  tokenizer.save_pretrained(out)
  print(f"[react] policy saved to {out}", flush=True)


def run_recipe(cfg):
  """The recipe the trainer runs: --algo adapted to the React reward's spec (eq. 6 already weighs
  the global and line terms, so BoT-GRPO reads them with w_global = w_local = 1)."""
  from botjax.rewards.react import ReactReward
  return _cli.run_recipe(cfg, ReactReward.spec)


def make_trainer(cfg, *, model, tokenizer, train, reward, mesh=None, eval_fn=None,
                 run_config=None):
  """The RLTrainer of a run: the React reward given the user's requests, chat-templated prompts."""
  from botjax.rewards import react
  from botjax.train.loop import RLTrainer
  from botjax.train.rollouts import ListPrompts
  return RLTrainer(cfg, model=model, tokenizer=tokenizer, prompts=ListPrompts(train, seed=cfg.seed),
                   reward_fn=RequestPrompts(reward),
                   prompt_fn=lambda r: react.chat_messages(r["prompt"]), mesh=mesh,
                   eval_fn=eval_fn, run_config=run_config,
                   stop_token_ids=_cli.turn_end_ids(tokenizer),
                   checkpoint=(run_config or {}).get("checkpoint"))


def run():
  tiny = FLAGS.model == "tiny"
  _cli.start_distributed(FLAGS)
  from botjax import models
  from botjax.train import config as config_lib
  _user(lambda: models.get_config(FLAGS.model))
  cfg = _user(lambda: train_config(tiny))
  if FLAGS.verbose or FLAGS.dry_run:    # always saved in <workdir>/config.json
    _cli.print_settings("react", FLAGS, (
        "model", "algo", "mesh", "checkpoint", "engine", "prompts", "judges", "judge",
        "judge_api", "judge_model", "vlm_judge", "vlm_judge_api", "vlm_judge_model", "vlm_mode",
        "vlm_line_weight", "typecheck"), cfg)
  recipe = run_recipe(cfg)
  print(f"[react] recipe {recipe.name}: w_global={recipe.w_global:g}, w_local={recipe.w_local:g} "
        f"(the React reward's own weights, eq. 6)", flush=True)
  if not FLAGS.eval_only:     # evaluation (the compile rate) takes no judges
    try:
      reward_line = _react.judge_modes_check(FLAGS.judges, judge=FLAGS.judge,
                                             vlm_judge=FLAGS.vlm_judge)
    except UserError as e:
      if not FLAGS.dry_run:
        raise
      reward_line = f"not runnable as given: {e}"
    print(f"[react] reward (--judges={FLAGS.judges}): {reward_line}", flush=True)
  if FLAGS.dry_run:
    print(_cli.plan_text(FLAGS.model, FLAGS.mesh, cfg, FLAGS.device_memory))
    return
  if not FLAGS.eval_only:
    _cli.refuse_rerun(cfg.workdir, FLAGS.resume)
  # before the warm start or the weights: toolchain, browser, judge endpoints
  check_prerequisites(judges=not FLAGS.eval_only)
  ckpt, train, held_out, mesh = load_policy(tiny)
  held_out = held_out[:FLAGS.eval_limit] if FLAGS.eval_limit else held_out
  if not train or not held_out:
    raise UserError(f"{len(train)} train and {len(held_out)} held-out prompts: need at least one "
                    f"of each (more prompts, or another --test_fraction)")
  from botjax.rewards import react
  reward = make_reward()
  # evaluation measures the compile rate only: no judges, the same Node workers and browser
  eval_reward = (react.ReactReward(reward.config, pool=reward.pool, renderer=reward.renderer)
                 if (reward.code_judge or reward.vlm_judge) else reward)
  tok = models.load_tokenizer(ckpt)
  run_config = {"train": config_lib.to_dict(cfg), "model": FLAGS.model, "checkpoint": ckpt,
                "reward": {f: FLAGS[f].value for f in ("judges", "judge_model", "vlm_judge_model",
                                                        "vlm_mode", "vlm_line_weight", "typecheck",
                                                        "blank_is_failure")},
                "prompts": {"source": FLAGS.prompts or "built-in",
                            "test_fraction": FLAGS.test_fraction}}
  from botjax.train.rundir import RunDir
  saved = RunDir(cfg.workdir)
  if FLAGS.eval_only and os.path.exists(saved.config_path):   # judges take no part in evaluation
    run_config["reward"] = saved.read_config().get("reward", run_config["reward"])
  trainer = None
  try:
    trainer = _user(lambda: make_trainer(
        cfg, model=models.load_pretrained(ckpt, mesh=mesh, scan_layers=bool(cfg.scan_layers)),
        tokenizer=tok, train=train,
        reward=reward, mesh=mesh,
        eval_fn=make_eval_fn(eval_reward, held_out, cfg.workdir, n=FLAGS.eval_n,
                             label=FLAGS.algo),
        run_config=run_config))
    if not FLAGS.eval_only:
      _react.save_judges(cfg.workdir, {what: {"url": FLAGS[what].value,
                                              "model": FLAGS[f"{what}_model"].value}
                                       for what in TRAINING_JUDGES if FLAGS[what].value})
      trainer.run()
      export(trainer, tok, cfg.workdir)
    if FLAGS.eval_only or not cfg.eval_every:
      trainer.eval_fn(trainer, trainer.host_step)
  finally:
    if trainer is not None:
      trainer.close()
    reward.close()
    if eval_reward is not reward:
      eval_reward.close()


if __name__ == "__main__":
  _cli.entry(__doc__, run)
