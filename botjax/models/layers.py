"""Shared decoder layers: RMSNorm (float32), RoPE (scaled / partial / per layer off), GQA, SwiGLU.

Parameters are stored in JAX layout (`[in, out]`, heads split out: q kernel `[D, N, H]`) and
carry logical axis names in their `logical_axes` metadata; `botjax.models.sharding` maps those
names to mesh axes.

Shape letters: B batch, L new tokens, S key slots, D width, N/K query/kv heads, G = N/K,
H head dim, R rotary dims, F MLP width.

Attention has several implementations with the same result (`ATTENTION_IMPLEMENTATIONS`), chosen
per model by `DecoderConfig.attention` and, for `"auto"`, by the platform of the devices the
model runs on (`attention_implementation`):

* `"xla"`: `jax.nn.dot_product_attention(implementation="xla")`, the portable one (TPU, and
  GPU without cuDNN); KV cache `[layers, B, S, K, H]`.
* `"cudnn"`: `jax.nn.dot_product_attention(implementation="cudnn")`, cuDNN's fused flash
  attention, for training and prefill on NVIDIA GPUs (bf16/fp16 activations, head dim a
  multiple of 8 up to 128; other shapes use `"xla"`); decode steps use the `"xla"` path.
* `"cpu"`: a dense attention with a hand-written backward and a decode path tuned for XLA:CPU;
  KV cache slots-last, `[layers, B, K, H, S]`. Only for CPU.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from botjax import _xla_cpu
from botjax.models.config import ATTENTION_IMPLEMENTATIONS, DecoderConfig
from botjax.models.sharding import constrain

# Finite stand-in for -inf so a query with no visible key gives a uniform row, never NaN
# (the value `jax.nn.dot_product_attention` uses for masked logits).
_MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)

# KV-cache layouts: slots last for the XLA:CPU path, conventional [B, S, K, H] otherwise.
CPU_CACHE_LAYOUT = "BKHS"
CACHE_LAYOUT = "BSKH"


def _cudnn_available() -> bool:
  """Whether jax finds cuDNN's fused attention on this host (the jax CUDA plugin)."""
  try:
    from jax._src.cudnn import fused_attention_stablehlo
  except ImportError:
    return False
  return getattr(fused_attention_stablehlo, "cuda_versions", None) is not None


def attention_implementation(choice: str = "auto", where=None) -> str:
  """Resolves an attention choice to an implementation for the devices a model runs on.

  Args:
    choice: one of `ATTENTION_IMPLEMENTATIONS`; anything but `"auto"` is returned as is.
    where: the devices, mesh or arrays the model is placed on (see
      `botjax._xla_cpu.platform_of`); None: the mesh set with `jax.set_mesh`, else the
      default device.

  Returns:
    `"auto"` resolves to `"cpu"` on CPU (`"xla"` there with `BOTJAX_XLA_CPU_TUNING=0`),
    `"cudnn"` on GPUs where jax finds cuDNN, else `"xla"` (TPU included).
  """
  if choice not in ATTENTION_IMPLEMENTATIONS:
    raise ValueError(f"attention implementation {choice!r} is not supported; valid: "
                     f"{ATTENTION_IMPLEMENTATIONS}")
  if choice != "auto":
    return choice
  platform = _xla_cpu.platform_of(where)
  if platform == "cpu":
    return "cpu" if _xla_cpu.mode() != "off" else "xla"
  if platform == "gpu" and _cudnn_available():
    return "cudnn"
  return "xla"


def cache_layout(implementation: str) -> str:
  """The KV-cache layout an attention implementation reads: `"BKHS"` for `"cpu"`, else `"BSKH"`."""
  return CPU_CACHE_LAYOUT if implementation == "cpu" else CACHE_LAYOUT


