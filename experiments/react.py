r"""React code generation with BoT-GRPO: the paper's first experiment.

  python experiments/react.py --model=qwen2.5-3b --judge=http://127.0.0.1:8000/v1 --judge_model=J
  python experiments/react.py --model=qwen2.5-3b --mesh=fsdp:8 --dry_run     # plan, no weights
  python experiments/react.py --model=tiny --steps=2                         # CPU, end to end
  python experiments/react.py --eval_only --workdir=runs/react               # compile rate
  python experiments/react.py --compare=runs/react,runs/react-grpo \
      --pairwise_judge=URL --pairwise_judge_model=P --workdir=runs/compare   # win rate
  python experiments/react.py --compare=runs/react,runs/react-grpo --compare_checkpoints \
      --pairwise_judge=URL --pairwise_judge_model=P --workdir=runs/curve     # win rate vs step

Defaults follow the paper (BoT-GRPO, arXiv 2610.09804, §4): BoT-GRPO, 8 prompts x 8 rollouts per
step, global reward = compile / render failure + ESLint score + LLM code judge (+ the VLM
screenshot judge with --vlm_judge), line-level local penalties (compiler, ESLint, judge lines)
spread over tokens with φ(d) = max(0, 1 − d/4), on the built-in prompt set split 80/20 within
each category (`botjax.rewards.react.split_prompts`; --prompts for your own). A blank page is
not a render failure (--blank_is_failure makes it one).
Step-level recipes (--algo=pure, verigate, process_grpo) read the same penalties per
blank-line-separated block of the completion (`botjax.rewards.react.penalties.step_spans_of`).
Model-written code is compiled, linted and rendered by the pinned Node toolchain and headless
Chromium in sandboxed workers (`botjax.rewards.react`), never in this process.

Outputs in --workdir: checkpoints/, metrics.jsonl (reward components as reward/compile,
reward/render, reward/lint, reward/judge, reward/vlm), eval.json every --eval_every steps with
compile_rate.png (compile rate on held-out prompts: transpiles and renders, a blank page counted,
as in the paper; visible_rate: renders something visible), judges.json (the training judges), and
hf_final/ (the trained policy as a Hugging Face checkpoint, for --compare).

--compare=A,B renders one rollout per held-out prompt for each side (a workdir's hf_final/ or any
HF checkpoint dir) and writes the ABBA pairwise VLM win rate of A over B (ties 0.5) to
compare.json and compare.png. The pairwise judge must be given (--pairwise_judge,
--pairwise_judge_model) and differ from the training judges (same URL and model as --judge,
--vlm_judge or a compared run's judges.json is refused without --allow_same_judge): the paper
evaluates with another model to avoid judge circularity. --compare_checkpoints compares every
checkpoint run A saved (and its starting policy, step 0) with B: winrate_curve.json and .png, the
win rate and tie rate against step (the paper's Figure 2); keep more checkpoints while training
with --set=checkpoint_every=N --set=keep_checkpoints=M.

`--model=tiny` builds (or reuses) a tiny model warm-started on template components
(`botjax.testbeds.react_tiny`; shrink it with --warm); its samples seldom make good apps, but every
reward component, the sandbox and the line -> token mapping run for real. Errors a user can fix
(missing weights, toolchain, unreachable judge, bad flags) exit 2 with what to do, and are checked
before any expensive work (the warm start, loading weights). $BOTJAX_REACT_TOOLCHAIN points at
another copy of the Node toolchain directory.
"""

import dataclasses
import json
import os
import socket
import sys
import time
import urllib.parse

from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _cli  # noqa: E402  experiments/_cli.py (this script's directory is on sys.path)
from _cli import UserError, user as _user  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "qwen2.5-3b", "Preset of botjax.models.PRESETS, or `tiny` (CPU).")
flags.DEFINE_string("algo", "bot_grpo", "Recipe of botjax.algorithms.RECIPES.")
flags.DEFINE_string("mesh", "fsdp:-1", "Mesh spec, e.g. fsdp:8 or data:2,fsdp:4 (-1: the rest).")
flags.DEFINE_string("checkpoint", "", "Local HF checkpoint dir (default: the preset's Hub repo, from "
                    "the HF cache or downloaded into it; --offline: cache only).")
flags.DEFINE_string("prompts", "", "React prompts: a .jsonl/.json of {id, prompt, category?}, or a "
                    "dataset name `datasets` opens offline (default: the built-in set).")
