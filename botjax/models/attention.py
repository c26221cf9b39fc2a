"""Attention implementations, chosen through a table (`ATTENTION_FNS`).

Every implementation computes the same grouped-query attention (up to float rounding),
softmax(q kᵀ / √H + mask) v, over the new tokens, over a prefix followed by them
(`Decoder.shared_prefix`), or over a KV cache's slots (`botjax.models.cache`). They differ in
their kernels and in the layout of the keys and values they keep:

* `"xla"`: `jax.nn.dot_product_attention(implementation="xla")`, the portable one (TPU, and
  GPU without cuDNN); KV cache `[layers, B, S, K, H]` (`CACHE_LAYOUT`).
* `"cudnn"`: `jax.nn.dot_product_attention(implementation="cudnn")`, cuDNN's fused flash
  attention, for training and prefill on NVIDIA GPUs (bf16/fp16 activations, head dim a
  multiple of 8 up to 128; other shapes use `"xla"`); decode steps use the `"xla"` path.
* `"cpu"`: a dense attention with a hand-written backward and a decode path tuned for XLA:CPU
  (`botjax.models.attention_cpu`); KV cache slots-last, `[layers, B, K, H, S]`. Only for CPU.

A model names one in `DecoderConfig.attention`; `"auto"` resolves it from the platform of the
devices the model runs on, when it is traced (`attention_implementation`).

Shape letters: B batch, L new tokens, P prefix tokens, S key slots, N/K query/kv heads,
G = N/K, H head dim. Layouts are written in these letters ("BSKH": [B, S, K, H]).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from botjax import xla_cpu
from botjax.models import attention_cpu
from botjax.models.config import ATTENTION_IMPLEMENTATIONS

# The portable KV-cache layout, [layers, B, S, K, H], and the order of the new tokens' keys
# and values the portable attention returns ([B, L, K, H]).
CACHE_LAYOUT = "BSKH"
KV_LAYOUT = "BSKH"


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


def attend_portable(q, k, v, allowed, cached=None, prefix=None, *, causal: bool = False,
                    implementation: str = "xla"):
  """The portable attention over the new tokens, a prefix, or a KV cache's slots.

  Args:
    q: [B, L, N, H] queries (RoPE applied, not scaled).
    k, v: [B, L, K, H] the new tokens' keys (RoPE applied) and values.
    allowed: bool [B, L, L] which new tokens each query may see; with a prefix [B, L, P + L],
      the prefix columns first.
    cached: a cache's view of this layer (`botjax.models.cache.CachedLayer`, layout
      `CACHE_LAYOUT`), or None.
    prefix: (k, v) of P earlier tokens of each row, [B, P, K, H] each, or None.
    causal: `allowed` lies within the causal mask (no prefix, no cache); a hint for cuDNN.
    implementation: `"xla"` or `"cudnn"` (`dot_product_attention`); cached decode steps use
      `"xla"`, as cuDNN's kernels are built for long query blocks.

  Returns:
    ([B, L, N·H] output in the dtype of q, (k, v) [B, L, K, H] of the new tokens); with a
    cache, (output, the view's updated arrays `cached.state`).
  """
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
  cached = cached.write(k, v, KV_LAYOUT)
  # One mask over all S slots: the earlier slots as given, and the new tokens at their slots
  # (the write above put their keys there).
  out = dot_product_attention(q, cached.keys, cached.values,
                              cached.allowed | cached.new_slots(allowed),
                              implementation="xla")
  return out.reshape(b, l, n * h), cached.state


def _cudnn_available() -> bool:
  """Whether jax finds cuDNN's fused attention on this host (the jax CUDA plugin)."""
  try:
    from jax._src.cudnn import fused_attention_stablehlo
  except ImportError:
    return False
  return getattr(fused_attention_stablehlo, "cuda_versions", None) is not None


def _on_cudnn_gpu(where: Any) -> bool:
  return xla_cpu.platform_of(where) == "gpu" and _cudnn_available()


class AttentionFn(NamedTuple):
  """One attention implementation: its function, the layouts it keeps, and where it applies.

  Attributes:
    attend: `(q, k, v, allowed, cached, prefix, *, causal) -> (out [B, L, N·H], new kv)`, as
      `attend_portable`; the new tokens' keys and values (and a prefix's) in `kv_layout`.
    cache_layout: the KV-cache layout it reads (`botjax.models.cache.KVCache.layout`).
    kv_layout: the order of the new tokens' keys and values it returns, e.g. "BSKH".
    auto: `where -> bool`, whether `"auto"` may pick it for the devices `where` (see
      `attention_implementation`).
  """
  attend: Callable
  cache_layout: str
  kv_layout: str
  auto: Callable[[Any], bool]


# In the order in which "auto" tries them: the first whose `auto(where)` holds.
ATTENTION_FNS: dict[str, AttentionFn] = {
    "cpu": AttentionFn(attention_cpu.attend_cpu, attention_cpu.CACHE_LAYOUT,
                       attention_cpu.KV_LAYOUT, attention_cpu.auto),
    "cudnn": AttentionFn(functools.partial(attend_portable, implementation="cudnn"),
                         CACHE_LAYOUT, KV_LAYOUT, _on_cudnn_gpu),
    "xla": AttentionFn(functools.partial(attend_portable, implementation="xla"),
                       CACHE_LAYOUT, KV_LAYOUT, lambda where: True),
}


def attention_implementation(choice: str = "auto", where: Any = None) -> str:
  """Resolves an attention choice to an implementation for the devices a model runs on.

  Args:
    choice: one of `ATTENTION_IMPLEMENTATIONS`; anything but `"auto"` is returned as is.
    where: the devices, mesh or arrays the model is placed on (see
      `botjax.xla_cpu.platform_of`); None: the mesh set with `jax.set_mesh`, else the
      default device.

  Returns:
    `"auto"` resolves to `"cpu"` on CPU (`"xla"` there with `BOTJAX_XLA_CPU_TUNING=0`),
    `"cudnn"` on GPUs where jax finds cuDNN, else `"xla"` (TPU included): the first entry of
    `ATTENTION_FNS` whose `auto` holds.
  """
  if choice not in ATTENTION_IMPLEMENTATIONS:
    raise ValueError(f"attention implementation {choice!r} is not supported; valid: "
                     f"{ATTENTION_IMPLEMENTATIONS}")
  if choice != "auto":
    return choice
  return next(name for name, fn in ATTENTION_FNS.items() if fn.auto(where))


def cache_layout(implementation: str) -> str:
  """The KV-cache layout an attention implementation reads (`"auto"` resolved first)."""
  return ATTENTION_FNS[attention_implementation(implementation)].cache_layout