def dense(x: jax.Array, kernel: jax.Array) -> jax.Array:
  """x[..., D] · kernel[D, *out] -> [..., *out], computed as one 2-D matmul [M, D] · [D, O].

  The same contraction as `einsum("...D,D...->......")`, but XLA:CPU differentiates a matmul
  with 3-D activations by materialising transposed copies of them (measured: the SwiGLU
  gradient of the 3-layer benchmark model ran 2.4x slower as 3-D einsums); on flattened rows it
  calls the GEMM with a transposed operand instead. On GPU/TPU the reshapes are free.

  Args:
    x: [..., D] activations.
    kernel: [D, *out] weights.

  Returns:
    [..., *out], dtype of the operands.
  """
  d = x.shape[-1]
  y = x.reshape(-1, d) @ kernel.reshape(d, -1)
  return y.reshape(x.shape[:-1] + kernel.shape[1:])


def _param(rngs: nnx.Rngs, shape, axes, dtype, *, init: str = "normal", fan_in: int = 1):
  if init == "ones":
    value = jnp.ones(shape, dtype)
  elif init == "zeros":
    value = jnp.zeros(shape, dtype)
  else:
    value = jax.random.normal(rngs.params(), shape, dtype) * (1.0 / math.sqrt(fan_in))
  return nnx.Param(value, logical_axes=axes)