flags.DEFINE_float("test_fraction", 0.2, "Held-out share of each prompt category (a seeded split: "
                   "botjax.rewards.react.split_prompts).")
flags.DEFINE_string("judge", "", "OpenAI-compatible base URL of the LLM code judge (default: none).")
flags.DEFINE_string("judge_model", "judge", "Model name sent to --judge.")
flags.DEFINE_string("vlm_judge", "", "OpenAI-compatible base URL of the VLM screenshot judge (default: none).")
flags.DEFINE_string("vlm_judge_model", "vlm", "Model name sent to --vlm_judge.")
flags.DEFINE_enum("vlm_mode", "screenshot", ["screenshot", "one_turn", "two_turn"],
                  "VLM judge protocol; one_turn/two_turn add line attributions (see --vlm_line_weight).")
flags.DEFINE_float("vlm_line_weight", 0.0, "Weight of the VLM's line impacts (paper ablation: 1.0, 0.2).")
flags.DEFINE_bool("typecheck", False, "Add `tsc --strict` diagnostics as compiler line penalties.")
flags.DEFINE_integer("steps", 200, "RL steps.")
flags.DEFINE_string("workdir", "runs/react", "Output dir: checkpoints, metrics.jsonl, eval.json, hf_final.")
flags.DEFINE_bool("resume", True, "Resume from --workdir; false refuses a workdir holding a run.")
flags.DEFINE_multi_string("set", [], "TrainConfig override, e.g. --set=rollout.group_size=4.")
flags.DEFINE_multi_string("warm", [], "tiny only: TinyReactSetup override, e.g. --warm=warm_steps=20.")
flags.DEFINE_bool("eval_only", False, "Only measure the compile rate (the latest checkpoint in --workdir).")
flags.DEFINE_integer("eval_every", 10, "Compile-rate evaluation every N steps (0: only after training).")
flags.DEFINE_integer("eval_n", 4, "Rollouts per held-out prompt for the compile rate.")
flags.DEFINE_integer("eval_limit", 0, "Use only the first N held-out prompts (0: all).")
flags.DEFINE_list("compare", [], "A,B: ABBA pairwise VLM win rate of A over B (workdirs or HF dirs).")
flags.DEFINE_string("pairwise_judge", "", "Base URL of the pairwise VLM judge of --compare (required "
                    "there; a different model from the training judges, as in the paper).")
flags.DEFINE_string("pairwise_judge_model", "", "Model name of the pairwise judge (required with "
                    "--compare).")
flags.DEFINE_bool("allow_same_judge", False, "Let --compare's pairwise judge be a training judge "
                  "(same URL and model as --judge/--vlm_judge or a compared run's judges); the "
                  "paper uses a different model to avoid judge circularity.")
flags.DEFINE_bool("compare_checkpoints", False, "With --compare=RUN,BASELINE: the win rate of every "
                  "checkpoint RUN saved (its checkpoints/, see --set=keep_checkpoints=N) and of its "
                  "starting policy against BASELINE, as a curve against step (winrate_curve.json "
                  "and .png).")
flags.DEFINE_bool("blank_is_failure", False, "Count a blank page (renders, nothing visible) as a "
                  "render failure in the reward (default: not, as in the paper). The compile rate "
                  "counts blank pages either way; eval.json also reports the visible rate.")
flags.DEFINE_float("compare_temperature", 0.0, "Sampling temperature of --compare rollouts (0: greedy).")
flags.DEFINE_bool("dry_run", False, "Print the config and the memory/FLOPs plan, then exit.")
_cli.define_distributed_flags()
_cli.define_memory_flags()
_cli.define_offline_flag()
_cli.define_verbose_flag()


def train_config(tiny):
  """The paper's React recipe (8 prompts x 8 rollouts), or CPU-sized settings for tiny."""
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
        optim=config_lib.OptimConfig(learning_rate=5e-7),
        rollout=config_lib.RolloutConfig(prompts_per_step=8, group_size=8, max_prompt_tokens=512,
                                         max_new_tokens=2048),
        reward=config_lib.RewardConfig(workers=8, timeout_s=300.0, kind="thread"),
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


