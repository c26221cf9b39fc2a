"""The run directory: every file a run writes or reads, and its format, in one place.

  <workdir>/
    config.json        the run config (`RunDir.write_config`), plus the base checkpoint the
                       model was loaded from ("checkpoint") and its layer layout ("scan_layers")
    metrics.jsonl      one JSON record per logged step (`RunDir.metrics_writer`, `load_metrics`)
    metrics.jsonl.<unix time>.old   the records of an earlier run that started over here
    eval.json          {"latest": {...}, "history": [{"step": s, ...}, ...]} (`RunDir.append_eval`)
    checkpoints/<step>/  Orbax checkpoints of the TrainState and the loop's counters
                       (`RunDir.checkpointer`, `load_params`)
    hf_final/          a Hugging Face export of the final policy (experiments/react.py)
    tb/                TensorBoard event files (`TrainConfig.tensorboard`)
    *.png              figures drawn into the run (`RunDir.file`)

`metrics.jsonl` rows (`load_metrics`): `{"step": s, ...}`, s = RL steps completed. Step 0 (a
run that starts from scratch with evaluation on) holds only the evaluation of the initial policy
(`eval/...` keys); every other row holds the step's training metrics (see `docs/extending.md`
for the keys) and, on evaluation steps, the `eval/...` keys. A resumed run first drops the rows
after its checkpoint (they are written again), so each step appears once.

Multi-process runs: every write goes through a `RunDir` whose `is_writer` is True on one process
only (default: `jax.process_index() == 0`); the others read and skip writes. Orbax checkpoints
are the exception: every process takes part in a save (Orbax coordinates them).

Light to import (standard library and numpy); jax and Orbax are imported when a checkpoint or
the process index is needed.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Mapping

import numpy as np

CONFIG = "config.json"
METRICS = "metrics.jsonl"
EVAL = "eval.json"
CHECKPOINTS = "checkpoints"
HF_FINAL = "hf_final"
TENSORBOARD = "tb"


class RunDirError(ValueError):
  """A run directory's file is missing or malformed (the message names the file)."""


def _plain(v):
  """A JSON-ready value: numpy / jax scalars as Python numbers, arrays as lists, non-finite
  floats as strings ("nan", "inf")."""
  if isinstance(v, (np.generic, np.ndarray)):
    v = v.item() if np.ndim(v) == 0 else np.asarray(v).tolist()
  if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
    v = v.item()
  if isinstance(v, float) and not math.isfinite(v):
    return str(v)
  return v


def read_jsonl(path: str) -> list[dict]:
  """The records of a JSONL file (one JSON object per non-empty line).

  Raises:
    RunDirError: the file is missing or a line is not JSON.
  """
  if not os.path.isfile(path):
    raise RunDirError(f"no such file: {path}")
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  try:
    return [json.loads(line) for line in lines]
  except json.JSONDecodeError as e:
    raise RunDirError(f"{path} is not JSONL (one JSON record per line): {e}") from None


def read_eval_history(path: str) -> list[dict]:
  """The `history` list of an eval.json ([{"step": s, key: value, ...}, ...]).

  Raises:
    RunDirError: missing file, invalid JSON, or no list of entries with a "step".
  """
  try:
    with open(path) as f:
      blob = json.load(f)
  except FileNotFoundError:
    raise RunDirError(f"no such file: {path}") from None
  except json.JSONDecodeError as e:
    raise RunDirError(f"{path} is not valid JSON: {e}") from None
  history = blob.get("history") if isinstance(blob, dict) else None
  if not isinstance(history, list) or not all(isinstance(h, dict) and "step" in h for h in history):
    raise RunDirError(f"{path} has no `history` list of {{'step': ..., 'pass@k': ...}} entries "
                      "(the eval.json format of `RunDir.append_eval`)")
  return history


