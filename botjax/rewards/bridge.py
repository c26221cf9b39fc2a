"""The one bridge from jitted code to host rewards: `jax.pure_callback` / `io_callback` wrappers.

`host_reward_callback` wraps a numpy function of token ids; `reward_fn_callback` wraps any
`RewardFn` (which works on strings) with a tokenizer: it decodes inside the callback and returns
the sequence rewards [B] and the token-level values [B, T] (token spans mapped to tokens).

Use it only for cheap, deterministic rewards that must sit inside `jit` (a length penalty, a
banned-token count, a string match, a format check). JAX may run a pure callback zero
times (its result unused), once, or several times, and exceptions inside are not a supported way
to fail, so anything slow, remote or fallible belongs in `RewardPool` between sampling and the
update. Rewards carry no gradient: the wrapped call is a constant for autodiff.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

_VMAP_METHODS = ("sequential", "broadcast_all", "expand_dims", "legacy_vectorized")


def _host_fn(fn: Callable, out_shape: tuple[int, ...], dtype: np.dtype, name: str) -> Callable:
  """fn on numpy inputs, its result checked against the declared shape (leading batch dims from
  a vmap with broadcast_all are allowed) and cast to dtype."""

  def host(*arrays):
    out = np.asarray(fn(*(np.asarray(a) for a in arrays)), dtype=dtype)
    if out.shape[out.ndim - len(out_shape):] != out_shape or out.ndim < len(out_shape):
      raise ValueError(f"host reward {name} returned shape {out.shape}, declared {out_shape}")
    return out

  return host


def _no_gradient(call: Callable) -> Callable:
  """`call` as a constant for autodiff: its JVP is zero (callbacks have no JVP rule)."""
  wrapped = jax.custom_jvp(call)

  @wrapped.defjvp
  def _jvp(primals, tangents):
    del tangents
    out = call(*primals)
    return out, jnp.zeros_like(out)

  return wrapped


def _declared(out_shape: Sequence[int], dtype) -> tuple[tuple[int, ...], np.dtype]:
  shape = tuple(int(d) for d in out_shape)
  if any(d < 0 for d in shape):
    raise ValueError(f"out_shape must hold non-negative sizes, got {tuple(out_shape)}")
  return shape, np.dtype(dtype)


def host_reward_callback(fn: Callable[..., np.ndarray], *, out_shape: Sequence[int],
                         dtype=np.float32, vmap_method: str = "sequential") -> Callable:
  """Wraps a host reward `fn(*numpy arrays) -> array[out_shape]` for use inside jit and vmap.

  r = pure_callback(fn, ShapeDtypeStruct(out_shape, dtype), *arrays), with zero gradient.

  Args:
    fn: deterministic, side-effect-free host function of numpy arrays (e.g. int32[B, T] token
      ids -> float32[B] rewards).
    out_shape: the declared result shape for unbatched inputs, e.g. (B,).
    dtype: result dtype (float32 by default).
    vmap_method: how `jax.vmap` calls fn: "sequential" (one host call per batch element, fn sees
      unbatched arrays) or "broadcast_all" (one host call, fn sees arrays with the batch axes in
      front and must return them in front of out_shape); also "expand_dims".

  Returns:
    g(*arrays) -> jax.Array of shape out_shape (plus vmapped axes) and dtype `dtype`.
  """
  if vmap_method not in _VMAP_METHODS:
    raise ValueError(f"vmap_method must be one of {_VMAP_METHODS}, got {vmap_method!r}")
  shape, dtype = _declared(out_shape, dtype)
  name = getattr(fn, "__name__", repr(fn))
  host = _host_fn(fn, shape, dtype, name)

  def call(*arrays):
    return jax.pure_callback(host, jax.ShapeDtypeStruct(shape, dtype), *arrays,
                             vmap_method=vmap_method)

  return _no_gradient(call)


def host_io_callback(fn: Callable[..., np.ndarray], *, out_shape: Sequence[int],
                     dtype=np.float32, ordered: bool = False) -> Callable:
  """Like `host_reward_callback` but through `jax.experimental.io_callback`: the call is never
  dropped or repeated by the compiler, for host functions with side effects (logging, counters).

  `ordered=True` keeps program order across calls (not vmappable: JAX refuses to vmap an ordered
  IO callback); an unordered one is vmapped as one call per element.

  Args:
    fn: host function of numpy arrays returning array[out_shape].
    out_shape: the declared result shape.
    dtype: result dtype.
    ordered: keep the order of calls.

  Returns:
    g(*arrays) -> jax.Array of shape out_shape, with zero gradient.
  """
  from jax.experimental import io_callback

  shape, dtype = _declared(out_shape, dtype)
  host = _host_fn(fn, shape, dtype, getattr(fn, "__name__", repr(fn)))

  def call(*arrays):
    return io_callback(host, jax.ShapeDtypeStruct(shape, dtype), *arrays, ordered=ordered)

  return _no_gradient(call)


class RewardFnCallback:
  """A `RewardFn` plus a tokenizer as a jax function of token ids (see `reward_fn_callback`).

  Calling it inside or outside `jit` / `vmap` gives `(rewards f32[B], token_values f32[B, T])`;
  `host` is the same computation on numpy arrays, run directly.
  """

  def __init__(self, fn, tokenizer, *, batch_size: int, completion_len: int,
               metadata=None, stop_token_ids: Sequence[int] = (), vmap_method: str = "sequential"):
    from botjax.rewards.base import reward_spec
    from botjax.sampling.text import _backend
    if vmap_method not in _VMAP_METHODS:
      raise ValueError(f"vmap_method must be one of {_VMAP_METHODS}, got {vmap_method!r}")
    if int(batch_size) < 1 or int(completion_len) < 1:
      raise ValueError(f"batch_size and completion_len must be >= 1, got {batch_size}, "
                       f"{completion_len}")
    self.fn, self.tokenizer = fn, tokenizer
    self.spec = reward_spec(fn)
    self.B, self.T = int(batch_size), int(completion_len)
    if metadata is None or isinstance(metadata, dict):
      metadata = [dict(metadata or {}) for _ in range(self.B)]
    if len(metadata) != self.B:
      raise ValueError(f"metadata has {len(metadata)} items for batch_size={self.B}")
    self.metadata = [dict(m) for m in metadata]
    self.stop_token_ids = frozenset(int(t) for t in stop_token_ids)
    self.vmap_method = vmap_method
    self._backend = _backend(tokenizer)

  def _row_text(self, ids: np.ndarray, mask: np.ndarray) -> tuple[str, list[tuple[int, int]]]:
    """Completion text of one row and the character offsets of its T' = Σ mask tokens; a final
    stop token is not part of the text and gets the empty span at its end (as the sampler's)."""
    from botjax.sampling.text import decode_with_offsets
    toks = [int(t) for t in ids[mask]]
    stopped = bool(toks) and toks[-1] in self.stop_token_ids
    text, offsets = decode_with_offsets(self.tokenizer, toks[:-1] if stopped else toks)
    if stopped:
      offsets.append((len(text), len(text)))
    return text, offsets

  def _one(self, ids, mask, prompt_ids, prompt_mask) -> tuple[np.ndarray, np.ndarray]:
    from botjax.rewards.base import call_reward_fn, spans_to_token_values
    rows = [self._row_text(ids[b], mask[b]) for b in range(self.B)]
    if prompt_ids is None:
      prompts = [""] * self.B
    else:
      prompts = self._backend.decode_batch(
          [[int(t) for t in prompt_ids[b][prompt_mask[b]]] for b in range(self.B)],
          skip_special_tokens=False)
    results = call_reward_fn(self.fn, prompts, [text for text, _ in rows], self.metadata)
    self.spec.check_results(results, self.fn)
    rewards = np.asarray([r.reward for r in results], np.float32)
    values = np.zeros((self.B, self.T), np.float32)
    for b, (r, (_, offsets)) in enumerate(zip(results, rows)):
      if r.token_spans:
        values[b] = spans_to_token_values(r.token_spans, offsets, self.T)
    return rewards, values

  def host(self, completion_ids, completion_mask, prompt_ids=None, prompt_mask=None):
    """The rewards f32[..., B] and token values f32[..., B, T] of numpy inputs (any leading
    dims, e.g. from a vmap with broadcast_all)."""
    ids = np.asarray(completion_ids)
    mask = np.asarray(completion_mask, bool)
    if ids.shape[-2:] != (self.B, self.T) or mask.shape != ids.shape:
      raise ValueError(f"completion ids {ids.shape} and mask {mask.shape} must end in "
                       f"(batch_size, completion_len) = ({self.B}, {self.T})")
    lead = ids.shape[:-2]
    flat = lambda x: None if x is None else np.asarray(x).reshape(  # noqa: E731
        (-1,) + np.shape(x)[-2:])
    pids = flat(prompt_ids)
    pmask = None if prompt_ids is None else flat(
        np.ones(np.shape(prompt_ids), bool) if prompt_mask is None
        else np.broadcast_to(np.asarray(prompt_mask, bool), np.shape(prompt_ids)))
    out = [self._one(i, m, None if pids is None else pids[n], None if pmask is None else pmask[n])
           for n, (i, m) in enumerate(zip(flat(ids), flat(mask)))]
    rewards = np.stack([r for r, _ in out]).reshape(lead + (self.B,))
    values = np.stack([v for _, v in out]).reshape(lead + (self.B, self.T))
    return rewards, values

  def __call__(self, completion_ids, completion_mask, prompt_ids=None, prompt_mask=None):
    """(rewards f32[B], token values f32[B, T]) of int[B, T] completion ids and their bool[B, T]
    mask (right padding), with optional int[B, Lp] prompt ids and bool mask; zero gradient."""
    shapes = (jax.ShapeDtypeStruct((self.B,), np.float32),
              jax.ShapeDtypeStruct((self.B, self.T), np.float32))
    args = [completion_ids, completion_mask]
    if prompt_ids is not None:
      args += [prompt_ids, jnp.ones(jnp.shape(prompt_ids), bool) if prompt_mask is None
               else prompt_mask]

    def call(*arrays):
      return jax.pure_callback(self.host, shapes, *arrays, vmap_method=self.vmap_method)

    wrapped = jax.custom_jvp(call)

    @wrapped.defjvp
    def _jvp(primals, tangents):
      del tangents
      out = call(*primals)
      return out, jax.tree.map(jnp.zeros_like, out)

    return wrapped(*args)


def reward_fn_callback(fn, tokenizer, *, batch_size: int, completion_len: int, metadata=None,
                       stop_token_ids: Sequence[int] = (),
                       vmap_method: str = "sequential") -> RewardFnCallback:
  """Any `RewardFn` as a function of token ids for use inside `jit` and `vmap`.

  Inside the host callback each row's completion (its tokens where the mask is True) is decoded
  with its per-token character offsets (`botjax.sampling.decode_with_offsets`), the prompts (when
  given) are decoded, `fn(prompts, completions, metadata)` runs, and the token spans of its
  results are mapped to tokens (`spans_to_token_values`: a token gets the value of every span
  holding its first character):

    rewards[b]     = results[b].reward                                    f32[B]
    values[b, t]   = Σ_{(a, e, x) ∈ results[b].token_spans : a ≤ start(t) < e} x   f32[B, T]

  Same caveats as `host_reward_callback`: JAX may call a pure callback zero, one or several
  times; keep `fn` cheap and deterministic; the outputs carry no gradient.

  Args:
    fn: a RewardFn (strings in, `RewardResult`s out); its `spec` is checked against its results.
    tokenizer: the model's tokenizer (a fast `transformers` tokenizer or `tokenizers.Tokenizer`).
    batch_size: B, rows per call (before any vmap).
    completion_len: T, completion columns.
    metadata: one dict for every row, or B dicts (static: the same for every call).
    stop_token_ids: ids that end a completion; a final one is left out of the text (as the
      sampler's texts leave out the EOS that ended a row).
    vmap_method: as in `host_reward_callback`.

  Returns:
    A `RewardFnCallback` g: `g(completion_ids, completion_mask, prompt_ids=None,
    prompt_mask=None) -> (rewards f32[B], token_values f32[B, T])`.
  """
  return RewardFnCallback(fn, tokenizer, batch_size=batch_size, completion_len=completion_len,
                          metadata=metadata, stop_token_ids=stop_token_ids,
                          vmap_method=vmap_method)
