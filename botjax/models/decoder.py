"""The decoder: embeddings, a stack of pre-norm blocks, final norm, tied or separate LM head.

One implementation serves Qwen2/2.5, Llama 3.x, SmolLM3 and Phi-3/Phi-4-mini; the family
differences are fields of `DecoderConfig`. A `KVCache` pytree holds S slots per layer for the
sampler; the forward pass without a cache attends causally among the given tokens.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from botjax.models.config import DecoderConfig
from botjax.models.layers import (CACHE_LAYOUT, CPU_CACHE_LAYOUT, Block, CachedLayer, RMSNorm,
                                  _param, attention_implementation, cache_layout, rope_cos_sin,
                                  write_slots)
from botjax.models.sharding import constrain


def _block(layer: Block, x, cos, sin, allowed, prefix=None, *, implementation="cpu",
           causal=False):
  return layer(x, cos, sin, allowed, None, prefix, implementation=implementation,
               causal=causal)


def _window_mask(allowed: jax.Array, distance: jax.Array, window) -> jax.Array:
  """allowed [B, L, S] & (distance [L, S] < window), or `allowed` itself for window None."""
  if window is None:
    return allowed
  return allowed & (distance < window)[None]


_REMAT_BLOCKS: dict = {}


def _block_fn(remat: bool, implementation: str, causal: bool):
  """`_block` for one attention implementation, under `nnx.remat` when `remat`."""
  def block(layer, x, cos, sin, allowed, prefix=None):
    # positional only: nnx.remat cannot resolve a partial's keyword arguments to positions
    return _block(layer, x, cos, sin, allowed, prefix, implementation=implementation,
                  causal=causal)

  if not remat:
    return block
  key = (implementation, causal)
  if key not in _REMAT_BLOCKS:
    _REMAT_BLOCKS[key] = nnx.remat(block)
  return _REMAT_BLOCKS[key]


# The window of a layer without one, in a layer scan: every distance is below it.
_NO_WINDOW = np.iinfo(np.int32).max


def _stack_blocks(blocks: list[Block]) -> Block:
  """One `Block` whose parameters are those of `blocks` stacked on a leading [num_layers] axis.

  The first block is reused as the container (its variables get the stacked values, and
  their `logical_axes` a leading `"layers"` name, which the sharding rules leave unsharded).
  Its `use_rope` is True when any layer applies RoPE; the layers that do not are told so at
  call time (`Block.__call__`'s `rope_on`).
  """
  stack = blocks[0]
  flat = [dict(nnx.to_flat_state(nnx.state(b))) for b in blocks]
  for path, var in flat[0].items():
    var.set_value(jnp.stack([f[path].get_value() for f in flat]))
    axes = var.get_metadata().get("logical_axes")
    if axes is not None:
      var.set_metadata("logical_axes", ("layers",) + tuple(axes))
  stack.use_rope = any(b.use_rope for b in blocks)
  return stack


@struct.dataclass
class KVCache:
  """Per-layer keys and values of S cache slots, and which slots hold a real token.

  Two layouts, one per attention implementation (`botjax.models.layers.cache_layout`):

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
  layout: str = struct.field(pytree_node=False, default=CPU_CACHE_LAYOUT)

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
        `botjax.models.layers.attention_implementation`).

    Returns:
      A `KVCache` with k and v zeros ([num_layers, B, S, K, H] or [num_layers, B, K, H, S])
      and valid all False [B, S].
    """
    if layout is None:
      layout = cache_layout(attention_implementation(cfg.attention))
    if layout == CACHE_LAYOUT:
      shape = (cfg.num_layers, batch_size, max_len, cfg.num_kv_heads, cfg.head_dim)
    elif layout == CPU_CACHE_LAYOUT:
      shape = (cfg.num_layers, batch_size, cfg.num_kv_heads, cfg.head_dim, max_len)
    else:
      raise ValueError(f"cache layout {layout!r} is not supported; valid: "
                       f"{(CACHE_LAYOUT, CPU_CACHE_LAYOUT)}")
    return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
               valid=jnp.zeros((batch_size, max_len), bool), layout=layout)

  @property
  def max_len(self) -> int:
    return self.valid.shape[1]

  @property
  def slot_axis(self) -> int:
    """The axis of k and v that indexes slots (2 for `"BSKH"`, 4 for `"BKHS"`)."""
    return 2 if self.layout == CACHE_LAYOUT else 4

  @property
  def logical_axes(self) -> tuple[str, ...]:
    """Logical axis names of k and v (for `botjax.models.sharding.constrain`)."""
    if self.layout == CACHE_LAYOUT:
      return ("layers", "batch", "cache_length", "act_kv_heads", "head_dim")
    return ("layers", "batch", "act_kv_heads", "head_dim", "cache_length")


class Decoder(nnx.Module):
  """Decoder-only transformer with the HF families' conventions.

  Call: `model(input_ids, positions, attention_mask=None, *, cache=None, cache_index=None,
  return_hidden=False) -> (logits f32[B, L, V] or hidden [B, L, D], cache or None)`.

  Attention runs through the implementation `config.attention` names; `"auto"` resolves it
  when the model is traced, from the mesh set with `jax.set_mesh` (else the default device):
  `"cpu"` on CPU, `"cudnn"` on NVIDIA GPUs, `"xla"` elsewhere
  (`botjax.models.layers.attention_implementation`). Set it explicitly (e.g.
  `dataclasses.replace(cfg, attention="xla")`) to trace for a platform other than the one
  in use, as for `jax.export`.

  With `scan_layers=True` the blocks are one `Block` of stacked parameters ([num_layers, ...])
  that every forward path runs with `jax.lax.scan`; per-layer differences (sliding windows,
  NoPE layers) become scanned values. XLA then compiles one layer instead of num_layers:
  Qwen2.5-3B's RL update compiles several times faster on CPU (`benchmarks/compile_time.py`).
  """

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs, dtype=jnp.float32,
               param_dtype=jnp.float32, remat: bool = False, scan_layers: bool = False):
    """Builds the decoder with random weights (or abstract ones under `nnx.eval_shape`).

    Args:
      cfg: the decoder config.
      rngs: random streams for the initial weights.
      dtype: computation dtype.
      param_dtype: storage dtype of the parameters.
      remat: recompute each block in the backward pass (`nnx.remat`) instead of keeping its
        activations; applies to the forward without a cache (training).
      scan_layers: store the blocks as one `Block` whose parameters have a leading
        [num_layers] axis (`self.layers`) and run them with `jax.lax.scan`: the compiled
        program holds one layer, not num_layers. Same outputs as unrolled, and the same
        initial weights for the same `rngs` (the blocks are built one by one, then stacked:
        eagerly, the layers' weights exist twice for a moment; under `nnx.eval_shape` or
        `jax.jit` they do not).
    """
    self.config = cfg
    self.dtype = dtype
    self.remat = remat
    self.scan_layers = scan_layers
    d, v = cfg.hidden_size, cfg.vocab_size
    # HF's initializer_range: a near-uniform initial policy when the embedding is tied.
    self.embed = _param(rngs, (v, d), ("vocab", "embed"), param_dtype, fan_in=2500)
    blocks = [Block(cfg, i, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
              for i in range(cfg.num_layers)]
    self.layers = _stack_blocks(blocks) if scan_layers else nnx.List(blocks)
    self.final_norm = RMSNorm(d, eps=cfg.rms_norm_eps, rngs=rngs, param_dtype=param_dtype)
    if not cfg.tie_word_embeddings:
      self.lm_head = _param(rngs, (d, v), ("embed", "vocab"), param_dtype, fan_in=d)

  def __call__(self, input_ids: jax.Array, positions: jax.Array,
               attention_mask: jax.Array | None = None, *, cache: KVCache | None = None,
               cache_index: jax.Array | int | None = None, return_hidden: bool = False,
               rope: tuple[jax.Array, jax.Array] | None = None
               ) -> tuple[jax.Array, KVCache | None]:
    """Forward pass over L new tokens, optionally through a KV cache.

    Without a cache, query l sees key s iff s ≤ l and attention_mask[s] (and l − s < window
    on sliding-window layers). With a cache, the L new keys/values go to slots
    cache_index .. cache_index+L-1, marked valid where attention_mask is True, and query l
    sees every valid slot ≤ cache_index + l. Outputs at padded positions are finite but
    meaningless.

    Args:
      input_ids: int32 [B, L] token ids.
      positions: int32 [B, L] position ids (explicit, so left-padded rows work).
      attention_mask: bool [B, L], True on real tokens (default: all True).
      cache: a `KVCache` with S ≥ cache_index + L slots, or None.
      cache_index: int32 scalar (may be traced): the slot of the first new token. A Python
        int 0 (prefill) skips reading the cache, which then holds no earlier slot.
      return_hidden: return the final-normed hidden states [B, L, D] instead of logits.
      rope: (cos, sin) [B, L, R/2] of `rope_cos_sin(config, positions)`, when the caller has
        them already (the sampler computes them for all decode steps before its loop:
        computed inside each step, XLA fused cos and sin into every RoPE product, 6 times
        per step for 3 layers). Default: computed from `positions`.

    Returns:
      (float32 logits [B, L, V] — or hidden [B, L, D] in `dtype` — and the updated cache or
      None).
    """
    cfg = self.config
    if input_ids.ndim != 2 or positions.shape != input_ids.shape:
      raise ValueError(f"input_ids and positions must both be [B, L]; got {input_ids.shape} "
                       f"and {positions.shape}")
    impl = attention_implementation(cfg.attention)
    if cache is not None and cache.layout != cache_layout(impl):
      raise ValueError(f"attention {impl!r} reads a KV cache of layout {cache_layout(impl)!r}, "
                       f"got {cache.layout!r} (build it with KVCache.init(..., layout=None))")
    b, l = input_ids.shape
    if attention_mask is None:
      attention_mask = jnp.ones((b, l), bool)
    attention_mask = attention_mask.astype(bool)
    # FSDP-style: gather the whole table for the lookup (a sharded gather replicates anyway).
    table = constrain(self.embed[...], (None, None))
    x = jnp.take(table, input_ids, axis=0).astype(self.dtype)
    x = constrain(x, ("batch", "length", "act_embed"))
    cos, sin = rope_cos_sin(cfg, positions) if rope is None else rope
    causal = jnp.tril(jnp.ones((l, l), bool))
    allowed = causal[None, :, :] & attention_mask[:, None, :]        # [B, L, L]
    offsets = jnp.arange(l, dtype=jnp.int32)
    # query l minus key j, in sequence indices (cache slots when cached): for sliding windows
    distance = offsets[:, None] - offsets[None, :]                     # [L, L]
    fresh = False
    if cache is not None:
      if cache_index is None:
        raise ValueError("a cached forward needs cache_index (slot of the first new token)")
      if l > cache.max_len or cache.valid.shape[0] != b:
        raise ValueError(f"{b} rows of {l} new tokens do not fit a cache of "
                         f"{cache.valid.shape[0]} rows x {cache.max_len} slots")
      # A static 0 (a Python int) is a prefill into an empty prefix: skip the cached scores.
      fresh = isinstance(cache_index, (int, np.integer)) and int(cache_index) == 0
      index = jnp.asarray(cache_index, jnp.int32)
      zero = jnp.zeros((), jnp.int32)
      k_all, v_all = cache.k, cache.v
      valid = jax.lax.dynamic_update_slice(cache.valid, attention_mask, (zero, index))
      if not fresh:
        # Each layer writes its new slots first and then reads the earlier slots back from the
        # updated cache. Reading them from the cache passed in while writing the new slots made
        # XLA copy the whole cache twice per decode step (nothing ordered those reads before
        # the writes, so they could not share its buffer).
        slots = jnp.arange(cache.max_len, dtype=jnp.int32)
        cache_distance = (index + offsets)[:, None] - slots[None, :]  # [L, S]
        allowed_cache = jnp.broadcast_to(                            # earlier valid slots
            (valid & (slots[None, :] < index))[:, None, :], (b, l, cache.max_len))
    if self.scan_layers:
      def step(layer, carry, per):
        x, k_all, v_all = carry
        window, rope_on = per.get("window"), per.get("rope")
        layer_allowed = _window_mask(allowed, distance, window)
        if cache is None:
          x, _ = layer(x, cos, sin, layer_allowed, implementation=impl, causal=True,
                       rope_on=rope_on)
        elif not fresh:
          layer_cache = _window_mask(allowed_cache, cache_distance, window)
          x, (k_all, v_all) = layer(x, cos, sin, layer_allowed,
                                    CachedLayer(k_all, v_all, per["index"], index, layer_cache,
                                                cache.layout),
                                    implementation=impl, rope_on=rope_on)
        else:
          x, (k, v) = layer(x, cos, sin, layer_allowed, implementation=impl, causal=True,
                            rope_on=rope_on)
          k_all, v_all = write_slots(k_all, v_all, per["index"], index, k, v, cache.layout)
        return x, k_all, v_all

      if cache is None:
        k_all = v_all = None
      x, k_all, v_all = self._layer_scan(step, (x, k_all, v_all),
                                         remat=self.remat and cache is None)
    else:
      for i, layer in enumerate(self.layers):
        window = cfg.window(i)
        layer_allowed = _window_mask(allowed, distance, window)
        if cache is None:
          block = _block_fn(self.remat, impl, True)
          x, (k, v) = block(layer, x, cos, sin, layer_allowed)
          continue
        if not fresh:
          layer_cache = _window_mask(allowed_cache, cache_distance, window)
          x, (k_all, v_all) = layer(x, cos, sin, layer_allowed,
                                    CachedLayer(k_all, v_all, i, index, layer_cache,
                                                cache.layout),
                                    implementation=impl)
          continue
        # slot 0 onward: no earlier slot exists, so the cache is not read
        x, (k, v) = layer(x, cos, sin, layer_allowed, implementation=impl, causal=True)
        k_all, v_all = write_slots(k_all, v_all, i, index, k, v, cache.layout)
    hidden = self.final_norm(x)
    new_cache = None
    if cache is not None:
      new_cache = KVCache(k=k_all, v=v_all, valid=valid, layout=cache.layout)
    if return_hidden:
      return hidden, new_cache
    return self.unembed(hidden), new_cache

  def shared_prefix(self, prefix_ids: jax.Array, prefix_positions: jax.Array,
                    prefix_mask: jax.Array, rows: jax.Array, input_ids: jax.Array,
                    positions: jax.Array, attention_mask: jax.Array | None = None
                    ) -> tuple[jax.Array, jax.Array]:
    """Forward pass of B rows that continue U shared prefixes, each prefix computed once.

    Row b is prefix `rows[b]` (P columns) followed by its own L columns. The hidden states
    are those of the plain forward pass over the B concatenated rows (`self(concat(...))`),
    but each prefix goes through the layers once, not once per row that continues it: the
    n completions of a GRPO group share one prompt. At every layer the prefixes run first;
    each row's L tokens then attend over its prefix's keys and values (gathered per row)
    followed by its own, in one softmax.

    Args:
      prefix_ids: int32 [U, P] prefix tokens.
      prefix_positions: int32 [U, P] their position ids.
      prefix_mask: bool [U, P], True on real prefix tokens.
      rows: int32 [B], the prefix of each row, in [0, U).
      input_ids: int32 [B, L] each row's own tokens (columns P .. P + L − 1 of the row).
      positions: int32 [B, L] their position ids.
      attention_mask: bool [B, L], True on real tokens (default: all True).

    Returns:
      (prefix hidden [U, P, D], hidden [B, L, D]): final-normed hidden states, in `dtype`.
    """
    cfg = self.config
    if prefix_ids.ndim != 2 or prefix_positions.shape != prefix_ids.shape:
      raise ValueError(f"prefix_ids and prefix_positions must both be [U, P]; got "
                       f"{prefix_ids.shape} and {prefix_positions.shape}")
    if input_ids.ndim != 2 or positions.shape != input_ids.shape:
      raise ValueError(f"input_ids and positions must both be [B, L]; got {input_ids.shape} "
                       f"and {positions.shape}")
    if rows.shape != input_ids.shape[:1]:
      raise ValueError(f"rows must be [B] = [{input_ids.shape[0]}], got {rows.shape}")
    (u, p), (b, l) = prefix_ids.shape, input_ids.shape
    if attention_mask is None:
      attention_mask = jnp.ones((b, l), bool)
    attention_mask = attention_mask.astype(bool)
    prefix_mask = prefix_mask.astype(bool)
    table = constrain(self.embed[...], (None, None))
    xp = jnp.take(table, prefix_ids, axis=0).astype(self.dtype)      # [U, P, D]
    x = jnp.take(table, input_ids, axis=0).astype(self.dtype)        # [B, L, D]
    x = constrain(x, ("batch", "length", "act_embed"))
    cos_p, sin_p = rope_cos_sin(cfg, prefix_positions)
    cos, sin = rope_cos_sin(cfg, positions)
    allowed_p = jnp.tril(jnp.ones((p, p), bool))[None] & prefix_mask[:, None, :]   # [U, P, P]
    row_prefix = jnp.take(prefix_mask, rows, axis=0)                 # [B, P]
    allowed = jnp.concatenate(                                       # [B, L, P + L]
        [jnp.broadcast_to(row_prefix[:, None, :], (b, l, p)),
         jnp.tril(jnp.ones((l, l), bool))[None] & attention_mask[:, None, :]], axis=2)
    cols = jnp.arange(p + l, dtype=jnp.int32)
    distance = cols[:, None] - cols[None, :]                         # query col − key col
    impl = attention_implementation(cfg.attention)
    if self.scan_layers:
      def step(layer, carry, per):
        xp, x = carry
        window, rope_on = per.get("window"), per.get("rope")
        xp, (kp, vp) = layer(xp, cos_p, sin_p, _window_mask(allowed_p, distance[:p, :p], window),
                             implementation=impl, causal=True, rope_on=rope_on)
        prefix = (jnp.take(kp, rows, axis=0), jnp.take(vp, rows, axis=0))
        x, _ = layer(x, cos, sin, _window_mask(allowed, distance[p:], window), None, prefix,
                     implementation=impl, causal=False, rope_on=rope_on)
        return xp, x

      xp, x = self._layer_scan(step, (xp, x), remat=self.remat)
      return self.final_norm(xp), self.final_norm(x)
    block_p = _block_fn(self.remat, impl, True)
    block = _block_fn(self.remat, impl, False)
    for i, layer in enumerate(self.layers):
      window = cfg.window(i)
      layer_p = _window_mask(allowed_p, distance[:p, :p], window)
      layer_allowed = _window_mask(allowed, distance[p:], window)
      xp, (kp, vp) = block_p(layer, xp, cos_p, sin_p, layer_p)
      prefix = (jnp.take(kp, rows, axis=0), jnp.take(vp, rows, axis=0))   # rows' prefix k, v
      x, _ = block(layer, x, cos, sin, layer_allowed, prefix)
    return self.final_norm(xp), self.final_norm(x)

  def _layer_scan(self, step, carry, *, remat: bool = False):
    """Runs `step` over the stacked layers of a `scan_layers` decoder (`jax.lax.scan`).

    Args:
      step: (layer, carry, per) -> carry: one layer's work, `layer` a `Block` holding that
        layer's parameters, `per` a dict of that layer's `index` (int32 scalar) and, where
        the layers differ in them, its `window` (int32; `_NO_WINDOW` for full attention) and
        `rope` (bool: whether it applies RoPE).
      carry: the initial carry (a pytree of arrays).
      remat: recompute each layer's step in the backward pass (`jax.checkpoint`) instead of
        keeping its activations.

    Returns:
      The carry after the last layer.
    """
    cfg = self.config
    n = cfg.num_layers
    graphdef, state = nnx.split(self.layers)
    per = {"index": jnp.arange(n, dtype=jnp.int32)}
    windows = [cfg.window(i) for i in range(n)]
    if any(w is not None for w in windows):
      per["window"] = jnp.asarray([_NO_WINDOW if w is None else w for w in windows], jnp.int32)
    ropes = [cfg.uses_rope(i) for i in range(n)]
    if any(ropes) and not all(ropes):
      per["rope"] = jnp.asarray(ropes, bool)

    def body(carry, xs):
      layer_state, layer_per = xs
      return step(nnx.merge(graphdef, layer_state), carry, layer_per), None

    if remat:
      body = jax.checkpoint(body, prevent_cse=False)
    return jax.lax.scan(body, carry, (state, per))[0]

  def unembed(self, hidden: jax.Array) -> jax.Array:
    """Logits of hidden states: h Eᵀ (tied) or h W_lm.

    Args:
      hidden: [..., D] final-normed hidden states.

    Returns:
      float32 [..., V] logits.
    """
    if self.config.tie_word_embeddings:
      w = self.embed[...].astype(self.dtype)
      return jnp.einsum("...D,VD->...V", hidden.astype(self.dtype), w,
                        preferred_element_type=jnp.float32)
    w = self.lm_head[...].astype(self.dtype)
    return jnp.einsum("...D,DV->...V", hidden.astype(self.dtype), w,
                      preferred_element_type=jnp.float32)
