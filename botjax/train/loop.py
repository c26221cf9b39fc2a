"""The RL loop: collect rollouts -> advantages -> update -> log -> checkpoint.

`RLTrainer.step` is one iteration, each part in one place:

  collect      `botjax.train.rollouts.RolloutCollector`: sampling, host scoring, spans and steps
               mapped to tokens, DAPO dynamic sampling (resample groups of constant accuracy),
               filler rows, rows lost to infrastructure failures kept out of the loss.
  advantages   `build_batch`: `algorithms.compute_advantages` (GRPO, RLOO, BoT-GRPO, PURE,
               VeriGate, BPPO selection, ReCo weights, DAPO overlong shaping) in one jitted call,
               plus the reference log-probs when the recipe has a KL term.
  update       `update`: mini-batches x PPO epochs through the jitted update (`_update_program`
               chooses the program: one jitted update, or host-parallel slices).
  log          `_metrics`: reward, accuracy, lengths, timings, failures.
  checkpoint   `save` / `_maybe_resume`.

The recipe is adapted to the reward through the reward's declared `RewardSpec` only
(`algorithms.recipe_for_reward`): a reward whose global and local parts are already weighted
(MathReward, BoT-GRPO arXiv 2610.09804 eq. 8; ReactReward, eq. 6) is read with w_global =
w_local = 1.

Determinism and exact resume: step `s` samples with `fold_in(PRNGKey(seed), s)`, reads prompts
from the prompt source at a saved integer position, shuffles mini-batches with a seed derived
from `(seed, s)`, and passes `(step, row)` to reward functions in each item's metadata
(`_step`, `_row`) so that noisy judges can seed themselves. A run restarted in the same work
directory restores the newest checkpoint and continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import warnings
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from botjax import algorithms, xla_cpu
from botjax.rewards.base import RewardSpec, reward_spec
from botjax.rewards.pool import RewardPool
from botjax.sampling import Sampler, SamplingConfig
from botjax.train import step as step_lib
from botjax.train.checkpoint import Checkpointer
from botjax.train.config import TrainConfig, to_dict
from botjax.train.rollouts import (  # noqa: F401  (re-exported: their import path before rollouts.py)
    PROMPT_TRIM_MULTIPLE, TRIM_MULTIPLE, ListPrompts, PromptSource, RolloutCollector, Rollouts,
    concat_rollouts, default_prompt, filler_rollouts, take_rows, trim_columns)
from botjax.train.writer import MetricsWriter, progress

# Old private names, kept for code that imported them from here.
_concat_rollouts, _take, _trim_columns = concat_rollouts, take_rows, trim_columns


def recipe_for_run(cfg: TrainConfig, spec: RewardSpec) -> algorithms.Recipe:
  """The run's recipe: `cfg.recipe` adapted to the reward's spec, then `cfg.recipe_overrides`.

  Raises:
    ValueError: the reward lacks a signal the recipe reads, or an override of w_global /
      w_local would weigh an already weighted reward twice.
  """
  overrides = dict(cfg.recipe_overrides)
  algorithms.get_recipe(cfg.recipe, **overrides)          # unknown names fail here, by name
  # DAPO's overlong lengths and Dr. GRPO's L_norm follow the run's generation budget unless
  # the overrides set them (`Recipe.for_budget`).
  base = algorithms.get_recipe(cfg.recipe, max_new_tokens=cfg.rollout.max_new_tokens)
  recipe = algorithms.recipe_for_reward(base, spec)
  recipe = dataclasses.replace(recipe, **overrides)
  algorithms.check_reward_inputs(recipe, spec)
  return recipe


def _commit(tree, mesh):
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


class RLTrainer:
  """Post-trains a `botjax.models.Decoder` with any recipe of `botjax.algorithms`.

  Args:
    cfg: the TrainConfig.
    model: the policy (an nnx Module; it is split, and its parameters live in `self.state`).
    tokenizer: the model's tokenizer (chat template used for prompts unless `prompt_fn` gives
      token ids directly).
    prompts: a PromptSource (records by global index).
    reward_fn: a RewardFn (`botjax.rewards`); run in a `RewardPool` with the config's timeout.
      Its `spec` (`botjax.rewards.RewardSpec`) says what it gives; without one it is a plain
      sequence reward.
    prompt_fn: record -> chat messages, a string, or a list of token ids.
    eval_fn: optional `(trainer, step) -> dict` run every `cfg.eval_every` steps and at the end.
    mesh: optional device mesh; parameters should already carry their shardings.
    run_config: the full experiment config dict to save (default: `to_dict(cfg)`).
    stop_token_ids: extra ids that end a completion besides the tokenizer's EOS.
    sampler: reuse a Sampler (and its compiled programs) built for the same model and
      sampling config, e.g. across runs of several recipes in one process.
    reward_provides: deprecated; the reward's `spec` declares its signals. When given, every
      name must be a signal the spec declares.
  """

  def __init__(self, cfg: TrainConfig, *, model: nnx.Module, tokenizer, prompts: PromptSource,
               reward_fn, prompt_fn: Callable = default_prompt, eval_fn: Callable | None = None,
               mesh=None, run_config: Mapping | None = None,
               stop_token_ids: Sequence[int] = (), reward_provides: Sequence[str] | None = None,
               sampler: Sampler | None = None):
    self.cfg = cfg
    self.reward_spec = reward_spec(reward_fn)
    if reward_provides is not None:
      self._check_provides(reward_provides, reward_fn)
    self.recipe = recipe_for_run(cfg, self.reward_spec)
    self.tokenizer = tokenizer
    self.eval_fn = eval_fn
    self.mesh = mesh
    self.run_config = dict(run_config) if run_config is not None else to_dict(cfg)
    self.model_config = model.config
    if cfg.host_threads < 0:
      raise ValueError(f"host_threads must be >= 0 (0 = automatic), got {cfg.host_threads}")

    # sampling
    self.sampling = self._sampling_config(model, tokenizer, stop_token_ids)
    self.pad_id = self.sampling.pad_token_id
    self.temperature = self.sampling.logp_temperature
    if sampler is not None and sampler.config != self.sampling:
      raise ValueError(f"the given sampler's config {sampler.config} differs from the run's "
                       f"{self.sampling}")
    self._own_sampler = sampler is None
    self.sampler = sampler or Sampler(model, model.config, self.sampling, mesh=mesh,
                                      host_threads=cfg.host_threads or None)

    # parameters and optimizer
    scanned = bool(getattr(model, "scan_layers", False))
    if cfg.scan_layers is not None and cfg.scan_layers != scanned:
      raise ValueError(f"TrainConfig.scan_layers={cfg.scan_layers}, but the model was built "
                       f"with scan_layers={scanned}: the layout of its parameters is fixed when "
                       f"it is built; load it with load_pretrained(..., scan_layers="
                       f"{cfg.scan_layers}) (or Decoder(..., scan_layers={cfg.scan_layers})), "
                       f"or set scan_layers=None")
    self.graphdef, params, self.rest = step_lib.split_model(model, remat=cfg.remat)
    self.num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    self.optimizer = step_lib.make_optimizer(cfg.optim, cfg.steps * cfg.ppo_epochs * cfg.mini_batches)
    self.state = _commit(step_lib.init_state(params, self.optimizer, cfg.seed), mesh)
    self.ref_params = (jax.tree.map(jnp.copy, params) if self.recipe.kl_coef > 0 else None)
    self.host_step = 0             # RL iterations completed
    self.skipped_in_a_row = 0

    # rollouts
    self.pool = RewardPool(reward_fn, num_workers=cfg.reward.workers,
                           timeout_s=cfg.reward.timeout_s,
                           fallback_reward=cfg.reward.fallback_reward, kind=cfg.reward.kind)
    r = cfg.rollout
    self.collector = RolloutCollector(
        sampler=self.sampler, tokenizer=tokenizer, prompts=prompts, prompt_fn=prompt_fn,
        pool=self.pool, prompts_per_step=r.prompts_per_step, group_size=r.group_size,
        max_prompt_tokens=r.max_prompt_tokens, dynamic_sampling=self.recipe.dynamic_sampling,
        max_resample_rounds=self.recipe.max_resample_rounds, pad_id=self.pad_id)

    # compiled programs
    self._update_fns: dict = {}
    self._logprob_fn = step_lib.make_logprob_fn(self.graphdef, self.rest,
                                                temperature=self.temperature,
                                                chunk=cfg.logprob_chunk)
    self._adv_fn = jax.jit(self._advantages, static_argnames=("num_groups",))

    # checkpoints and logs
    self.checkpointer = Checkpointer(os.path.join(cfg.workdir, "checkpoints"),
                                     keep=cfg.keep_checkpoints)
    self.writer: MetricsWriter | None = None
    self.resumed_from: int | None = None
    self._maybe_resume()

  def _check_provides(self, provides: Sequence[str], reward_fn) -> None:
    warnings.warn("RLTrainer(reward_provides=...) is deprecated: the reward function's `spec` "
                  "(botjax.rewards.RewardSpec) declares its signals", DeprecationWarning,
                  stacklevel=3)
    declared = {s.value for s in self.reward_spec.signals}
    missing = sorted(set(provides) - declared)
    if missing:
      raise ValueError(f"reward_provides names {missing}, which the spec of {reward_fn!r} does "
                       f"not declare (it declares {sorted(declared)}); give the reward function "
                       f"a `spec = botjax.rewards.RewardSpec(...)` that declares them")

  def _sampling_config(self, model, tokenizer, stop_token_ids) -> SamplingConfig:
    r = self.cfg.rollout
    eos = [int(t) for t in np.atleast_1d(model.config.eos_token_id)]
    tok_eos = getattr(tokenizer, "eos_token_id", None)
    if tok_eos is not None and int(tok_eos) not in eos:
      eos.append(int(tok_eos))
    pad = getattr(tokenizer, "pad_token_id", None)
    pad_id = int(pad if pad is not None else model.config.pad_token_id or 0)
    return SamplingConfig(
        max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_k=r.top_k, top_p=r.top_p,
        eos_token_ids=tuple(eos), stop_token_ids=tuple(int(t) for t in stop_token_ids),
        pad_token_id=pad_id)

  @property
  def prompts(self) -> PromptSource:
    return self.collector.prompts

  @property
  def position(self) -> int:
    """Prompt-source position: records consumed so far."""
    return self.collector.position

  @position.setter
  def position(self, value: int) -> None:
    self.collector.position = int(value)

  # -- checkpoints ---------------------------------------------------------------------------

  def _maybe_resume(self):
    restored = self.checkpointer.restore_latest(self.state, self.run_config)
    if restored is None:
      return
    self.state, meta = restored
    self.position = int(meta["position"])
    self.host_step = int(meta["host_step"])
    self.skipped_in_a_row = int(meta.get("skipped_in_a_row", 0))
    self.resumed_from = self.host_step

  def save(self):
    meta = {"config": self.run_config, "position": self.position, "host_step": self.host_step,
            "skipped_in_a_row": self.skipped_in_a_row}
    self.checkpointer.save(self.host_step, self.state, meta)

  # -- parameters ----------------------------------------------------------------------------

  def full_state(self, params=None):
    """The model's full nnx.State (params + non-trainable variables) for the sampler."""
    params = self.state.params if params is None else params
    if len(jax.tree.leaves(self.rest)) == 0:
      return params
    return nnx.merge_state(params, self.rest)

  def model(self) -> nnx.Module:
    """A module view of the current parameters (for evaluation or saving)."""
    return nnx.merge(self.graphdef, self.state.params, self.rest)

  # -- rollouts (see botjax.train.rollouts) --------------------------------------------------

  def sample_and_score(self, records, key, *, step: int, group_offset: int = 0) -> Rollouts:
    """Samples `group_size` completions per record with the current policy and scores them."""
    return self.collector.sample_and_score(records, key, step=step, params=self.full_state(),
                                           group_offset=group_offset)

  def collect(self, key, step: int) -> tuple[Rollouts, dict]:
    """One step's rollouts; with DAPO dynamic sampling, groups of constant accuracy are
    resampled."""
    return self.collector.collect(key, step, params=self.full_state())

  def sample_filler(self, like: Rollouts | None, rows: int) -> Rollouts:
    """Rows that carry no loss (mask all False), to keep the batch shape when groups run out."""
    return filler_rollouts(like, rows, self.pad_id)

  # -- advantages ----------------------------------------------------------------------------

  def _advantages(self, rewards, mask, group_ids, local, step_rewards, step_mask, token_step,
                  old_logp, verifier, *, num_groups):
    return algorithms.compute_advantages(
        self.recipe, rewards=rewards, mask=mask, group_ids=group_ids, num_groups=num_groups,
        local_rewards=local if self.recipe.granularity is algorithms.Granularity.TOKEN else None,
        step_rewards=step_rewards, step_mask=step_mask, token_step=token_step,
        old_logp=old_logp, verifier=verifier)

  def build_batch(self, roll: Rollouts) -> tuple[step_lib.RLBatch, dict]:
    """Advantages + teacher-forcing inputs for the update, as device arrays.

    Groups are 0..P-1 plus group P, which holds the rows lost to infrastructure failures (all
    masked), so the advantages run with num_groups = P + 1.
    """
    roll = trim_columns(roll, TRIM_MULTIPLE, PROMPT_TRIM_MULTIPLE)
    opt = lambda x: None if x is None else jnp.asarray(x)  # noqa: E731
    a = self._adv_fn(  # DAPO overlong shaping happens inside compute_advantages
        jnp.asarray(roll.rewards), jnp.asarray(roll.mask), jnp.asarray(roll.group_ids),
        jnp.asarray(roll.local), opt(roll.step_rewards), opt(roll.step_mask),
        opt(roll.token_step), jnp.asarray(roll.logp), opt(roll.verifier),
        num_groups=self.cfg.rollout.prompts_per_step + 1)
    input_ids = np.concatenate([roll.prompt_ids, roll.tokens], axis=1).astype(np.int32)
    attn = np.concatenate([roll.prompt_mask, roll.mask], axis=1)
    positions = np.maximum(np.cumsum(attn.astype(np.int32), axis=1) - 1, 0).astype(np.int32)
    T = roll.tokens.shape[1]
    ref_logp = np.zeros((input_ids.shape[0], T), np.float32)
    if self.ref_params is not None:
      slots = self._prompt_slots(input_ids, positions, attn, T, input_ids.shape[0])
      ref_logp, _ = self._logprob_fn(self.ref_params, input_ids, positions, attn, T, slots)
    batch = step_lib.RLBatch(
        input_ids=jnp.asarray(input_ids), positions=jnp.asarray(positions),
        attention_mask=jnp.asarray(attn), old_logp=jnp.asarray(roll.logp),
        ref_logp=jnp.asarray(ref_logp), advantages=a.advantages,
        loss_mask=a.loss_mask, seq_weights=a.seq_weights)
    lm = np.asarray(a.loss_mask)
    av = np.asarray(a.advantages)[lm]
    info = {
        "adv_mean": float(av.mean()) if av.size else 0.0,
        "adv_std": float(av.std()) if av.size else 0.0,
        "adv_abs_max": float(np.abs(av).max()) if av.size else 0.0,
        "loss_token_fraction": float(lm.sum() / max(roll.mask.sum(), 1)),
    }
    return batch, info

  # -- update --------------------------------------------------------------------------------

  def _update_fn(self, num_micro: int, num_prompts: int = 0):
    if (num_micro, num_prompts) not in self._update_fns:
      self._update_fns[num_micro, num_prompts] = step_lib.make_update_fn(
          self.graphdef, self.rest, self.recipe, self.optimizer, num_micro=num_micro,
          temperature=self.temperature, chunk=self.cfg.logprob_chunk, num_prompts=num_prompts)
    return self._update_fns[num_micro, num_prompts]

  def _parallel_update(self, parts: int, num_prompts: int):
    key = ("parallel", parts, num_prompts)
    if key not in self._update_fns:
      self._update_fns[key] = step_lib.ParallelUpdate(
          self.graphdef, self.rest, self.recipe, self.optimizer, parts=parts,
          temperature=self.temperature, chunk=self.cfg.logprob_chunk, num_prompts=num_prompts)
    return self._update_fns[key]

  def _prompt_slots(self, input_ids, positions, attention_mask, completion_len: int,
                    rows_per_slice: int, parts: int = 1) -> int:
    """`num_prompts` for the update and the reference log-probs (0 = no prompt sharing).

    With `parts` > 1 the rows are cut into that many contiguous slices (a parallel update);
    U then bounds the distinct prompts of each slice.
    """
    if not self.cfg.share_prompts or (self.mesh is not None and self.mesh.size > 1):
      # Across devices the gather of each row's prompt keys would cross shards; not measured.
      return 0
    p = input_ids.shape[1] - completion_len
    ids, pos, msk = (np.asarray(a[:, :p]) for a in (input_ids, positions, attention_mask))
    if parts == 1:
      return step_lib.prompt_slots(ids, pos, msk, rows_per_slice,
                                   at_least=self.cfg.rollout.prompts_per_step)
    n = ids.shape[0] // parts
    slots = [step_lib.prompt_slots(ids[i * n:(i + 1) * n], pos[i * n:(i + 1) * n],
                                   msk[i * n:(i + 1) * n], n,
                                   at_least=-(-self.cfg.rollout.prompts_per_step // parts))
             for i in range(parts)]
    return 0 if 0 in slots else max(slots)

  def _update_threads(self, mb_rows: int, num_micro: int) -> int:
    """Host threads for one mini-batch's update (1 = the single jitted `update`).

    `TrainConfig.host_threads`, or with 0 two on small CPU hosts without a mesh (as the
    sampler does); one when the mini-batch is micro-batched or does not split evenly.
    """
    threads = self.cfg.host_threads
    if threads == 0:
      mesh = self.mesh if self.mesh is not None and self.mesh.size > 1 else None
      threads = xla_cpu.default_host_threads(self.state.params, mesh=mesh)
    if threads == 1 or num_micro != 1 or mb_rows % threads:
      return 1
    return threads

  def _update_program(self, batch: step_lib.RLBatch, mb_rows: int, micro: int):
    """The update program for mini-batches of `mb_rows` rows in micro-batches of `micro`: the
    single jitted update, or its host-parallel form (`_update_threads`)."""
    threads = self._update_threads(mb_rows, mb_rows // micro)
    if threads > 1:
      # One mini-batch: its slices are known here. Several: rows are shuffled per epoch, so
      # U bounds any slice of mb_rows // threads rows.
      one = batch.input_ids.shape[0] == mb_rows
      return self._parallel_update(threads, self._prompt_slots(
          batch.input_ids, batch.positions, batch.attention_mask, batch.completion_len,
          mb_rows // threads, parts=threads if one else 1))
    return self._update_fn(mb_rows // micro, self._prompt_slots(
        batch.input_ids, batch.positions, batch.attention_mask, batch.completion_len, micro))

  def update(self, batch: step_lib.RLBatch, step: int) -> dict:
    """`ppo_epochs` passes of `mini_batches` optimizer updates over the batch; mean metrics."""
    cfg = self.cfg
    B = batch.input_ids.shape[0]
    nmb = cfg.mini_batches
    if B % nmb:
      raise ValueError(f"{B} rollouts per step do not split into mini_batches={nmb}")
    mb_rows = B // nmb
    micro = cfg.micro_batch_size or mb_rows
    if mb_rows % micro:
      raise ValueError(f"mini-batch of {mb_rows} rows does not split into micro_batch_size={micro}")
    fn = self._update_program(batch, mb_rows, micro)
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
          mb = jax.tree.map(lambda x: jax.device_put(x, batch_sharding(self.mesh, x.ndim)), mb)
        self.state, m = fn(self.state, mb)
        m = jax.device_get(m)
        for k, v in m.items():
          sums[k] = sums.get(k, 0.0) + float(v)
        n += 1
        self.skipped_in_a_row = self.skipped_in_a_row + 1 if float(m["skipped"]) else 0
        if self.skipped_in_a_row > cfg.max_skipped_updates:
          raise FloatingPointError(
              f"{self.skipped_in_a_row} consecutive updates had a non-finite loss or gradient "
              f"(max_skipped_updates={cfg.max_skipped_updates}); stopping at step {step}")
    out = {k: v / n for k, v in sums.items()}
    out["skipped_updates"] = sums.get("skipped", 0.0)
    out.pop("skipped", None)
    return out

  # -- one RL iteration ----------------------------------------------------------------------

  def step(self) -> dict:
    """One RL iteration: collect, advantages, update(s). Returns its metrics."""
    step = self.host_step
    t0 = time.perf_counter()
    key = jax.random.fold_in(jax.random.PRNGKey(self.cfg.seed), step)
    pool_before = self.pool.metrics()
    roll, info = self.collect(key, step)
    t1 = time.perf_counter()
    batch, adv_info = self.build_batch(roll)
    metrics = self.update(batch, step)
    jax.block_until_ready(self.state.params)
    t2 = time.perf_counter()
    self.host_step += 1
    metrics.update(info)
    metrics.update(adv_info)
    metrics.update(self._metrics(roll, pool_before, self.pool.metrics()))
    timing = self.collector.timing
    metrics.update({
        "generate_s": timing["generate_s"],
        "reward_s": timing["reward_s"],
        "update_s": t2 - t1,
        "step_s": t2 - t0,
        "generate_tokens_per_s": float(roll.mask.sum()) / max(timing["generate_s"], 1e-9),
        "update_tokens_per_s": float(np.asarray(batch.attention_mask).sum()) * self.cfg.ppo_epochs
                               / max(t2 - t1, 1e-9),
    })
    return metrics

  @staticmethod
  def _metrics(roll: Rollouts, pool_before: dict, pool_after: dict) -> dict:
    """Rollout metrics over the rows that carry loss (no filler rows, no infrastructure
    failures): reward, accuracy (when the reward has a verifier), lengths, reward components."""
    real = roll.mask.any(axis=1)
    r, lengths = roll.rewards[real], roll.lengths[real]
    out = {
        "reward_mean": float(r.mean()) if r.size else 0.0,
        "reward_std": float(r.std()) if r.size else 0.0,
        "response_length": float(lengths.mean()) if lengths.size else 0.0,
        "truncated_fraction": float((roll.finish[real] == 1).mean()) if real.any() else 0.0,
        "reward_failures": float(pool_after["failures"] - pool_before["failures"]),
        "reward_timeouts": float(pool_after["timeouts"] - pool_before["timeouts"]),
    }
    if roll.verifier is not None:
      out["accuracy"] = float(roll.verifier[real].mean()) if real.any() else 0.0
    comps: dict[str, list] = {}
    for res, ok in zip(roll.results, real):
      if ok:
        for k, v in res.components.items():
          comps.setdefault(k, []).append(v)
    out.update({f"reward/{k}": float(np.mean(v)) for k, v in comps.items()})
    return out

  # -- the run -------------------------------------------------------------------------------

  def run(self) -> list[dict]:
    """Trains to `cfg.steps`, logging, evaluating and checkpointing; returns the records."""
    cfg = self.cfg
    os.makedirs(cfg.workdir, exist_ok=True)
    with open(os.path.join(cfg.workdir, "config.json"), "w") as f:
      json.dump(self.run_config, f, indent=2, sort_keys=True)
    self._print_start()
    self._trim_metrics()
    self.writer = MetricsWriter(cfg.workdir, tensorboard=cfg.tensorboard,
                                wandb_project=cfg.wandb_project, config=self.run_config)
    records = []
    start, t_start = self.host_step, time.perf_counter()
    try:
      if self.host_step == 0 and self.eval_fn is not None and cfg.eval_every:
        records.append(self.writer.write(0, self._eval(0)))
      bar = progress(range(self.host_step, cfg.steps), total=cfg.steps, desc=self.recipe.name,
                     enabled=cfg.progress)
      if hasattr(bar, "update") and self.host_step:
        bar.update(self.host_step)
      for _ in bar:
        m = self.step()
        s = self.host_step
        extra = {}
        if self.eval_fn is not None and cfg.eval_every and (s % cfg.eval_every == 0 or s == cfg.steps):
          extra = self._eval(s)
        if s % cfg.log_every == 0 or extra or s == cfg.steps:
          records.append(self.writer.write(s, m, **extra))
        if hasattr(bar, "set_postfix"):
          bar.set_postfix(self._postfix(m, extra))
        if cfg.checkpoint_every and (s % cfg.checkpoint_every == 0 or s == cfg.steps):
          self.save()
    finally:
      self.writer.close()
    self._print_summary(records, self.host_step - start, time.perf_counter() - t_start)
    return records

  def _model_name(self) -> str:
    name = self.run_config.get("model")
    if isinstance(name, str) and name:
      return name
    return f"{self.model_config.model_type} ({self.num_params / 1e6:,.1f} M parameters)"

  def _print_start(self) -> None:
    """One line at the start (the full config with `cfg.verbose`; it is in config.json)."""
    cfg = self.cfg
    if not cfg.progress and not cfg.verbose:
      return
    where = f"resuming at step {self.host_step}" if self.resumed_from else "starting"
    print(f"[botjax] {self.recipe.name} on {self._model_name()}, {where} in {cfg.workdir}",
          flush=True)
    if cfg.verbose:
      print(f"[botjax] recipe: {self.recipe}\n[botjax] config: "
            + json.dumps(self.run_config, sort_keys=True), flush=True)

  @staticmethod
  def _postfix(m: dict, extra: dict) -> dict:
    """Progress-bar fields: reward, accuracy (train, or eval when measured), seconds per step."""
    out = {"reward": f"{m['reward_mean']:.3f}"}
    acc = extra.get("eval/accuracy", m.get("accuracy"))
    if acc is not None:
      out["acc"] = f"{acc:.3f}"
    out["s/step"] = f"{m['step_s']:.1f}"
    return out

  def _print_summary(self, records: list[dict], steps: int, seconds: float) -> None:
    if not (self.cfg.progress or self.cfg.verbose) or not steps:
      return
    trained = [r for r in records if "reward_mean" in r]
    parts = [f"{steps} steps in {seconds:.0f} s"]
    if trained:
      parts.append(f"reward {trained[0]['reward_mean']:.3f} -> {trained[-1]['reward_mean']:.3f}")
    last = records[-1] if records else {}
    acc = last.get("eval/accuracy", last.get("accuracy"))
    if acc is not None:
      parts.append(f"accuracy {acc:.3f}")
    print(f"[botjax] done: {'; '.join(parts)}; {self.cfg.workdir}", flush=True)

  def _trim_metrics(self) -> None:
    """Keeps metrics.jsonl consistent with the state the run continues from: a resumed run drops
    the records a crashed run wrote after its last checkpoint (they will be written again); a run
    starting at step 0 moves an earlier file aside (`metrics.jsonl.<unix time>.old`), never
    deleting it."""
    path = os.path.join(self.cfg.workdir, "metrics.jsonl")
    if not os.path.exists(path):
      return
    if self.host_step == 0:
      os.replace(path, f"{path}.{int(time.time())}.old")
      return
    with open(path) as f:
      lines = [line for line in f if line.strip()]
    keep = [line for line in lines if json.loads(line).get("step", 0) <= self.host_step]
    if len(keep) != len(lines):
      with open(path + ".tmp", "w") as f:
        f.writelines(keep)
      os.replace(path + ".tmp", path)

  def _eval(self, step: int) -> dict:
    out = self.eval_fn(self, step)
    return {f"eval/{k}" if not k.startswith("eval/") else k: v for k, v in out.items()}

  def close(self):
    """Stops the reward workers and update threads, flushes pending checkpoint writes."""
    self.pool.close()
    for fn in self._update_fns.values():
      if isinstance(fn, step_lib.ParallelUpdate):
        fn.close()
    if self._own_sampler:
      self.sampler.close()
    self.checkpointer.close()