def check_reachable(url: str, what: str) -> None:
  """Fails fast when nothing listens at `url` (a TCP connect, no request sent)."""
  parts = urllib.parse.urlparse(url)
  if parts.scheme not in ("http", "https") or not parts.hostname:
    raise UserError(f"--{what}={url!r} is not an http(s) URL such as http://127.0.0.1:8000/v1")
  port = parts.port or (443 if parts.scheme == "https" else 80)
  try:
    socket.create_connection((parts.hostname, port), timeout=5).close()
  except OSError as e:
    raise UserError(f"--{what}={url} is unreachable ({e}); start an OpenAI-compatible server "
                    "(e.g. `vllm serve MODEL --port 8000`) or drop the flag") from None


def _endpoint(url: str) -> tuple[str, str, int, str]:
  """(scheme, host, port, path) of an endpoint URL, normalised so that spellings of the same
  endpoint compare equal (case of scheme and host, default port, trailing slash)."""
  parts = urllib.parse.urlparse(url.strip())
  scheme = parts.scheme.lower()
  host = (parts.hostname or "").lower()
  host = "127.0.0.1" if host in ("localhost", "::1", "0.0.0.0") else host
  port = parts.port or (443 if scheme == "https" else 80)
  return scheme, host, port, parts.path.rstrip("/")


def check_pairwise_judge(training_judges) -> None:
  """Refuses a missing pairwise judge, or one identical to a training judge.

  The paper evaluates with a different model from the training judges to avoid judge circularity
  (BoT-GRPO, arXiv 2610.09804, §4.1): a policy trained against a judge learns that judge's taste.

  Args:
    training_judges: (what, url, model) of each training judge known here: the flags --judge and
      --vlm_judge, and the judges saved in the compared runs' config.json.
  """
  if not FLAGS.pairwise_judge or not FLAGS.pairwise_judge_model:
    raise UserError("--compare needs its own pairwise VLM judge: pass --pairwise_judge=URL and "
                    "--pairwise_judge_model=NAME (a different model from the training judges, as "
                    "in the paper)")
  pair = (_endpoint(FLAGS.pairwise_judge), FLAGS.pairwise_judge_model.strip())
  for what, url, model in training_judges:
    if url and model and (_endpoint(url), model.strip()) == pair and not FLAGS.allow_same_judge:
      raise UserError(
          f"the pairwise judge ({FLAGS.pairwise_judge}, model {FLAGS.pairwise_judge_model!r}) is "
          f"the training judge {what} ({url}, model {model!r}); the paper evaluates with a "
          "different model to avoid judge circularity. Pass another --pairwise_judge / "
          "--pairwise_judge_model, or --allow_same_judge to compare with it anyway")


def check_prerequisites(*, judges: bool = True) -> None:
  """Everything a run needs that the user must provide, checked before any expensive work (the
  tiny warm start, loading weights): the React toolchain (Node packages, Chromium, Playwright)
  and, with `judges`, that the judge endpoints answer."""
  from botjax.rewards import react
  try:
    react.check_toolchain(render=True)
  except react.ToolchainError as e:
    raise UserError(f"{e}\nInstall it with `bash scripts/setup.sh test` (Node packages pinned in "
                    "botjax/rewards/react/node, Debian's chromium).") from None
  for what in ("judge", "vlm_judge") if judges else ():
    if FLAGS[what].value:
      check_reachable(FLAGS[what].value, what)


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


def make_reward(*, judges: bool = True):
  """The ReactReward of the flags (`check_prerequisites` has checked the toolchain)."""
  from botjax.rewards import react
  code_judge = vlm_judge = None
  if judges and FLAGS.judge:   # run() and compare() checked that the URLs are reachable
    code_judge = react.CodeJudge(react.JudgeConfig(model=FLAGS.judge_model, base_url=FLAGS.judge))
  if judges and FLAGS.vlm_judge:
    vlm_judge = react.VLMJudge(react.JudgeConfig(model=FLAGS.vlm_judge_model,
                                                 base_url=FLAGS.vlm_judge), mode=FLAGS.vlm_mode)
  cfg = _user(lambda: react.ReactRewardConfig(vlm_line_weight=FLAGS.vlm_line_weight,
                                              typecheck=FLAGS.typecheck,
                                              blank_is_failure=FLAGS.blank_is_failure))
  return react.ReactReward(cfg, code_judge=code_judge, vlm_judge=vlm_judge)


