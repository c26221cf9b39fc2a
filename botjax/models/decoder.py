"""The decoder: embeddings, a stack of pre-norm blocks, final norm, tied or separate LM head.

One implementation serves Qwen2/2.5, Llama 3.x, SmolLM3 and Phi-3/Phi-4-mini; the family
differences are fields of `DecoderConfig`. A `KVCache` pytree holds S slots per layer for the
sampler; the forward pass without a cache attends causally among the given tokens.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from botjax.models.attention import ATTENTION_FNS, attention_implementation
from botjax.models.cache import KVCache, window_mask
from botjax.models.config import DecoderConfig
from botjax.models.layers import Block, RMSNorm, _param, rope_cos_sin
from botjax.models.sharding import constrain

__all__ = ["Decoder", "KVCache"]

_REMAT_BLOCKS: dict = {}


def _remat_block(implementation: str, causal: bool):
  """`Block.__call__` without a cache, under `nnx.remat`, for one attention implementation."""
  key = (implementation, causal)
  if key not in _REMAT_BLOCKS:
    def block(layer, x, cos, sin, allowed, prefix=None):
      # positional only: nnx.remat cannot resolve a partial's keyword arguments to positions
      return layer(x, cos, sin, allowed, None, prefix, implementation=implementation,
                   causal=causal)
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


class Decoder(nnx.Module):
  """Decoder-only transformer with the HF families' conventions.

  Call: `model(input_ids, positions, attention_mask=None, *, cache=None, cache_index=None,
  return_hidden=False) -> (logits f32[B, L, V] or hidden [B, L, D], cache or None)`.

  Attention runs through the implementation `config.attention` names; `"auto"` resolves it
  when the model is traced, from the mesh set with `jax.set_mesh` (else the default device):
  `"cpu"` on CPU, `"cudnn"` on NVIDIA GPUs, `"xla"` elsewhere
  (`botjax.models.attention.attention_implementation`). Set it explicitly (e.g.
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
    attention = ATTENTION_FNS[impl]
    if cache is not None and cache.layout != attention.cache_layout:
      raise ValueError(f"attention {impl!r} reads a KV cache of layout "
                       f"{attention.cache_layout!r}, got {cache.layout!r} (build it with "
                       f"KVCache.init(..., layout=None))")
    b, l = input_ids.shape
    if attention_mask is None:
      attention_mask = jnp.ones((b, l), bool)
    attention_mask = attention_mask.astype(bool)
    (x,) = self._embed(input_ids)
    x = constrain(x, ("batch", "length", "act_embed"))
    cos, sin = rope_cos_sin(cfg, positions) if rope is None else rope
    causal = jnp.tril(jnp.ones((l, l), bool))
    allowed = causal[None, :, :] & attention_mask[:, None, :]        # [B, L, L]
    offsets = jnp.arange(l, dtype=jnp.int32)
    # query l minus key j, in sequence indices: for sliding windows
    distance = offsets[:, None] - offsets[None, :]                     # [L, L]
    cached = None
    if cache is not None:
      cached = cache.begin(attention_mask, cache_index, kv_layout=attention.kv_layout)
    remat = self.remat and cache is None

    def step(layer, carry, per):
      x, state = carry
      window = per.get("window")
      layer_allowed = window_mask(allowed, distance, window)
      view = None if cached is None else cached.layer(state, per["index"], window)
      x, new_kv = self._block(layer, x, cos, sin, layer_allowed, view, impl=impl,
                              causal=view is None, rope_on=per.get("rope"), remat=remat)
      if cached is not None:
        state = cached.store(state, per["index"], new_kv)
      return x, state

    x, state = self._layers(step, (x, None if cached is None else cached.state), remat=remat)
    hidden = self.final_norm(x)
    new_cache = None if cached is None else cached.finish(state)
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
    xp, x = self._embed(prefix_ids, input_ids)                       # [U, P, D], [B, L, D]
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

    def step(layer, carry, per):
      xp, x = carry
      window, rope_on = per.get("window"), per.get("rope")
      layer_p = window_mask(allowed_p, distance[:p, :p], window)
      layer_allowed = window_mask(allowed, distance[p:], window)
      xp, (kp, vp) = self._block(layer, xp, cos_p, sin_p, layer_p, impl=impl, causal=True,
                                 rope_on=rope_on, remat=self.remat)
      prefix = (jnp.take(kp, rows, axis=0), jnp.take(vp, rows, axis=0))   # rows' prefix k, v
      x, _ = self._block(layer, x, cos, sin, layer_allowed, prefix=prefix, impl=impl,
                         causal=False, rope_on=rope_on, remat=self.remat)
      return xp, x

    xp, x = self._layers(step, (xp, x), remat=self.remat)
    return self.final_norm(xp), self.final_norm(x)

  def _embed(self, *ids: jax.Array) -> tuple[jax.Array, ...]:
    """The embeddings of each int32 [..] array of token ids, [.., D] in `dtype`."""
    # FSDP-style: gather the whole table for the lookup (a sharded gather replicates anyway).
    table = constrain(self.embed[...], (None, None))
    return tuple(jnp.take(table, i, axis=0).astype(self.dtype) for i in ids)

  def _block(self, layer: Block, x, cos, sin, allowed, cached=None, prefix=None, *, impl: str,
             causal: bool, rope_on=None, remat: bool = False):
    """One block's forward (`Block.__call__`); with `remat` and unrolled layers, under
    `nnx.remat` (a layer scan recomputes its whole step instead, see `_layer_scan`)."""
    if remat and not self.scan_layers:
      return _remat_block(impl, causal)(layer, x, cos, sin, allowed, prefix)
    return layer(x, cos, sin, allowed, cached, prefix, implementation=impl, causal=causal,
                 rope_on=rope_on)

  def _layers(self, step, carry, *, remat: bool = False):
    """Runs `step` over the layers: a `jax.lax.scan` over the stacked layers of a
    `scan_layers` decoder (`_layer_scan`), else a Python loop over them.

    Args:
      step: (layer, carry, per) -> carry: one layer's work, `layer` a `Block` holding that
        layer's parameters, `per` a dict of that layer's `index` and, where the layers
        differ in them, its `window` (None or absent: full attention) and `rope` (bool:
        whether it applies RoPE; absent: as the block says).
      carry: the initial carry (a pytree of arrays).
      remat: recompute each layer's step in the backward pass instead of keeping its
        activations (a scan's whole step; unrolled, `step` passes it to `_block`).

    Returns:
      The carry after the last layer.
    """
    if self.scan_layers:
      return self._layer_scan(step, carry, remat=remat)
    for i, layer in enumerate(self.layers):
      carry = step(layer, carry, {"index": i, "window": self.config.window(i)})
    return carry

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
