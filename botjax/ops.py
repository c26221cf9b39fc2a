"""Masked and segment reductions shared by the advantage estimators and losses.

Every function is pure and jit-able and computes in float32 (integer counts stay integer).
Values outside a mask never reach a result, not even as NaN: they are replaced with
`jnp.where` before any arithmetic, never multiplied by the mask.

Groups are rows sharing a `group_ids` value in `[0, num_groups)`; `num_groups` is a static
Python int. Groups may be ragged and non-contiguous. Rows whose id lies outside that range are
dropped by the segment reductions and read back as 0 by `gather_groups`.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from botjax.types import Array


def f32(x) -> Array:
  """`x` (any shape, anything `jnp.asarray` takes) as a float32 array of the same shape."""
  return jnp.asarray(x, dtype=jnp.float32)


def parse_enum(cls, value, what: str):
  """`cls(value)` for a str-valued enum `cls`, or a ValueError that names `what`, the bad value
  and the valid values."""
  try:
    return cls(value)
  except ValueError:
    valid = ", ".join(m.value for m in cls)
    raise ValueError(f"unknown {what} {value!r}; valid: {valid}") from None


def _bool(mask) -> Array:
  return jnp.asarray(mask, dtype=jnp.bool_)


def masked_sum(x, mask, *, axis=None, keepdims: bool = False) -> Array:
  """Σ x over the entries where `mask` is True.

  Args:
    x: float array, any shape.
    mask: bool array of the same shape.
    axis: axis or axes to reduce (None: all).
    keepdims: keep reduced axes with size 1.

  Returns:
    float32 sums; entries outside `mask` (even NaN or inf) do not contribute.
  """
  x, mask = f32(x), _bool(mask)
  chex.assert_equal_shape([x, mask])
  return jnp.sum(jnp.where(mask, x, 0.0), axis=axis, keepdims=keepdims)


def masked_count(mask, *, axis=None, keepdims: bool = False) -> Array:
  """Number of True entries of `mask` as float32 (a denominator; divide by max(count, 1))."""
  return jnp.sum(_bool(mask), axis=axis, keepdims=keepdims, dtype=jnp.float32)


def masked_mean(x, mask, *, axis=None, keepdims: bool = False) -> Array:
  """Σ_m x / max(Σ m, 1); an empty selection gives 0.

  Args:
    x: float array, any shape.
    mask: bool array of the same shape.
    axis: axis or axes to reduce (None: all).
    keepdims: keep reduced axes with size 1.

  Returns:
    float32 masked means.
  """
  total = masked_sum(x, mask, axis=axis, keepdims=keepdims)
  count = masked_count(mask, axis=axis, keepdims=keepdims)
  return total / jnp.maximum(count, 1.0)


def masked_var(x, mask, *, axis=None, keepdims: bool = False, ddof: int = 0) -> Array:
  """Σ_m (x − mean)² / max(Σ m − ddof, 1), two-pass (centred) for float32 accuracy.

  Args:
    x: float array, any shape.
    mask: bool array of the same shape.
    axis: axis or axes to reduce (None: all).
    keepdims: keep reduced axes with size 1.
    ddof: 0 for the population variance, 1 for Bessel's correction.

  Returns:
    float32 variances (0 for selections of at most `ddof` entries' worth of data).
  """
  mean = masked_mean(x, mask, axis=axis, keepdims=True)
  centred = jnp.where(_bool(mask), f32(x) - mean, 0.0)
  sq = jnp.sum(centred * centred, axis=axis, keepdims=keepdims)
  count = masked_count(mask, axis=axis, keepdims=keepdims)
  return sq / jnp.maximum(count - ddof, 1.0)


def masked_whiten(x, mask, *, ddof: int = 1, eps: float = 1e-8, shift_mean: bool = True) -> Array:
  """Global masked whitening x̂ = (x − mean_m x) / sqrt(var_m x + eps), zero outside `mask`.

  This is verl's `masked_whiten` (Bessel-corrected variance by default) used by REINFORCE++.

  Args:
    x: float array, any shape (e.g. [B, T]).
    mask: bool array of the same shape.
    ddof: 1 (verl, default) or 0.
    eps: added to the variance.
    shift_mean: subtract the mean (False keeps the mean, scaling only).

  Returns:
    float32 array of x's shape, zero outside `mask`.

  References:
    Hu, REINFORCE++, https://arxiv.org/abs/2501.03262
  """
  mask = _bool(mask)
  mean = masked_mean(x, mask)
  var = masked_var(x, mask, ddof=ddof)
  out = (f32(x) - mean) * jax.lax.rsqrt(var + eps)
  if not shift_mean:
    out = out + mean
  return jnp.where(mask, out, 0.0)


def lengths(mask) -> Array:
  """Number of scored tokens per row: int32 [B] from a bool mask [B, T]."""
  mask = _bool(mask)
  chex.assert_rank(mask, 2)
  return jnp.sum(mask, axis=-1, dtype=jnp.int32)


def segment_sum(x, group_ids, *, num_groups: int) -> Array:
  """Σ over rows of each group: out[g] = Σ_{i: group_ids[i] = g} x[i].

  Args:
    x: float [B, ...] values per row.
    group_ids: int32 [B] group of each row.
    num_groups: number of groups (static).

  Returns:
    float32 [num_groups, ...] sums.
  """
  return jax.ops.segment_sum(f32(x), jnp.asarray(group_ids, jnp.int32),
                             num_segments=num_groups)


def segment_count(group_ids, *, num_groups: int, where=None) -> Array:
  """Rows per group (counting only rows where `where` is True): float32 [num_groups]."""
  group_ids = jnp.asarray(group_ids, jnp.int32)
  ones = jnp.ones(group_ids.shape, jnp.float32) if where is None else f32(_bool(where))
  return jax.ops.segment_sum(ones, group_ids, num_segments=num_groups)


def segment_mean(x, group_ids, *, num_groups: int, where=None) -> Array:
  """Mean over the (selected) rows of each group; empty groups give 0.

  Args:
    x: float [B] values per row.
    group_ids: int32 [B] group of each row.
    num_groups: number of groups (static).
    where: optional bool [B]; only rows with True count.

  Returns:
    float32 [num_groups] means.
  """
  x = f32(x)
  if where is not None:
    x = jnp.where(_bool(where), x, 0.0)
  total = segment_sum(x, group_ids, num_groups=num_groups)
  count = segment_count(group_ids, num_groups=num_groups, where=where)
  return total / jnp.maximum(count, 1.0)


def segment_max(x, group_ids, *, num_groups: int, where=None) -> Array:
  """Max over the (selected) rows of each group; empty groups give -inf."""
  x = f32(x)
  if where is not None:
    x = jnp.where(_bool(where), x, -jnp.inf)
  return jax.ops.segment_max(x, jnp.asarray(group_ids, jnp.int32), num_segments=num_groups)


def segment_min(x, group_ids, *, num_groups: int, where=None) -> Array:
  """Min over the (selected) rows of each group; empty groups give +inf."""
  x = f32(x)
  if where is not None:
    x = jnp.where(_bool(where), x, jnp.inf)
  return jax.ops.segment_min(x, jnp.asarray(group_ids, jnp.int32), num_segments=num_groups)


def gather_groups(values, group_ids) -> Array:
  """Reads a per-group value back to the rows: out[i] = values[group_ids[i]].

  Args:
    values: [num_groups, ...] per-group values.
    group_ids: int32 [B] group of each row.

  Returns:
    [B, ...] values; rows with an out-of-range id read 0.
  """
  return jnp.take(values, jnp.asarray(group_ids, jnp.int32), axis=0, mode="fill",
                  fill_value=0)


def suffix_sum(x, *, axis: int = -1) -> Array:
  """Reverse cumulative sum out[..., j] = Σ_{k ≥ j} x[..., k] (return-to-go with γ = 1)."""
  return jax.lax.cumsum(f32(x), axis=axis % jnp.ndim(x), reverse=True)


def masked_softmax(logits, mask, *, axis: int = -1) -> Array:
  """Softmax over the entries where `mask` is True; zero elsewhere and for empty selections.

  Args:
    logits: float array, any shape.
    mask: bool array of the same shape.
    axis: the softmax axis.

  Returns:
    float32 weights that sum to 1 over each non-empty selection and are finite, with finite
    gradients, for any input (masked entries may hold NaN or inf).
  """
  mask = _bool(mask)
  z = jnp.where(mask, f32(logits), 0.0)  # inner where: no NaN enters exp or its gradient
  z_max = jnp.max(jnp.where(mask, z, -jnp.inf), axis=axis, keepdims=True)
  z_max = jax.lax.stop_gradient(jnp.where(jnp.isfinite(z_max), z_max, 0.0))
  e = jnp.where(mask, jnp.exp(z - z_max), 0.0)
  total = jnp.sum(e, axis=axis, keepdims=True)
  return e / jnp.where(total > 0.0, total, 1.0)


__all__ = [
    "masked_sum", "masked_count", "masked_mean", "masked_var", "masked_whiten", "lengths",
    "segment_sum", "segment_count", "segment_mean", "segment_max", "segment_min",
    "gather_groups", "suffix_sum", "masked_softmax", "f32",
]