def react_repo(model):
  """The preset's HF repo; the paper's React policy is Qwen2.5-3B-Instruct (a chat model)."""
  from botjax import models
  return {"qwen2.5-3b": "Qwen/Qwen2.5-3B-Instruct"}.get(model, models.HF_REPOS.get(model))


def load_policy(tiny):
  """(checkpoint dir, train records, held-out records, mesh) for tiny or a real checkpoint."""
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
  ckpt = _cli.checkpoint_dir(FLAGS.checkpoint, FLAGS.model, react_repo(FLAGS.model),
                             offline=FLAGS.offline)
  prompts = _user(lambda: react.load_prompts(FLAGS.prompts or None))
  train, test = react.split_prompts(prompts, test_fraction=FLAGS.test_fraction)
  return ckpt, [p.to_record() for p in train], [p.to_record() for p in test], make_mesh(FLAGS.mesh)


def rollouts(sampler, tokenizer, records, key, n, params=None):
  """n completions per record, as texts (rows of a record adjacent)."""
  from botjax.rewards import react
  from botjax.sampling import generate_text
  out = generate_text(sampler, tokenizer, [react.chat_messages(r["prompt"]) for r in records],
                      key, n=n, params=params)
  return list(out.completions)


def make_eval_fn(reward, records, workdir):
  """`(trainer, step) -> metrics`: compile rate (transpiles and renders, a blank page included, as
  in the paper) and visible rate (renders something visible) of eval_n rollouts per held-out
  prompt; each evaluation is added to the run's eval.json and drawn in compile_rate.png."""
  import jax
  from botjax import plotting
  from botjax.rewards import react
  from botjax.train.rundir import RunDir
  run = RunDir(workdir)

  def fn(trainer, step):
    t0 = time.perf_counter()
    texts = rollouts(trainer.engine, trainer.tokenizer, records, jax.random.PRNGKey(4321),
                     FLAGS.eval_n)
    requests = [r["prompt"] for r in records for _ in range(FLAGS.eval_n)]
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
    curves = {FLAGS.algo: [(h["step"], h["compile_rate"]) for h in history]}
    if all("visible_rate" in h for h in history):
      curves[f"{FLAGS.algo} (visible)"] = [(h["step"], h["visible_rate"]) for h in history]
    plotting.plot_compile_rate(curves, run.file("compile_rate.png"))
    print(f"[react] eval at step {step}: compile rate {out['compile_rate']:.3f} (visible "
          f"{out['visible_rate']:.3f}, {blank} blank) of {out['n']} rollouts; failures {reasons}",
          flush=True)
    return {"compile_rate": out["compile_rate"], "visible_rate": out["visible_rate"]}
  return fn


def export(trainer, tokenizer, workdir):
  """Saves the policy as a Hugging Face checkpoint in <workdir>/hf_final (for --compare)."""
  from botjax import models
  from botjax.train.rundir import RunDir
  out = RunDir(workdir).hf_final
  models.save_pretrained(trainer.model(), out)
  tokenizer.save_pretrained(out)
  print(f"[react] policy saved to {out}", flush=True)


def resolve_side(path):
  from botjax.train.rundir import RunDir
  if os.path.exists(os.path.join(RunDir(path).hf_final, "config.json")):
    return RunDir(path).hf_final
  if os.path.exists(os.path.join(path, "config.json")) and any(
      f.endswith(".safetensors") for f in os.listdir(path)):
    return path
  raise UserError(f"--compare side {path!r} is neither a workdir with hf_final/ (written at the end "
                  "of training) nor a Hugging Face checkpoint dir (config.json + *.safetensors)")


JUDGES_FILE = "judges.json"   # the training judges of a run, for --compare's circularity check


def save_judges(workdir):
  """Writes the training judges of this run (URL and model of each one used) to the workdir."""
  from botjax.rewards import react
  judges = {what: {"url": FLAGS[what].value, "model": FLAGS[f"{what}_model"].value}
            for what in ("judge", "vlm_judge") if FLAGS[what].value}
  react.save_json(judges, os.path.join(workdir, JUDGES_FILE))


def training_judges(paths):
  """(what, url, model) of every training judge known: the flags, and each compared run's."""
  out = [(f"--{what}", FLAGS[what].value, FLAGS[f"{what}_model"].value)
         for what in ("judge", "vlm_judge")]
  for path in paths:
    saved = os.path.join(path, JUDGES_FILE)
    if os.path.exists(saved):
      with open(saved) as f:
        out += [(f"{what} of {path}", j.get("url"), j.get("model")) for what, j in json.load(f).items()]
  return out


