"""A per-slot KV cache: each decode slot of the slot engine owns one region of R token slots.

The slot engine (`botjax.sampling.slots`) keeps its slots' keys and values either in a paged
pool (`botjax.sampling.paged`: blocks handed out as sequences grow, attention read block by
block) or, here, in one region per slot: a `KVCache`-shaped array whose rows are the slots
([layers, S, K, H, R] in the `"BKHS"` layout of the `"cpu"` attention, [layers, S, R, K, H] in
the portable `"BSKH"`), with R = the call's prompt columns + its generation bucket, as the
lockstep `Sampler` sizes each row. Slot s's token at sequence position j sits in region slot
j, so a refill writes a prompt at slots 0 … len − 1 and decoding goes on from there.

A decode step hands the decoder a `RegionStep`, whose layer views (`RegionLayer`) have the
interface of `botjax.models.cache.CachedLayer`: the attention is the decoder's own
implementation (the lockstep sampler's kernel), over each slot's whole region with the slots
at or past its position masked. Only the write differs: each slot writes its new token at its
own position (a scatter of S tokens, not one shared column).

Regions suit short budgets: every step reads every slot's whole region, as the lockstep
sampler reads its rows', which costs no more than reading the live blocks when the region is
short, and the attention then runs as one fused pass instead of the paged pool's per-block
partials and their merge. At long budgets the pool is the smaller and faster cache
(`SlotEngine`'s `kv_cache="auto"` picks by budget; `docs/scaling.md` gives the measurements).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from botjax.models.attention import CACHE_LAYOUT
from botjax.models.cache import CachedLayer, KVCache
from botjax.models.config import DecoderConfig
from botjax.sampling.paged import PagedKVCache, PagedPass


@struct.dataclass
class RegionKVCache:
  """Keys and values of S slots, each in its own region of R token slots.

  Attributes:
    k: keys (RoPE applied), [layers, *layout] with B = S slots and S = R region slots:
      [layers, S, K, H, R] (`"BKHS"`) or [layers, S, R, K, H] (`"BSKH"`).
    v: values, same shape.
    layout: the layout of the attention implementation in use (static).
  """

  k: jax.Array
  v: jax.Array
  layout: str = struct.field(pytree_node=False, default=CACHE_LAYOUT)

  @classmethod
  def init(cls, cfg: DecoderConfig, *, num_slots: int, region: int, dtype=jnp.float32,
           layout: str = CACHE_LAYOUT) -> "RegionKVCache":
    """An all-zero cache of `num_slots` regions of `region` token slots each."""
    dense = KVCache.init(cfg, batch_size=num_slots, max_len=region, dtype=dtype, layout=layout)
    return cls(k=dense.k, v=dense.v, layout=layout)

  @property
  def num_slots(self) -> int:
    return self.k.shape[1 + self.layout.index("B")]

  @property
  def region(self) -> int:
    return self.k.shape[1 + self.layout.index("S")]

  nbytes = PagedKVCache.nbytes        # bytes of k and v

  def write_prompts(self, slots: jax.Array, k: jax.Array, v: jax.Array) -> "RegionKVCache":
    """Writes prompts' keys and values at region slots 0 … P − 1 of the slots `slots`.

    Args:
      slots: int32 [R'], the slot of each prompt (S or more: dropped).
      k, v: [layers, *layout] with B = R' and S = P ≤ R, in this cache's layout and dtype.
    """
    cols = k.shape[1 + self.layout.index("S")]
    index = (slice(None),) + tuple({"B": slots, "S": slice(0, cols)}.get(a, slice(None))
                                   for a in self.layout)
    return self.replace(k=self.k.at[index].set(k, mode="drop"),
                        v=self.v.at[index].set(v, mode="drop"))

  def at(self, pos: jax.Array) -> "RegionStep":
    """The cache addressed for one decode step: slot s's new token goes to region slot
    pos[s] (int32 [S]) and sees the slots before it."""
    return RegionStep(self, pos)


@struct.dataclass
class RegionStep:
  """A `RegionKVCache` addressed for one decode step of its S slots: the cache a decoder call
  is given.

  Attributes:
    cache: the `RegionKVCache`.
    pos: int32 [S], each slot's position: its new token's key and value go to region slot
      pos[s], and it sees the region slots before it (its new token included).
  """

  cache: RegionKVCache
  pos: jax.Array

  @property
  def layout(self) -> str:
    return self.cache.layout

  def begin(self, new_mask: jax.Array, index=None, *, kv_layout: str) -> "RegionPass":
    """Starts the decoder's pass of one new token per slot (`index` is unused: each slot's
    place is its `pos`)."""
    del index, kv_layout
    if new_mask.shape != (self.pos.shape[0], 1):
      raise ValueError(f"a region step feeds one token to each of {self.pos.shape[0]} slots, "
                       f"got new tokens of shape {new_mask.shape}")
    return RegionPass(self)


class RegionPass:
  """One decode step's pass through a `RegionStep` (the `KVCachePass` interface)."""

  def __init__(self, step: RegionStep):
    self.step = step
    self.state = (step.cache.k, step.cache.v)
    slots = jnp.arange(step.cache.region, dtype=jnp.int32)
    self.distance = step.pos[:, None] - slots[None, :]                   # [S, R]
    self.allowed = (self.distance > 0)[:, None, :]                       # [S, 1, R]
    self.at_pos = (self.distance == 0)[:, None, :]

  def layer(self, state, layer, window=None) -> "RegionLayer":
    allowed = self.allowed
    if window is not None:
      allowed = allowed & (self.distance < window)[:, None, :]
    return RegionLayer(*state, layer, self.step.pos, allowed, self.at_pos, self.step.layout)

  store = PagedPass.store            # the layer's view returns the arrays to carry on

  def finish(self, state) -> RegionKVCache:
    k, v = state
    return self.step.cache.replace(k=k, v=v)