class RunDir:
  """The files of one run under `path` (see the module docstring for the layout).

  Args:
    path: the run directory (`TrainConfig.workdir`).
    is_writer: whether this process writes files (None: `jax.process_index() == 0`, decided on
      the first write).
  """

  def __init__(self, path: str, *, is_writer: bool | None = None):
    self.path = os.fspath(path)
    self._is_writer = is_writer

  @property
  def is_writer(self) -> bool:
    if self._is_writer is None:
      import jax
      self._is_writer = jax.process_index() == 0
    return self._is_writer

  def file(self, name: str) -> str:
    """The path of `name` inside the run directory (figures, experiment-specific files)."""
    return os.path.join(self.path, name)

  @property
  def config_path(self) -> str:
    return self.file(CONFIG)

  @property
  def metrics_path(self) -> str:
    return self.file(METRICS)

  @property
  def eval_path(self) -> str:
    return self.file(EVAL)

  @property
  def checkpoints_dir(self) -> str:
    return self.file(CHECKPOINTS)

  @property
  def hf_final(self) -> str:
    return self.file(HF_FINAL)

  def has_run(self) -> bool:
    """True when a run has left checkpoints or metrics here."""
    return any(os.path.exists(p) for p in (self.checkpoints_dir, self.metrics_path))

  # -- config.json ---------------------------------------------------------------------------

  def write_config(self, config: Mapping[str, Any]) -> None:
    """Writes config.json (sorted keys, indented); no-op on a process that does not write."""
    if not self.is_writer:
      return
    os.makedirs(self.path, exist_ok=True)
    self._write_json(self.config_path, dict(config))

  def read_config(self) -> dict:
    """config.json as a dict.

    Raises:
      RunDirError: no config.json here (not a run directory) or invalid JSON.
    """
    try:
      with open(self.config_path) as f:
        return json.load(f)
    except FileNotFoundError:
      raise RunDirError(f"{self.path} has no {CONFIG}: not a run directory") from None
    except json.JSONDecodeError as e:
      raise RunDirError(f"{self.config_path} is not valid JSON: {e}") from None

  # -- metrics.jsonl -------------------------------------------------------------------------

  def begin_metrics(self, resume_step: int) -> None:
    """Keeps metrics.jsonl consistent with the state a run continues from.

    A run resumed at step `resume_step` > 0 drops the records a crashed run wrote after its
    last checkpoint (they will be written again); a run starting at step 0 moves an earlier
    file aside (`metrics.jsonl.<unix time>.old`), never deleting it.
    """
    path = self.metrics_path
    if not self.is_writer or not os.path.exists(path):
      return
    if resume_step == 0:
      os.replace(path, f"{path}.{int(time.time())}.old")
      return
    with open(path) as f:
      lines = [line for line in f if line.strip()]
    keep = [line for line in lines if json.loads(line).get("step", 0) <= resume_step]
    if len(keep) != len(lines):
      with open(path + ".tmp", "w") as f:
        f.writelines(keep)
      os.replace(path + ".tmp", path)

  def metrics_writer(self, *, tensorboard: bool = False, wandb_project: str = "",
                     config: Mapping | None = None) -> MetricsWriter:
    """A `MetricsWriter` appending to metrics.jsonl (and TensorBoard / W&B when asked)."""
    return MetricsWriter(self, tensorboard=tensorboard, wandb_project=wandb_project,
                         config=config)

  def read_metrics(self) -> list[dict]:
    """metrics.jsonl's records in file order (see the module docstring for the rows)."""
    return read_jsonl(self.metrics_path)

  # -- eval.json -----------------------------------------------------------------------------

  def read_eval(self) -> list[dict]:
    """eval.json's history (an empty list when the run has none)."""
    if not os.path.exists(self.eval_path):
      return []
    return read_eval_history(self.eval_path)

  def append_eval(self, step: int, values: Mapping[str, Any]) -> dict:
    """Adds `{"step": step, **values}` to eval.json's history (and as its "latest").

    Returns:
      The entry added.
    """
    entry = {"step": int(step), **{k: _plain(v) for k, v in values.items()}}
    if self.is_writer:
      history = self.read_eval() + [entry]
      os.makedirs(self.path, exist_ok=True)
      self._write_json(self.eval_path, {"latest": entry, "history": history})
    return entry

  # -- checkpoints ---------------------------------------------------------------------------

  def checkpointer(self, *, keep: int = 2):
    """The run's `Checkpointer` (checkpoints/, the newest `keep` kept)."""
    from botjax.train.checkpoint import Checkpointer
    return Checkpointer(self.checkpoints_dir, keep=keep)

  def checkpoint_steps(self) -> list[int]:
    """The steps saved under checkpoints/, ascending (an empty list when there are none)."""
    root = self.checkpoints_dir
    if not os.path.isdir(root):
      return []
    return sorted(int(d) for d in os.listdir(root)
                  if d.isdigit() and os.path.isdir(os.path.join(root, d)))

  def base_checkpoint(self) -> str:
    """The Hugging Face checkpoint the run's model was loaded from (config.json "checkpoint").

    Raises:
      RunDirError: config.json records none (the trainer was given a model object without
        `checkpoint=`), or the directory is gone.
    """
    base = self.read_config().get("checkpoint")
    if not base:
      raise RunDirError(f"{self.config_path} records no base checkpoint (\"checkpoint\"); pass "
                        "the model's structure: load_params(workdir, step, like=model)")
    if not os.path.exists(os.path.join(base, "config.json")):
      raise RunDirError(f"the base checkpoint of {self.path} ({base}, from its {CONFIG}) is gone")
    return base

  def load_params(self, step: int | None = None, *, like: Any = None):
    """The policy parameters saved at `step` (default: the newest checkpoint).

    Args:
      step: a saved step (`checkpoint_steps()`), or None for the newest.
      like: the structure and shardings to restore onto: a model (`nnx.Module`) or its
        parameters (`nnx.state(model, nnx.Param)`); None builds it, without weights, from the
        base checkpoint recorded in config.json (`base_checkpoint`).

    Returns:
      The parameters (an `nnx.State` of the model's `nnx.Param` leaves, dtypes as saved).

    Raises:
      RunDirError: no checkpoint (or not that step), or no way to know the model's structure.
    """
    steps = self.checkpoint_steps()
    if not steps:
      raise RunDirError(f"{self.path} holds no checkpoint (checkpoints/<step>/)")
    step = steps[-1] if step is None else int(step)
    if step not in steps:
      raise RunDirError(f"{self.path} has no checkpoint of step {step}; saved: {steps}")
    if like is None:
      like = self._abstract_model()
    ckpt = self.checkpointer(keep=len(steps))
    try:
      return ckpt.restore_params(step, like)
    finally:
      ckpt.close()

  def load_model(self, step: int | None = None):
    """The base checkpoint's model (config.json "checkpoint") with the parameters of `step`."""
    from flax import nnx

    from botjax import models
    model = models.load_pretrained(self.base_checkpoint(),
                                   scan_layers=bool(self.read_config().get("scan_layers")))
    nnx.update(model, self.load_params(step, like=model))
    return model

  def _abstract_model(self):
    from flax import nnx

    from botjax import models
    from botjax.models.weights import read_config
    cfg = read_config(self.base_checkpoint())
    scan = bool(self.read_config().get("scan_layers"))
    return nnx.eval_shape(lambda: models.Decoder(cfg, rngs=nnx.Rngs(0), scan_layers=scan))

  @staticmethod
  def _write_json(path: str, obj) -> None:
    with open(path + ".tmp", "w") as f:
      json.dump(obj, f, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)


