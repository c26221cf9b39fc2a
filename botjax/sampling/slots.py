"""Continuous batching: S decode slots over a KV cache, refilled from a queue of requests.

`SlotEngine` generates the same `SampleOutput` as the lockstep `Sampler` (and the same tokens
for the same key), but a row that stops frees its decode slot for the next request instead of
costing a slot until the longest row of the batch ends.

A call's n·P requests (prompt p, sample s; request id r = p·n + s, the row of the output) wait
in a queue, in order. The engine runs on the host as a loop over two jitted programs:

  refill  the next requests take the free slots: the prompts among them that are not already
          prefilled are prefilled (each prompt once: the prompt of the last request taken
          stays in a one-prompt store, so a group split between two refills is prefilled
          once), their keys and values are copied into each slot's part of the cache, and
          every new slot draws its first token from the prompt's last logits;
  chunk   decode steps of the slots (a `while_loop`): k steps while requests wait for a slot;
          once none waits, up to `drain_steps`, ending when no row is live or (paged) as soon
          as at most half of its rows are; a slot that stops (stop token or its budget) idles
          until the chunk ends.

Between the two the host reads the chunk's tokens and hands the slots of the rows that ended
to the next requests. Refilling between chunks keeps the prefill out of the decode loop; a
finished slot then waits at most k − 1 steps while others wait for it
(`benchmarks/long_rollouts.py` measures the utilisation). Once no request waits, the paged
pool's chunks run only the live slots, in narrower programs (S/2, S/4, … rows) when they fit,
and end only to narrow: with nothing to refill, a chunk that returned every k steps cost a host
round trip each time for nothing.

Two KV caches (`kv_cache`):

  paged    one pool of blocks (`botjax.sampling.paged`): a slot holds the blocks of its live
           tokens, the host allocates them as it grows and frees them when it ends, and the
           attention reads the blocks in use (its own per-block kernel);
  regions  one region per slot of the call's prompt + generation buckets
           (`botjax.sampling.regions`), as the lockstep sampler sizes a row: the attention is
           the decoder's own implementation (the sampler's kernel) over each slot's region.

"auto" keeps regions up to a generation bucket of `REGIONS_MAX_NEW_TOKENS` (64) and the pool
above it: at short budgets a region costs little memory and its one fused attention pass beats
the pool's per-block partials and their merge (a quick-start rollout, 128 rows of at most 64
tokens in one lane: 1.15x the lockstep sampler's time on regions against 1.71x on the pool), and
at longer ones the pool reads and holds only the live tokens (budget 1,024: 288 MiB against the
lockstep sampler's 1,056 MiB; at 128 the pool was ahead on a fixed-length control of the
2.6 M-parameter model, 1.20x against regions' 0.97x the lockstep sampler; docs/scaling.md).
Regions never narrow a chunk (see `_Lane.run`).

A decode step is the decoder's own forward pass (`botjax.models.Decoder.__call__`) through the
cache's step view (`PagedStep`, `RegionStep`): the layers' math is the decoder's; the cache
only places each slot's keys and values (and, paged, computes the attention over its blocks).

Shapes are static, so the number of compiled programs is bounded whatever the mix of lengths:
per (prompt-length bucket, generation bucket, stop-id width), one refill per number of new
prompts (0 and the powers of 4 below S, and S) and one chunk per row count (S, S/2, S/4, …
on the pool; S on regions);
the number of pool blocks read and of steps run are run-time values, not shapes. Engines of the
same model graph, decoding rule, drain length, tile, KV dtype and mesh share their compiled
programs (a trainer's rollout engine and its evaluation's engine compile each shape once).

Randomness: request r draws its t-th token with key `fold_in(fold_in(key, r), t)`, the
`Sampler`'s key of row r, so for one key every (prompt, sample) completion is the same under
the lockstep sampler and under this engine with any number of slots, lanes or refill order
(up to float rounding of the logits, which differ between the programs by ~1e-6).

`generate_groups` lets the caller extend the queue while it runs: each prompt's n rows are
handed to a callback as soon as they have all finished, and the prompts it returns are queued
(DAPO's dynamic sampling asks for its extra groups this way, `botjax.train.rollouts`).

On small CPU hosts the slots are split into `lanes` independent halves, each with its own
cache, run by as many host threads (`botjax.xla_cpu.default_host_threads`): a decode step of
this size leaves a core idle, as for the `Sampler`. A `generate` call deals its prompts to the
lanes in turn before they start, so the threads' timing decides nothing: the same call on the
same engine gives the same bits every time (from a queue shared by the lanes, the timing would
decide which lane takes a request, and so its prefill batch, chunk widths and float rounding).
The queue of `generate_groups` stays shared: the prompts `on_group` adds depend on the order in
which groups finish.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import math
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from botjax import xla_cpu
from botjax.models import attention_cpu
from botjax.models.attention import attention_implementation, cache_layout
from botjax.models.cache import KVCache
from botjax.models.layers import rope_cos_sin
from botjax.models.sharding import logical_to_spec
from botjax.sampling.buckets import bucket_size, left_pad
from botjax.sampling.config import SamplingConfig
from botjax.sampling.filtering import draw as draw_tokens
from botjax.sampling.output import (FINISH_LENGTH, FINISH_STOP, SampleOutput, checked_prompts,
                                    extra_stop_ids, generate_args)
from botjax.sampling.paged import BlockAllocator, PagedKVCache
from botjax.sampling.regions import RegionKVCache
from botjax.sampling.sampler import call_params, engine_parts


# The slot engine's KV caches: "paged" (`botjax.sampling.paged`: blocks of the live tokens),
# "regions" (`botjax.sampling.regions`: one region of the call's full length per slot), and
# "auto": regions up to a generation budget of `REGIONS_MAX_NEW_TOKENS`, the pool above it.
KV_CACHES = ("auto", "paged", "regions")
REGIONS_MAX_NEW_TOKENS = 64
# Default slots (`num_slots=None`): 64, or 128 where "auto" (or "regions") keeps regions for the
# config's budget (a region there is at most the prompt + 64 token slots, and a wider decode
# step costs little more than a narrower one at the sizes measured: the quick-start's rollouts
# of 16 x 8 rows ran in one wave instead of two, 139 -> 110 ms a call; docs/scaling.md).
SLOTS, REGION_SLOTS = 64, 128


def keeps_regions(kv_cache: str, new_tokens: int) -> bool:
  """Whether `kv_cache` keeps one region per slot for a generation budget (or bucket) of
  `new_tokens` ("auto": up to `REGIONS_MAX_NEW_TOKENS`), else the paged pool."""
  if kv_cache == "auto":
    return new_tokens <= REGIONS_MAX_NEW_TOKENS
  return kv_cache == "regions"


def default_num_slots(max_new_tokens: int, kv_cache: str = "auto") -> int:
  """`SlotEngine`'s number of slots when none is given, for a config's generation budget."""
  return REGION_SLOTS if keeps_regions(kv_cache, max_new_tokens) else SLOTS


def _prefill_bucket(u: int, slots: int) -> int:
  """Prompts a refill prefills for u new ones: the smallest power of 4 ≥ u, at most `slots`."""
  size = 1
  while size < u:
    size *= 4
  return min(size, slots)


def _narrower(slots: int) -> list[int]:
  """Row counts of the chunks once no request waits: S/2, S/4, … (those ≥ 1), widest first.

  Halving keeps at least half of a narrowed chunk's rows live (utilisation 0.84-0.86 ->
  0.91-0.92 on `benchmarks/long_rollouts.py`'s skewed workloads against S/4, S/16 only), for
  log2(S) chunk programs instead of 2."""
  out, width = [], slots // 2
  while width >= 1:
    out.append(width)
    width //= 2
  return out


@dataclasses.dataclass
class _Request:
  rid: int                        # output row (p·n + s), also the key index
  prompt: int                     # prompt index p
  budget: int                     # max new tokens of this row
  tokens: list = dataclasses.field(default_factory=list)
  logp: list = dataclasses.field(default_factory=list)
  support: list = dataclasses.field(default_factory=list)
  stopped: bool = False


@dataclasses.dataclass
class SlotStats:
  """What the latest `SlotEngine.generate` call did (summed over lanes).

  Attributes:
    decode_steps: decode steps run, per lane summed (each computes `slots_per_lane` rows).
    computed_token_steps: rows computed: slots x decode steps, plus one per request for the
      first token (drawn from the prefill's logits).
    useful_tokens: generated tokens returned.
    chunks: decode chunks run.
    refills: refill programs run.
    prefilled_prompts: prompts prefilled (a prompt refilled across two refills counts once
      while it stays in the store).
    peak_blocks: most pool blocks in use at once (summed over lanes).
    pool_bytes: bytes of the pools' keys and values (all lanes).
  """
  decode_steps: int = 0
  computed_token_steps: int = 0
  useful_tokens: int = 0
  chunks: int = 0
  refills: int = 0
  prefilled_prompts: int = 0
  peak_blocks: int = 0
  pool_bytes: int = 0

  @property
  def utilisation(self) -> float:
    """Useful token-steps / computed token-steps."""
    return self.useful_tokens / max(1, self.computed_token_steps)


def _committed(tree, sharding=None):
  """The arrays of `tree` placed as the programs' outputs are: a pool kept from an earlier call
  is a program's (committed) output, and a fresh one must be placed the same way, or the first
  refill of a later call compiles the refill again for the other kind of argument. `sharding`
  None commits each array to the device it is on (no mesh); under a mesh it is the sharding
  the programs constrain their outputs to (`SlotEngine._pool_sharding`, `_state_sharding`):
  jit refuses an array on one device of a multi-device mesh."""
  if sharding is None:
    return jax.tree.map(lambda x: jax.device_put(x, x.sharding), tree)
  return jax.device_put(tree, sharding)


class _Lane:
  """One group of slots with its own pool, block allocator and device state."""

  def __init__(self, engine: "SlotEngine", index: int, slots: int):
    self.engine = engine
    self.index = index
    self.slots = slots
    self.cache: PagedKVCache | None = None
    self.allocator: BlockAllocator | None = None

  def prepare(self, num_blocks: int, block_size: int, layout: str, dtype) -> None:
    """A pool of this size (kept from the previous call when the size matches)."""
    cfg = self.engine.model_config
    if (not isinstance(self.cache, PagedKVCache) or self.cache.num_blocks != num_blocks
        or self.cache.layout != layout or self.cache.k.dtype != dtype):
      pool = PagedKVCache.init(cfg, num_blocks=num_blocks, block_size=block_size, dtype=dtype,
                               layout=layout)
      self.cache = _committed(pool, self.engine._pool_sharding(pool))
    self.allocator = BlockAllocator(num_blocks)

  def prepare_regions(self, region: int, layout: str, dtype) -> None:
    """One region of `region` token slots per slot (kept from the previous call when the size
    matches)."""
    cfg = self.engine.model_config
    if (not isinstance(self.cache, RegionKVCache) or self.cache.region != region
        or self.cache.layout != layout or self.cache.k.dtype != dtype):
      cache = RegionKVCache.init(cfg, num_slots=self.slots, region=region, dtype=dtype,
                                 layout=layout)
      self.cache = _committed(cache, self.engine._pool_sharding(cache))
    self.allocator = None

  def run(self, call: "_Call") -> SlotStats:
    """Serves requests from the call's queue until it is empty and every slot has ended."""
    eng = self.engine
    s_num, bs = self.slots, eng.block_size
    alloc = self.allocator
    paged = alloc is not None                         # else one region per slot
    trash = alloc.trash if paged else 0
    nb = alloc.num_blocks if paged else 1
    tile = eng._tile(nb)
    stats = SlotStats()
    owner = np.full((nb,), s_num, np.int32)           # slot of each pool block (s_num: none)
    base = np.zeros((nb,), np.int32)                  # position of each block's first token
    blocks: list[list[int]] = [[] for _ in range(s_num)]
    active: list[_Request | None] = [None] * s_num    # request in each slot
    plen = np.zeros((s_num,), np.int64)               # prompt length of each slot's request
    gen = np.zeros((s_num,), np.int64)                # tokens generated (host view)
    store_prompt = -1                                 # the prompt held in the store
    state = call.init_state(s_num, eng._state_sharding())
    jp = call.prompt_cols // bs

    def grow(s: int, upto: int) -> None:              # blocks covering positions < upto
      if not paged:
        return
      need = -(-upto // bs) - len(blocks[s])
      if need > 0:
        for b in alloc.alloc(need):
          owner[b] = s
          base[b] = len(blocks[s]) * bs
          blocks[s].append(b)

    while True:
      # -- refill: the next requests take the free slots -------------------------------------
      free = [s for s in range(s_num) if active[s] is None]
      taken = call.take(len(free), idle=len(free) == s_num, lane=self.index) if free else []
      if call.stopped():
        break
      first = None
      if taken:
        sources: dict[int, int] = {}
        new_prompts: list[int] = []
        src = np.zeros((s_num,), np.int32)
        slot_idx = np.full((s_num,), s_num, np.int32)  # padding rows: slot S (dropped)
        rkeys = np.zeros((s_num,) + call.row_keys.shape[1:], call.row_keys.dtype)
        budget = np.ones((s_num,), np.int32)
        stops = np.full((s_num, call.stop_width), -1, np.int32)
        pblocks = np.full((s_num, jp), trash, np.int32) if paged else None
        plens = np.ones((s_num,), np.int32)
        for i, req in enumerate(taken):
          if req.prompt != store_prompt and req.prompt not in sources:
            sources[req.prompt] = 1 + len(new_prompts)
            new_prompts.append(req.prompt)
          src[i] = 0 if req.prompt == store_prompt else sources[req.prompt]
          s = free[i]
          active[s] = req
          m = call.prompt_lens[req.prompt]
          plen[s], gen[s] = m, 1
          grow(s, m)
          slot_idx[i], budget[i], plens[i] = s, req.budget, m
          rkeys[i] = call.row_keys[req.rid]
          stops[i] = call.stops[req.prompt]
          if paged:
            pblocks[i, :len(blocks[s])] = blocks[s]
        ids = lens = None
        if new_prompts:
          u = _prefill_bucket(len(new_prompts), s_num)
          ids = np.full((u, call.prompt_cols), call.pad, np.int32)
          ids[:len(new_prompts)] = call.right_padded[new_prompts]
          lens = np.ones((u,), np.int32)
          lens[:len(new_prompts)] = call.prompt_lens[new_prompts]
        store_src = int(src[len(taken) - 1])
        store_prompt = taken[-1].prompt
        self.cache, state, first = eng._refill(
            call.params, self.cache, state, ids, lens, src, slot_idx, rkeys, budget, stops,
            pblocks, plens, np.int32(store_src), call.prompt_cols)
        stats.refills += 1
        stats.prefilled_prompts += len(new_prompts)
        stats.computed_token_steps += len(taken)
      live_slots = [s for s in range(s_num) if active[s] is not None]
      if not live_slots:
        break
      # -- the rows of this chunk: all slots, or (no request waiting) fewer ------------------
      rows_n = s_num
      # Regions run every chunk at full width: a narrower chunk would take its rows' regions
      # out and put them back, and compile a program per width, for steps that cost about the
      # same (the quick-start's calls: 134 against 139 ms, with 5 programs compiled instead of
      # 10: 19.6 -> 9.9 s of compilation).
      if paged and not call.waiting(self.index):
        for width in _narrower(s_num):
          if len(live_slots) <= width:
            rows_n = width
      rows = np.full((rows_n,), s_num, np.int32)
      if rows_n == s_num:
        rows[:] = np.arange(s_num)
      else:
        rows[:len(live_slots)] = live_slots
      compact = np.full((s_num + 1,), rows_n, np.int32)   # lane slot -> row of this chunk
      compact[rows[rows < s_num]] = np.flatnonzero(rows < s_num)
      # -- how far this chunk may run: k steps while requests wait for a slot; else (nothing
      # to refill) up to `drain_steps`, ending (paged) once at most half its rows are live,
      # when a chunk half as wide takes over (with `on_group`, k: a finished group may queue
      # more)
      draining = call.on_group is None and not call.waiting(self.index)
      steps = eng.drain_steps if draining else eng.chunk_steps
      floor = rows_n // 2 if draining and paged else 0
      # -- blocks for the next `steps` positions of every live slot ---------------------------
      if paged:
        wtab = np.full((rows_n, call.wtab_width), trash, np.int32)
        table = np.full((rows_n, call.blocks_per_row), -1, np.int32)
        for s in live_slots:
          req = active[s]
          pos0 = plen[s] + gen[s] - 1                  # position of the token fed next
          last = min(pos0 + steps - 1, plen[s] + req.budget - 2)
          grow(s, max(last, pos0) + 1)
          first_blk = pos0 // bs
          row = blocks[s][first_blk:first_blk + call.wtab_width]
          wtab[compact[s], :len(row)] = row
          table[compact[s], :len(blocks[s])] = blocks[s]
        stats.peak_blocks = max(stats.peak_blocks, nb - 1 - alloc.num_free)
        blocks_in = (compact[owner], base, table, wtab,
                     np.int32(-(-alloc.high_water() // tile)))
      else:
        blocks_in = (None,) * 5
      self.cache, state, outs = eng._chunk(call.params, self.cache, state, rows, *blocks_in,
                                           np.int32(steps), np.int32(floor))
      stats.chunks += 1
      # -- read the chunk (and the refill before it) -----------------------------------------
      (tok, lp, sup, n_steps, gen_after, live, stopped), first = jax.device_get((outs, first))
      if first is not None:
        for i, req in enumerate(taken):
          req.tokens.append(int(first[0][i]))
          req.logp.append(float(first[1][i]))
          req.support.append(float(first[2][i]))
      stats.decode_steps += int(n_steps)
      stats.computed_token_steps += int(n_steps) * rows_n
      for s in live_slots:
        req, c = active[s], compact[s]
        k = int(gen_after[c] - gen[s])
        if k:
          req.tokens.extend(tok[c, :k].tolist())
          req.logp.extend(lp[c, :k].tolist())
          req.support.extend(sup[c, :k].tolist())
        gen[s] = gen_after[c]
        if not live[c]:
          req.stopped = bool(stopped[c])
          stats.useful_tokens += len(req.tokens)
          call.done(req)
          if paged:
            alloc.free(blocks[s])
            owner[blocks[s]] = s_num
            blocks[s] = []
          active[s] = None
    stats.pool_bytes = self.cache.nbytes
    return stats


_PER_SLOT = ("tok", "pos", "gen", "budget", "live", "stopped", "rkey", "stops")


class _Call:
  """One `generate` call's queue and per-prompt inputs.

  A plain call (no `on_group`) is split between the lanes before they start (`split`): lane i
  serves the i-th, (i + L)-th, ... prompt of the queue, so what each lane computes, and so
  every row's float rounding, does not depend on the host threads' timing. With `on_group`
  (`SlotEngine.generate_groups`), the last request of a prompt to finish hands that prompt's n
  rows to `on_group`, whose answer (more prompt indices) joins the queue; a lane
  whose slots are empty then waits while requests are in flight elsewhere, since they may add
  work. An exception raised by `on_group` stops every lane and is raised by the call."""

  def __init__(self, *, params, prompts, n, stops, stop_width, prompt_cols, wtab_width,
               blocks_per_row, pad, truncated, row_keys, budgets, start, on_group=None,
               region=None):
    self.params, self.n = params, n
    self.region = region                  # region slots per slot, or None (the paged pool)
    self.blocks_per_row = blocks_per_row
    self.prompt_cols, self.pad = prompt_cols, pad
    self.stop_width, self.wtab_width = stop_width, wtab_width
    self.truncated = truncated
    self.row_keys, self.budgets = row_keys, budgets
    self.prompt_lens = np.asarray([len(p) for p in prompts], np.int32)
    self.right_padded = np.full((len(prompts), prompt_cols), pad, np.int32)
    for i, p in enumerate(prompts):
      self.right_padded[i, :len(p)] = p
    self.stops = stops
    self.on_group = on_group
    self._queue: collections.deque[_Request] = collections.deque()
    self._lanes: list[collections.deque[_Request]] | None = None   # per-lane queues (split)
    self._cond = threading.Condition()
    self._in_flight = 0
    self._left = np.zeros((len(prompts),), np.int64)       # unfinished requests per prompt
    self._rows: dict[int, list[_Request]] = {}               # finished rows, by prompt queued
    self.error: BaseException | None = None
    self.finished: list[_Request] = []
    self._add(start)

  def _add(self, prompts) -> None:
    """Queues the n requests of each prompt (under the lock, or before any lane runs)."""
    num = len(self.prompt_lens)
    for p in prompts:
      p = int(p)
      if not 0 <= p < num:
        raise ValueError(f"prompt index {p} is outside [0, {num})")
      if p in self._rows:
        raise ValueError(f"prompt {p} was queued twice")
      self._rows[p] = []
      self._left[p] = self.n
      for s in range(self.n):
        rid = p * self.n + s
        self._queue.append(_Request(rid=rid, prompt=p, budget=int(self.budgets[rid])))

  def queued(self) -> list[int]:
    """The prompts queued so far, in order."""
    with self._cond:
      return list(self._rows)

  def split(self, lanes: int) -> None:
    """Deals a plain call's queue to `lanes` lanes, prompt by prompt in turn (a prompt's n
    requests stay together, so it is prefilled once); with `on_group` the queue stays shared,
    as the prompts it adds depend on the order in which groups finish."""
    if self.on_group is not None or lanes < 2:
      return
    self._lanes = [collections.deque() for _ in range(lanes)]
    order: dict[int, int] = {}
    for req in self._queue:
      lane = order.setdefault(req.prompt, len(order) % lanes)
      self._lanes[lane].append(req)
    self._queue.clear()

  def _queue_of(self, lane: int) -> collections.deque:
    return self._queue if self._lanes is None else self._lanes[lane]

  def waiting(self, lane: int = 0) -> bool:
    """Whether a request waits for a slot of `lane`."""
    with self._cond:
      return bool(self._queue_of(lane))

  def take(self, k: int, *, idle: bool = False, lane: int = 0) -> list[_Request]:
    """Up to k requests from `lane`'s queue. `idle` (the lane has no live slot): with
    `on_group`, waits while the queue is empty and requests are in flight, which may queue
    more."""
    with self._cond:
      if idle and self.on_group is not None:
        self._cond.wait_for(lambda: self._queue or not self._in_flight or self.error)
      if self.error is not None:
        return []
      queue = self._queue_of(lane)
      out = [queue.popleft() for _ in range(min(k, len(queue)))]
      self._in_flight += len(out)
      return out

  def stopped(self) -> bool:
    """Whether an `on_group` call failed (every lane then stops)."""
    return self.error is not None

  def done(self, req: _Request) -> None:
    """Records a finished request; the last of its prompt's n calls `on_group`."""
    group = None
    with self._cond:
      self.finished.append(req)
      self._rows[req.prompt].append(req)
      self._left[req.prompt] -= 1
      if self._left[req.prompt] == 0 and self.on_group is not None:
        group = sorted(self._rows[req.prompt], key=lambda r: r.rid)
    if group is not None and self.error is None:
      try:
        more = self.on_group(req.prompt, group)
        with self._cond:
          self._add(more or ())
      except BaseException as e:  # noqa: BLE001 - handed to the caller of generate
        with self._cond:
          self.error = self.error or e
    with self._cond:
      self._in_flight -= 1
      self._cond.notify_all()

  def init_state(self, s_num: int, sharding=None) -> dict:
    return _committed({
        "tok": jnp.zeros((s_num,), jnp.int32),
        "pos": jnp.zeros((s_num,), jnp.int32),
        "gen": jnp.zeros((s_num,), jnp.int32),
        "budget": jnp.ones((s_num,), jnp.int32),
        "live": jnp.zeros((s_num,), bool),
        "stopped": jnp.zeros((s_num,), bool),
        "rkey": jax.random.key_data(jax.random.split(jax.random.key(0), s_num)),
        "stops": jnp.full((s_num, self.stop_width), -1, jnp.int32),
        "store": None,
    }, sharding)


class SlotEngine:
  """botjax's continuous-batching rollout engine (`botjax.sampling.RolloutEngine`).

  Example:
    engine = SlotEngine(model, None, SamplingConfig(max_new_tokens=1024, eos_token_ids=(eos,)))
    out = engine.generate(prompts, jax.random.key(0), n=8)          # SampleOutput, B = P·n
    engine.set_params(nnx.state(updated_model))                      # no recompile

  Args:
    model: an `nnx.Module`, a `(graphdef, state)` pair, or a graphdef (then pass `params`).
    model_config: the model's `DecoderConfig` (None: `model.config`).
    sampling_config: decoding rule, stop ids and buckets (as for `Sampler`).
    num_slots: S, decode slots in all (split evenly over `lanes`; None:
      `default_num_slots(sampling_config.max_new_tokens, kv_cache)`, 128 where regions are
      kept for that budget, else 64).
    chunk_steps: k, decode steps between refills while requests wait for a slot.
    drain_steps: decode steps a chunk may run when no request waits (at least `chunk_steps`;
      on the paged pool such a chunk also ends once at most half its rows are live, and the
      next runs in a program half as wide).
    block_size: bs, token slots per pool block (None: `attention_cpu.PAGED_BLOCK_SIZE` (64) on
      CPU with `botjax.xla_cpu` tuning on, else 32).
    tile_blocks: pool blocks the attention reads per loop trip (`ragged_attention`; None:
      `attention_cpu.PAGED_TILE_BLOCKS` (32) on CPU with `botjax.xla_cpu` tuning on, else 128).
    cache_dtype: KV dtype (None: the model's compute dtype).
    kv_cache: "paged" (a pool of blocks), "regions" (one region of the call's full length per
      slot) or "auto" (regions up to a generation bucket of `REGIONS_MAX_NEW_TOKENS`, else
      paged); see the module docstring.
    lanes: independent slot groups run by as many host threads (None:
      `botjax.xla_cpu.default_host_threads`, 2 on small CPU hosts, else 1).
    mesh: optional mesh; the programs then run under it (parameters keep their sharding).
      In a multi-process run (`jax.distributed`) every process calls `generate` with the same
      arguments and runs the host loop over the same tokens, which the programs return
      replicated; each process then holds the whole `SampleOutput`.
  """

  exact_logp = True   # its log-probs are the trainer's (the same model, float tolerance)

  def __init__(self, model: Any, model_config: Any = None,
               sampling_config: SamplingConfig | None = None, *, num_slots: int | None = None,
               chunk_steps: int = 8, drain_steps: int = 64, block_size: int | None = None,
               tile_blocks: int | None = None, cache_dtype: Any = None,
               lanes: int | None = None, kv_cache: str = "auto", mesh=None):
    self.graphdef, self.params, self.model_config, self.cache_dtype = engine_parts(
        model, model_config, sampling_config, cache_dtype)
    self.config = sampling_config
    self.mesh = mesh
    cpu = attention_cpu.auto(mesh if mesh is not None else self.params)
    if block_size is None:
      block_size = attention_cpu.PAGED_BLOCK_SIZE if cpu else 32
    if tile_blocks is None:
      tile_blocks = attention_cpu.PAGED_TILE_BLOCKS if cpu else 128
    if kv_cache not in KV_CACHES:
      raise ValueError(f"kv_cache must be one of {KV_CACHES}, got {kv_cache!r}")
    if num_slots is None:
      num_slots = default_num_slots(self.config.max_new_tokens, kv_cache)
    for name, value in (("num_slots", num_slots), ("chunk_steps", chunk_steps),
                        ("drain_steps", drain_steps),
                        ("block_size", block_size), ("tile_blocks", tile_blocks)):
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    self.kv_cache = kv_cache
    if lanes is None:
      lanes = xla_cpu.default_host_threads(mesh if mesh is not None else self.params, mesh=mesh)
    if not isinstance(lanes, int) or lanes < 1 or num_slots % lanes:
      raise ValueError(f"lanes must be an int >= 1 dividing num_slots={num_slots}, got {lanes!r}")
    self.num_slots, self.chunk_steps, self.block_size = num_slots, chunk_steps, block_size
    self.drain_steps = max(drain_steps, chunk_steps)
    self.tile_blocks = tile_blocks
    self.lanes = [_Lane(self, i, num_slots // lanes) for i in range(lanes)]
    self.last_stats: SlotStats | None = None
    self._pool = None
    self._programs = _programs_for(self.graphdef, sampling_config, self.drain_steps, tile_blocks,
                                   self.cache_dtype, mesh)

  # -- host side ---------------------------------------------------------------------------

  def set_params(self, params: Any) -> None:
    """Replaces the parameters used by later `generate` calls (an `nnx.State` or a module)."""
    self.params = nnx.state(params) if isinstance(params, nnx.Module) else params

  def num_compiled(self) -> int:
    """Programs compiled so far (refills and decode chunks) for this engine's settings: engines
    of the same model graph, decoding rule, drain length, tile, KV dtype and mesh share their
    programs (a shape compiled for one is not compiled again for another)."""
    return self._programs.num_compiled()

  def close(self) -> None:
    """Stops the lanes' host threads (a later `generate` starts them again)."""
    if self._pool is not None:
      self._pool.shutdown(wait=True)
      self._pool = None

  def uses_regions(self, gen_cols: int) -> bool:
    """Whether a call of this generation bucket keeps one region per slot (else the paged
    pool): `kv_cache`, with "auto" resolved by the bucket (`keeps_regions`)."""
    return keeps_regions(self.kv_cache, gen_cols)

  def _layout(self) -> str:
    where = self.mesh if self.mesh is not None else self.params
    return cache_layout(attention_implementation(self.model_config.attention, where))

  def generate(self, prompts: Sequence[Sequence[int]], key: jax.Array, *, n: int = 1,
               max_new_tokens: int | Sequence[int] | None = None, params: Any = None,
               stop_token_ids: Sequence[Sequence[int]] | None = None) -> SampleOutput:
    """Samples n completions for each prompt through the slots.

    Args:
      prompts: P token-id lists (no padding), each non-empty.
      key: a PRNG key; request r = p·n + s draws as the `Sampler`'s row r.
      n: completions per prompt.
      max_new_tokens: the budget of every row (default `config.max_new_tokens`), or one
        budget per row (a sequence of P·n ints, row p·n + s): a row ends at its budget or at
        a stop token, whichever comes first.
      params: parameters for this call only (as for `Sampler.generate`).
      stop_token_ids: optional P lists of extra stop ids, one list per prompt.

    Returns:
      `SampleOutput` with B = P·n rows (prompt p's rows adjacent), prompt columns and
      generated columns T bucketed as the `Sampler` buckets them.
    """
    call, shapes = self._call(prompts, key, n=n, max_new_tokens=max_new_tokens, params=params,
                              stop_token_ids=stop_token_ids, start=None, on_group=None)
    self._serve(call)
    return self._assemble(call, call.queued(), *shapes)

  def generate_groups(self, prompts: Sequence[Sequence[int]], key: jax.Array, *, n: int,
                      start: Sequence[int], on_group, row_keys: Any = None,
                      max_new_tokens: int | Sequence[int] | None = None, params: Any = None,
                      stop_token_ids: Sequence[Sequence[int]] | None = None,
                      ) -> tuple[SampleOutput, np.ndarray]:
    """Samples groups of n completions while the caller decides, group by group, what to
    sample next: the prompts `start` are queued first; when the n rows of a prompt p have all
    finished, `on_group(p, out)` is called (on a lane's host thread, one call at a time per
    lane) with `out`, a host-array `SampleOutput` of those n rows, and the prompt indices it
    returns join the same queue. The slots stay busy meanwhile: this is how DAPO's dynamic
    sampling asks for more groups without another batch (`botjax.train.rollouts`).

    Args:
      prompts: C candidate prompts (token-id lists); only the queued ones are sampled.
      key: a PRNG key; request (p, s) draws with `fold_in(key, p·n + s)` unless `row_keys`.
      n: completions per prompt.
      start: prompt indices queued first, in order.
      on_group: `on_group(p: int, out: SampleOutput) -> Sequence[int]`, the prompts to queue
        next (each index at most once in a call); an exception it raises stops the call and is
        raised here.
      row_keys: optional C·n PRNG keys (typed keys or their key data), row p·n + s's key.
      max_new_tokens, params, stop_token_ids: as for `generate` (per-row budgets and stop
        ids indexed over the C candidates).

    Returns:
      (out, queued): `SampleOutput` of the queued prompts in index order (group g = the g-th
      of `queued`, B = len(queued)·n rows) and `queued` [len] int, sorted.
    """
    if not callable(on_group):
      raise ValueError(f"on_group must be callable, got {on_group!r}")
    call, shapes = self._call(prompts, key, n=n, max_new_tokens=max_new_tokens, params=params,
                              stop_token_ids=stop_token_ids, start=list(start),
                              on_group=on_group, row_keys=row_keys)
    self._serve(call)
    if call.error is not None:
      raise call.error
    queued = np.asarray(sorted(call.queued()), np.int64)
    return self._assemble(call, queued, *shapes), queued

  def _call(self, prompts, key, *, n, max_new_tokens, params, stop_token_ids, start, on_group,
            row_keys=None) -> tuple[_Call, tuple]:
    """A call's checked inputs as a `_Call`, and (prompts, prompt bucket, generation bucket)."""
    cfg = self.config
    per_row = not (max_new_tokens is None or isinstance(max_new_tokens, (int, np.integer)))
    prompts, max_new = generate_args(prompts, n, None if per_row else max_new_tokens,
                                     cfg.max_new_tokens)
    num = len(prompts)
    rows = num * n
    if not per_row:
      budgets = np.full((rows,), max_new, np.int64)
    else:
      budgets = np.asarray(list(max_new_tokens), np.int64)
      if budgets.shape != (rows,):
        raise ValueError(f"max_new_tokens must be an int or {rows} ints (one per row), got "
                         f"{budgets.shape[0]} values")
    if budgets.min() < 1:
      raise ValueError(f"max_new_tokens must be >= 1, got {int(budgets.min())}")
    params = call_params(self.params, params, "engine")
    vocab = self.model_config.vocab_size
    prompts = checked_prompts(prompts, vocab)
    extra = extra_stop_ids(stop_token_ids, num, vocab)
    width = bucket_size(max(1, len(cfg.all_stop_ids) + max(len(s) for s in extra)), minimum=4,
                        name="number of stop ids")
    stops = np.full((num, width), -1, np.int32)
    for i in range(num):
      row = list(cfg.all_stop_ids) + extra[i]
      stops[i, :len(row)] = row
    lp = bucket_size(max(len(p) for p in prompts), cfg.prompt_len_buckets,
                     minimum=cfg.min_len_bucket, name="prompt length")
    tb = bucket_size(int(budgets.max()), cfg.gen_len_buckets, minimum=cfg.min_len_bucket,
                     name="max_new_tokens")
    bs = self.block_size
    regions = self.uses_regions(tb)
    # prompt columns of the prefill: whole blocks of the pool, or the bucket (a region)
    cols = lp if regions else -(-lp // bs) * bs
    if row_keys is None:
      if not (isinstance(key, jax.Array)
              and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)):
        key = jax.random.wrap_key_data(jnp.asarray(key, jnp.uint32))
      row_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(rows))
    elif not (isinstance(row_keys, jax.Array)
              and jax.dtypes.issubdtype(row_keys.dtype, jax.dtypes.prng_key)):
      row_keys = jax.random.wrap_key_data(jnp.asarray(row_keys, jnp.uint32))
    row_keys = np.asarray(jax.device_get(jax.random.key_data(row_keys)))
    if row_keys.shape[0] != rows:
      raise ValueError(f"row_keys must hold {rows} keys (one per row), got {row_keys.shape[0]}")
    per_slot = -(-(lp + tb - 1) // bs)            # blocks of a row at its full budget
    call = _Call(params=params, prompts=prompts, n=n, stops=stops, stop_width=width,
                 prompt_cols=cols, wtab_width=(self.drain_steps - 2) // bs + 2,
                 blocks_per_row=per_slot, pad=cfg.pad_token_id, truncated=cfg.logp_truncated,
                 row_keys=row_keys, budgets=budgets,
                 start=range(num) if start is None else start, on_group=on_group,
                 region=lp + tb if regions else None)
    if on_group is not None:
      call.on_group = lambda p, reqs: on_group(p, self._assemble(call, [p], prompts, lp, tb,
                                                                 requests=reqs, host=True))
    return call, (prompts, lp, tb)

  def _serve(self, call: _Call) -> None:
    """Runs the lanes over the call's queue and sums their `SlotStats` into `last_stats`."""
    per_slot, bs, layout = call.blocks_per_row, self.block_size, self._layout()
    rows = len(call.budgets)                      # rows the call may sample
    lanes = self.lanes[:max(1, min(len(self.lanes), math.ceil(rows / self.lanes[0].slots)))]
    for lane in lanes:
      if call.region is not None:
        lane.prepare_regions(call.region, layout, self.cache_dtype)
        continue
      need = lane.slots * per_slot + 1             # every slot at its full budget, and the trash
      tile = self._tile(need)
      lane.prepare(-(-need // tile) * tile, bs, layout, self.cache_dtype)
    call.split(len(lanes))
    if len(lanes) == 1:
      results = [lanes[0].run(call)]
    else:
      if self._pool is None:
        self._pool = concurrent.futures.ThreadPoolExecutor(len(self.lanes),
                                                           thread_name_prefix="slots")
      results = list(self._pool.map(lambda lane: lane.run(call), lanes))
    stats = SlotStats()
    for r in results:
      for f in dataclasses.fields(SlotStats):
        setattr(stats, f.name, getattr(stats, f.name) + getattr(r, f.name))
    self.last_stats = stats

  def _assemble(self, call: _Call, chosen, prompts, lp: int, tb: int, *, requests=None,
                host: bool = False) -> SampleOutput:
    """The `SampleOutput` of the prompts `chosen` (in that order; group g = chosen[g]) from
    `requests` (default: the call's finished ones); `host`: numpy arrays (for `on_group`),
    else device arrays."""
    cfg = self.config
    n = call.n
    chosen = [int(p) for p in chosen]
    rows = len(chosen) * n
    where = {p: g for g, p in enumerate(chosen)}
    tokens = np.full((rows, tb), cfg.pad_token_id, np.int32)
    logp = np.zeros((rows, tb), np.float32)
    support = np.full((rows, tb), -np.inf, np.float32)
    lengths = np.zeros((rows,), np.int32)
    finish = np.zeros((rows,), np.int32)
    found = 0
    for req in (call.finished if requests is None else requests):
      if req.prompt not in where:
        continue
      row = where[req.prompt] * n + req.rid % n
      k = len(req.tokens)
      tokens[row, :k] = req.tokens
      logp[row, :k] = req.logp
      support[row, :k] = req.support
      lengths[row] = k
      finish[row] = FINISH_STOP if req.stopped else FINISH_LENGTH
      found += 1
    if found != rows:
      raise RuntimeError(f"{rows - found} requests did not finish")
    ids, mask = left_pad([prompts[p] for p in chosen], lp, pad_token_id=cfg.pad_token_id)
    put = (lambda x: x) if host else jnp.asarray
    return SampleOutput(
        prompt_ids=put(np.repeat(ids, n, axis=0)),
        prompt_mask=put(np.repeat(mask, n, axis=0)),
        tokens=put(tokens), mask=put(np.arange(tb)[None] < lengths[:, None]),
        logp=put(logp), lengths=put(lengths), finish_reason=put(finish),
        group_ids=put(np.arange(rows, dtype=np.int32) // n), num_groups=len(chosen),
        support_logp=put(support) if call.truncated else None)

  # -- programs ----------------------------------------------------------------------------

  def _run(self, fn, *args, **kwargs):
    params = args[0]
    if self.mesh is not None:
      with jax.set_mesh(self.mesh), xla_cpu.threefry_unrolled(self.mesh):
        return fn(*args, **kwargs)
    with xla_cpu.threefry_unrolled(params):
      return fn(*args, **kwargs)

  def _refill(self, params, cache, state, ids, lens, src, slot, rkeys, budget, stops, pblocks,
              plens, store_src, cols):
    """Dispatches a refill; returns (cache, state, (first tokens, log-probs, supports))."""
    u = 0 if ids is None else ids.shape[0]
    if state["store"] is None:           # the first refill of a call: an empty store
      cfg = self.model_config
      dense = KVCache.init(cfg, batch_size=1, max_len=cols, dtype=self.cache_dtype,
                           layout=cache.layout)
      state = dict(state, store=_committed((dense.k[:, 0], dense.v[:, 0],
                                            jnp.zeros((cfg.vocab_size,), jnp.float32)),
                                           self._state_sharding()))
    return self._run(self._programs.refill, params, cache, state, ids, lens, src, slot, rkeys,
                     budget, stops, pblocks, plens, store_src, new_prompts=u)

  def _chunk(self, params, cache, state, rows, owner, base, table, wtab, num_tiles, limit,
             floor):
    """Dispatches a decode chunk; returns (cache, state, outputs)."""
    return self._run(self._programs.chunk, params, cache, state, rows, owner, base, table,
                     wtab, num_tiles, limit, floor)

  def _tile(self, num_blocks: int) -> int:
    return self._programs._tile(num_blocks)

  def _pool_sharding(self, pool: PagedKVCache):
    return self._programs._pool_sharding(pool)

  def _state_sharding(self):
    return self._programs._state_sharding()


class _Programs:
  """The slot engine's two jitted programs (refill and decode chunk) for one model graph,
  decoding rule, drain length (the chunk's output columns), tile, KV dtype and mesh.

  Engines built with equal ones share one `_Programs` (`_programs_for`), so each shape compiles
  once per process: a trainer's rollout engine and its evaluation's engine (the same decoding
  rule), or the runs of one experiment. The programs hold no parameters (they are arguments),
  and they are freed with the last engine that uses them.
  """

  def __init__(self, graphdef, config: SamplingConfig, drain_steps: int, tile_blocks: int,
               cache_dtype, mesh):
    self.graphdef, self.config, self.drain_steps = graphdef, config, drain_steps
    self.tile_blocks, self.cache_dtype, self.mesh = tile_blocks, cache_dtype, mesh
    self.refill = xla_cpu.jit(self._refill_impl, decode=True, donate_argnums=(1, 2),
                              static_argnames=("new_prompts",))
    self.chunk = xla_cpu.jit(self._chunk_impl, decode=True, donate_argnums=(1, 2))

  def num_compiled(self) -> int:
    return self.refill._cache_size() + self.chunk._cache_size()

  def _tile(self, num_blocks: int) -> int:
    """Pool blocks the attention reads per loop trip (`ragged_attention`'s tile)."""
    return min(self.tile_blocks, num_blocks)

  def _model(self, params):
    states = params if isinstance(params, (tuple, list)) else (params,)
    return nnx.merge(self.graphdef, *states)

  def _pool_sharding(self, pool: PagedKVCache):
    """Under a mesh: the pool's KV heads over `tensor` (as the attention's heads are; other
    axes replicated, so every device holds every block of its heads), None without a mesh."""
    if self.mesh is None:
      return None
    axes = [None] * pool.k.ndim
    axes[1 + pool.layout.index("K")] = "act_kv_heads"
    spec = list(logical_to_spec(axes, mesh=self.mesh, shape=pool.k.shape))
    while spec and spec[-1] is None:   # as XLA writes the outputs' spec (P(None, None,
      spec.pop()                        # 'tensor')), or the fast path keys a second entry
    return jax.tree.map(lambda _: NamedSharding(self.mesh, PartitionSpec(*spec)), pool)

  def _state_sharding(self):
    """Under a mesh: the per-slot state and the prompt store replicated; None without one."""
    return None if self.mesh is None else NamedSharding(self.mesh, PartitionSpec())

  def _constrained(self, cache: PagedKVCache, state: dict) -> tuple[PagedKVCache, dict]:
    """A program's pool and state, constrained to the shardings a fresh pool and state are
    placed with, so that every call sees the same kind of argument (no mesh: as they are)."""
    if self.mesh is None:
      return cache, state
    cache = jax.lax.with_sharding_constraint(cache, self._pool_sharding(cache))
    return cache, jax.lax.with_sharding_constraint(state, self._state_sharding())

  def _replicated(self, outs):
    """What the host reads after a program, replicated under a mesh: every process of a
    multi-process run reads the whole value from its own devices and so runs the same host
    loop (no mesh: as they are)."""
    if self.mesh is None:
      return outs
    return jax.lax.with_sharding_constraint(outs, self._state_sharding())

  def _refill_impl(self, params, cache, state, ids, lens, src, slot, rkeys, budget, stops,
                   pblocks, plens, store_src, *, new_prompts: int):
    """Prefills the new prompts, copies each new slot's prompt into its blocks, and draws
    each new slot's first token (traced once per shape)."""
    cfg = self.config
    model = self._model(params)
    store_k, store_v, store_logits = state["store"]
    src_k, src_v, src_logits = store_k[:, None], store_v[:, None], store_logits[None]
    if new_prompts:
      u, cols = ids.shape
      positions = jnp.broadcast_to(jnp.arange(cols, dtype=jnp.int32)[None], (u, cols))
      mask = positions < lens[:, None]
      # As in `Sampler.prefill`: the barrier keeps XLA from constant-folding the empty cache.
      dense, start = jax.lax.optimization_barrier((
          KVCache.init(model.config, batch_size=u, max_len=cols, dtype=self.cache_dtype,
                       layout=cache.layout), jnp.int32(0)))
      hidden, dense = model(ids, positions, attention_mask=mask, cache=dense, cache_index=start,
                            return_hidden=True)
      last = jnp.take_along_axis(hidden, (lens - 1)[:, None, None], axis=1)[:, 0]   # [U, D]
      logits = model.unembed(last)
      src_k = jnp.concatenate([src_k, dense.k.astype(src_k.dtype)], axis=1)
      src_v = jnp.concatenate([src_v, dense.v.astype(src_v.dtype)], axis=1)
      src_logits = jnp.concatenate([src_logits, logits], axis=0)
    if isinstance(cache, RegionKVCache):   # each new slot's prompt at the start of its region
      cache = cache.write_prompts(slot, src_k[:, src], src_v[:, src])
    else:                                  # each new slot's prompt, block by block, into its blocks
      r, jp = pblocks.shape
      bs = cache.block_size
      lay = cache.k.shape[0]

      def blocks_of(x):               # [L, 1+U, *layout (B: rows)] -> [L, R·Jp, *layout]
        x = x[:, src]
        axis = 1 + cache.layout.index("S")                  # the prompt's slots
        x = x.reshape(x.shape[:axis] + (jp, bs) + x.shape[axis + 1:])
        x = jnp.moveaxis(x, axis, 2)                        # [L, R, Jp, ..., bs, ...]
        return x.reshape((lay, r * jp) + x.shape[3:])

      flat = pblocks.reshape(-1)
      cache = cache.replace(k=cache.k.at[:, flat].set(blocks_of(src_k)),
                            v=cache.v.at[:, flat].set(blocks_of(src_v)))
    row_keys = jax.random.wrap_key_data(rkeys)
    first_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, jnp.int32(0))
    d = draw_tokens(first_keys, src_logits[src], temperature=cfg.temperature, top_k=cfg.top_k,
                    top_p=cfg.top_p, truncated=cfg.logp_truncated)
    hit = jnp.any(d.tokens[:, None] == stops, axis=1)
    live = ~hit & (budget > 1)

    def put(x, value):
      return x.at[slot].set(value, mode="drop")

    state = dict(
        state, tok=put(state["tok"], d.tokens), pos=put(state["pos"], plens),
        gen=put(state["gen"], jnp.ones_like(plens)), budget=put(state["budget"], budget),
        live=put(state["live"], live), stopped=put(state["stopped"], hit),
        rkey=put(state["rkey"], jax.random.key_data(row_keys)),
        stops=put(state["stops"], stops),
        store=(src_k[:, store_src], src_v[:, store_src], src_logits[store_src]))
    cache, state = self._constrained(cache, state)
    return cache, state, self._replicated((d.tokens, d.logp, d.support))

  def _chunk_impl(self, params, cache, state, rows, owner, base, table, wtab, num_tiles, limit,
                  floor):
    """Up to `limit` (≤ `drain_steps`) decode steps of the slots `rows`, ending early once at
    most `floor` of them are live (traced once per number of rows)."""
    cfg = self.config
    model = self._model(params)
    steps = self.drain_steps
    regions = isinstance(cache, RegionKVCache)
    s_all = state["tok"].shape[0]
    s_num = rows.shape[0]
    real = rows < s_all
    st = {name: state[name][jnp.minimum(rows, s_all - 1)] for name in _PER_SLOT}
    st["live"] = st["live"] & real
    pad = jnp.int32(cfg.pad_token_id)
    rkeys = jax.random.wrap_key_data(st["rkey"])
    outs = (jnp.full((s_num, steps), pad, jnp.int32), jnp.zeros((s_num, steps), jnp.float32),
            jnp.full((s_num, steps), -jnp.inf, jnp.float32))
    # RoPE of every step's positions, computed once (as in `Sampler`): a live slot feeds
    # position pos + i at step i (a slot that ended feeds nothing that is kept).
    rope = jax.vmap(lambda p: rope_cos_sin(model.config, p[:, None]))(
        st["pos"][None, :] + jnp.arange(steps, dtype=jnp.int32)[:, None])  # [k, R', 1, ·]
    if regions:
      if s_num != s_all:   # the host never narrows a chunk of regions (`_Lane.run`)
        raise ValueError(f"a chunk of regions runs all {s_all} slots, got {s_num} rows")

      def address(cache, live, pos):
        return cache.at(pos)
    else:
      bs = cache.block_size
      trash = cache.num_blocks - 1
      tile = self._tile(cache.num_blocks)
      first_block = st["pos"] // bs

      def address(cache, live, pos):
        col = jnp.clip(pos // bs - first_block, 0, wtab.shape[1] - 1)
        block = jnp.where(live, jnp.take_along_axis(wtab, col[:, None], axis=1)[:, 0], trash)
        return cache.at(block=block, offset=pos % bs, length=pos + 1, owner=owner, base=base,
                        table=table, tile=tile, num_tiles=num_tiles)

    def cond(carry):
      i, _, st, _ = carry
      return (i < limit) & (jnp.sum(st["live"].astype(jnp.int32)) > floor)

    def body(carry):
      i, cache, st, outs = carry
      live, pos = st["live"], st["pos"]
      logits, cache = model(st["tok"][:, None], pos[:, None], attention_mask=live[:, None],
                            cache=address(cache, live, pos), rope=(rope[0][i], rope[1][i]))
      logits = logits[:, 0]
      keys = jax.vmap(jax.random.fold_in)(rkeys, st["gen"])
      d = draw_tokens(keys, logits, temperature=cfg.temperature, top_k=cfg.top_k,
                      top_p=cfg.top_p, truncated=cfg.logp_truncated)
      tok = jnp.where(live, d.tokens, pad)
      outs = tuple(jax.lax.dynamic_update_slice_in_dim(o, x[:, None], i, axis=1)
                   for o, x in zip(outs, (tok, jnp.where(live, d.logp, 0.0),
                                          jnp.where(live, d.support, -jnp.inf))))
      hit = live & jnp.any(tok[:, None] == st["stops"], axis=1)
      gen = st["gen"] + live.astype(jnp.int32)
      end = hit | (gen >= st["budget"])
      st = dict(st, tok=jnp.where(live, tok, st["tok"]), pos=pos + live.astype(jnp.int32),
                gen=gen, live=live & ~end, stopped=st["stopped"] | hit)
      return i + 1, cache, st, outs

    steps_run, cache, st, outs = jax.lax.while_loop(
        cond, body, (jnp.int32(0), cache, st, outs))
    state = dict(state, **{name: state[name].at[rows].set(st[name], mode="drop")
                           for name in _PER_SLOT})
    cache, state = self._constrained(cache, state)
    return cache, state, self._replicated((*outs, steps_run, st["gen"], st["live"],
                                           st["stopped"]))


_SHARED: "weakref.WeakValueDictionary[tuple, _Programs]" = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def _programs_for(graphdef, config, drain_steps, tile_blocks, cache_dtype, mesh) -> _Programs:
  """The `_Programs` of these settings: the one an engine alive holds, else a new one."""
  key = (graphdef, config, drain_steps, tile_blocks, jnp.dtype(cache_dtype), mesh)
  with _SHARED_LOCK:
    programs = _SHARED.get(key)
    if programs is None:
      programs = _Programs(*key)
      _SHARED[key] = programs
    return programs


def _slots_engine(model, sampling_config: SamplingConfig, *, mesh=None, host_threads=None,
                  **options) -> SlotEngine:
  """The "slots" factory; `host_threads` (the trainer's option for the "jax" engine) sets the
  lanes, with `num_slots` (default `default_num_slots`) rounded up to a multiple of them."""
  if host_threads is not None and "lanes" not in options:
    options["lanes"] = host_threads
    slots = options.get("num_slots") or default_num_slots(
        sampling_config.max_new_tokens, options.get("kv_cache", "auto"))
    options["num_slots"] = -(-slots // host_threads) * host_threads
  return SlotEngine(model, getattr(model, "config", None), sampling_config, mesh=mesh, **options)
