"""Wiring shared by the experiment scripts: user errors, multi-host flags, checkpoints (from the HF
cache, or downloaded), dry-run plans, finished-run reuse and the absl entry point. Imports of
botjax stay inside the functions so that `--help` answers without loading JAX."""

import json
import os
import sys

from absl import app, flags, logging

# transformers' advisory that PyTorch is absent says nothing to a botjax user (the models are JAX)
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


class UserError(Exception):
  """A problem the user can fix; printed without a traceback, exit code 2."""


def user(fn):
  """Runs fn, turning configuration and data errors (ValueError, FileNotFoundError) into UserError."""
  try:
    return fn()
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None


def define_distributed_flags() -> None:
  flags.DEFINE_bool("distributed", False, "Multi-host: jax.distributed.initialize() first, on "
                    "every host (TPU pods, SLURM and Open MPI need nothing else).")
  flags.DEFINE_string("coordinator", "", "With --distributed elsewhere: host:port of process 0.")
  flags.DEFINE_integer("num_processes", 0, "With --distributed elsewhere: number of processes.")
  flags.DEFINE_integer("process_id", -1, "With --distributed elsewhere: this process's id.")
  flags.DEFINE_integer("heartbeat_timeout", 60, "With --distributed: seconds after which a silent "
                       "process counts as lost; the others stop after a quarter of it, naming it.")


def start_distributed(FLAGS) -> None:
  """`botjax.distributed.initialize` from the flags of `define_distributed_flags` (with
  --distributed only)."""
  if not FLAGS.distributed:
    return
  from botjax import distributed
  try:
    distributed.initialize(FLAGS.coordinator or None, FLAGS.num_processes or None,
                           None if FLAGS.process_id < 0 else FLAGS.process_id,
                           settings=distributed.Settings(
                               heartbeat_timeout_s=FLAGS.heartbeat_timeout))
  except (RuntimeError, ValueError) as e:
    raise UserError(f"--distributed: {e}") from None


def define_offline_flag() -> None:
  flags.DEFINE_bool("offline", False, "Never download: weights and data come from the HF cache "
                    "only (as HF_HUB_OFFLINE=1, which is honoured too).")


def checkpoint_dir(checkpoint: str, model: str, repo: str | None, *, offline: bool = False) -> str:
  """--checkpoint, else the preset's Hub repo: from the HF cache, downloaded into it (with a
  progress bar) when missing, unless --offline or HF_HUB_OFFLINE=1."""
  from botjax import models
  if offline:
    os.environ["HF_HUB_OFFLINE"] = "1"   # tokenizer and data loaders stay in the cache too
  source = checkpoint or repo
  if not source:
    raise UserError(f"no known HF repo for --model={model}; pass --checkpoint=DIR")
  try:
    return models.resolve_checkpoint(source, local_files_only=True if offline else None)
  except FileNotFoundError as e:
    raise UserError(f"{e}\n(--checkpoint=DIR takes a local checkpoint directory; without it "
                    f"the weights are {repo or 'the preset repo'} from the Hugging Face "
                    "Hub.)") from None


def define_judge_flags(judges, prompt_keys) -> None:
  """--<judge>_api for each judge flag in `judges` (e.g. "judge" gives --judge_api), and
  --judge_prompt=KEY=FILE with the keys of `prompt_keys` (KEY -> what that prompt is)."""
  for name in judges:
    flags.DEFINE_enum(f"{name}_api", "openai", ["openai", "anthropic"],
                      f"API of --{name}: openai (chat completions: vLLM, SGLang, OpenAI; key from "
                      "$OPENAI_API_KEY, else none) or anthropic (the Messages API: --" + name +
                      "=https://api.anthropic.com, key from $ANTHROPIC_API_KEY).")
  keys = "; ".join(f"{k}: {v}" for k, v in prompt_keys.items())
  flags.DEFINE_multi_string("judge_prompt", [], "KEY=FILE: a judge prompt read from FILE "
                            "instead of the built-in one (repeat for several). KEY is one of: "
                            f"{keys}.")


def judge_prompts(values, prompt_keys) -> dict:
  """{KEY: pathlib.Path} of --judge_prompt=KEY=FILE flags; UserError for an unknown KEY, a
  repeated one or a missing FILE (the judges check the placeholders when they are built)."""
  import pathlib
  out = {}
  for value in values:
    key, sep, path = value.partition("=")
    if not sep or key not in prompt_keys:
      raise UserError(f"--judge_prompt={value!r}: expected KEY=FILE with KEY one of "
                      f"{sorted(prompt_keys)}")
    if key in out:
      raise UserError(f"--judge_prompt: {key} given twice")
    if not os.path.isfile(os.path.expanduser(path)):
      raise UserError(f"--judge_prompt={value}: no such file {path!r}")
    out[key] = pathlib.Path(os.path.expanduser(path))
  return out


