"""The KV cache, and the small interface through which a forward pass reads and writes it.

`Decoder.__call__` and the attention implementations touch a cache only through three
objects, so that another kind of cache is another implementation of the same three:

* the cache (`KVCache`), a pytree; `begin(new_mask, index, kv_layout=...)` starts one forward
  pass of L new tokens and returns the pass;
* the pass (`KVCachePass`), built once per forward pass:
  - `state`: the arrays carried from layer to layer (also through a layer scan);
  - `layer(state, layer, window)`: the view that layer's attention reads, or None when there
    is nothing to read (a prefill into an empty cache: the new tokens see only each other);
  - `store(state, layer, new_kv)`: the state after that layer, from what its attention
    returned (the view's `state` when it had a view, else the new tokens' keys and values);
  - `finish(state)`: the updated cache;
* the view (`CachedLayer`), all the attention implementations use:
  - `write(k, v, kv_layout)`: the new tokens' keys and values into their slots (a new view);
  - `keys`, `values`: this layer's slots in `layout`; `allowed`: bool [B, L, S], the earlier
    slots each new query may see; `new_slots(allowed)`: the new tokens' own mask [B, L, L]
    placed at their slots, [B, L, S];
  - `state`: the arrays to carry on (after `write`).

A view may instead compute the attention itself, with a method `attend(q, k, v) -> (output,
state)` that `botjax.models.layers.Attention` calls in place of the attention implementation:
the slot engine's paged pool (`botjax.sampling.paged`), whose blocks only it knows how to read.

Layouts are strings of the letters B (rows), S (slots), K (kv heads), H (head dim) in axis
order; each attention implementation reads the layout it declares
(`botjax.models.attention.ATTENTION_FNS`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from botjax.models.attention import (ATTENTION_FNS, CACHE_LAYOUT, attention_implementation,
                                     cache_layout)
from botjax.models.config import DecoderConfig

# Logical axis names of each layout letter (`botjax.models.sharding`).
_LOGICAL = {"B": "batch", "S": "cache_length", "K": "act_kv_heads", "H": "head_dim"}


def _check_layout(layout: str) -> str:
  valid = tuple(sorted({fn.cache_layout for fn in ATTENTION_FNS.values()}, reverse=True))
  if layout not in valid:
    raise ValueError(f"cache layout {layout!r} is not supported; valid: {valid}")
  return layout


def window_mask(allowed: jax.Array, distance: jax.Array, window) -> jax.Array:
  """allowed [B, L, S] & (distance [L, S] < window), or `allowed` itself for window None.

  `distance` is query minus key position (in sequence indices, or cache slots); `window` a
  Python int, an int32 scalar (a layer scan), or None (full causal attention).
  """
  if window is None:
    return allowed
  return allowed & (distance < window)[None]


def write_slots(k_all: jax.Array, v_all: jax.Array, layer, index: jax.Array,
                k: jax.Array, v: jax.Array, layout: str = CACHE_LAYOUT,
                kv_layout: str | None = None) -> tuple[jax.Array, jax.Array]:
  """Writes one layer's new keys and values into a cache's slots index .. index + L − 1.

  Args:
    k_all, v_all: keys and values of every layer, [num_layers, *layout] (e.g. [num_layers, B,
      S, K, H] for `"BSKH"`).
    layer: the layer (a Python int, or an int32 scalar in a layer scan).
    index: int32 scalar, the first slot written.
    k, v: the new tokens' keys and values, their L tokens on the axis "S" of `kv_layout`.
    layout: the cache's layout.
    kv_layout: the axis order of k and v (None: `layout`), e.g. "BKSH" for [B, K, L, H].

  Returns:
    The updated (k_all, v_all), dtypes unchanged.
  """
  _check_layout(layout)
  kv_layout = layout if kv_layout is None else kv_layout
  zero = jnp.zeros((), jnp.int32)
  lay = jnp.asarray(layer, jnp.int32)
  start = (lay,) + tuple(index if axis == "S" else zero for axis in layout)
  perm = tuple(kv_layout.index(axis) for axis in layout)
  if perm != tuple(range(len(layout))):
    k, v = k.transpose(perm), v.transpose(perm)
  k_all = jax.lax.dynamic_update_slice(k_all, k[None].astype(k_all.dtype), start)
  v_all = jax.lax.dynamic_update_slice(v_all, v[None].astype(v_all.dtype), start)
  return k_all, v_all


class CachedLayer(NamedTuple):
  """One layer's view of a `KVCache` during a cached forward pass (see the module docstring).

  Attributes:
    k: keys of every layer, as `KVCache.k` ([num_layers, *layout]).
    v: values of every layer, as `KVCache.v`.
    layer: this layer's index into k and v (a Python int, or an int32 scalar in a layer scan).
    index: int32 scalar, the slot of the first new token.
    allowed: bool [B, L, S], which earlier slots (before `index`) each new query may see;
      the new tokens see each other through the layer's own `allowed` [B, L, L].
    layout: as `KVCache.layout`.
  """
  k: jax.Array
  v: jax.Array
  layer: int
  index: jax.Array
  allowed: jax.Array
  layout: str = CACHE_LAYOUT

  def write(self, k: jax.Array, v: jax.Array, kv_layout: str) -> "CachedLayer":
    """The view after writing the L new tokens' keys and values (axes in `kv_layout`)."""
    k_all, v_all = write_slots(self.k, self.v, self.layer, self.index, k, v, self.layout,
                               kv_layout)
    return self._replace(k=k_all, v=v_all)

  @property
  def keys(self) -> jax.Array:
    """This layer's keys of all S slots, in `layout` (e.g. [B, S, K, H])."""
    return self.k[self.layer]

  @property
  def values(self) -> jax.Array:
    """This layer's values of all S slots, in `layout`."""
    return self.v[self.layer]

  def new_slots(self, allowed: jax.Array) -> jax.Array:
    """bool [B, L, S]: the new tokens' mask `allowed` [B, L, L] at their slots, False elsewhere."""
    zero = jnp.zeros((), jnp.int32)
    return jax.lax.dynamic_update_slice(jnp.zeros_like(self.allowed), allowed,
                                        (zero, zero, self.index))

  @property
  def state(self) -> tuple[jax.Array, jax.Array]:
    """(k, v) of every layer, to carry to the next layer."""
    return self.k, self.v