def run_checkpoints(path):
  """(starting HF checkpoint dir, sorted saved steps) of a training workdir, for the curve."""
  from botjax.train.rundir import RunDir, RunDirError
  run = RunDir(path)
  if not os.path.exists(run.config_path) or not run.checkpoint_steps():
    raise UserError(f"--compare_checkpoints needs a training workdir (config.json and "
                    f"checkpoints/) as the first --compare side, got {path!r}")
  try:
    base = run.base_checkpoint()
  except RunDirError as e:
    raise UserError(f"{e}; --compare_checkpoints restores the run's parameters into it") from None
  return base, run.checkpoint_steps()


def restore_params(path, step, params):
  """The policy parameters of the run in `path` at `step`, read alone (no optimizer state) onto
  the structure and shardings of `params` (an nnx.State)."""
  from botjax.train.rundir import load_params
  return load_params(path, step, like=params)


def screenshots(reward, checkpoint, test, params_list=((None, None),)):
  """Renders one rollout per held-out prompt of `checkpoint`'s policy, for each (label, params)
  of `params_list` (None: the checkpoint's own weights): yields (label, screenshots)."""
  import jax
  from flax import nnx
  from botjax import models
  from botjax.sampling import Sampler, SamplingConfig
  model, tok = models.load_pretrained(checkpoint), models.load_tokenizer(checkpoint)
  eos = model.config.eos_token_id
  sc = SamplingConfig(max_new_tokens=_max_new_tokens(), temperature=FLAGS.compare_temperature,
                      eos_token_ids=tuple(eos) if isinstance(eos, (list, tuple)) else (eos,),
                      pad_token_id=tok.pad_token_id or 0)
  sampler = Sampler(model, model.config, sc)
  _, params, rest = nnx.split(model, nnx.Param, ...)
  requests = [p.prompt for p in test]
  for label, restore in params_list:
    state = None
    if restore is not None:
      restored = restore(params)
      state = restored if len(jax.tree.leaves(rest)) == 0 else nnx.merge_state(restored, rest)
    texts = rollouts(sampler, tok, [p.to_record() for p in test], jax.random.PRNGKey(0), 1,
                     params=state)
    shots = [s.screenshot for s in reward.score(requests, texts)]
    print(f"[react] {checkpoint if label is None else label}: "
          f"{sum(x is not None for x in shots)}/{len(test)} rendered", flush=True)
    yield label, shots


