"""Shared decoder layers: RMSNorm (float32), RoPE (scaled / partial / per layer off), GQA, SwiGLU.

Parameters are stored in JAX layout (`[in, out]`, heads split out: q kernel `[D, N, H]`) and
carry logical axis names in their `logical_axes` metadata; `botjax.models.sharding` maps those
names to mesh axes.

Shape letters: B batch, L new tokens, S key slots, D width, N/K query/kv heads, G = N/K,
H head dim, R rotary dims, F MLP width.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from botjax.models.config import DecoderConfig
from botjax.models.sharding import constrain

# Finite stand-in for -inf so a query with no visible key gives a uniform row, never NaN.
_MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


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
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
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
    y = jnp.einsum("BLD,DNH->BLNH", x, kernel[...].astype(self.dtype))
    if bias is not None:
      y = y + bias[...].astype(self.dtype)[None, None]
    return y

  def __call__(self, x: jax.Array, cos: jax.Array | None, sin: jax.Array | None,
               allowed: jax.Array, past: tuple[jax.Array, jax.Array, jax.Array] | None = None
               ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Attention over the L new tokens and, with a cache, the S cached slots.

    Cached keys are read in place (never copied with the new ones spliced in): the scores of
    the cached slots and of the new tokens are joined before one softmax.

    Args:
      x: [B, L, D] normed input.
      cos, sin: [B, L, R/2], or None for a NoPE layer.
      allowed: bool [B, L, L], which new tokens each query may see.
      past: (k_cache [B, S, K, H], v_cache [B, S, K, H], allowed_past bool [B, L, S]) or None.

    Returns:
      ([B, L, D] output, (k [B, L, K, H], v [B, L, K, H]) of the new tokens, RoPE applied).
    """
    q = self._proj(x, self.q_kernel, self.q_bias if self.qkv_bias else None)
    k = self._proj(x, self.k_kernel, self.k_bias if self.qkv_bias else None)
    v = self._proj(x, self.v_kernel, self.v_bias if self.qkv_bias else None)
    if cos is not None:
      q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    b, l, n, h = q.shape
    kh = self.num_kv_heads
    qg = q.reshape(b, l, kh, n // kh, h)
    scale = h ** -0.5
    scores = jnp.einsum("BLKGH,BSKH->BKGLS", qg, k, preferred_element_type=jnp.float32) * scale
    scores = jnp.where(allowed[:, None, None, :, :], scores, _MASK_VALUE)
    if past is not None:
      k_past, v_past, allowed_past = past
      past_scores = jnp.einsum("BLKGH,BSKH->BKGLS", qg, k_past.astype(self.dtype),
                               preferred_element_type=jnp.float32) * scale
      past_scores = jnp.where(allowed_past[:, None, None, :, :], past_scores, _MASK_VALUE)
      scores = jnp.concatenate([past_scores, scores], axis=-1)
    probs = jax.nn.softmax(scores, axis=-1).astype(self.dtype)
    if past is not None:
      s = past_scores.shape[-1]
      out = (jnp.einsum("BKGLS,BSKH->BLKGH", probs[..., :s], v_past.astype(self.dtype))
             + jnp.einsum("BKGLS,BSKH->BLKGH", probs[..., s:], v))
    else:
      out = jnp.einsum("BKGLS,BSKH->BLKGH", probs, v)
    y = jnp.einsum("BLNH,NHD->BLD", out.reshape(b, l, n, h),
                   self.o_kernel[...].astype(self.dtype))
    if self.has_o_bias:
      y = y + self.o_bias[...].astype(self.dtype)[None, None]
    return y, (k, v)


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
    gate = x @ self.gate[...].astype(self.dtype)
    up = x @ self.up[...].astype(self.dtype)
    if self.bias:
      gate = gate + self.gate_bias[...].astype(self.dtype)[None, None]
      up = up + self.up_bias[...].astype(self.dtype)[None, None]
    hidden = constrain(jax.nn.silu(gate) * up, ("batch", "length", "act_mlp"))
    y = hidden @ self.down[...].astype(self.dtype)
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

  def __call__(self, x, cos, sin, allowed, past=None):
    with jax.named_scope("attention"):
      if self.use_rope:
        y, new_kv = self.attn(self.input_norm(x), cos, sin, allowed, past)
      else:
        y, new_kv = self.attn(self.input_norm(x), None, None, allowed, past)
    x = constrain(x + y, ("batch", "length", "act_embed"))
    with jax.named_scope("mlp"):
      x = constrain(x + self.mlp(self.post_norm(x)), ("batch", "length", "act_embed"))
    return x, new_kv
