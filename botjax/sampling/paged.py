"""A paged KV cache: one pool of fixed-size blocks, read only where slots hold tokens.

The slot engine (`botjax.sampling.slots`) keeps every layer's keys and values in one pool of NB
blocks of `block_size` token slots: a `KVCache`-shaped array whose rows are blocks
([layers, NB, K, H, bs] in the `"BKHS"` layout of the `"cpu"` attention, [layers, NB, bs, K, H]
in the portable `"BSKH"`). A decoding slot owns the blocks that hold its sequence (prompt, then
generated tokens); the host maps (slot, j) to the pool block holding positions j·bs … j·bs +
bs − 1 of that slot's sequence.

The pool plugs into the decoder through the cache interface of `botjax.models.cache`:
`PagedKVCache.at(...)` addresses it for one decode step of S slots (`PagedStep`), whose
`begin` starts the pass; each layer's view (`PagedLayer`) computes the attention itself
(`PagedLayer.attend`, see `botjax.models.layers.Attention`), as only the pool knows where a
slot's keys are. The layers' math is the decoder's own.

Attention is computed block by block, *for the block's owner*: pool block b scores the query of
slot `owner[b]` against its bs keys, keeps the block's maximum score m_b, the sum of its
exponentials l_b and its weighted values o_b, and the owner's output is their log-sum-exp merge

  M_s = max_{b: owner[b]=s} m_b,   out_s = Σ_b e^{m_b − M_s} o_b / Σ_b e^{m_b − M_s} l_b,

the split softmax of flash-decoding (one partial softmax per block), merged in the slot's own
block order (so a slot's result does not depend on where its blocks lie in the pool). The host
allocates blocks lowest-first, so the blocks in use stay near the start of the pool and a
run-time number of tiles covers them: a decode step reads the live tokens and the partly
filled last block of each slot, not every slot's full budget. Reading the blocks in pool
order, with the queries gathered per block ([M, K, G, H], small), keeps the cache read inside
the fused score reduction; gathering the blocks through the table instead materialised a copy
of every live block at each layer (a prototype on the 2.6 M-parameter model of
`benchmarks/long_rollouts.py`, 64 slots: 16.8 vs 12.1 ms per step).
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from botjax import xla_cpu
from botjax.models import attention_cpu
from botjax.models.attention import CACHE_LAYOUT
from botjax.models.config import DecoderConfig

# Finite stand-in for -inf (as in the attention implementations): a block with no visible key
# gets weight e^{MASK − M_s} = 0 in the merge, never NaN.
_MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)
# The attention below computes on blocks as [blocks, K, H, bs] on every platform (q·k reduces
# over H with the token slots minor, p·v over the slots), a transpose away from the pool's
# layout; the layout letters: B a pool block, S a token slot in it, K kv heads, H head dim.
_COMPUTE_AXES = ("B", "K", "H", "S")


def pool_shape(cfg: DecoderConfig, *, num_blocks: int, block_size: int,
               layout: str = CACHE_LAYOUT) -> tuple[int, ...]:
  """Shape of k (and of v) of a pool: [layers, *layout] with B = NB blocks, S = bs slots."""
  if sorted(layout) != sorted(_COMPUTE_AXES):
    raise ValueError(f"pool layout {layout!r} is not an order of the letters B, S, K, H")
  sizes = {"B": num_blocks, "S": block_size, "K": cfg.num_kv_heads, "H": cfg.head_dim}
  return (cfg.num_layers,) + tuple(sizes[a] for a in layout)


@struct.dataclass
class PagedKVCache:
  """Keys and values of every layer in NB blocks of `block_size` token slots.

  Attributes:
    k: keys (RoPE applied), [layers, *layout]: [layers, NB, K, H, bs] (`"BKHS"`) or
      [layers, NB, bs, K, H] (`"BSKH"`).
    v: values, same shape.
    layout: the layout of the attention implementation in use (static; see
      `botjax.models.cache.KVCache`).
  """

  k: jax.Array
  v: jax.Array
  layout: str = struct.field(pytree_node=False, default=CACHE_LAYOUT)

  @classmethod
  def init(cls, cfg: DecoderConfig, *, num_blocks: int, block_size: int, dtype=jnp.float32,
           layout: str = CACHE_LAYOUT) -> "PagedKVCache":
    """An all-zero pool for a config (NB = `num_blocks` blocks of bs = `block_size` slots)."""
    shape = pool_shape(cfg, num_blocks=num_blocks, block_size=block_size, layout=layout)
    return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), layout=layout)

  @property
  def num_blocks(self) -> int:
    return self.k.shape[1]

  @property
  def block_size(self) -> int:
    return self.k.shape[1 + self.layout.index("S")]

  @property
  def nbytes(self) -> int:
    """Bytes of k and v."""
    return 2 * self.k.size * self.k.dtype.itemsize

  def at(self, *, block: jax.Array, offset: jax.Array, length: jax.Array, owner: jax.Array,
         base: jax.Array, table: jax.Array, tile: int, num_tiles: jax.Array) -> "PagedStep":
    """The pool addressed for one decode step of S slots (see `PagedStep`)."""
    return PagedStep(self, block, offset, length, owner, base, table, num_tiles, tile)


@struct.dataclass
class PagedStep:
  """A pool addressed for one decode step of S slots: the cache a decoder call is given.

  Slot s writes its new token's key and value to pool block `block[s]`, token slot
  `offset[s]`, and attends over the blocks it owns up to `length[s]` (its new token
  included), among the first `num_tiles` tiles of `tile` blocks (`ragged_attention`).

  Attributes:
    pool: the `PagedKVCache`.
    block: int32 [S], the pool block of each slot's new token (a finished slot: a block of no
      slot, e.g. the allocator's trash block).
    offset: int32 [S], its token slot in that block, in [0, bs).
    length: int32 [S], each slot's visible length (its new token sits at length − 1).
    owner: int32 [NB], the slot that owns each pool block, or S (none).
    base: int32 [NB], the sequence position of each block's first token slot.
    table: int32 [S, J], slot s's j-th block, −1 past its last one.
    num_tiles: int32 scalar, tiles of `tile` blocks to read (may be traced).
    tile: blocks per tile (static; NB is a multiple of it).
  """

  pool: PagedKVCache
  block: jax.Array
  offset: jax.Array
  length: jax.Array
  owner: jax.Array
  base: jax.Array
  table: jax.Array
  num_tiles: jax.Array
  tile: int = struct.field(pytree_node=False, default=1)

  @property
  def layout(self) -> str:
    return self.pool.layout

  def begin(self, new_mask: jax.Array, index=None, *, kv_layout: str) -> "PagedPass":
    """Starts the decoder's pass of one new token per slot (`index` is unused: each slot's
    place is in `block` and `offset`)."""
    del index, kv_layout
    if new_mask.shape != (self.block.shape[0], 1):
      raise ValueError(f"a paged step feeds one token to each of {self.block.shape[0]} "
                       f"slots, got new tokens of shape {new_mask.shape}")
    return PagedPass(self)


class PagedPass:
  """One decode step's pass through a `PagedStep` (the `KVCachePass` interface)."""

  def __init__(self, step: PagedStep):
    self.step = step
    self.state = (step.pool.k, step.pool.v)

  def layer(self, state, layer, window=None) -> "PagedLayer":
    return PagedLayer(*state, layer, window, self.step)

  def store(self, state, layer, new_kv):
    del state, layer
    return new_kv

  def finish(self, state) -> PagedKVCache:
    k, v = state
    return self.step.pool.replace(k=k, v=v)