def compare():
  """ABBA pairwise VLM win rate of --compare A over B on the held-out prompts; with
  --compare_checkpoints, of each saved checkpoint of run A over B (a curve against step)."""
  from botjax import plotting
  from botjax.rewards import react
  if len(FLAGS.compare) != 2:
    raise UserError(f"--compare needs two comma-separated paths A,B, got {FLAGS.compare}")
  check_pairwise_judge(training_judges(FLAGS.compare))
  check_reachable(FLAGS.pairwise_judge, "pairwise_judge")
  check_prerequisites(judges=False)
  if FLAGS.compare_checkpoints:
    base, steps = run_checkpoints(FLAGS.compare[0])
  else:
    side_a = resolve_side(FLAGS.compare[0])
  side_b = resolve_side(FLAGS.compare[1])
  prompts = _user(lambda: react.load_prompts(FLAGS.prompts or None))
  _, test = react.split_prompts(prompts, test_fraction=FLAGS.test_fraction)
  test = test[:FLAGS.eval_limit] if FLAGS.eval_limit else test
  requests = [p.prompt for p in test]
  judge = react.PairwiseJudge(react.JudgeConfig(model=FLAGS.pairwise_judge_model,
                                                base_url=FLAGS.pairwise_judge))
  out_dir = FLAGS.workdir
  os.makedirs(out_dir, exist_ok=True)
  reward = make_reward(judges=False)
  try:
    [(_, shots_b)] = list(screenshots(reward, side_b, test))
    if FLAGS.compare_checkpoints:
      run = FLAGS.compare[0]
      plan = [(0, None)] + [(s, lambda p, s=s: restore_params(run, s, p)) for s in steps if s]
      points = []
      for step, shots_a in screenshots(reward, base, test, plan):
        result = react.pairwise_win_rate(judge, requests, shots_a, shots_b)
        points.append({"step": step, **result})
        print(f"[react] step {step}: win rate {result['win_rate']:.3f} (ties "
              f"{result['tie_rate']:.3f}) over {FLAGS.compare[1]}", flush=True)
      curve = {"run": run, "baseline": FLAGS.compare[1], "prompts": [p.id for p in test],
               "pairwise_judge_model": FLAGS.pairwise_judge_model, "points": points}
      react.save_json(curve, os.path.join(out_dir, "winrate_curve.json"))
      _plot_curve(points, os.path.join(out_dir, "winrate_curve.png"))
      print(f"[react] wrote {os.path.join(out_dir, 'winrate_curve.json')} ({len(points)} "
            "checkpoints)", flush=True)
      return
    [(_, shots_a)] = list(screenshots(reward, side_a, test))
  finally:
    reward.close()
  result = react.pairwise_win_rate(judge, requests, shots_a, shots_b)
  result.update(a=FLAGS.compare[0], b=FLAGS.compare[1], prompts=[p.id for p in test],
                pairwise_judge_model=FLAGS.pairwise_judge_model)
  react.save_json(result, os.path.join(out_dir, "compare.json"))
  label = f"{os.path.basename(os.path.normpath(FLAGS.compare[0]))} vs " \
          f"{os.path.basename(os.path.normpath(FLAGS.compare[1]))}"
  plotting.plot_win_rates({label: result}, os.path.join(out_dir, "compare.png"))
  print(f"[react] win rate of A over B: {result['win_rate']:.3f} (ties {result['tie_rate']:.3f}, "
        f"{result['wins']}-{result['losses']}-{result['ties']} of {result['n']}); wrote "
        f"{os.path.join(out_dir, 'compare.json')}", flush=True)


def _plot_curve(points, path):
  """Win rate (ties 0.5) and tie rate against step, as the paper's Figure 2."""
  from botjax import plotting
  run = os.path.basename(os.path.normpath(FLAGS.compare[0]))
  baseline = os.path.basename(os.path.normpath(FLAGS.compare[1]))
  plotting.plot_win_rate_curve({run: [(p["step"], p["win_rate"], p["tie_rate"]) for p in points]},
                               path, title=f"Pairwise win rate against {baseline}")


def _max_new_tokens():
  return train_config(FLAGS.model == "tiny").rollout.max_new_tokens



def run_recipe(cfg):
  """The recipe the trainer runs: --algo adapted to the React reward's spec (eq. 6 already weighs
  the global and line terms, so BoT-GRPO reads them with w_global = w_local = 1)."""
  from botjax.rewards.react import ReactReward
  from botjax.train.config import recipe_for_run
  return recipe_for_run(cfg, ReactReward.spec)


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
                   checkpoint=(run_config or {}).get("checkpoint"))


def run():
  tiny = FLAGS.model == "tiny"
  _cli.start_distributed(FLAGS)
  from botjax import models
  from botjax.train import config as config_lib
  _user(lambda: models.get_config(FLAGS.model))
  if FLAGS.compare:
    return compare()
  cfg = _user(lambda: train_config(tiny))
  if FLAGS.verbose or FLAGS.dry_run:    # always saved in <workdir>/config.json
    print("[react] flags: " + json.dumps({f: FLAGS[f].value for f in (
        "model", "algo", "mesh", "checkpoint", "prompts", "judge", "judge_model", "vlm_judge",
        "vlm_judge_model", "vlm_mode", "vlm_line_weight", "typecheck")}, sort_keys=True))
    print("[react] train config: " + json.dumps(config_lib.to_dict(cfg), sort_keys=True),
          flush=True)
  recipe = _user(lambda: run_recipe(cfg))
  print(f"[react] recipe {recipe.name}: w_global={recipe.w_global:g}, w_local={recipe.w_local:g} "
        f"(the React reward's own weights, eq. 6)", flush=True)
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
                "reward": {f: FLAGS[f].value for f in ("judge_model", "vlm_judge_model", "vlm_mode",
                                                        "vlm_line_weight", "typecheck",
                                                        "blank_is_failure")}}
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
        eval_fn=make_eval_fn(eval_reward, held_out, cfg.workdir),
        run_config=run_config))
    if not FLAGS.eval_only:
      save_judges(cfg.workdir)
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
