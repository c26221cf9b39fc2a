"""Metrics sinks: JSONL (always), TensorBoard event files, Weights & Biases (when asked)."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Mapping

import numpy as np


def _plain(v):
  if isinstance(v, (np.generic, np.ndarray)):
    v = v.item() if np.ndim(v) == 0 else np.asarray(v).tolist()
  if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
    v = v.item()
  if isinstance(v, float) and not math.isfinite(v):
    return str(v)
  return v


class MetricsWriter:
  """Writes one record per call to `<workdir>/metrics.jsonl` and, optionally, TensorBoard/W&B.

  Args:
    workdir: the run directory.
    tensorboard: also write TensorBoard event files under `<workdir>/tb` (tensorboardX).
    wandb_project: a Weights & Biases project name, or "" for none; requires `wandb`.
    config: the run config dict (recorded by W&B).
    filename: the JSONL file name.
  """

  def __init__(self, workdir: str, *, tensorboard: bool = True, wandb_project: str = "",
               config: Mapping | None = None, filename: str = "metrics.jsonl"):
    os.makedirs(workdir, exist_ok=True)
    self.path = os.path.join(workdir, filename)
    self._f = open(self.path, "a", buffering=1)
    self._tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(os.path.join(workdir, "tb"))
    self._wandb = None
    if wandb_project:
      try:
        import wandb
      except ImportError:
        raise ImportError("wandb_project is set but wandb is not installed: pip install wandb") from None
      self._wandb = wandb.init(project=wandb_project, config=dict(config or {}), dir=workdir)

  def write(self, step: int, metrics: Mapping, **extra) -> dict:
    record = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}, **extra}
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
    self._f.close()
    if self._tb is not None:
      self._tb.close()
    if self._wandb is not None:
      self._wandb.finish()


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def progress(iterable, *, total=None, desc="", enabled=True):
  """A tqdm bar on a terminal (stderr), a plain iterable otherwise."""
  if not enabled:
    return iterable
  from tqdm.auto import tqdm
  return tqdm(iterable, total=total, desc=desc, dynamic_ncols=True, file=sys.stderr,
              disable=not sys.stderr.isatty() and not os.environ.get("BOTJAX_PROGRESS"))