def define_memory_flags() -> None:
  flags.DEFINE_bool("remat", None, "Recompute each decoder block in the backward pass (less "
                    "memory, ~1/3 more compute); default: the experiment's choice for --model.")
  flags.DEFINE_bool("scan_layers", None, "Stack the decoder's layers and run them as one "
                    "lax.scan (compiles the update several times faster, same results); "
                    "default: the experiment's choice for --model.")
  flags.DEFINE_integer("micro_batch_size", None, "Rows per gradient-accumulation slice "
                       "(the update is the same; 0 = the whole mini-batch); default: the "
                       "experiment's choice for --model.")
  flags.DEFINE_float("device_memory", None, "GiB per device that --dry_run plans against "
                     "(default: the attached accelerator's, none on CPU).")


def define_verbose_flag() -> None:
  flags.DEFINE_bool("verbose", False, "Print the full flags and training config at the start "
                    "(they are always saved in the workdir's config.json).")


def define_run_flags(name: str, *, workdir: str, eval_n: int, eval_help: str,
                     warm_help: str) -> None:
  """The flags every paper experiment (aime.py, react.py) defines alike: the model and recipe,
  the mesh, the weights, the run directory and resume, overrides, evaluation, the dry run, the
  rollout engine, and the shared groups (multi-host, memory, offline, verbose).

  Args:
    name: the experiment's name, for the help texts (e.g. "aime").
    workdir: default of --workdir.
    eval_n: default of --eval_n (samples per held-out prompt).
    eval_help: what an evaluation measures (help of --eval_every / --eval_only).
    warm_help: help of --warm (the tiny testbed's setup class and an example).
  """
  flags.DEFINE_string("model", "qwen2.5-3b", "Preset of botjax.models.PRESETS, or `tiny` (CPU).")
  flags.DEFINE_string("algo", "bot_grpo", "Recipe of botjax.algorithms.RECIPES.")
  flags.DEFINE_string("mesh", "fsdp:-1", "Mesh spec, e.g. fsdp:8 or data:2,fsdp:4 (-1: the rest).")
  flags.DEFINE_string("checkpoint", "", "Local HF checkpoint dir (default: the preset's Hub repo, "
                      "from the HF cache or downloaded into it; --offline: cache only).")
  flags.DEFINE_string("engine", "auto", "Rollout engine: a name of botjax.sampling.ENGINES (jax: "
                      "the lockstep KV-cache sampler; slots: continuous batching over a paged KV "
                      "pool, faster when completion lengths spread; vllm: a vLLM engine in this "
                      "process; auto: slots where measured faster (one device of a small CPU "
                      "host, budgets of at most 64 or at least 256 tokens), else jax; "
                      "docs/scaling.md), "
                      "TrainConfig.rollout.engine.")
  flags.DEFINE_integer("steps", 200, "RL steps.")
  flags.DEFINE_string("workdir", workdir, f"Output dir of the {name} run: checkpoints/, "
                      "metrics.jsonl, eval.json, config.json.")
  flags.DEFINE_bool("resume", True, "Resume from --workdir; false refuses a workdir holding a run.")
  flags.DEFINE_multi_string("set", [], "TrainConfig override, e.g. --set=rollout.group_size=4.")
  flags.DEFINE_multi_string("warm", [], f"tiny only: {warm_help}")
  flags.DEFINE_bool("eval_only", False, f"Only evaluate ({eval_help}) the latest checkpoint in "
                    "--workdir, if any.")
  flags.DEFINE_integer("eval_every", 10, f"Evaluate ({eval_help}) every N steps (0: only after "
                       "training).")
  flags.DEFINE_integer("eval_n", eval_n, "Samples per held-out prompt.")
  flags.DEFINE_integer("eval_limit", 0, "Evaluate only the first N held-out prompts (0: all).")
  flags.DEFINE_bool("dry_run", False, "Print the config and the memory/FLOPs plan, then exit.")
  define_distributed_flags()
  define_memory_flags()
  define_offline_flag()
  define_verbose_flag()


def check_engine(name: str) -> str:
  """`name` if it is a rollout engine of `botjax.sampling.ENGINES`, else a UserError."""
  from botjax.sampling import ENGINES
  if name not in ENGINES:
    raise UserError(f"--engine={name!r}: not a rollout engine; valid: {', '.join(ENGINES)}")
  return name


