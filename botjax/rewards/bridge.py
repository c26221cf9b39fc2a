"""The one bridge from jitted code to host rewards: `jax.pure_callback` / `io_callback` wrappers.

Use it only for cheap, deterministic rewards on token ids that must sit inside `jit` (a length
penalty, a banned-token count, a string match on detokenized ids). JAX may run a pure callback zero
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
