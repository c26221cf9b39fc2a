"""The jitted RL update: teacher-forced log-probs -> recipe surrogate -> aggregation -> AdamW.

Shapes: B rows, Lp prompt columns (left-padded), T completion columns, L = Lp + T, D width,
V vocabulary. Nothing here does I/O; the host loop (`loop.py`) builds `RLBatch`es and calls
`update` once per mini-batch.

Micro-batching is exact: the aggregation denominator of the whole mini-batch is computed first
(`losses.aggregate` returns `(num, den)` pairs that add across rows), each micro-batch adds
`grad(num_mb) / den`, so the accumulated gradient equals the whole-batch gradient up to float
summation order, for every aggregation mode.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from botjax import algorithms, losses, xla_cpu
from botjax.models import logprobs as logprobs_lib
from botjax.sampling.filtering import filter_logits, support_threshold
from botjax.train.config import OptimConfig


@flax.struct.dataclass
class TrainState:
  """Everything an update changes: params, optimizer state, step counter and PRNG key."""
  params: Any                  # nnx.State of the model's nnx.Param leaves
  opt_state: Any
  step: jax.Array              # int32 scalar: number of optimizer updates applied
  key: jax.Array               # PRNG key of the run (fold_in(step) per use)


@flax.struct.dataclass
class RLBatch:
  """One mini-batch of scored rollouts, ready for the update.

  Attributes:
    input_ids: int32[B, L] prompt (left-padded) followed by completion (right-padded).
    positions: int32[B, L] position ids (0 at the first real prompt token).
    attention_mask: bool[B, L] True on real prompt and completion tokens.
    old_logp: f32[B, T] behaviour log-probs of the completion tokens (from the sampler).
    ref_logp: f32[B, T] reference-policy log-probs (zeros when no KL is used).
    advantages: f32[B, T] token advantages, zero outside `loss_mask`.
    loss_mask: bool[B, T] True on completion tokens that carry loss.
    seq_weights: f32[B] per-completion weights (ReCo), ones otherwise.
    behaviour_logp: f32[B, T] the rollout engine's log-probs of the completion tokens when they
      are not the trainer's own (vLLM: `old_logp` is then the trainer's recomputation), read by
      the truncated importance-sampling correction (`Recipe.tis_cap`); None: `old_logp`.
    support: f32[B, T] the sampler's top-k / top-p support thresholds of the completion
      tokens (`SampleOutput.support_logp`), or None: the update's log-probs are then taken
      under the same truncated distribution as `old_logp` (`split_logprobs(support=)`).
  """
  input_ids: jax.Array
  positions: jax.Array
  attention_mask: jax.Array
  old_logp: jax.Array
  ref_logp: jax.Array
  advantages: jax.Array
  loss_mask: jax.Array
  seq_weights: jax.Array
  behaviour_logp: jax.Array | None = None
  support: jax.Array | None = None

  @property
  def completion_len(self) -> int:
    return self.old_logp.shape[1]

  @classmethod
  def abstract(cls, batch_size: int, prompt_len: int, completion_len: int) -> "RLBatch":
    """The batch's shapes and dtypes as `jax.ShapeDtypeStruct`s (B rows, L = P + T columns), to
    lower or compile the update without data."""
    b, t, l = batch_size, completion_len, prompt_len + completion_len
    s = jax.ShapeDtypeStruct
    return cls(input_ids=s((b, l), jnp.int32), positions=s((b, l), jnp.int32),
               attention_mask=s((b, l), jnp.bool_), old_logp=s((b, t), jnp.float32),
               ref_logp=s((b, t), jnp.float32), advantages=s((b, t), jnp.float32),
               loss_mask=s((b, t), jnp.bool_), seq_weights=s((b,), jnp.float32))


def make_optimizer(cfg: OptimConfig, total_steps: int) -> optax.GradientTransformation:
  """AdamW with warm-up and clipping, as the papers train (DAPO §4.1, DeepSeekMath §4.2)."""
  if cfg.schedule == "constant":
    lr = optax.join_schedules(
        [optax.linear_schedule(0.0, cfg.learning_rate, max(cfg.warmup_steps, 1)),
         optax.constant_schedule(cfg.learning_rate)], [max(cfg.warmup_steps, 1)]) \
        if cfg.warmup_steps > 0 else cfg.learning_rate
  elif cfg.schedule == "cosine":
    lr = optax.warmup_cosine_decay_schedule(
        0.0, cfg.learning_rate, max(cfg.warmup_steps, 1), max(total_steps, cfg.warmup_steps + 1),
        end_value=0.1 * cfg.learning_rate)
  else:
    raise ValueError(f"optim.schedule={cfg.schedule!r}; valid: 'constant', 'cosine'")
  return optax.chain(
      optax.clip_by_global_norm(cfg.max_grad_norm),
      optax.adamw(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.adam_eps, weight_decay=cfg.weight_decay),
  )


def split_model(model: nnx.Module, *, remat: bool | None = None):
  """(graphdef, params, rest): params are the trainable nnx.Param leaves.

  Args:
    model: a `botjax.models.Decoder` (or any NNX module).
    remat: True / False sets `Decoder.remat` (recompute each block in the backward pass) in
      the returned graphdef, without changing `model`; None keeps the model's own.
  """
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  if remat is not None and getattr(model, "remat", remat) != remat:
    clone = nnx.merge(graphdef, params, rest)    # a new module over the same arrays
    clone.remat = bool(remat)
    graphdef, params, rest = nnx.split(clone, nnx.Param, ...)
  return graphdef, params, rest


def split_logprobs(graphdef, params, rest, input_ids, positions, attention_mask, *,
                   completion_len: int, temperature: float = 1.0, chunk: int = 128,
                   num_prompts: int = 0, support=None):
  """`botjax.models.logprobs.completion_logprobs` of the split model (differentiable in params).

  Log-probs and entropies of the T completion tokens under softmax(logits / temperature),
  chunked and rematerialised per chunk of `chunk` positions, so [B, T, V] logits never exist
  at once, forward or backward. With `num_prompts` = U > 0 the rows of a group share one
  forward pass of their prompt (`Decoder.shared_prefix`). (The RL update of
  `benchmarks/rl_step.py`, 16 prompts of about 24 tokens x 8 completions of 64: 0.166 ->
  0.141 s with sharing, A/B in one process.)

  Args:
    graphdef, params, rest: the split model (`split_model`).
    input_ids: int32[B, L]; positions: int32[B, L]; attention_mask: bool[B, L].
    completion_len: T < L, the number of trailing completion columns of `input_ids`.
    temperature: the sampling temperature (the sampler scores its tokens the same way).
    chunk: completion positions per chunk.
    num_prompts: U (static), at least the number of distinct prompts among the B rows, or
      0 to run every row's prompt (no sharing).
    support: optional f32[B, T] top-k / top-p support thresholds of the completion tokens
      (`RLBatch.support`): log-probs under the sampler's truncated distribution.

  Returns:
    (logp f32[B, T], entropy f32[B, T]).
  """
  model = nnx.merge(graphdef, params, rest)
  return logprobs_lib.completion_logprobs(
      model, input_ids, positions, attention_mask, completion_len=completion_len,
      temperature=temperature, chunk_size=chunk, num_prompts=num_prompts, support=support)


class StepOutput(NamedTuple):
  state: TrainState
  metrics: dict


def _tree_where(pred, a, b):
  return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


def loss_denominator(loss_mask: jax.Array, recipe: algorithms.Recipe) -> jax.Array:
  """The aggregation denominator of a whole mini-batch (`losses.aggregate`), at least 1e-12.

  Args:
    loss_mask: bool [B, T] of the whole mini-batch.
    recipe: the algorithm recipe (its aggregation mode and norm).

  Returns:
    float32 scalar.
  """
  _, den = losses.aggregate(jnp.zeros(loss_mask.shape, jnp.float32), loss_mask,
                            mode=recipe.agg_mode, norm=recipe.agg_norm)
  return jnp.maximum(den, 1e-12)


def micro_grads(params, mb: RLBatch, den: jax.Array, *, graphdef, rest,
                recipe: algorithms.Recipe, temperature: float = 1.0, chunk: int = 128,
                num_prompts: int = 0) -> tuple[jax.Array, dict, Any]:
  """Loss share, summed statistics and gradient of one slice of a mini-batch.

  loss = Σ_slice num / den with `den` the whole mini-batch's denominator, so the losses and
  gradients of the slices add up to those of the whole mini-batch.

  Args:
    params: the trainable parameters (`nnx.Param` state).
    mb: an RLBatch of the slice's rows.
    den: `loss_denominator` of the whole mini-batch.
    graphdef, rest, recipe, temperature, chunk, num_prompts: as for `update`.

  Returns:
    (loss f32 scalar, stats: dict of f32 sums, grads: pytree like params).
  """
  T = mb.completion_len
  use_ref = recipe.kl_coef > 0

  def mb_loss(params):
    logp, ent = split_logprobs(graphdef, params, rest, mb.input_ids, mb.positions,
                                    mb.attention_mask, completion_len=T,
                                    temperature=temperature, chunk=chunk,
                                    num_prompts=num_prompts, support=mb.support)
    behaviour = mb.old_logp if mb.behaviour_logp is None else mb.behaviour_logp
    per_token, m = algorithms.policy_loss(
        recipe, logp, mb.old_logp, mb.advantages, mb.loss_mask,
        ref_logp=mb.ref_logp if use_ref else None, seq_weights=mb.seq_weights,
        behaviour_logp=behaviour)
    num, _ = losses.aggregate(per_token, mb.loss_mask, mode=recipe.agg_mode, norm=recipe.agg_norm)
    msk = mb.loss_mask
    stats = {
        "loss_num": num,
        "tokens": jnp.sum(msk).astype(jnp.float32),
        "entropy_sum": jnp.sum(jnp.where(msk, ent, 0.0)),
        "logp_diff_sum": jnp.sum(jnp.where(msk, jnp.abs(logp - mb.old_logp), 0.0)),
    }
    for name in ("clipped", "kl"):
      if name in m:
        stats[f"{name}_sum"] = jnp.sum(jnp.where(msk, m[name].astype(jnp.float32), 0.0))
    if recipe.tis_cap is not None:
      w = losses.tis_weights(mb.old_logp, behaviour, msk, cap=recipe.tis_cap)
      stats["tis_weight_sum"] = jnp.sum(w)
      over = jnp.where(msk, mb.old_logp - behaviour, 0.0) > np.log(recipe.tis_cap)   # ratio > C
      stats["tis_capped_sum"] = jnp.sum(msk & over, dtype=jnp.float32)
    return num / den, stats

  (loss, stats), grads = jax.value_and_grad(mb_loss, has_aux=True)(params)
  return loss, stats, grads


def apply_grads(state: TrainState, grads, loss: jax.Array, stats: dict, *,
                optimizer: optax.GradientTransformation) -> StepOutput:
  """The optimizer step from a mini-batch's summed gradient; skips non-finite updates.

  Args:
    state: the current TrainState.
    grads: the mini-batch's gradient (summed over its slices), like `state.params`.
    loss: the mini-batch's loss (summed over its slices).
    stats: the slices' summed statistics (`micro_grads`).
    optimizer: the optax transformation.

  Returns:
    StepOutput(new state, scalar metrics).
  """
  grad_norm = optax.tree.norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  safe_grads = jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads)
  updates, new_opt = optimizer.update(safe_grads, state.opt_state, state.params)
  new_params = optax.apply_updates(state.params, updates)
  new_state = TrainState(
      params=_tree_where(finite, new_params, state.params),
      opt_state=_tree_where(finite, new_opt, state.opt_state),
      step=state.step + finite.astype(jnp.int32),
      key=state.key,
  )
  tok = jnp.maximum(stats["tokens"], 1.0)
  metrics = {
      "loss": loss,
      "grad_norm": grad_norm,
      "skipped": 1.0 - finite.astype(jnp.float32),
      "entropy": stats["entropy_sum"] / tok,
      "abs_logp_diff": stats["logp_diff_sum"] / tok,
      "loss_tokens": stats["tokens"],
  }
  if "clipped_sum" in stats:
    metrics["clip_fraction"] = stats["clipped_sum"] / tok
  if "kl_sum" in stats:
    metrics["kl"] = stats["kl_sum"] / tok
  if "tis_weight_sum" in stats:
    metrics["tis_weight"] = stats["tis_weight_sum"] / tok
    metrics["tis_capped_fraction"] = stats["tis_capped_sum"] / tok
  return StepOutput(new_state, metrics)


def update(state: TrainState, batch: RLBatch, *, graphdef, rest, recipe: algorithms.Recipe,
           optimizer: optax.GradientTransformation, num_micro: int = 1,
           temperature: float = 1.0, chunk: int = 128, num_prompts: int = 0) -> StepOutput:
  """One optimizer update on one mini-batch (call under `jax.jit`, see `make_update_fn`).

  A non-finite loss or gradient skips the update: parameters and optimizer state are left
  untouched, `step` still advances the skip counter in the metrics (`skipped` = 1).

  Args:
    state: the current TrainState.
    batch: an RLBatch with B rows; B must be divisible by `num_micro`.
    graphdef, rest: static model structure and non-trainable state (from `split_model`).
    recipe: the algorithm recipe (static, hashable).
    optimizer: the optax transformation.
    num_micro: number of gradient-accumulation slices.
    temperature: scoring temperature (same as sampling).
    chunk: completion positions per log-prob chunk.
    num_prompts: U > 0 shares each prompt's forward pass among the rows of a micro-batch
      that hold it (`split_logprobs`); U must be at least the number of distinct
      prompts in any micro-batch (`prompt_slots`). 0 = no sharing.

  Returns:
    StepOutput(new state, scalar metrics).
  """
  B = batch.input_ids.shape[0]
  if B % num_micro:
    raise ValueError(f"batch of {B} rows is not divisible into {num_micro} micro-batches")
  den = loss_denominator(batch.loss_mask, recipe)
  grads_of = functools.partial(micro_grads, den=den, graphdef=graphdef, rest=rest,
                               recipe=recipe, temperature=temperature, chunk=chunk,
                               num_prompts=num_prompts)
  mbs = jax.tree.map(lambda x: x.reshape((num_micro, B // num_micro) + x.shape[1:]), batch)

  if num_micro == 1:
    loss, stats, grads = grads_of(state.params, jax.tree.map(lambda x: x[0], mbs))
  else:
    def body(carry, mb):
      g_acc, l_acc, s_acc = carry
      l, s, g = grads_of(state.params, mb)
      return (jax.tree.map(jnp.add, g_acc, g), l_acc + l, jax.tree.map(jnp.add, s_acc, s)), None
    zeros_g = jax.tree.map(jnp.zeros_like, state.params)
    _, s_shape, _ = jax.eval_shape(grads_of, state.params, jax.tree.map(lambda x: x[0], mbs))
    zeros_s = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), s_shape)
    (grads, loss, stats), _ = jax.lax.scan(body, (zeros_g, jnp.float32(0.0), zeros_s), mbs)
  return apply_grads(state, grads, loss, stats, optimizer=optimizer)


def make_update_fn(graphdef, rest, recipe, optimizer, *, num_micro=1, temperature=1.0,
                   chunk=128, donate=True, num_prompts=0):
  """`update` jitted with everything static bound; `(state, batch) -> StepOutput`.

  Called at top level on a small CPU host, it compiles with `botjax.xla_cpu.compiler_options`;
  called inside your own `jax.jit` (or any other trace), it is a plain jitted function.
  """
  fn = functools.partial(update, graphdef=graphdef, rest=rest, recipe=recipe,
                         optimizer=optimizer, num_micro=num_micro, temperature=temperature,
                         chunk=chunk, num_prompts=num_prompts)
  return xla_cpu.jit(fn, donate_argnums=(0,) if donate else ())


class ParallelUpdate:
  """`update` with its slices' gradients computed concurrently by host threads.

  `fn(state, batch)` splits the B rows into `parts` contiguous slices, computes each slice's
  loss share and gradient (`micro_grads`) in its own thread, and applies their sum
  (`apply_grads`): the arithmetic of `update(..., num_micro=parts)`, in `parts` programs that
  run side by side. For small CPU hosts, where XLA:CPU leaves a core idle during much of one
  program (see `botjax.xla_cpu.default_host_threads`).

  Args:
    graphdef, rest, recipe, optimizer, temperature, chunk: as for `make_update_fn`.
    parts: number of slices and threads (B must be divisible by it).
    num_prompts: U for each slice (at least the distinct prompts of any slice), or 0.
  """

  def __init__(self, graphdef, rest, recipe, optimizer, *, parts: int, temperature=1.0,
               chunk=128, num_prompts=0, donate=True):
    if parts < 2:
      raise ValueError(f"ParallelUpdate needs parts >= 2, got {parts}")
    self.parts = parts
    self._den = jax.jit(functools.partial(loss_denominator, recipe=recipe))
    self._grads = xla_cpu.jit(functools.partial(
        micro_grads, graphdef=graphdef, rest=rest, recipe=recipe,
        temperature=temperature, chunk=chunk, num_prompts=num_prompts))

    def apply(state, grads, losses_, stats):
      total = functools.reduce(lambda a, b: jax.tree.map(jnp.add, a, b), grads)
      stat = functools.reduce(lambda a, b: jax.tree.map(jnp.add, a, b), stats)
      return apply_grads(state, total, functools.reduce(jnp.add, losses_), stat,
                         optimizer=optimizer)

    self._apply = xla_cpu.jit(apply, donate_argnums=(0,) if donate else ())
    self._threads = xla_cpu.HostThreads(parts, name="update")
    self._shapes: set = set()

  def __call__(self, state, batch):
    B = batch.input_ids.shape[0]
    if B % self.parts:
      raise ValueError(f"batch of {B} rows is not divisible into {self.parts} parts")
    rows = B // self.parts
    den = self._den(batch.loss_mask)
    slices = [(jax.tree.map(lambda x, i=i: x[i * rows:(i + 1) * rows], batch),)
              for i in range(self.parts)]

    def grads(mb):
      out = self._grads(state.params, mb, den)
      jax.block_until_ready(out)
      return out

    shape = jax.tree.map(lambda x: x.shape, slices[0][0])
    if repr(shape) not in self._shapes:   # a new shape: compile once, in this thread
      results = [grads(*slices[0])] + self._threads.map(grads, slices[1:])
      self._shapes.add(repr(shape))
    else:
      results = self._threads.map(grads, slices)
    return self._apply(state, [g for _, _, g in results], [l for l, _, _ in results],
                       [s for _, s, _ in results])

  def close(self) -> None:
    """Stops the threads (after any slice in flight)."""
    self._threads.close()


def make_logprob_fn(graphdef, rest, *, temperature=1.0, chunk=128, cut=None):
  """Jitted `(params, input_ids, positions, attention_mask, T, U=0) -> (logp, entropy)`.

  U is `split_logprobs`' `num_prompts` (static). Compiled as `make_update_fn` is. With
  `cut` = (top_k, top_p) the program takes the log-probs under the model's own top-k / top-p
  cut and returns (logp, entropy, support) (`completion_logprobs_own_cut`).
  """
  def fn(params, input_ids, positions, attention_mask, completion_len, num_prompts=0):
    if cut is not None:
      rule = lambda z: support_threshold(z, filter_logits(z, top_k=cut[0], top_p=cut[1]))  # noqa: E731
      return logprobs_lib.completion_logprobs_own_cut(
          nnx.merge(graphdef, params, rest), input_ids, positions, attention_mask, rule,
          completion_len=completion_len, temperature=temperature, chunk_size=chunk,
          num_prompts=num_prompts)
    return split_logprobs(graphdef, params, rest, input_ids, positions, attention_mask,
                               completion_len=completion_len, temperature=temperature,
                               chunk=chunk, num_prompts=num_prompts)
  return xla_cpu.jit(fn, static_argnums=(4, 5))


def prompt_slots(prompt_ids: np.ndarray, prompt_positions: np.ndarray, prompt_mask: np.ndarray,
                 rows_per_slice: int, *, at_least: int = 0) -> int:
  """`num_prompts` for `update` on host arrays: 0 when sharing prompts would not pay.

  U = min(rows_per_slice, max(distinct prompts of the batch, at_least)) bounds the distinct
  prompts of any slice of `rows_per_slice` rows, however the rows are shuffled; `at_least`
  (the prompts per step) keeps U, and so the compiled update, the same from step to step
  when a batch happens to repeat a prompt. Sharing is off (0) unless U is at most half the
  rows: each slice then runs at most half as many prompt rows as it has rows.

  Args:
    prompt_ids, prompt_positions: int [B, P]; prompt_mask: bool [B, P] (numpy).
    rows_per_slice: rows of each micro-batch.
    at_least: a floor for the number of distinct prompts.

  Returns:
    U ≥ 0 (a Python int).
  """
  if prompt_ids.shape[1] == 0:
    return 0
  key = np.concatenate([np.where(prompt_mask, prompt_ids, -1), prompt_positions,
                        prompt_mask.astype(prompt_ids.dtype)], axis=1)
  distinct = len(np.unique(key, axis=0))
  u = min(rows_per_slice, max(distinct, at_least))
  return u if 2 * u <= rows_per_slice else 0


def init_state(params, optimizer: optax.GradientTransformation, seed: int) -> TrainState:
  return TrainState(params=params, opt_state=optimizer.init(params),
                    step=jnp.zeros((), jnp.int32), key=jax.random.PRNGKey(seed))