def memory_settings(cfg, *, remat: bool | None = None, scan_layers: bool | None = None,
                    micro_batch_size: int | None = None, verbose: bool = False):
  """`cfg` (a TrainConfig) with the given --remat / --scan_layers / --micro_batch_size (None:
  the experiment's choice stays) and --verbose applied."""
  import dataclasses
  changes = {k: v for k, v in (("remat", remat), ("scan_layers", scan_layers),
                               ("micro_batch_size", micro_batch_size)) if v is not None}
  if verbose:
    changes["verbose"] = True
  return dataclasses.replace(cfg, **changes)


def paper_config(cfg, *, eval_every: int, engine: str = "auto", sets=(), remat=None,
                 scan_layers=None, micro_batch_size=None, verbose=False):
  """The run config of a paper experiment: `cfg` (the experiment's TrainConfig) under the
  paper's protocol, then the user's settings.

  The paper's GRPO takes eq. 1's population std in every group z-score
  (`algorithms.PAPER_PROTOCOL`), so that BoT-GRPO with w_s = 0 is exactly GRPO; the recipe
  overrides already in `cfg` win over it, and `--set=recipe.grpo_ddof=1` gives Bessel's. Then
  `eval_every`, the rollout `engine` (a name of `botjax.sampling.ENGINES`), the memory settings
  (None: the experiment's choice) and the `--set` overrides `sets`, last.

  Raises:
    ValueError: a bad `--set` override (`config.apply_overrides`).
    UserError: an unknown engine.
  """
  import dataclasses
  from botjax import algorithms
  from botjax.train import config as config_lib
  overrides = {**dict(algorithms.PAPER_PROTOCOL), **dict(cfg.recipe_overrides)}
  cfg = dataclasses.replace(cfg, eval_every=eval_every, recipe_overrides=tuple(overrides.items()),
                            rollout=dataclasses.replace(cfg.rollout, engine=check_engine(engine)))
  cfg = memory_settings(cfg, remat=remat, scan_layers=scan_layers,
                        micro_batch_size=micro_batch_size, verbose=verbose)
  return config_lib.apply_overrides(cfg, list(sets))


def config_from_flags(cfg, FLAGS):
  """`paper_config(cfg, ...)` with the values of the flags of `define_run_flags` (the one place
  that reads them)."""
  return paper_config(cfg, eval_every=FLAGS.eval_every, engine=FLAGS.engine, sets=FLAGS.set,
                      remat=FLAGS.remat, scan_layers=FLAGS.scan_layers,
                      micro_batch_size=FLAGS.micro_batch_size, verbose=FLAGS.verbose)


def run_recipe(cfg, spec, *, hint: str = ""):
  """The recipe a run trains: `train.config.recipe_for_run(cfg, spec)` (the one recipe path of
  the trainer), its ValueError as a UserError with `hint` appended."""
  from botjax.train.config import recipe_for_run
  try:
    return recipe_for_run(cfg, spec)
  except ValueError as e:
    raise UserError(f"{e}{hint}") from None


TURN_ENDS = ("<|im_end|>",)   # ChatML's end of turn (Qwen2.5, SmolLM3)


def turn_end_ids(tokenizer) -> tuple[int, ...]:
  """Ids of the chat template's end-of-turn tokens that the tokenizer has (`TURN_ENDS`), to stop
  a completion at the end of its turn: a base checkpoint such as Qwen/Qwen2.5-3B declares only
  `<|endoftext|>` as its EOS, while its chat template ends each turn with `<|im_end|>`."""
  vocab = tokenizer.get_vocab()
  return tuple(int(vocab[t]) for t in TURN_ENDS if t in vocab)


def print_settings(name: str, FLAGS, flag_names, cfg, out=print) -> None:
  """The flags `flag_names` and the full train config on the console (--verbose, --dry_run),
  through `out` (a function of one line; a multi-process run passes its process-0 printer)."""
  from botjax.train import config as config_lib
  out(f"[{name}] flags: " + json.dumps({f: FLAGS[f].value for f in flag_names}, sort_keys=True))
  out(f"[{name}] train config: " + json.dumps(config_lib.to_dict(cfg), sort_keys=True))


def slot_engine_slots(cfg) -> int:
  """The slots a run's slot engine holds: `rollout.engine_options`' num_slots, else
  `botjax.sampling.slots.default_num_slots` of the run's budget."""
  from botjax.sampling.slots import default_num_slots
  options = dict(cfg.rollout.engine_options)
  return int(options.get("num_slots") or default_num_slots(
      cfg.rollout.max_new_tokens, options.get("kv_cache", "auto")))


