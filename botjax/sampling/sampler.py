"""Batched generation: one prefill, then a jitted KV-cache decode loop with per-token log-probs.

Layout of a call with P prompts, n samples each (B = P·n rows), padded prompt length Lp and
generation bucket T:

  cache slots  0 … Lp−1        the left-padded prompt (padding slots are never attended)
               Lp … Lp+T−2     generated tokens, one slot per decode step
  positions    prompt token j of a row of length m: j − (Lp − m);  generated token t: m + t

The prompt is prefilled once per prompt (P rows) and its cache repeated n times. The decode loop
is a `jax.lax.while_loop` that stops when every row has emitted a stop token or `max_new_tokens`
tokens were generated, whichever comes first; the token budget is a run-time value, so all budgets
inside one generation bucket share one program. Parameters are an argument of the jitted
function (split once from the NNX module), so new parameters between RL steps do not recompile.

Randomness: row r draws token t with key `fold_in(fold_in(key, r), t)`, so the same key gives the
same completions whatever the sharding, the padding of the batch, and the number of host threads
that generate parts of it (`host_threads`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from botjax import xla_cpu
from botjax.models.decoder import KVCache
from botjax.models.layers import rope_cos_sin
from botjax.models.sharding import constrain
from botjax.sampling.buckets import bucket_size, left_pad, positions_from_mask
from botjax.sampling.config import SamplingConfig
from botjax.sampling.filtering import draw as draw_tokens
from botjax.sampling.output import (FINISH_LENGTH, FINISH_STOP, SampleOutput, checked_prompts,
                                    extra_stop_ids, generate_args)

_BATCH_AXES = ("data", "fsdp")


def _split_model(model: Any) -> tuple[nnx.GraphDef, Any]:
  if isinstance(model, nnx.Module):
    return nnx.split(model)
  if isinstance(model, tuple) and len(model) == 2 and isinstance(model[0], nnx.GraphDef):
    return model
  if isinstance(model, nnx.GraphDef):
    return model, None
  raise TypeError("model must be an nnx.Module, an nnx.GraphDef, or a (graphdef, state) pair; "
                  f"got {type(model).__name__}")


def engine_parts(model: Any, model_config: Any, sampling_config: Any,
                 cache_dtype: Any) -> tuple[nnx.GraphDef, Any, Any, Any]:
  """What botjax's own engines start from, checked: (graphdef, params, model config, cache dtype).

  `model_config` None takes the model's `config`; `cache_dtype` None takes the model's compute
  dtype (float32 without one). Raises TypeError for a sampling config that is not a
  `SamplingConfig`, ValueError for a stop or pad id outside the vocabulary.
  """
  if not isinstance(sampling_config, SamplingConfig):
    raise TypeError(f"sampling_config must be a SamplingConfig, got "
                    f"{type(sampling_config).__name__}")
  graphdef, params = _split_model(model)
  if model_config is None:
    model_config = getattr(model, "config", None)
    if model_config is None:
      raise ValueError("model_config is None and the model has no `config` attribute")
  if cache_dtype is None:
    cache_dtype = getattr(model, "dtype", jnp.float32)
  vocab = model_config.vocab_size
  for i in sampling_config.all_stop_ids + (sampling_config.pad_token_id,):
    if i >= vocab:
      raise ValueError(f"token id {i} in the sampling config is outside the vocabulary "
                       f"[0, {vocab})")
  return graphdef, params, model_config, jnp.dtype(cache_dtype)


def call_params(held: Any, params: Any, what: str) -> Any:
  """The parameters of one `generate` call: `params` (a module's state) or, when None, the ones
  the engine holds. Raises ValueError when there are none."""
  params = held if params is None else params
  if isinstance(params, nnx.Module):
    params = nnx.state(params)
  if params is None:
    raise ValueError(f"this {what} holds no parameters: pass params=")
  return params


def _repeat_cache(cache: KVCache, n: int) -> KVCache:
  """Repeats each row of a cache n times (rows of one prompt adjacent)."""
  if n == 1:
    return cache
  return cache.replace(k=jnp.repeat(cache.k, n, axis=1), v=jnp.repeat(cache.v, n, axis=1),
                       valid=jnp.repeat(cache.valid, n, axis=0))


def _extend_cache(cache: KVCache, extra: int) -> KVCache:
  """Appends `extra` empty (invalid) slots to every row of a cache (either layout)."""
  slots = [(0, 0)] * cache.k.ndim
  slots[cache.slot_axis] = (0, extra)
  return cache.replace(k=jnp.pad(cache.k, slots), v=jnp.pad(cache.v, slots),
                       valid=jnp.pad(cache.valid, ((0, 0), (0, extra))))


def _constrain_cache(cache: KVCache) -> KVCache:
  axes = cache.logical_axes
  return cache.replace(k=constrain(cache.k, axes), v=constrain(cache.v, axes),
                       valid=constrain(cache.valid, ("batch", "cache_length")))


class Sampler:
  """Jitted batched sampler for a `botjax.models.Decoder`: botjax's lockstep rollout engine
  (`botjax.sampling.RolloutEngine`, registered as "jax").

  Example:
    sampler = Sampler(model, model.config, SamplingConfig(max_new_tokens=128, temperature=1.0,
                                                          eos_token_ids=(eos,)))
    out = sampler.generate([[1, 2, 3], [4, 5]], jax.random.key(0), n=8)   # B = 16 rows
    out = sampler.generate(prompts, key, n=8, params=nnx.state(updated_model))  # no recompile

  Args:
    model: an `nnx.Module` (split once here), or a `(graphdef, state)` pair, or a graphdef
      alone (then every `generate` call passes `params`).
    model_config: the model's `DecoderConfig` (None: `model.config`).
    sampling_config: decoding rule, stop ids and buckets.
    mesh: optional mesh with axes (`data`, `fsdp`, `tensor`): rows are sharded over `data` and
      `fsdp`, the model over `tensor` (parameters keep the sharding they already have, e.g. from
      `botjax.models.sharding.shard_model`). None runs on the default device.
    cache_dtype: KV-cache dtype (None: the model's compute dtype, float32 if unknown).
    host_threads: split each call's prompts into this many parts, generated concurrently by
      as many host threads (same completions: a row's draws depend on its row index only).
      None: `botjax.xla_cpu.default_host_threads` for the parameters' devices (2 on small
      CPU hosts without a mesh, else 1). A call whose parts the batch buckets would pad to
      more rows than the whole runs as one program.

  The KV cache layout and the attention path follow the model's `config.attention` (see
  `botjax.models.Decoder`). On CPU targets the programs are compiled with
  `botjax.xla_cpu.compiler_options` and lowered with `botjax.xla_cpu.threefry_unrolled`
  (both per program, chosen from the devices; `BOTJAX_XLA_CPU_TUNING=0` turns them off).
  """

  exact_logp = True   # its log-probs are the trainer's (the same model, the same kernels)

  def __init__(self, model: Any, model_config: Any, sampling_config: SamplingConfig, *,
               mesh: Mesh | None = None, cache_dtype: Any = None,
               host_threads: int | None = None):
    self.graphdef, self.params, self.model_config, self.cache_dtype = engine_parts(
        model, model_config, sampling_config, cache_dtype)
    self.config = sampling_config
    self.mesh = mesh
    self._batch_axes = tuple(a for a in _BATCH_AXES if mesh is not None and a in mesh.shape)
    self._batch_shards = math.prod(mesh.shape[a] for a in self._batch_axes)
    self.last_num_steps: jax.Array | None = None   # decode steps of the latest call
    where = mesh if mesh is not None else self.params
    if host_threads is None:
      host_threads = xla_cpu.default_host_threads(where, mesh=mesh)
    if not isinstance(host_threads, int) or host_threads < 1:
      raise ValueError(f"host_threads must be an int >= 1 (or None), got {host_threads!r}")
    self.host_threads = host_threads
    self._threads = xla_cpu.HostThreads(host_threads, name="sampler")
    self._generate_jit = xla_cpu.jit(self._generate_impl, decode=True,
                                      static_argnames=("n", "gen_len"))

  # -- host side ---------------------------------------------------------------------------

  def set_params(self, params: Any) -> None:
    """Replaces the parameters used by later `generate` calls (an `nnx.State` or a module)."""
    self.params = nnx.state(params) if isinstance(params, nnx.Module) else params

  def num_compiled(self) -> int:
    """Programs compiled so far (one per bucket triple and `n`)."""
    return self._generate_jit._cache_size()

  def buckets(self, num_prompts: int, prompt_len: int, max_new_tokens: int,
              n: int = 1) -> tuple[int, int, int]:
    """The padded (prompts, prompt length, generation length) a call would compile for."""
    cfg = self.config
    # P·n must divide over the batch shards: P must be a multiple of shards / gcd(shards, n).
    multiple = self._batch_shards // math.gcd(self._batch_shards, n)
    pb = bucket_size(num_prompts, cfg.batch_buckets, multiple_of=multiple,
                     name="number of prompts")
    lp = bucket_size(prompt_len, cfg.prompt_len_buckets, minimum=cfg.min_len_bucket,
                     name="prompt length")
    tb = bucket_size(max_new_tokens, cfg.gen_len_buckets, minimum=cfg.min_len_bucket,
                     name="max_new_tokens")
    return pb, lp, tb

  def generate(self, prompts: Sequence[Sequence[int]], key: jax.Array, *, n: int = 1,
               max_new_tokens: int | None = None, params: Any = None,
               stop_token_ids: Sequence[Sequence[int]] | None = None) -> SampleOutput:
    """Samples n completions for each prompt.

    Args:
      prompts: P token-id lists (no padding), each non-empty.
      key: a PRNG key (`jax.random.key` or a raw uint32[2] key).
      n: completions per prompt (the group size G).
      max_new_tokens: generation budget for this call (default `config.max_new_tokens`); any
        value within the same generation bucket reuses the compiled program.
      params: model parameters for this call only: an `nnx.State` of the sampler's graphdef
        (or a tuple of states, as `nnx.split(model, nnx.Param, ...)` returns them), or a
        module; default: the sampler's current parameters. New values with the same shapes,
        dtypes and shardings reuse the compiled program.
      stop_token_ids: optional P lists of extra stop ids, one list per prompt, on top of the
        config's `eos_token_ids` and `stop_token_ids`.

    Returns:
      `SampleOutput` with B = P·n rows (rows of prompt p adjacent, `group_ids = p`),
      `num_groups = P`, prompt columns Lp and generated columns T as bucketed.
    """
    cfg = self.config
    prompts, max_new = generate_args(prompts, n, max_new_tokens, cfg.max_new_tokens)
    params = call_params(self.params, params, "sampler")
    vocab = self.model_config.vocab_size
    prompts = checked_prompts(prompts, vocab)
    num = len(prompts)
    pb, lp, tb = self.buckets(num, max(len(p) for p in prompts), int(max_new), n)

    ids, mask = left_pad(prompts, lp, pad_token_id=cfg.pad_token_id)
    padded_ids = np.full((pb, lp), cfg.pad_token_id, np.int32)
    padded_mask = np.zeros((pb, lp), bool)
    padded_ids[:num], padded_mask[:num] = ids, mask
    padded_mask[num:, -1] = True              # dummy rows: one token, never generate

    extra = extra_stop_ids(stop_token_ids, num, vocab)
    width = bucket_size(max(1, len(cfg.all_stop_ids) + max(len(s) for s in extra)), minimum=4,
                        name="number of stop ids")
    stops = np.full((pb, width), -1, np.int32)
    for i in range(pb):
      row = list(cfg.all_stop_ids) + (extra[i] if i < num else [])
      stops[i, :len(row)] = row

    if not (isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)):
      key = jax.random.wrap_key_data(jnp.asarray(key, jnp.uint32))
    # Contiguous runs of prompts (one run: the whole call), each padded to its own batch
    # bucket and generated with the row keys of its place in the whole batch; the host threads
    # generate several runs concurrently (`host_threads`).
    parts = self._threads.split(num, lambda m: self.buckets(m, lp, int(max_new), n)[0], pb)

    def part(lo, hi, size):
      # Padding rows repeat the last row of the whole call (inactive here, so never decoded).
      rows = np.full((size,), pb - 1, np.int32)
      rows[:hi - lo] = np.arange(lo, hi)
      active = np.arange(size) < hi - lo
      out, steps = self._run(params, padded_ids[rows], padded_mask[rows], active, stops[rows],
                             key, max_new, n=n, tb=tb, row_offset=lo * n)
      if len(parts) > 1:
        jax.block_until_ready(out.tokens)
      out = jax.tree.map(lambda x: x[:(hi - lo) * n], out)
      return out.replace(group_ids=out.group_ids + lo if lo else out.group_ids,
                         num_groups=num), steps

    results = self._threads.map(part, parts)
    outs = [o for o, _ in results]
    out = outs[0] if len(outs) == 1 else jax.tree.map(
        lambda *xs: jnp.concatenate(xs, axis=0), *outs)
    self.last_num_steps = functools.reduce(jnp.maximum, [st for _, st in results])
    return out

  def close(self) -> None:
    """Stops the host threads of `host_threads` > 1 (a later `generate` starts them again)."""
    self._threads.close()

  def _run(self, params, ids, mask, active, stops, key, max_new, *, n, tb, row_offset):
    """One call of the jitted program (rows sharded over the mesh when there is one)."""
    args = (params, ids, mask, active, stops, key, np.int32(max_new), np.int32(row_offset))
    if self.mesh is not None:
      spec = (P(self._batch_axes) if self._batch_axes and ids.shape[0] % self._batch_shards == 0
              else P())
      rows = NamedSharding(self.mesh, spec)
      replicated = NamedSharding(self.mesh, P())
      if jax.process_count() > 1:   # a process-local key -> the same global key everywhere
        key = jax.random.wrap_key_data(
            jax.device_put(np.asarray(jax.random.key_data(key)), replicated),
            impl=jax.random.key_impl(key))
      args = (params, *jax.device_put(args[1:5], rows), jax.device_put(key, replicated),
              *args[6:])
      with jax.set_mesh(self.mesh), xla_cpu.threefry_unrolled(self.mesh):
        return self._generate_jit(*args, n=n, gen_len=tb)
    with xla_cpu.threefry_unrolled(params):
      return self._generate_jit(*args, n=n, gen_len=tb)

  # -- device side -------------------------------------------------------------------------

  def prefill(self, model: Any, prompt_ids: jax.Array, prompt_mask: jax.Array, *, n: int,
              gen_len: int) -> tuple[KVCache, jax.Array]:
    """The prompts' forward pass into a KV cache, repeated for n samples each (traceable).

    Prefills the P prompts once; only the last column's logits are needed (left padding puts
    every prompt's last token there), so the [P, Lp, V] logits are never formed. The cache
    holds the Lp prompt slots, then T empty ones.

    Args:
      model: the decoder (merged, e.g. inside a jitted function).
      prompt_ids: int32 [P, Lp] left-padded prompts.
      prompt_mask: bool [P, Lp], True on prompt tokens.
      n: samples per prompt.
      gen_len: T, generated slots.

    Returns:
      (cache of B = P·n rows and Lp + T slots, in the model's cache layout; float32 logits
      [B, V] of each row's next token).
    """
    num, lp = prompt_ids.shape
    positions = positions_from_mask(prompt_mask)
    # The barrier hides the empty cache and the start index from XLA, which would otherwise
    # constant-fold the fully masked scores of the empty cached slots: [P, K, G, Lp, Lp] per
    # layer, seconds of compile time at batch 64.
    cache, start = jax.lax.optimization_barrier((
        KVCache.init(model.config, batch_size=num, max_len=lp, dtype=self.cache_dtype),
        jnp.int32(0)))
    hidden, cache = model(prompt_ids, positions, attention_mask=prompt_mask, cache=cache,
                          cache_index=start, return_hidden=True)
    logits = model.unembed(hidden[:, -1, :])                       # [P, V]
    cache = _constrain_cache(_repeat_cache(_extend_cache(cache, gen_len), n))
    return cache, constrain(jnp.repeat(logits, n, axis=0), ("batch", "act_vocab"))

  def decode_step(self, model: Any, cache: KVCache, tokens: jax.Array, positions: jax.Array,
                  live: jax.Array, index: jax.Array,
                  rope: tuple[jax.Array, jax.Array] | None = None
                  ) -> tuple[jax.Array, KVCache]:
    """One decode step: each row's latest token into cache slot `index` (traceable).

    Args:
      model: the decoder.
      cache: the KV cache of B rows.
      tokens: int32 [B], the tokens fed.
      positions: int32 [B], their positions.
      live: bool [B], rows still generating (a finished row's slot stays invalid).
      index: int32 scalar, the slot written.
      rope: optional (cos, sin) [B, 1, R/2] of `positions`.

    Returns:
      (float32 logits [B, V] of the next token, updated cache).
    """
    logits, cache = model(tokens[:, None], positions[:, None], attention_mask=live[:, None],
                          cache=cache, cache_index=index, rope=rope)
    return logits[:, 0, :], cache

  def _generate_impl(self, params, prompt_ids, prompt_mask, active, stop_ids, key, max_new,
                     row_offset, *, n: int, gen_len: int) -> tuple[SampleOutput, jax.Array]:
    """Prefill + decode loop (traced once per bucket); also returns the steps taken."""
    cfg = self.config
    states = params if isinstance(params, (tuple, list)) else (params,)
    model = nnx.merge(self.graphdef, *states)
    num, lp = prompt_ids.shape
    rows = num * n
    pad = jnp.int32(cfg.pad_token_id)
    cache, logits = self.prefill(model, prompt_ids, prompt_mask, n=n, gen_len=gen_len)

    def rep(x):
      return jnp.repeat(x, n, axis=0)

    prompt_len = rep(jnp.sum(prompt_mask.astype(jnp.int32), axis=1))   # [B]
    stop_ids = rep(stop_ids)
    active = rep(active)
    row_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
        key, row_offset + jnp.arange(rows, dtype=jnp.int32))

    truncated = cfg.logp_truncated

    def draw(step, step_logits, live):
      keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, step)
      d = draw_tokens(keys, step_logits, temperature=cfg.temperature, top_k=cfg.top_k,
                      top_p=cfg.top_p, truncated=truncated)
      tok = jnp.where(live, d.tokens, pad)
      lp_tok = jnp.where(live, d.logp, 0.0)
      sup = jnp.where(live, d.support, -jnp.inf)
      hit = live & jnp.any(tok[:, None] == stop_ids, axis=1)
      return tok, (lp_tok, sup), hit

    tokens = jnp.full((rows, gen_len), pad, jnp.int32)
    # the log-probs [B, T] and, when truncated, the support thresholds [B, T]
    logp = tuple(jnp.zeros((rows, gen_len), jnp.float32) for _ in range(1 + truncated))

    def put(logp, lp_sup, t):
      return tuple(jax.lax.dynamic_update_slice_in_dim(buf, x[:, None], t, axis=1)
                   for buf, x in zip(logp, lp_sup))

    tok, lp_tok, stopped = draw(jnp.int32(0), logits, active)
    tokens = tokens.at[:, 0].set(tok)
    logp = put(logp, lp_tok, 0)
    lengths = active.astype(jnp.int32)
    done = ~active | stopped

    def cond(carry):
      t, _, _, _, _, done, _, _ = carry
      return (t < max_new) & ~jnp.all(done)

    # RoPE's cos and sin of every decode step, computed once: inside the step XLA fuses them
    # into each layer's q and k rotation and evaluates them there (64-token sampling
    # 0.084 -> 0.076 s on the benchmark model of benchmarks/rl_step.py, measured).
    step_positions = prompt_len[None, :] + jnp.arange(gen_len, dtype=jnp.int32)[:, None] - 1
    rope_cos, rope_sin = jax.vmap(lambda p: rope_cos_sin(self.model_config, p[:, None]))(
        step_positions)                                           # [T, B, 1, R/2] each

    def body(carry):
      t, cache, prev, tokens, logp, done, stopped, lengths = carry
      live = ~done
      # Feed token t−1 into slot Lp + t − 1; its logits give token t.
      step_logits, cache = self.decode_step(model, cache, prev, prompt_len + t - 1, live,
                                            lp + t - 1, (rope_cos[t], rope_sin[t]))
      tok, lp_tok, hit = draw(t, step_logits, live)
      tokens = jax.lax.dynamic_update_slice_in_dim(tokens, tok[:, None], t, axis=1)
      logp = put(logp, lp_tok, t)
      return (t + 1, cache, tok, tokens, logp, done | hit, stopped | hit,
              lengths + live.astype(jnp.int32))

    carry = (jnp.int32(1), cache, tok, tokens, logp, done, stopped, lengths)
    steps, _, _, tokens, logp, _, stopped, lengths = jax.lax.while_loop(cond, body, carry)

    mask = jnp.arange(gen_len, dtype=jnp.int32)[None, :] < lengths[:, None]
    out = SampleOutput(
        prompt_ids=rep(prompt_ids), prompt_mask=rep(prompt_mask), tokens=tokens, mask=mask,
        logp=logp[0], lengths=lengths,
        finish_reason=jnp.where(stopped, FINISH_STOP, FINISH_LENGTH).astype(jnp.int32),
        group_ids=(jnp.arange(rows, dtype=jnp.int32) // n), num_groups=num,
        support_logp=jnp.where(mask, logp[1], -jnp.inf) if truncated else None)
    return out, steps
