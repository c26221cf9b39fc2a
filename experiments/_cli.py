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


def start_distributed(FLAGS) -> None:
  """`botjax.models.sharding.initialize_distributed` from the flags of `define_distributed_flags`."""
  from botjax.models.sharding import initialize_distributed
  try:
    initialize_distributed(FLAGS.distributed, coordinator_address=FLAGS.coordinator or None,
                           num_processes=FLAGS.num_processes or None,
                           process_id=None if FLAGS.process_id < 0 else FLAGS.process_id)
  except (RuntimeError, ValueError) as e:
    raise UserError(f"--distributed: jax.distributed.initialize failed: {e}") from None


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


def memory_settings(cfg, FLAGS):
  """`cfg` (a TrainConfig) with --remat / --scan_layers / --micro_batch_size (and --verbose)
  applied when given."""
  import dataclasses
  if getattr(FLAGS, "verbose", False):
    cfg = dataclasses.replace(cfg, verbose=True)
  if FLAGS.remat is not None:
    cfg = dataclasses.replace(cfg, remat=FLAGS.remat)
  if getattr(FLAGS, "scan_layers", None) is not None:
    cfg = dataclasses.replace(cfg, scan_layers=FLAGS.scan_layers)
  if FLAGS.micro_batch_size is not None:
    cfg = dataclasses.replace(cfg, micro_batch_size=FLAGS.micro_batch_size)
  return cfg


# The slot engine's default number of slots (`botjax.sampling.SlotEngine(num_slots=)`).
SLOT_ENGINE_SLOTS = 64


def plan_text(model: str, mesh: str, cfg, device_memory_gib: float | None = None, *,
              compute_flops: bool = True) -> str:
  """The dry-run memory/FLOPs plan of one update of `cfg` (a TrainConfig) on `mesh`, and whether
  it fits `device_memory_gib` (default: the attached accelerator's memory). The experiments load
  their models with float32 parameters and computation (`load_pretrained`'s defaults)."""
  import jax.numpy as jnp
  from botjax import models
  r = cfg.rollout
  rows = r.prompts_per_step * r.group_size // max(cfg.mini_batches, 1)
  memory = None if device_memory_gib is None else int(device_memory_gib * (1 << 30))
  return user(lambda: str(models.plan(
      model, mesh, batch_size=rows, seq_len=r.max_prompt_tokens + r.max_new_tokens,
      completion_len=r.max_new_tokens, logprob_chunk=cfg.logprob_chunk, dtype=jnp.float32,
      remat=bool(cfg.remat), micro_batch_size=cfg.micro_batch_size, device_memory=memory,
      compute_flops=compute_flops, kv_slots=SLOT_ENGINE_SLOTS if r.engine == "slots" else 0)))


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
