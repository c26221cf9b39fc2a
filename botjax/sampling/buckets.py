"""Shape buckets and host-side prompt padding.

A jitted program is compiled once per input shape. Rounding the prompt length, the generation
length and the number of prompts up to a few bucket sizes keeps a training run at a handful of
programs instead of one per step.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def bucket_size(n: int, buckets: tuple[int, ...] = (), *, minimum: int = 1,
                multiple_of: int = 1, name: str = "size") -> int:
  """Smallest allowed size ≥ n.

  With explicit `buckets`, the smallest bucket ≥ n that is a multiple of `multiple_of`;
  otherwise the smallest power of two ≥ max(n, minimum), rounded up to a multiple of
  `multiple_of` (so batch buckets stay divisible by the number of batch shards).

  Args:
    n: the size to cover, ≥ 1.
    buckets: strictly increasing allowed sizes; () means powers of two.
    minimum: smallest power-of-two bucket.
    multiple_of: the bucket must be divisible by this (≥ 1).
    name: what `n` is, for error messages.

  Returns:
    The bucket size (int).
  """
  if n < 1:
    raise ValueError(f"{name} must be >= 1, got {n}")
  if multiple_of < 1:
    raise ValueError(f"multiple_of must be >= 1, got {multiple_of}")
  if buckets:
    for b in buckets:
      if b >= n and b % multiple_of == 0:
        return b
    raise ValueError(f"{name} {n} does not fit the largest bucket divisible by {multiple_of} "
                     f"among {buckets}; add a larger bucket")
  size = max(1, minimum)
  while size < n:
    size *= 2
  return -(-size // multiple_of) * multiple_of


def left_pad(prompts: Sequence[Sequence[int]], length: int, *,
             pad_token_id: int) -> tuple[np.ndarray, np.ndarray]:
  """Left-pads token lists into a batch, so every prompt ends at the last column.

  Args:
    prompts: P token-id lists, each of length 1..`length`.
    length: Lp, the padded length.
    pad_token_id: id written into the padding.

  Returns:
    ids: [P, Lp] int32, prompt p in the last len(prompts[p]) columns.
    mask: [P, Lp] bool, True on prompt tokens.
  """
  ids = np.full((len(prompts), length), pad_token_id, np.int32)
  mask = np.zeros((len(prompts), length), bool)
  for p, prompt in enumerate(prompts):
    n = len(prompt)
    if n == 0:
      raise ValueError(f"prompt {p} is empty; every prompt needs at least one token "
                       "(e.g. a BOS token)")
    if n > length:
      raise ValueError(f"prompt {p} has {n} tokens, more than the padded length {length}")
    ids[p, length - n:] = np.asarray(prompt, np.int64)
    mask[p, length - n:] = True
  return ids, mask


def positions_from_mask(mask):
  """Positions of left-padded rows: pᵢ = (Σ_{j≤i} maskⱼ) − 1, clipped at 0 on the padding.

  Args:
    mask: [B, L] bool, True on real tokens: a NumPy array, or a jax array (also traced).

  Returns:
    [B, L] int32 positions, a NumPy array for a NumPy mask, else a jax array; the first real
    token of each row is at position 0.
  """
  xp = jnp if isinstance(mask, jax.Array) else np
  return xp.maximum(xp.cumsum(xp.asarray(mask).astype(xp.int32), axis=-1) - 1, 0
                    ).astype(xp.int32)
