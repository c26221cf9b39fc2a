"""The compiled programs of a run's update, and the loop of mini-batches and PPO epochs over them.

`UpdatePrograms` compiles each program once and picks one per batch:

  update      `step.make_update_fn`: one jitted optimizer update on a mini-batch, with
              gradient accumulation over micro-batches (`TrainConfig.micro_batch_size`).
  parallel    `ParallelUpdate`: the same update split over host threads (small CPU hosts,
              `TrainConfig.host_threads`; see `threads`).
  logprobs    `step.make_logprob_fn`: teacher-forced log-probs under given parameters (the
              reference policy's for a KL term; the behaviour policy's for an engine whose
              log-probs are not exact).

Prompt sharing (`TrainConfig.share_prompts`): the rows of a group share one forward pass of their
prompt when that pays (`prompt_slots`); the number of prompt slots U is part of a program's
static shape, chosen from the batch so that it stays the same from step to step.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from botjax import algorithms, xla_cpu
from botjax.train import step as step_lib
from botjax.train.config import TrainConfig


def commit(tree, mesh):
  """Places uncommitted leaves (fresh optimizer state, step, key) where the update expects them.

  Otherwise the first update, whose inputs are uncommitted, and the second, whose inputs are
  the first one's committed outputs, compile two programs for the same shapes.
  """
  if mesh is not None:
    from jax.sharding import NamedSharding, PartitionSpec
    default = NamedSharding(mesh, PartitionSpec())
  else:
    default = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.tree.map(
      lambda x: x if getattr(x, "committed", getattr(x, "_committed", True)) else
      jax.device_put(x, default), tree)


def check_layout(cfg: TrainConfig, model) -> bool:
  """The model's `scan_layers` (its parameter layout), checked against `cfg.scan_layers`.

  Raises:
    ValueError: they differ (the layout is fixed when the model is built).
  """
  scanned = bool(getattr(model, "scan_layers", False))
  if cfg.scan_layers is not None and cfg.scan_layers != scanned:
    raise ValueError(f"TrainConfig.scan_layers={cfg.scan_layers}, but the model was built "
                     f"with scan_layers={scanned}: the layout of its parameters is fixed when "
                     f"it is built; load it with load_pretrained(..., scan_layers="
                     f"{cfg.scan_layers}) (or Decoder(..., scan_layers={cfg.scan_layers})), "
                     f"or set scan_layers=None")
  return scanned


class UpdatePrograms:
  """The update programs of one run (a cache keyed by their static shapes) and the update loop.

  Args:
    cfg: the TrainConfig (mini_batches, ppo_epochs, micro_batch_size, logprob_chunk,
      share_prompts, host_threads, max_skipped_updates, seed, rollout.prompts_per_step).
    recipe: the run's recipe (static in every program).
    graphdef, rest: the split model (`step.split_model`).
    optimizer: the optax transformation.
    temperature: the scoring temperature (`SamplingConfig.logp_temperature`).
    cut: (top_k, top_p) of the run's sampling rule when its log-probs are truncated
      (`SamplingConfig.logp_truncated`), else None: `logprobs_own_cut`'s cut.
    mesh: the device mesh, or None.
    where: parameters whose devices decide the default host threads (`xla_cpu`).
  """

  def __init__(self, cfg: TrainConfig, recipe: algorithms.Recipe, graphdef, rest, optimizer, *,
               temperature: float, cut: tuple[int, float] | None = None, mesh=None,
               where: Any = None):
    self.cfg, self.recipe, self.graphdef, self.rest = cfg, recipe, graphdef, rest
    self.sampling_cut, self._cut_fn = cut, None
    self.optimizer, self.temperature, self.mesh, self.where = optimizer, temperature, mesh, where
    self._programs: dict = {}
    self._logprob_fn = step_lib.make_logprob_fn(graphdef, rest, temperature=temperature,
                                                chunk=cfg.logprob_chunk)

  # -- programs ------------------------------------------------------------------------------

  def update_fn(self, num_micro: int, num_prompts: int = 0):
    """The jitted update for `num_micro` micro-batches and U = `num_prompts` prompt slots."""
    key = ("update", num_micro, num_prompts)
    if key not in self._programs:
      self._programs[key] = step_lib.make_update_fn(
          self.graphdef, self.rest, self.recipe, self.optimizer, num_micro=num_micro,
          temperature=self.temperature, chunk=self.cfg.logprob_chunk, num_prompts=num_prompts)
    return self._programs[key]

  def parallel_update(self, parts: int, num_prompts: int) -> step_lib.ParallelUpdate:
    """The update split over `parts` host threads."""
    key = ("parallel", parts, num_prompts)
    if key not in self._programs:
      self._programs[key] = step_lib.ParallelUpdate(
          self.graphdef, self.rest, self.recipe, self.optimizer, parts=parts,
          temperature=self.temperature, chunk=self.cfg.logprob_chunk, num_prompts=num_prompts)
    return self._programs[key]

  def logprobs(self, params, input_ids, positions, attention_mask, completion_len: int):
    """Teacher-forced log-probs [B, T] of the last `completion_len` columns under `params`
    (a `build_batch` `LogpFn` once `params` is bound)."""
    slots = self.prompt_slots(input_ids, positions, attention_mask, completion_len,
                              input_ids.shape[0])
    logp, _ = self._logprob_fn(params, input_ids, positions, attention_mask, completion_len,
                               slots)
    return logp

  def logprobs_own_cut(self, params, input_ids, positions, attention_mask,
                       completion_len: int):
    """(logp, support) [B, T] each: the teacher-forced log-probs under `params`' own top-k /
    top-p cut of the run's sampling rule, and that cut (`completion_logprobs_own_cut`), for
    an engine that samples truncated but returns no cut (vLLM)."""
    if self.sampling_cut is None:
      raise ValueError("logprobs_own_cut: the run's sampling rule cuts nothing (no top-k / "
                       "top-p, or truncated_logp=False)")
    if self._cut_fn is None:
      self._cut_fn = step_lib.make_logprob_fn(self.graphdef, self.rest,
                                              temperature=self.temperature,
                                              chunk=self.cfg.logprob_chunk,
                                              cut=self.sampling_cut)
    slots = self.prompt_slots(input_ids, positions, attention_mask, completion_len,
                              input_ids.shape[0])
    logp, _, support = self._cut_fn(params, input_ids, positions, attention_mask,
                                    completion_len, slots)
    return logp, support

  def prompt_slots(self, input_ids, positions, attention_mask, completion_len: int,
                   rows_per_slice: int, parts: int = 1) -> int:
    """`num_prompts` for the update and the log-probs (0 = no prompt sharing).

    With `parts` > 1 the rows are cut into that many contiguous slices (a parallel update);
    U then bounds the distinct prompts of each slice.
    """
    if not self.cfg.share_prompts or (self.mesh is not None and self.mesh.size > 1):
      # Across devices the gather of each row's prompt keys would cross shards; not measured.
      return 0
    p = input_ids.shape[1] - completion_len
    ids, pos, msk = (np.asarray(a[:, :p]) for a in (input_ids, positions, attention_mask))
    at_least = self.cfg.rollout.prompts_per_step
    if parts == 1:
      return step_lib.prompt_slots(ids, pos, msk, rows_per_slice, at_least=at_least)
    n = ids.shape[0] // parts
    slots = [step_lib.prompt_slots(ids[i * n:(i + 1) * n], pos[i * n:(i + 1) * n],
                                   msk[i * n:(i + 1) * n], n, at_least=-(-at_least // parts))
             for i in range(parts)]
    return 0 if 0 in slots else max(slots)

  def threads(self, mb_rows: int, num_micro: int) -> int:
    """Host threads for one mini-batch's update (1 = the single jitted `update`).

    `TrainConfig.host_threads`, or with 0 two on small CPU hosts without a mesh (as the
    jax engine does); one when the mini-batch is micro-batched or does not split evenly.
    """
    threads = self.cfg.host_threads
    if threads == 0:
      mesh = self.mesh if self.mesh is not None and self.mesh.size > 1 else None
      threads = xla_cpu.default_host_threads(self.where, mesh=mesh)
    if threads == 1 or num_micro != 1 or mb_rows % threads:
      return 1
    return threads

  def program(self, batch: step_lib.RLBatch, mb_rows: int, micro: int):
    """The update program for mini-batches of `mb_rows` rows in micro-batches of `micro`: the
    single jitted update, or its host-parallel form (`threads`)."""
    threads = self.threads(mb_rows, mb_rows // micro)
    if threads > 1:
      # One mini-batch: its slices are known here. Several: rows are shuffled per epoch, so
      # U bounds any slice of mb_rows // threads rows.
      one = batch.input_ids.shape[0] == mb_rows
      return self.parallel_update(threads, self.prompt_slots(
          batch.input_ids, batch.positions, batch.attention_mask, batch.completion_len,
          mb_rows // threads, parts=threads if one else 1))
    return self.update_fn(mb_rows // micro, self.prompt_slots(
        batch.input_ids, batch.positions, batch.attention_mask, batch.completion_len, micro))

  # -- the update loop -----------------------------------------------------------------------

  def train(self, state: step_lib.TrainState, batch: step_lib.RLBatch, *, step: int,
            skipped_in_a_row: int = 0) -> tuple[step_lib.TrainState, dict, int]:
    """`ppo_epochs` passes of `mini_batches` optimizer updates over the batch.

    Mini-batch rows are shuffled per epoch with a seed derived from `(cfg.seed, step)`.

    Returns:
      (new state, mean metrics over the updates plus skipped_updates, consecutive skipped
       updates so far).

    Raises:
      ValueError: the batch does not split into the mini- and micro-batches.
      FloatingPointError: more than `max_skipped_updates` consecutive updates were skipped
        (non-finite loss or gradient).
    """
    cfg = self.cfg
    B = batch.input_ids.shape[0]
    nmb = cfg.mini_batches
    if B % nmb:
      raise ValueError(f"{B} rollouts per step do not split into mini_batches={nmb}")
    mb_rows = B // nmb
    micro = cfg.micro_batch_size or mb_rows
    if mb_rows % micro:
      raise ValueError(f"mini-batch of {mb_rows} rows does not split into micro_batch_size={micro}")
    fn = self.program(batch, mb_rows, micro)
    rng = np.random.default_rng([cfg.seed, step, 7])
    sums: dict[str, float] = {}
    n = 0
    for _ in range(cfg.ppo_epochs):
      order = rng.permutation(B) if nmb > 1 else np.arange(B)
      for j in range(nmb):
        rows = jnp.asarray(order[j * mb_rows:(j + 1) * mb_rows])
        mb = jax.tree.map(lambda x: x[rows], batch) if nmb > 1 else batch
        if self.mesh is not None:
          from botjax.models.sharding import batch_sharding
          if jax.process_count() > 1:   # the same host values on every process -> global
            mb = jax.tree.map(np.asarray, mb)
          mb = jax.tree.map(lambda x: jax.device_put(x, batch_sharding(self.mesh, x.ndim)), mb)
        state, m = fn(state, mb)
        m = jax.device_get(m)
        for k, v in m.items():
          sums[k] = sums.get(k, 0.0) + float(v)
        n += 1
        skipped_in_a_row = skipped_in_a_row + 1 if float(m["skipped"]) else 0
        if skipped_in_a_row > cfg.max_skipped_updates:
          raise FloatingPointError(
              f"{skipped_in_a_row} consecutive updates had a non-finite loss or gradient "
              f"(max_skipped_updates={cfg.max_skipped_updates}); stopping at step {step}")
    out = {k: v / n for k, v in sums.items()}
    out["skipped_updates"] = sums.get("skipped", 0.0)
    out.pop("skipped", None)
    return state, out, skipped_in_a_row

  def close(self) -> None:
    """Stops the threads of the host-parallel updates."""
    for fn in self._programs.values():
      if isinstance(fn, step_lib.ParallelUpdate):
        fn.close()
