"""The `"cpu"` attention: a dense attention tuned for XLA:CPU, entry `"cpu"` of
`botjax.models.attention.ATTENTION_FNS`.

Head-major products ([B, K, ·, H]: every attention product is a batched GEMM over (B, K) in
canonical form), a hand-written backward (`attend`), and a KV cache with the slots last
(`CACHE_LAYOUT`, [layers, B, K, H, S]) that a decode step reads as fused multiply + sums. Only
for CPU targets: `botjax.models.attention.attention_implementation` picks it for `"auto"` on
CPU (unless `BOTJAX_XLA_CPU_TUNING=0`); every other platform gets the portable attention.

Shape letters: B batch, L new tokens, P prefix tokens, S key slots, N/K query/kv heads,
G = N/K, H head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from botjax import xla_cpu

# Finite stand-in for -inf so a query with no visible key gives a uniform row, never NaN
# (the value `jax.nn.dot_product_attention` uses for masked logits).
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)

# The KV cache it reads: slots last, [layers, B, K, H, S] (see `botjax.models.cache.KVCache`).
CACHE_LAYOUT = "BKHS"
# The order of the new tokens' keys and values it returns (and reads as a prefix): [B, K, L, H].
KV_LAYOUT = "BKSH"


def auto(where) -> bool:
  """Whether `"auto"` picks this attention for the devices `where`: a CPU target, with
  `BOTJAX_XLA_CPU_TUNING` not off (`botjax.xla_cpu.enabled`)."""
  return xla_cpu.enabled(where)


def _attend_fwd(qh, k, v, bias):
  b, kh, q, h = qh.shape
  l, s = bias.shape[1:]
  scores = jnp.einsum("BKQH,BKSH->BKQS", qh, k, preferred_element_type=jnp.float32)
  scores = scores.reshape(b, kh, q // l, l, s) + bias[:, None, None]
  probs = jax.nn.softmax(scores, axis=-1).reshape(b, kh, q, s)
  out = jnp.einsum("BKQS,BKSH->BKQH", probs.astype(qh.dtype), v)
  return out, (qh, k, v, probs, out)


def _attend_bwd(res, d_out):
  qh, k, v, probs, out = res
  dt = qh.dtype
  d_probs = jnp.einsum("BKQH,BKSH->BKQS", d_out, v, preferred_element_type=jnp.float32)
  # Σ_s P ⊙ dP = Σ_h O ⊙ dO: the softmax backward without a second pass over the scores.
  delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
  d_scores = (probs * (d_probs - delta)).astype(dt)
  d_q = jnp.einsum("BKQS,BKSH->BKQH", d_scores, k)
  d_k, d_v = xla_cpu.on_cpu(_attend_dkv_cpu, _attend_dkv, qh, d_out, probs.astype(dt), d_scores)
  return d_q, d_k, d_v, None


def _attend_dkv(qh, d_out, probs, d_scores):
  """dK = dSᵀ q and dV = Pᵀ dO, [B, K, S, H] each."""
  d_v = jnp.einsum("BKQS,BKQH->BKSH", probs, d_out)
  d_k = jnp.einsum("BKQS,BKQH->BKSH", d_scores, qh)
  return d_k, d_v


def _attend_dkv_cpu(qh, d_out, probs, d_scores):
  """`_attend_dkv` as XLA:CPU runs it fastest.

  dV = Pᵀ dO and dK = dSᵀ q contract over the queries, the major axis of P and dS. Given as
  such, XLA:CPU runs them as transposed-operand Eigen products (4.4 ms each in the benchmark's
  update, measured); as (dOᵀ P)ᵀ and (qᵀ dS)ᵀ they are canonical GEMMs that YNNPACK runs, and
  only the small [B, K, Q, H] operands are transposed (update 0.205 -> 0.197 s, A/B in one
  process). The barrier keeps XLA from folding those transposes back. A second barrier keeps
  the products' [B, K, H, S] outputs: XLA would otherwise fold the swap back into them when a
  consumer slices them (a prefix's keys, see `Decoder.shared_prefix`), making them
  transposed-operand products again (update with shared prompts 0.141 -> 0.134 s).
  """
  d_out_t, qh_t = jax.lax.optimization_barrier((jnp.swapaxes(d_out, 2, 3),
                                                 jnp.swapaxes(qh, 2, 3)))
  d_v = jnp.einsum("BKHQ,BKQS->BKHS", d_out_t, probs)
  d_k = jnp.einsum("BKHQ,BKQS->BKHS", qh_t, d_scores)
  d_k, d_v = jax.lax.optimization_barrier((d_k, d_v))
  return jnp.swapaxes(d_k, 2, 3), jnp.swapaxes(d_v, 2, 3)


@jax.custom_vjp
def attend(qh: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array) -> jax.Array:
  """softmax(q kᵀ + bias) v for every (row, kv head), with a hand-written backward pass.

  out[b, k, g·L + l] = Σ_s softmax_s(qh[b, k, g·L + l] · k[b, k, s] + bias[b, l, s]) v[b, k, s]

  The backward is the FlashAttention one (Dao et al., 2022, Alg. 2, without tiling): with
  P the probabilities and O the output, dS = P ⊙ (dO Vᵀ − rowsum(dO ⊙ O)). Autodiff of the
  same forward costs 2.3x more on XLA:CPU (it differentiates the max, the mask and the
  normalisation as separate passes over the [B, K, G·L, S] scores); the probabilities are the
  only saved intermediate, as in plain autodiff.

  Args:
    qh: [B, K, G·L, H] queries, already scaled by 1/√H, groups of L rows per query head.
    k: [B, K, S, H] keys.
    v: [B, K, S, H] values.
    bias: float32 [B, L, S], 0 where query l may see key s and `MASK_VALUE` where not (a row
      with no visible key gets uniform weights, never NaN).

  Returns:
    [B, K, G·L, H] in the dtype of qh.

  References:
    Dao et al., FlashAttention, https://arxiv.org/abs/2205.14135
  """
  return _attend_fwd(qh, k, v, bias)[0]


attend.defvjp(_attend_fwd, _attend_bwd)


def attend_cpu(q, k, v, allowed, cached=None, prefix=None, *, causal: bool = False):
  """The XLA:CPU attention over the new tokens, a prefix, or a KV cache's slots.

  Arguments and results as `botjax.models.attention.attend_portable` (the same values up to
  float rounding; `causal` is unused), in this module's layouts: the new tokens' keys and
  values are returned, and a prefix's are read, head-major ([B, K, L, H], [B, K, P, H]); a
  cache `cached` is read slots last (`CACHE_LAYOUT`, [B, K, H, S] per layer).
  """
  del causal
  b, l, n, h = q.shape
  kh = k.shape[2]
  g = n // kh
  dtype = q.dtype
  # Head-major layout [B, K, ·, H]: every attention product is then a batched GEMM over
  # (B, K) in canonical form, which XLA:CPU calls without transposing its operands (a
  # query-major einsum made it copy the scores and the cache at every layer and step).
  qh = q.reshape(b, l, kh, g, h).transpose(0, 2, 3, 1, 4).reshape(b, kh, g * l, h)
  k = k.transpose(0, 2, 1, 3)                                     # [B, K, L, H]
  v = v.transpose(0, 2, 1, 3)
  qh = qh * jnp.asarray(h ** -0.5, qh.dtype)

  # Decoding (a few queries per kv head against a long cache): the products as broadcast
  # multiply + sum in float32, which XLA fuses with the read of the cache slice; as batched
  # GEMMs of [G·L, H] x [H, S] they took 2-4x longer on CPU and copied each layer's cache
  # slice out first. The cache holds k and v slots-last ([B, K, H, S]), so q·k reduces over
  # H along vectorised slots, and p·v over the slots; the sums are `xla_cpu.fused_sum`,
  # which keeps XLA:CPU from materialising the products (64-token sampling 0.25 -> 0.12 s
  # with both, measured before and after on the benchmark model).
  few = cached is not None and g * l <= 4
  f32 = jnp.float32
  fused_sum, fused_max = xla_cpu.fused_sum, xla_cpu.fused_max

  if cached is None:   # training, scoring and prefill: one softmax over the new tokens
    bias = jnp.where(allowed, 0.0, MASK_VALUE).astype(jnp.float32)
    keys, vals = k, v
    if prefix is not None:
      keys = jnp.concatenate([prefix[0].astype(k.dtype), k], axis=2)   # [B, K, P + L, H]
      vals = jnp.concatenate([prefix[1].astype(v.dtype), v], axis=2)
    out = attend(qh, keys, vals, bias)
    new_kv = (k, v)
  else:
    if cached.layout != CACHE_LAYOUT:
      raise ValueError(f"attention 'cpu' reads a KV cache of layout {CACHE_LAYOUT!r}, "
                       f"got {cached.layout!r}")
    cached = cached.write(k, v, KV_LAYOUT)
    keys = cached.keys.astype(dtype)                              # [B, K, H, S]
    vals = cached.values.astype(dtype)
    # One softmax over the earlier slots (read from the updated cache, the new slots masked
    # out) and the new tokens (from k and v directly), without joining their scores:
    # out = (Σ_s e_s v_s + Σ_l e_l v_l) / (Σ_s e_s + Σ_l e_l), e = exp(score − max). Both
    # parts read the queries, so XLA keeps them computed once (with the cache part alone it
    # fused the queries, RoPE included, into the q·k reduction: 3x slower decode, measured).
    if few:   # q·k reduced over H, vectorised along the slots
      sc_past = fused_sum(qh.astype(f32)[:, :, :, :, None] * keys.astype(f32)[:, :, None],
                          axis=3)
    else:
      sc_past = jnp.einsum("BKQH,BKHS->BKQS", qh, keys, preferred_element_type=f32)
    s_len = keys.shape[-1]
    sc_past = jnp.where(cached.allowed[:, None, None], sc_past.reshape(b, kh, g, l, s_len),
                        MASK_VALUE)
    sc_new = jnp.einsum("BKQH,BKSH->BKQS", qh, k, preferred_element_type=f32)
    sc_new = jnp.where(allowed[:, None, None], sc_new.reshape(b, kh, g, l, l), MASK_VALUE)
    top = jax.lax.stop_gradient(jnp.maximum(fused_max(sc_past, keepdims=True),
                                            fused_max(sc_new, keepdims=True)))
    e_past = jnp.exp(sc_past - top).reshape(b, kh, g * l, s_len)
    e_new = jnp.exp(sc_new - top).reshape(b, kh, g * l, l)
    denom = (fused_sum(e_past, keepdims=True)
             + fused_sum(e_new, keepdims=True))                    # f32 [B, K, G·L, 1]
    if few:   # Σ_s e_s v_s as a fused f32 multiply + sum over the slots (minor axis)
      acc = fused_sum(e_past[:, :, :, None, :] * vals.astype(f32)[:, :, None, :, :])
      acc = acc + jnp.sum(e_new[:, :, :, :, None] * v.astype(f32)[:, :, None, :, :], axis=3)
    else:
      acc = jnp.einsum("BKQS,BKHS->BKQH", e_past.astype(dtype), vals,
                       preferred_element_type=f32)
      acc = acc + jnp.einsum("BKQS,BKSH->BKQH", e_new.astype(dtype), v,
                             preferred_element_type=f32)
    out = (acc / denom).astype(dtype)
    new_kv = cached.state
  out = out.reshape(b, kh, g, l, h).transpose(0, 3, 1, 2, 4).reshape(b, l, n * h)
  return out, new_kv


# The slot engine's pool on CPU (`botjax.sampling.SlotEngine`'s default `block_size` and
# `tile_blocks` there; 32 and 128 elsewhere): blocks of 64 token slots, 32 blocks (2,048 slots)
# read per loop trip. A block's slots are the minor axis of the attention's products, and
# XLA:CPU vectorises 64 of them better than 32: the products of 6,144 cached tokens took
# 0.10 ms as 96 blocks of 64 against 0.33 ms as 192 blocks of 32 (the quick-start's head size,
# 24). In the slot engine, against blocks of 32 read 64 per trip (A/B in one process,
# benchmarks/long_rollouts.py's workloads): 1.15x at budget 256, 1.20x at 1,024, 1.03-1.06x on
# the fixed-length control; blocks of 128 (16 per trip) were slower (0.80x the lockstep sampler
# on the control), and 64 blocks of 64 per trip gained less (1.12x at 1,024).
PAGED_BLOCK_SIZE = 64
PAGED_TILE_BLOCKS = 32


def paged_partials(qb: jax.Array, keys: jax.Array, values: jax.Array,
                   visible: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The per-block partial softmax of a paged decode step (`botjax.sampling.paged.
  ragged_attention`'s tile), tuned for XLA:CPU. [M blocks, K kv heads, G = N/K, H, bs slots]:

    scores = qb · keys (over H), masked by `visible`;  top = max over bs
    part_sum = Σ_bs exp(scores − top);                 part = Σ_bs exp(scores − top) · values

  The gathered queries and the mask pass an optimisation barrier, so XLA:CPU does not fuse
  the gather into the products (it then recomputed it per element); the score is one batched
  GEMM over (M, K), and the reductions over bs are `xla_cpu`'s fused ones. In the slot engine
  (4 layers, 64 slots, tile 64; the decode compiler options) the step went from 0.77x to 0.96x
  the lockstep sampler's on fixed lengths (benchmarks/long_rollouts.py's control, A/B in one
  process).

  Args:
    qb: float32 [M, K, G, H] each block's owner's query.
    keys, values: float32 [M, K, H, bs] the blocks' keys and values.
    visible: bool [M, bs] which slots of each block its owner sees.

  Returns:
    (top [M, K, G], part_sum [M, K, G], part [M, K, G, H]), float32.
  """
  qb, visible = jax.lax.optimization_barrier((qb, visible))
  scores = jnp.einsum("mkgh,mkhs->mkgs", qb, keys)
  scores = jnp.where(visible[:, None, None], scores, MASK_VALUE)
  top = xla_cpu.fused_max(scores, axis=-1)
  e = jnp.exp(scores - top[..., None])
  part_sum = xla_cpu.fused_sum(e, axis=-1)
  part = xla_cpu.fused_sum(e[:, :, :, None, :] * values[:, :, None], axis=-1)
  return top, part_sum, part


def paged_products(portable, qb, keys, values, visible):
  """`paged_partials` in programs lowered for CPU (tuning on), `portable(qb, keys, values,
  visible)` for every other platform (`xla_cpu.on_cpu`): the one CPU branch of
  `botjax.sampling.paged`."""
  return xla_cpu.on_cpu(paged_partials, portable, qb, keys, values, visible)

