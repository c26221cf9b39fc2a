"""Orbax checkpoints holding everything a run needs to continue exactly where it stopped.

A checkpoint at step N (`<workdir>/checkpoints/N/`) stores the TrainState (`state`: params,
optimizer state, update counter, PRNG key; see `botjax.train.step.TrainState`) and a JSON record
(`meta`: the full run config, the prompt-source position, the host loop's own counters). The
trainer saves one every `TrainConfig.checkpoint_every` steps and at the end, and keeps the newest
`TrainConfig.keep_checkpoints` (default 2; older ones are deleted as new ones land).

`Checkpointer.restore_latest` (resume) refuses a config that differs in a field that matters,
naming each differing field; `Checkpointer.restore_params(step, like)` reads the policy
parameters of any saved step alone (no optimizer state, no config check), which is what
`botjax.train.load_params(workdir, step)` uses.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from botjax.train.config import config_diff


class ConfigMismatchError(ValueError):
  """The saved run config differs from the current one in fields that change the run."""


def saved_config(directory: str) -> dict | None:
  """The run config saved with the newest checkpoint in `directory` (`<workdir>/checkpoints`),
  or None when it holds none (read without keeping a manager open)."""
  if not os.path.isdir(directory):
    return None
  mngr = ocp.CheckpointManager(os.path.abspath(directory),
                               options=ocp.CheckpointManagerOptions(create=False))
  try:
    latest = _latest_meta(mngr)
    return None if latest is None else latest[1].get("config", {})
  finally:
    mngr.close()


def _latest_meta(mngr) -> tuple[int, dict] | None:
  """(step, meta) of a manager's newest checkpoint (its JSON part only), or None."""
  step = mngr.latest_step()
  if step is None:
    return None
  return step, mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]


class Checkpointer:
  """Saves checkpoints of a run's TrainState and counters; keeps the newest `keep`.

  Args:
    directory: where checkpoints live (`<workdir>/checkpoints`, `RunDir.checkpointer`).
    keep: how many recent checkpoints to keep (`TrainConfig.keep_checkpoints`).
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

  def steps(self) -> list[int]:
    """The saved steps, ascending."""
    return sorted(int(s) for s in self._mngr.all_steps())

  def restore_params(self, step: int, like: Any) -> Any:
    """The policy parameters saved at `step`, read alone (no optimizer state, no config check).

    Args:
      step: a saved step (`steps()`).
      like: a model (`nnx.Module`, possibly abstract: `nnx.eval_shape`) or its parameters
        (`nnx.State` of its `nnx.Param` leaves, concrete or `jax.ShapeDtypeStruct`): the tree
        structure and shardings to restore onto.

    Returns:
      The parameters, a tree like `like`'s parameters, in the dtypes they were saved with.

    Raises:
      ValueError: `step` is not saved here (the message lists the saved steps).
    """
    from flax import nnx
    if step not in self.steps():
      raise ValueError(f"no checkpoint of step {step} in {self.directory}; saved: {self.steps()}")
    params = nnx.state(like, nnx.Param) if isinstance(like, nnx.Module) else like
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])   # for abstract leaves
    target = {"params": jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                       sharding=getattr(x, "sharding", None) or one), params)}
    args = jax.tree.map(lambda x: ocp.ArrayRestoreArgs(sharding=x.sharding), target)
    # A checkpointer of its own: the manager's handler for `state` is the one it saved with
    # (StandardSave), which restores whole trees only.
    with ocp.PyTreeCheckpointer() as ckptr:
      out = ckptr.restore(os.path.join(self.directory, str(step), "state"),
                          args=ocp.args.PyTreeRestore(item=target, restore_args=args,
                                                      partial_restore=True))
    return out["params"]

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
    latest = _latest_meta(self._mngr)
    if latest is None:
      return None
    step, meta = latest
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