class MetricsWriter:
  """Appends one record per `write` to metrics.jsonl and, optionally, TensorBoard / W&B.

  Nothing is written (or opened) on a process whose `RunDir.is_writer` is False.

  Args:
    run: the `RunDir` (or its path).
    tensorboard: also write TensorBoard event files under `<workdir>/tb` (tensorboardX).
    wandb_project: a Weights & Biases project name, or "" for none; requires `wandb`.
    config: the run config dict (recorded by W&B).
  """

  def __init__(self, run: RunDir | str, *, tensorboard: bool = False, wandb_project: str = "",
               config: Mapping | None = None):
    self.run = run if isinstance(run, RunDir) else RunDir(run)
    self.path = self.run.metrics_path
    self._f = self._tb = self._wandb = None
    if not self.run.is_writer:
      return
    os.makedirs(self.run.path, exist_ok=True)
    self._f = open(self.path, "a", buffering=1)
    if tensorboard:
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(self.run.file(TENSORBOARD))
    if wandb_project:
      try:
        import wandb
      except ImportError:
        raise ImportError("wandb_project is set but wandb is not installed: pip install "
                          "wandb") from None
      self._wandb = wandb.init(project=wandb_project, config=dict(config or {}),
                               dir=self.run.path)

  def write(self, step: int, metrics: Mapping, **extra) -> dict:
    """Writes `{"step": step, **metrics, **extra}` and returns it (JSON-ready values)."""
    record = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}, **extra}
    if self._f is None:
      return record
    self._f.write(json.dumps(record) + "\n")
    scalars = {k: v for k, v in record.items()
               if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
    if self._tb is not None:
      for k, v in scalars.items():
        self._tb.add_scalar(k, v, step)
    if self._wandb is not None:
      self._wandb.log(scalars, step=step)
    return record

  def close(self):
    if self._f is not None:
      self._f.close()
    if self._tb is not None:
      self._tb.close()
    if self._wandb is not None:
      self._wandb.finish()


def load_metrics(workdir: str) -> list[dict]:
  """The records of a run's metrics.jsonl, one per logged step, in order (module docstring)."""
  return RunDir(workdir).read_metrics()


def load_params(workdir: str, step: int | None = None, *, like: Any = None):
  """The policy parameters of the run in `workdir` at `step` (`RunDir.load_params`)."""
  return RunDir(workdir).load_params(step, like=like)


__all__ = ["RunDir", "RunDirError", "MetricsWriter", "load_metrics", "load_params", "read_jsonl",
           "read_eval_history", "CONFIG", "METRICS", "EVAL", "CHECKPOINTS", "HF_FINAL"]