class PagedLayer(NamedTuple):
  """One layer's view of a `PagedStep`: it writes the new tokens and computes the attention.

  Attributes:
    k, v: the pool's keys and values of every layer.
    layer: this layer (a Python int, or an int32 scalar in a layer scan).
    window: its sliding window (int or int32 scalar), or None.
    step: the `PagedStep`.
  """
  k: jax.Array
  v: jax.Array
  layer: int
  window: object
  step: PagedStep

  def attend(self, q: jax.Array, k: jax.Array, v: jax.Array
             ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Writes each slot's new key and value, then its attention over its own blocks.

    Args:
      q: [S, 1, N, H] queries (RoPE applied, not scaled).
      k, v: [S, 1, K, H] the new tokens' keys (RoPE applied) and values.

    Returns:
      (output [S, 1, N·H] in the dtype of q, the pool's updated (k, v)).
    """
    st = self.step
    s_num, _, n, h = q.shape
    kh = k.shape[2]
    k_all, v_all = write_tokens(self.k, self.v, self.layer, st.block, st.offset, k[:, 0],
                                v[:, 0], st.layout)
    qh = q[:, 0].reshape(s_num, kh, n // kh, h) * jnp.asarray(h ** -0.5, q.dtype)
    out = ragged_attention(qh, k_all, v_all, st.owner, st.base, st.length, st.table,
                           layout=st.layout, window=self.window, tile=st.tile,
                           num_tiles=st.num_tiles, layer=self.layer)
    return out.reshape(s_num, 1, n * h).astype(q.dtype), (k_all, v_all)


def write_tokens(k_all: jax.Array, v_all: jax.Array, layer, block: jax.Array,
                 offset: jax.Array, k: jax.Array, v: jax.Array,
                 layout: str) -> tuple[jax.Array, jax.Array]:
  """Writes one token per slot into a layer of the pool.

  Args:
    k_all, v_all: the pool's keys and values ([layers, *layout]).
    layer: the layer (an int, or an int32 scalar in a layer scan).
    block: int32 [S], the pool block of each slot's token.
    offset: int32 [S], its slot inside the block, in [0, bs).
    k, v: [S, K, H] the tokens' keys and values.
    layout: the pool's layout.

  Returns:
    The updated (k_all, v_all).
  """
  lay = jnp.full(block.shape, layer, jnp.int32)
  # (layer, block, offset) select [S] entries; the K and H axes stay whole, and indexing puts
  # the [S] axis first in either layout, so the update is [S, K, H].
  index = (lay,) + tuple({"B": block, "S": offset}.get(a, slice(None)) for a in layout)
  return (k_all.at[index].set(k.astype(k_all.dtype)),
          v_all.at[index].set(v.astype(v_all.dtype)))


def _to_block_order(x: jax.Array, layout: str) -> jax.Array:
  """Pool blocks [M, *layout] as [M, K, H, bs] (no-op when the pool is laid out so)."""
  perm = tuple(layout.index(a) for a in _COMPUTE_AXES)
  return x if perm == tuple(range(4)) else x.transpose(perm)


def _block_partials(q, keys, values, owner, base, length, *, layout, window):
  """Per-block partial softmax of each block's owner: (max [M, K, G], sum [M, K, G],
  weighted values [M, K, G, H]), float32; blocks of no slot (owner = S) are all-masked."""
  s_num = q.shape[0]
  f32 = jnp.float32
  keys = _to_block_order(keys, layout).astype(f32)                  # [M, K, H, bs]
  values = _to_block_order(values, layout).astype(f32)
  bs = keys.shape[-1]
  row = jnp.minimum(owner, s_num - 1)
  qb = q[row].astype(f32)                                           # [M, K, G, H]
  pos = base[:, None] + jnp.arange(bs, dtype=jnp.int32)[None]        # [M, bs]
  limit = length[row][:, None]
  visible = (pos < limit) & (owner < s_num)[:, None]
  if window is not None:
    visible = visible & (pos >= limit - window)
  return attention_cpu.paged_products(_partials, qb, keys, values, visible)


def _partials(qb, keys, values, visible):
  """`_block_partials`' portable products (`attention_cpu.paged_partials` on CPU)."""
  # q·k reduced over H along the vectorised token slots, fused with the read of the pool
  scores = jnp.sum(qb[..., None] * keys[:, :, None], axis=3)        # [M, K, G, bs]
  scores = jnp.where(visible[:, None, None], scores, _MASK_VALUE)
  top = jnp.max(scores, axis=-1)                                    # [M, K, G]
  e = jnp.exp(scores - top[..., None])
  part_sum = jnp.sum(e, axis=-1)
  part = jnp.sum(e[:, :, :, None, :] * values[:, :, None], axis=-1)   # [M, K, G, H]
  return top, part_sum, part


def ragged_attention(q: jax.Array, keys: jax.Array, values: jax.Array, owner: jax.Array,
                     base: jax.Array, length: jax.Array, table: jax.Array, *, layout: str,
                     window=None, tile: int | None = None, num_tiles=None,
                     layer=None) -> jax.Array:
  """Each slot's query attends over the pool blocks it owns, up to its own length.

  out_s = Σ_{b, i} softmax(q_s · k_{b,i}) v_{b,i} over the blocks b with owner[b] = s and their
  token slots i with base[b] + i < length[s] (and, with a window, base[b] + i ≥
  length[s] − window): one softmax per slot, computed as per-block partial softmaxes (read in
  pool order) merged by log-sum-exp in each slot's own block order (`table`), so a slot's
  result does not depend on where its blocks lie in the pool or on the other slots.

  With `tile` and `num_tiles`, only the first num_tiles·tile blocks are read, a tile of
  `tile` blocks at a time in a loop whose trip count is a run-time value: one program serves
  every number of blocks in use. Without, every block of `keys` is read at once.

  Args:
    q: [S, K, G, H] queries, already scaled by 1/√H.
    keys: one layer's pool keys [NB, *layout]; with `layer`, every layer's
      ([layers, NB, ...]), of which layer `layer` is read (inside the tile loop, a slice of
      one layer taken before the loop became a copy of that layer's whole pool at every
      step; the loop reads its tiles from the whole pool instead).
    values: the same layer's values, same shape.
    owner: int32 [NB], the slot that owns pool block b, or S (no slot: the block is skipped).
    base: int32 [NB], the sequence position of block b's first token slot.
    length: int32 [S], each slot's visible length (its query sits at position length − 1).
    table: int32 [S, J], slot s's j-th block in the pool, −1 past its last block.
    layout: the pool's layout (`"BKHS"` or `"BSKH"`).
    window: sliding-window size (int or int32 scalar), or None for full attention.
    tile: blocks per tile (static; NB must be a multiple of it), or None.
    num_tiles: tiles to read (int32, may be traced), with `tile`.
    layer: the layer to read when `keys` and `values` hold every layer (int or int32 scalar).

  Returns:
    float32 [S, K, G, H]; a slot that owns no visible token gets finite garbage.
  """
  s_num, kh, g, h = q.shape
  f32 = jnp.float32
  if layer is None:
    keys, values, layer = keys[None], values[None], 0
  nb = keys.shape[1]
  if tile is None:
    tile, num_tiles = nb, 1
  if nb % tile:
    raise ValueError(f"the pool's {nb} blocks are not a multiple of tile={tile}")
  lay = jnp.asarray(layer, jnp.int32)
  zero = jnp.zeros((), jnp.int32)

  def body(t, bufs):
    start = t * tile

    def cut(x):                                                   # [tile, ...] of layer `lay`
      at = (lay, start) + (zero,) * (x.ndim - 2)
      return jax.lax.dynamic_slice(x, at, (1, tile) + x.shape[2:])[0]

    out = _block_partials(q, cut(keys), cut(values),
                          jax.lax.dynamic_slice_in_dim(owner, start, tile),
                          jax.lax.dynamic_slice_in_dim(base, start, tile), length,
                          layout=layout, window=window)
    return tuple(jax.lax.dynamic_update_slice_in_dim(buf, x, start, axis=0)
                 for buf, x in zip(bufs, out))

  bufs = (jnp.full((nb, kh, g), _MASK_VALUE, f32), jnp.zeros((nb, kh, g), f32),
          jnp.zeros((nb, kh, g, h), f32))
  if isinstance(num_tiles, int) and num_tiles == 1:
    bufs = body(0, bufs)
  else:
    bufs = jax.lax.fori_loop(0, num_tiles, body, bufs)
  top, part_sum, part = bufs
  # Merge each slot's partials in its own block order: [S, J] gathers of small partials.
  used = table >= 0
  idx = jnp.where(used, table, 0)
  top = jnp.where(used[..., None, None], top[idx], _MASK_VALUE)           # [S, J, K, G]
  slot_top = jnp.max(top, axis=1, keepdims=True)
  weight = jnp.exp(top - slot_top)
  den = jnp.sum(part_sum[idx] * weight, axis=1)                          # [S, K, G]
  num = jnp.sum(part[idx] * weight[..., None], axis=1)                   # [S, K, G, H]
  return num / jnp.maximum(den, jnp.finfo(f32).tiny)[..., None]


class BlockAllocator:
  """Host-side free list of a pool's blocks, lowest index first.

  Handing out the lowest free block keeps the blocks in use packed at the start of the pool,
  so `high_water` (one past the highest block in use) stays near the number in use, and the
  attention reads `pool[:high_water]` (see the module docstring). The last block of the pool
  is never handed out: writes of finished slots go there.

  Args:
    num_blocks: NB, blocks in the pool (≥ 2).
  """

  def __init__(self, num_blocks: int):
    if num_blocks < 2:
      raise ValueError(f"a pool needs at least 2 blocks (one is the trash block), got "
                       f"{num_blocks}")
    self.num_blocks = num_blocks
    self.trash = num_blocks - 1
    self._free = list(range(num_blocks - 1))       # a heap (sorted is a valid heap)
    self._used = np.zeros(num_blocks, bool)

  @property
  def num_free(self) -> int:
    return len(self._free)

  def alloc(self, n: int) -> list[int]:
    """n free blocks, lowest first.

    Raises:
      RuntimeError: fewer than n blocks are free.
    """
    if n > len(self._free):
      raise RuntimeError(f"the KV pool has {len(self._free)} free blocks, {n} were asked for")
    out = [heapq.heappop(self._free) for _ in range(n)]
    self._used[out] = True
    return out

  def free(self, blocks) -> None:
    """Returns blocks to the free list."""
    for b in blocks:
      if not self._used[b]:
        raise ValueError(f"block {b} is not in use")
      self._used[b] = False
      heapq.heappush(self._free, b)

  def high_water(self) -> int:
    """One past the highest block in use (0 when none is)."""
    used = np.flatnonzero(self._used)
    return int(used[-1]) + 1 if used.size else 0
