"""Orbax checkpoints holding everything a run needs to continue exactly where it stopped.

A checkpoint at step N stores the TrainState (params, optimizer state, update counter, PRNG
key) and a JSON record: the full run config, the data-iterator position, the host loop's own
counters. `Checkpointer.restore_latest` refuses a config that differs in a field that matters,
naming each differing field.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from botjax.train.config import config_diff


class ConfigMismatchError(ValueError):
  """The saved run config differs from the current one in fields that change the run."""


class Checkpointer:
  """Saves every `every` steps (and on demand), keeps the last `keep`.

  Args:
    directory: where checkpoints live (`<workdir>/checkpoints`).
    keep: how many recent checkpoints to keep.
  """

  def __init__(self, directory: str, *, keep: int = 2):
    self.directory = os.path.abspath(directory)
    self._mngr = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
    )

  def save(self, step: int, state: Any, meta: dict) -> None:
    self._mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
    self._mngr.wait_until_finished()

  def latest_step(self) -> int | None:
    return self._mngr.latest_step()

  def restore_latest(self, abstract_state: Any, config: dict) -> tuple[Any, dict] | None:
    """Restores the newest checkpoint onto `abstract_state`'s structure and shardings.

    Args:
      abstract_state: a TrainState (concrete or `jax.ShapeDtypeStruct` leaves) giving the
        tree structure, dtypes and shardings to restore into.
      config: the current run config as `config.to_dict` gives it.

    Returns:
      (state, meta), or None when the directory has no checkpoint.

    Raises:
      ConfigMismatchError: the saved config differs in a field that matters.
    """
    step = self._mngr.latest_step()
    if step is None:
      return None
    meta = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    diffs = config_diff(meta.get("config", {}), config)
    if diffs:
      raise ConfigMismatchError(
          f"refusing to resume from {self.directory} (step {step}): the saved config differs in "
          f"{len(diffs)} field(s) that change the run:\n  " + "\n  ".join(diffs) +
          "\nUse a new --workdir, or restore the saved values.")
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        abstract_state)
    restored = self._mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target)))
    return restored["state"], meta

  def close(self) -> None:
    self._mngr.wait_until_finished()
    self._mngr.close()