class RegionLayer(NamedTuple):
  """One layer's view of a `RegionStep`, with the interface of
  `botjax.models.cache.CachedLayer` (the decoder's attention implementations read it).

  Attributes:
    k, v: the cache's keys and values of every layer ([layers, *layout]).
    layer: this layer's index into k and v (a Python int, or an int32 scalar in a layer scan).
    pos: int32 [S], the region slot of each slot's new token.
    allowed: bool [S, 1, R], the earlier region slots each slot's query sees (its window
      applied).
    at_pos: bool [S, 1, R], True at each slot's own new slot.
    layout: the cache's layout.
  """
  k: jax.Array
  v: jax.Array
  layer: int
  pos: jax.Array
  allowed: jax.Array
  at_pos: jax.Array
  layout: str

  def write(self, k: jax.Array, v: jax.Array, kv_layout: str) -> "RegionLayer":
    """The view after writing each slot's new key and value (one token per slot, axes in
    `kv_layout`) at its own position."""
    s_num = self.pos.shape[0]
    lay = jnp.full((s_num,), self.layer, jnp.int32)
    rows = jnp.arange(s_num, dtype=jnp.int32)
    order = tuple(kv_layout.index(a) for a in "BSKH")
    k1 = k.transpose(order)[:, 0]                                        # [S, K, H]
    v1 = v.transpose(order)[:, 0]
    # (layer, slot, position) select [S] entries of [layers, *layout]; K and H stay whole and
    # the [S] axis comes first in either layout, so the update is [S, K, H].
    index = (lay,) + tuple({"B": rows, "S": self.pos}.get(a, slice(None)) for a in self.layout)
    return self._replace(k=self.k.at[index].set(k1.astype(self.k.dtype), mode="drop"),
                         v=self.v.at[index].set(v1.astype(self.v.dtype), mode="drop"))

  # this layer's keys and values of every slot's region, in `layout` (e.g. [S, K, H, R]), and
  # the arrays carried on: as a `KVCache`'s view reads them
  keys, values, state = CachedLayer.keys, CachedLayer.values, CachedLayer.state

  def new_slots(self, allowed: jax.Array) -> jax.Array:
    """bool [S, 1, R]: the new token's own mask `allowed` [S, 1, 1] at its region slot."""
    return self.at_pos & allowed