class RMSNorm(nnx.Module):
  """y = w · x / sqrt(mean(x²) + ε), computed in float32 and cast back (as in HF)."""

  def __init__(self, dim: int, *, eps: float, rngs: nnx.Rngs, param_dtype=jnp.float32):
    self.eps = eps
    self.scale = _param(rngs, (dim,), ("norm",), param_dtype, init="ones")

  def __call__(self, x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    var = _xla_cpu.fused_sum(jnp.square(x32), keepdims=True) / x.shape[-1]
    y = (x32 * jax.lax.rsqrt(var + self.eps)).astype(x.dtype)
    scale = self.scale[...].astype(x.dtype)
    return scale.reshape((1,) * (x.ndim - 1) + scale.shape) * y


def rope_inv_freq(cfg: DecoderConfig, *, long: bool = False) -> np.ndarray:
  """Inverse frequencies θ_i = 1 / (f_i · base^(2i/R)) of a config's RoPE, float32 [R/2].

  `f_i` is 1 (default), `factor` (linear), the llama3 wavelength-dependent smoothing, or the
  LongRoPE short (`long=False`) / long factors. Computed in float32 as transformers does.

  Args:
    cfg: the decoder config.
    long: LongRoPE only: use the long factors (sequence beyond the original context).

  Returns:
    float32 numpy [R/2].

  References:
    Su et al., RoFormer, https://arxiv.org/abs/2104.09864
    Ding et al., LongRoPE, https://arxiv.org/abs/2402.13753
  """
  dim = cfg.rotary_dim
  exponent = (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim))
  inv = (np.float32(1.0) / (np.float32(cfg.rope_theta) ** exponent)).astype(np.float32)
  if cfg.rope_type == "linear":
    inv = (inv / np.float32(cfg.rope_factor)).astype(np.float32)
  elif cfg.rope_type == "llama3":
    factor = cfg.rope_factor
    old = cfg.original_max_position_embeddings
    low_wavelen = old / cfg.rope_low_freq_factor
    high_wavelen = old / cfg.rope_high_freq_factor
    wavelen = (2 * math.pi / inv).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv).astype(np.float32)
    smooth = ((old / wavelen - cfg.rope_low_freq_factor)
              / (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor)).astype(np.float32)
    smoothed = ((1 - smooth) * scaled / factor + smooth * scaled).astype(np.float32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    inv = np.where(medium, smoothed, scaled).astype(np.float32)
  elif cfg.rope_type == "longrope":
    ext = np.asarray(cfg.rope_long_factor if long else cfg.rope_short_factor, np.float32)
    base = (np.float32(cfg.rope_theta) ** exponent).astype(np.float32)
    inv = (np.float32(1.0) / (ext * base)).astype(np.float32)
  return inv


def rope_attention_factor(cfg: DecoderConfig) -> float:
  """Scale of cos/sin: LongRoPE's √(1 + ln(s)/ln(original)) with s = max_pos/original; else 1."""
  if cfg.rope_type != "longrope":
    return 1.0
  if cfg.rope_attention_factor is not None:
    return cfg.rope_attention_factor
  scale = cfg.max_position_embeddings / cfg.original_max_position_embeddings
  if scale <= 1.0:
    return 1.0
  return math.sqrt(1 + math.log(scale) / math.log(cfg.original_max_position_embeddings))


def rope_cos_sin(cfg: DecoderConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
  """cos and sin of the rotation angles p·θ_i for explicit positions.

  LongRoPE switches to the long factors when max(positions) + 1 exceeds
  `original_max_position_embeddings`, for the whole call (as transformers does).

  Args:
    cfg: the decoder config.
    positions: int32 [B, L] position ids.

  Returns:
    (cos, sin), float32 [B, L, R/2] each, already multiplied by the attention factor.
  """
  inv = jnp.asarray(rope_inv_freq(cfg))
  if cfg.rope_type == "longrope":
    long_inv = jnp.asarray(rope_inv_freq(cfg, long=True))
    is_long = jnp.max(positions) + 1 > cfg.original_max_position_embeddings
    inv = jnp.where(is_long, long_inv, inv)
  angles = positions.astype(jnp.float32)[..., None] * inv[None, None, :]
  scale = rope_attention_factor(cfg)
  return jnp.cos(angles) * scale, jnp.sin(angles) * scale


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """Rotates the first R dims of each head (HF's rotate-half convention); the rest pass.

  x'₁ = x₁ cos − x₂ sin,  x'₂ = x₂ cos + x₁ sin  with x₁, x₂ the two halves of x[..., :R].

  Args:
    x: [B, L, heads, H].
    cos: [B, L, R/2].
    sin: [B, L, R/2].

  Returns:
    [B, L, heads, H], dtype of x.
  """
  half = cos.shape[-1]
  rot = 2 * half
  c = cos[:, :, None, :].astype(x.dtype)
  s = sin[:, :, None, :].astype(x.dtype)
  x1, x2 = x[..., :half], x[..., half:rot]
  parts = [x1 * c - x2 * s, x2 * c + x1 * s]
  if rot < x.shape[-1]:
    parts.append(x[..., rot:])
  return jnp.concatenate(parts, axis=-1)


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
  d_k, d_v = _xla_cpu.on_cpu(_attend_dkv_cpu, _attend_dkv, qh, d_out, probs.astype(dt), d_scores)
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
    bias: float32 [B, L, S], 0 where query l may see key s and a large negative value where
      not (a row with no visible key gets uniform weights, never NaN).

  Returns:
    [B, K, G·L, H] in the dtype of qh.

  References:
    Dao et al., FlashAttention, https://arxiv.org/abs/2205.14135
  """
  return _attend_fwd(qh, k, v, bias)[0]


attend.defvjp(_attend_fwd, _attend_bwd)


def write_slots(k_all: jax.Array, v_all: jax.Array, layer: int, index: jax.Array,
                k: jax.Array, v: jax.Array, layout: str = CPU_CACHE_LAYOUT
                ) -> tuple[jax.Array, jax.Array]:
  """Writes one layer's new keys and values into a cache's slots index .. index + L − 1.

  Args:
    k_all, v_all: keys and values of every layer, [num_layers, B, K, H, S] for layout
      `"BKHS"` (slots last, the `"cpu"` attention) or [num_layers, B, S, K, H] for `"BSKH"`.
    layer: the layer (a Python int, or an int32 scalar in a layer scan).
    index: int32 scalar, the first slot written.
    k, v: the new tokens' keys and values as `Attention` returns them: [B, K, L, H] for
      `"BKHS"`, [B, L, K, H] for `"BSKH"`.
    layout: `"BKHS"` or `"BSKH"`.

  Returns:
    The updated (k_all, v_all), dtypes unchanged.
  """
  zero = jnp.zeros((), jnp.int32)
  lay = jnp.asarray(layer, jnp.int32)
  if layout == CPU_CACHE_LAYOUT:
    start = (lay, zero, zero, zero, index)                          # [1, B, K, H, L]
    k, v = k.transpose(0, 1, 3, 2), v.transpose(0, 1, 3, 2)
  elif layout == CACHE_LAYOUT:
    start = (lay, zero, index, zero, zero)                          # [1, B, L, K, H]
  else:
    raise ValueError(f"cache layout {layout!r} is not supported; valid: "
                     f"{(CPU_CACHE_LAYOUT, CACHE_LAYOUT)}")
  k_all = jax.lax.dynamic_update_slice(k_all, k[None].astype(k_all.dtype), start)
  v_all = jax.lax.dynamic_update_slice(v_all, v[None].astype(v_all.dtype), start)
  return k_all, v_all


class CachedLayer(NamedTuple):
  """One layer's view of a decoder's KV cache during a cached forward pass.

  Attributes:
    k: keys of every layer, as `KVCache.k` ([num_layers, B, K, H, S] or [num_layers, B, S,
      K, H] by `layout`).
    v: values of every layer, as `KVCache.v`.
    layer: this layer's index into k and v (a Python int, or an int32 scalar in a layer scan).
    index: int32 scalar, the slot of the first new token.
    allowed: bool [B, L, S], which earlier slots (before `index`) each new query may see;
      the new tokens see each other through the layer's own `allowed` [B, L, L].
    layout: `"BKHS"` or `"BSKH"`, as `KVCache.layout`.
  """
  k: jax.Array
  v: jax.Array
  layer: int
  index: jax.Array
  allowed: jax.Array
  layout: str = CPU_CACHE_LAYOUT


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, allowed: jax.Array, *,
                          implementation: str = "xla", causal: bool = False) -> jax.Array:
  """softmax(q kᵀ / √H + mask) v through `jax.nn.dot_product_attention`, grouped-query.

  out[b, l, n] = Σ_s p[b, l, n, s] v[b, s, n // G],
  p[b, l, n, :] = softmax_s(q[b, l, n] · k[b, s, n // G] / √H where allowed[b, l, s])

  A query with no allowed key gets uniform weights (masked logits are a large finite negative
  number, as in the `"cpu"` path).

  Args:
    q: [B, L, N, H] queries (not scaled).
    k: [B, S, K, H] keys.
    v: [B, S, K, H] values.
    allowed: bool [B, L, S], which keys each query may see.
    implementation: `"xla"` or `"cudnn"` (cuDNN's flash attention where its shapes and dtypes
      allow: bf16/fp16, head dim a multiple of 8 up to 128; else the XLA one).
    causal: `allowed` lies within the causal mask (query l sees only keys s ≤ l, S = L): lets
      cuDNN skip the blocks above the diagonal. The result is the same.

  Returns:
    [B, L, N, H] in the dtype of q.

  References:
    Dao, FlashAttention-2, https://arxiv.org/abs/2307.08691
  """
  h = q.shape[-1]
  k, v = k.astype(q.dtype), v.astype(q.dtype)
  mask = allowed[:, None, :, :]                                     # [B, 1, L, S]
  if implementation == "cudnn" and not (q.dtype in (jnp.bfloat16, jnp.float16)
                                        and h % 8 == 0 and h <= 128):
    implementation = "xla"
  if implementation == "cudnn":
    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=h ** -0.5,
                                        is_causal=causal and q.shape[1] == k.shape[1],
                                        implementation="cudnn")
  return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=h ** -0.5,
                                      implementation="xla")


class Attention(nnx.Module):
  """Grouped-query causal self-attention, with an optional KV cache of S slots.

  softmax(q kᵀ / √H + mask) v with N query heads sharing K kv heads (G = N/K per group).

  References:
    Ainslie et al., GQA, https://arxiv.org/abs/2305.13245
  """

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs, dtype, param_dtype):
    d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    self.num_heads, self.num_kv_heads, self.head_dim = n, k, h
    self.dtype = dtype
    q_axes, kv_axes = ("embed", "q_heads", "head_dim"), ("embed", "kv_heads", "head_dim")
    self.q_kernel = _param(rngs, (d, n, h), q_axes, param_dtype, fan_in=d)
    self.k_kernel = _param(rngs, (d, k, h), kv_axes, param_dtype, fan_in=d)
    self.v_kernel = _param(rngs, (d, k, h), kv_axes, param_dtype, fan_in=d)
    self.o_kernel = _param(rngs, (n, h, d), ("q_heads", "head_dim", "embed"), param_dtype,
                           fan_in=n * h)
    if cfg.qkv_bias:
      self.q_bias = _param(rngs, (n, h), ("q_heads", "head_dim"), param_dtype, init="zeros")
      self.k_bias = _param(rngs, (k, h), ("kv_heads", "head_dim"), param_dtype, init="zeros")
      self.v_bias = _param(rngs, (k, h), ("kv_heads", "head_dim"), param_dtype, init="zeros")
    if cfg.o_bias:
      self.o_bias = _param(rngs, (d,), ("norm",), param_dtype, init="zeros")
    self.qkv_bias, self.has_o_bias = cfg.qkv_bias, cfg.o_bias

  def _proj(self, x, kernel, bias):
    y = dense(x, kernel[...].astype(self.dtype))                    # [B, L, N, H]
    if bias is not None:
      y = y + bias[...].astype(self.dtype)[None, None]
    return y

  def __call__(self, x: jax.Array, cos: jax.Array | None, sin: jax.Array | None,
               allowed: jax.Array, cached: CachedLayer | None = None,
               prefix: tuple[jax.Array, jax.Array] | None = None, *,
               implementation: str = "cpu", causal: bool = False
               ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Attention over the L new tokens, or, with a cache, over the cache's S slots.

    With a cache, the new keys/values are written to their slots first; the queries then
    attend over the earlier slots of the updated cache and over the new tokens (one softmax).
    With a prefix (and no cache), the queries attend over the P prefix keys followed by the
    new tokens (one softmax), as if the prefix had been the first P tokens of each row.

    Keys and values are head-major ([B, K, ·, H]) for `implementation="cpu"` and
    sequence-major ([B, ·, K, H]) for the others; "kv layout" below means that choice.

    Args:
      x: [B, L, D] normed input.
      cos, sin: [B, L, R/2], or None for a NoPE layer.
      allowed: bool [B, L, L], which new tokens each query may see; with a prefix
        [B, L, P + L], the prefix columns first.
      cached: the cache and this layer's slot mask, or None.
      prefix: (k, v) of P earlier tokens of each row (RoPE applied), each [B, K, P, H] or
        [B, P, K, H] by the kv layout, or None.
      implementation: `"cpu"`, `"xla"` or `"cudnn"` (resolved, see `attention_implementation`).
      causal: `allowed` lies within the causal mask (no prefix, no cache); a hint for cuDNN.

    Returns:
      ([B, L, D] output, (k, v) of the new tokens, RoPE applied, [B, K, L, H] or [B, L, K, H]
      by the kv layout); with a cache, (output, (k, v) of the whole updated cache).
    """
    q = self._proj(x, self.q_kernel, self.q_bias if self.qkv_bias else None)
    k = self._proj(x, self.k_kernel, self.k_bias if self.qkv_bias else None)
    v = self._proj(x, self.v_kernel, self.v_bias if self.qkv_bias else None)
    if cos is not None:
      q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    b, l, n, h = q.shape
    if implementation == "cpu":
      out, new_kv = self._attend_cpu(q, k, v, allowed, cached, prefix)
    else:
      out, new_kv = self._attend(q, k, v, allowed, cached, prefix, implementation, causal)
    o_kernel = self.o_kernel[...].astype(self.dtype)
    y = dense(out, o_kernel.reshape(n * h, -1))
    if self.has_o_bias:
      y = y + self.o_bias[...].astype(self.dtype)[None, None]
    return y, new_kv

  def _attend(self, q, k, v, allowed, cached, prefix, implementation, causal):
    """The portable path: `dot_product_attention`, KV cache [layers, B, S, K, H]."""
    b, l, n, h = q.shape
    if cached is None:
      keys, vals = k, v
      if prefix is not None:
        keys = jnp.concatenate([prefix[0].astype(k.dtype), k], axis=1)   # [B, P + L, K, H]
        vals = jnp.concatenate([prefix[1].astype(v.dtype), v], axis=1)
      out = dot_product_attention(q, keys, vals, allowed, implementation=implementation,
                                  causal=causal and prefix is None)
      return out.reshape(b, l, n * h), (k, v)
    if cached.layout != CACHE_LAYOUT:
      raise ValueError(f"attention {implementation!r} reads a KV cache of layout "
                       f"{CACHE_LAYOUT!r}, got {cached.layout!r}")
    k_all, v_all = write_slots(cached.k, cached.v, cached.layer, cached.index, k, v,
                               CACHE_LAYOUT)
    keys, vals = k_all[cached.layer], v_all[cached.layer]          # [B, S, K, H]
    # One mask over all S slots: the earlier slots as given, and the new tokens at their
    # slots index .. index + L − 1 (the write above put their keys there).
    new = jax.lax.dynamic_update_slice(jnp.zeros_like(cached.allowed), allowed,
                                       (jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32),
                                        cached.index))
    # Decode steps attend through XLA: cuDNN's kernels are built for long query blocks.
    out = dot_product_attention(q, keys, vals, cached.allowed | new, implementation="xla")
    return out.reshape(b, l, n * h), (k_all, v_all)

  def _attend_cpu(self, q, k, v, allowed, cached, prefix):
    """The XLA:CPU path: head-major products, hand-written backward, slots-last KV cache."""
    b, l, n, h = q.shape
    kh = self.num_kv_heads
    g = n // kh
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
    # H along vectorised slots, and p·v over the slots; the sums are `_xla_cpu.fused_sum`,
    # which keeps XLA:CPU from materialising the products (64-token sampling 0.25 -> 0.12 s
    # with both, measured before and after on the benchmark model).
    few = cached is not None and g * l <= 4
    f32 = jnp.float32
    fused_sum, fused_max = _xla_cpu.fused_sum, _xla_cpu.fused_max

    if cached is None:   # training, scoring and prefill: one softmax over the new tokens
      bias = jnp.where(allowed, 0.0, _MASK_VALUE).astype(jnp.float32)
      keys, vals = k, v
      if prefix is not None:
        keys = jnp.concatenate([prefix[0].astype(k.dtype), k], axis=2)   # [B, K, P + L, H]
        vals = jnp.concatenate([prefix[1].astype(v.dtype), v], axis=2)
      out = attend(qh, keys, vals, bias)
      new_kv = (k, v)
    else:
      if cached.layout != CPU_CACHE_LAYOUT:
        raise ValueError(f"attention 'cpu' reads a KV cache of layout {CPU_CACHE_LAYOUT!r}, "
                         f"got {cached.layout!r}")
      k_all, v_all = write_slots(cached.k, cached.v, cached.layer, cached.index, k, v)
      keys = k_all[cached.layer].astype(self.dtype)                 # [B, K, H, S]
      vals = v_all[cached.layer].astype(self.dtype)
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
                          _MASK_VALUE)
      sc_new = jnp.einsum("BKQH,BKSH->BKQS", qh, k, preferred_element_type=f32)
      sc_new = jnp.where(allowed[:, None, None], sc_new.reshape(b, kh, g, l, l), _MASK_VALUE)
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
        acc = jnp.einsum("BKQS,BKHS->BKQH", e_past.astype(self.dtype), vals,
                         preferred_element_type=f32)
        acc = acc + jnp.einsum("BKQS,BKSH->BKQH", e_new.astype(self.dtype), v,
                               preferred_element_type=f32)
      out = (acc / denom).astype(self.dtype)
      new_kv = (k_all, v_all)
    out = out.reshape(b, kh, g, l, h).transpose(0, 3, 1, 2, 4).reshape(b, l, n * h)
    return out, new_kv


class MLP(nnx.Module):
  """SwiGLU: down(silu(x W_gate) ⊙ x W_up).

  References:
    Shazeer, GLU Variants Improve Transformer, https://arxiv.org/abs/2002.05202
  """

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs, dtype, param_dtype):
    d, f = cfg.hidden_size, cfg.intermediate_size
    self.dtype = dtype
    self.gate = _param(rngs, (d, f), ("embed", "mlp"), param_dtype, fan_in=d)
    self.up = _param(rngs, (d, f), ("embed", "mlp"), param_dtype, fan_in=d)
    self.down = _param(rngs, (f, d), ("mlp", "embed"), param_dtype, fan_in=f)
    self.bias = cfg.mlp_bias
    if cfg.mlp_bias:
      self.gate_bias = _param(rngs, (f,), ("mlp",), param_dtype, init="zeros")
      self.up_bias = _param(rngs, (f,), ("mlp",), param_dtype, init="zeros")
      self.down_bias = _param(rngs, (d,), ("norm",), param_dtype, init="zeros")

  def __call__(self, x: jax.Array) -> jax.Array:
    gate = dense(x, self.gate[...].astype(self.dtype))
    up = dense(x, self.up[...].astype(self.dtype))
    if self.bias:
      gate = gate + self.gate_bias[...].astype(self.dtype)[None, None]
      up = up + self.up_bias[...].astype(self.dtype)[None, None]
    hidden = constrain(jax.nn.silu(gate) * up, ("batch", "length", "act_mlp"))
    y = dense(hidden, self.down[...].astype(self.dtype))
    if self.bias:
      y = y + self.down_bias[...].astype(self.dtype)[None, None]
    return y


class Block(nnx.Module):
  """Pre-norm decoder block: x + attn(norm(x)), then x + mlp(norm(x))."""

  def __init__(self, cfg: DecoderConfig, layer: int, *, rngs: nnx.Rngs, dtype, param_dtype):
    self.use_rope = cfg.uses_rope(layer)
    self.input_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, rngs=rngs,
                              param_dtype=param_dtype)
    self.attn = Attention(cfg, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
    self.post_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, rngs=rngs,
                             param_dtype=param_dtype)
    self.mlp = MLP(cfg, rngs=rngs, dtype=dtype, param_dtype=param_dtype)

  def __call__(self, x, cos, sin, allowed, cached=None, prefix=None, *,
               implementation: str = "cpu", causal: bool = False,
               rope_on: jax.Array | None = None):
    """x [B, L, D] -> (x [B, L, D], new (k, v)); arguments as `Attention.__call__`.

    `rope_on` (a bool scalar, possibly traced) says whether this layer applies RoPE when one
    stacked block stands for layers that differ in it (`Decoder(scan_layers=True)` on
    SmolLM3's NoPE layers); a NoPE layer then rotates by angle 0 (cos 1, sin 0), which leaves
    q and k exactly as they are.
    """
    if not self.use_rope:
      cos = sin = None
    elif rope_on is not None and cos is not None:
      cos = jnp.where(rope_on, cos, jnp.ones_like(cos))
      sin = jnp.where(rope_on, sin, jnp.zeros_like(sin))
    with jax.named_scope("attention"):
      y, new_kv = self.attn(self.input_norm(x), cos, sin, allowed, cached, prefix,
                            implementation=implementation, causal=causal)
    x = constrain(x + y, ("batch", "length", "act_embed"))
    with jax.named_scope("mlp"):
      x = constrain(x + self.mlp(self.post_norm(x)), ("batch", "length", "act_embed"))
    return x, new_kv