def plan_text(model: str, mesh: str, cfg, device_memory_gib: float | None = None, *,
              compute_flops: bool = True) -> str:
  """The dry-run memory/FLOPs plan of one update of `cfg` (a TrainConfig) on `mesh`, and whether
  it fits `device_memory_gib` (default: the attached accelerator's memory). The experiments load
  their models with float32 parameters and computation (`load_pretrained`'s defaults)."""
  import jax.numpy as jnp
  from botjax import models
  from botjax.models.sharding import abstract_mesh, spec_devices
  r = cfg.rollout
  rows = r.prompts_per_step * r.group_size // max(cfg.mini_batches, 1)
  memory = None if device_memory_gib is None else int(device_memory_gib * (1 << 30))
  engine = engine_here(cfg, abstract_mesh(mesh, spec_devices(mesh)))
  text = user(lambda: str(models.plan(
      model, mesh, batch_size=rows, seq_len=r.max_prompt_tokens + r.max_new_tokens,
      completion_len=r.max_new_tokens, logprob_chunk=cfg.logprob_chunk, dtype=jnp.float32,
      remat=bool(cfg.remat), micro_batch_size=cfg.micro_batch_size, device_memory=memory,
      compute_flops=compute_flops, kv_slots=slot_engine_slots(cfg) if engine == "slots" else 0)))
  label, value = "rollout engine", engine + (" (auto)" if r.engine == "auto" else "")
  width = len(next(line for line in text.splitlines() if "params / device" in line))
  return f"{text}\n  {label}{value:>{width - 2 - len(label)}}"


def engine_here(cfg, mesh=None) -> str:
  """The rollout engine `cfg` runs with on this host and `mesh`: its name, "auto" resolved as
  the trainer resolves it (`train.config.resolve_engine`: the engine of the run saved in
  `cfg.workdir`, else the one `botjax.sampling.auto_engine` picks here)."""
  from botjax.train import config as config_lib
  from botjax.train.checkpoint import saved_config
  from botjax.train.rundir import RunDir
  saved = (saved_config(RunDir(cfg.workdir).checkpoints_dir) if cfg.rollout.engine == "auto"
           else None)
  return config_lib.resolve_engine(cfg, saved=saved, where=mesh).rollout.engine


def refuse_rerun(workdir: str, resume: bool) -> None:
  """With --resume=false, refuses a workdir that already holds a run."""
  from botjax.train.rundir import RunDir
  if RunDir(workdir).has_run() and not resume:
    raise UserError(f"--resume=false but {workdir} already holds a run (checkpoints/ or "
                    "metrics.jsonl); delete them or choose another --workdir")


def save_seconds(workdir: str, seconds: float, cfg) -> None:
  """Marks a finished run: its wall time and the config it ran (read by `finished_seconds`)."""
  from botjax.train import config as config_lib
  from botjax.train.rundir import RunDir
  with open(RunDir(workdir).file("seconds.json"), "w") as f:
    json.dump({"seconds": seconds, "config": config_lib.to_dict(cfg)}, f)


def finished_seconds(workdir: str, cfg) -> float | None:
  """Seconds of an earlier complete run of exactly this config in `workdir`, else None."""
  from botjax.train import config as config_lib
  from botjax.train.rundir import RunDir
  run = RunDir(workdir)
  path = run.file("seconds.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    saved = json.load(f)
  recs = run.read_metrics()
  complete = recs and recs[-1].get("step") == cfg.steps and "eval/accuracy" in recs[-1]
  cfg = config_lib.resolve_engine(cfg, saved=saved.get("config"))   # "auto": the engine it ran
  same = not config_lib.config_diff(saved.get("config", {}),
                                    json.loads(json.dumps(config_lib.to_dict(cfg))),
                                    ignore=frozenset())
  return float(saved["seconds"]) if complete and same else None


def entry(doc: str, run) -> None:
  """Runs `run()` under absl: user errors exit 2 without a traceback; --help prints `doc` and
  the flags and exits 0 (absl's own --help exits 1)."""

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    try:
      run()
    except UserError as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(2)

  if {"--help", "-h", "--helpshort"} & set(sys.argv[1:]):
    shared = flags.FLAGS.module_help(sys.modules[__name__])   # define_distributed_flags
    print(doc + "\nflags:\n" + flags.FLAGS.main_module_help() + "\n" + shared)
    sys.exit(0)
  app.run(main)
