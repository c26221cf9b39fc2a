"""Shared decoder layers: RMSNorm (float32), RoPE (scaled / partial / per layer off), GQA, SwiGLU.

Parameters are stored in JAX layout (`[in, out]`, heads split out: q kernel `[D, N, H]`) and
carry logical axis names in their `logical_axes` metadata; `botjax.models.sharding` maps those
names to mesh axes.

Shape letters: B batch, L new tokens, S key slots, D width, N/K query/kv heads, G = N/K,
H head dim, R rotary dims, F MLP width.

`Attention` projects, rotates and then attends through one of the implementations of
`botjax.models.attention.ATTENTION_FNS` (portable `"xla"`, `"cudnn"`, XLA:CPU `"cpu"`), which
a model chooses by `DecoderConfig.attention`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from botjax import xla_cpu
from botjax.models.attention import ATTENTION_FNS
from botjax.models.cache import CachedLayer
from botjax.models.config import DecoderConfig
from botjax.models.sharding import constrain


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
    var = xla_cpu.fused_sum(jnp.square(x32), keepdims=True) / x.shape[-1]
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
               implementation: str = "xla", causal: bool = False
               ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Attention over the L new tokens, or, with a cache, over the cache's S slots.

    With a cache, the new keys/values are written to their slots first; the queries then
    attend over the earlier slots of the updated cache and over the new tokens (one softmax).
    With a prefix (and no cache), the queries attend over the P prefix keys followed by the
    new tokens (one softmax), as if the prefix had been the first P tokens of each row.

    Keys and values of the new tokens (returned) and of a prefix (read) have the axis order
    `ATTENTION_FNS[implementation].kv_layout` ("kv layout" below: [B, L, K, H] for the
    portable attention, [B, K, L, H] for `"cpu"`).

    Args:
      x: [B, L, D] normed input.
      cos, sin: [B, L, R/2], or None for a NoPE layer.
      allowed: bool [B, L, L], which new tokens each query may see; with a prefix
        [B, L, P + L], the prefix columns first.
      cached: this layer's view of a cache (`botjax.models.cache.CachedLayer`), or None. A
        view with an `attend(q, k, v) -> (out [B, L, N·H], state)` method computes the
        attention itself (`botjax.sampling.paged.PagedLayer`).
      prefix: (k, v) of P earlier tokens of each row (RoPE applied), each [B, P, K, H] or
        [B, K, P, H] by the kv layout, or None.
      implementation: a key of `ATTENTION_FNS` (resolved, see
        `botjax.models.attention.attention_implementation`).
      causal: `allowed` lies within the causal mask (no prefix, no cache); a hint for cuDNN.

    Returns:
      ([B, L, D] output, (k, v) of the new tokens, RoPE applied, in the kv layout); with a
      cache, (output, the view's updated arrays `cached.state`).
    """
    q = self._proj(x, self.q_kernel, self.q_bias if self.qkv_bias else None)
    k = self._proj(x, self.k_kernel, self.k_bias if self.qkv_bias else None)
    v = self._proj(x, self.v_kernel, self.v_bias if self.qkv_bias else None)
    if cos is not None:
      q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    b, l, n, h = q.shape
    if cached is not None and hasattr(cached, "attend"):
      # a cache that computes the attention itself (the paged pool of the slot engine)
      out, new_kv = cached.attend(q, k, v)
    else:
      out, new_kv = ATTENTION_FNS[implementation].attend(q, k, v, allowed, cached, prefix,
                                                         causal=causal)
    o_kernel = self.o_kernel[...].astype(self.dtype)
    y = dense(out, o_kernel.reshape(n * h, -1))
    if self.has_o_bias:
      y = y + self.o_bias[...].astype(self.dtype)[None, None]
    return y, new_kv


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
               implementation: str = "xla", causal: bool = False,
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