class KVCachePass:
  """One forward pass of L new tokens through a `KVCache`, written at slots index .. index + L − 1.

  The new tokens are marked valid where `new_mask` is True; query l sees every valid slot
  before `index` (and, through its layer's own mask, the new tokens up to itself). A static
  `index` of 0 (a Python int) is a prefill into an empty cache: nothing is read, each layer's
  new keys and values are only stored.

  Args:
    cache: the cache.
    new_mask: bool [B, L], True on real new tokens.
    index: the slot of the first new token: an int32 scalar (may be traced) or a Python int.
    kv_layout: the axis order of the new tokens' keys and values that the layers' attention
      returns (`botjax.models.attention.AttentionFn.kv_layout`).
  """

  def __init__(self, cache: "KVCache", new_mask: jax.Array, index, *, kv_layout: str):
    if index is None:
      raise ValueError("a cached forward needs cache_index (slot of the first new token)")
    b, l = new_mask.shape
    if l > cache.max_len or cache.valid.shape[0] != b:
      raise ValueError(f"{b} rows of {l} new tokens do not fit a cache of "
                       f"{cache.valid.shape[0]} rows x {cache.max_len} slots")
    self.layout, self.kv_layout = cache.layout, kv_layout
    # A static 0 (a Python int) is a prefill into an empty prefix: skip the cached scores.
    self.fresh = isinstance(index, (int, np.integer)) and int(index) == 0
    self.index = jnp.asarray(index, jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    self.state = (cache.k, cache.v)
    self.valid = jax.lax.dynamic_update_slice(cache.valid, new_mask, (zero, self.index))
    if not self.fresh:
      # Each layer writes its new slots first and then reads the earlier slots back from the
      # updated cache. Reading them from the cache passed in while writing the new slots made
      # XLA copy the whole cache twice per decode step (nothing ordered those reads before
      # the writes, so they could not share its buffer).
      slots = jnp.arange(cache.max_len, dtype=jnp.int32)
      offsets = jnp.arange(l, dtype=jnp.int32)
      self.distance = (self.index + offsets)[:, None] - slots[None, :]    # [L, S]
      self.allowed = jnp.broadcast_to(                                  # earlier valid slots
          (self.valid & (slots[None, :] < self.index))[:, None, :], (b, l, cache.max_len))

  def layer(self, state, layer, window=None) -> CachedLayer | None:
    """The view layer `layer` reads (its sliding `window`, if any, applied), or None."""
    if self.fresh:   # slot 0 onward: no earlier slot exists, so the cache is not read
      return None
    return CachedLayer(*state, layer, self.index,
                       window_mask(self.allowed, self.distance, window), self.layout)

  def store(self, state, layer, new_kv):
    """The state after layer `layer`, whose attention returned `new_kv`."""
    if self.fresh:
      return write_slots(*state, layer, self.index, *new_kv, self.layout, self.kv_layout)
    return new_kv

  def finish(self, state) -> "KVCache":
    """The cache after the pass."""
    k, v = state
    return KVCache(k=k, v=v, valid=self.valid, layout=self.layout)


@struct.dataclass
class KVCache:
  """Per-layer keys and values of S cache slots, and which slots hold a real token.

  Two layouts, one per kind of attention implementation (`ATTENTION_FNS[...].cache_layout`):

  * `"BSKH"` (GPU, TPU: the `"xla"` and `"cudnn"` attention): k and v [num_layers, B, S, K,
    H], the layout `jax.nn.dot_product_attention` reads.
  * `"BKHS"` (the XLA:CPU `"cpu"` attention): k and v [num_layers, B, K, H, S], head-major,
    slots last: a decode step's q · k then reduces over H with the slots as the vectorised
    minor axis (3.2x faster on XLA:CPU than with H minor, measured), and probs · v reduces
    over the minor axis, which XLA:CPU fuses with the read of the cache.

  Attributes:
    k: keys (RoPE already applied), in `layout`.
    v: values, in `layout`.
    valid: bool [B, S], True where a slot holds a (non-padding) token.
    layout: `"BSKH"` or `"BKHS"` (static).
  """

  k: jax.Array
  v: jax.Array
  valid: jax.Array
  layout: str = struct.field(pytree_node=False, default=CACHE_LAYOUT)

  @classmethod
  def init(cls, cfg: DecoderConfig, *, batch_size: int, max_len: int,
           dtype=jnp.float32, layout: str | None = None) -> "KVCache":
    """An empty cache (no valid slot) for a config.

    Args:
      cfg: the decoder config (layers, kv heads, head dim, attention).
      batch_size: B rows.
      max_len: S slots per row (prompt + generated tokens).
      dtype: storage dtype of keys and values.
      layout: `"BSKH"` or `"BKHS"`; None: the layout of the attention implementation that
        `cfg.attention` resolves to for the devices in use (see
        `botjax.models.attention.attention_implementation`).

    Returns:
      A `KVCache` with k and v zeros ([num_layers, B, S, K, H] or [num_layers, B, K, H, S])
      and valid all False [B, S].
    """
    if layout is None:
      layout = cache_layout(attention_implementation(cfg.attention))
    sizes = {"B": batch_size, "S": max_len, "K": cfg.num_kv_heads, "H": cfg.head_dim}
    shape = (cfg.num_layers,) + tuple(sizes[axis] for axis in _check_layout(layout))
    return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
               valid=jnp.zeros((batch_size, max_len), bool), layout=layout)

  @property
  def max_len(self) -> int:
    return self.valid.shape[1]

  @property
  def slot_axis(self) -> int:
    """The axis of k and v that indexes slots (2 for `"BSKH"`, 4 for `"BKHS"`)."""
    return 1 + self.layout.index("S")

  @property
  def logical_axes(self) -> tuple[str, ...]:
    """Logical axis names of k and v (for `botjax.models.sharding.constrain`)."""
    return ("layers",) + tuple(_LOGICAL[axis] for axis in self.layout)

  def begin(self, new_mask: jax.Array, index, *, kv_layout: str) -> KVCachePass:
    """Starts a forward pass of L new tokens at slot `index` (see `KVCachePass`)."""
    return KVCachePass(self, new_mask, index, kv_layout=kv_layout)
