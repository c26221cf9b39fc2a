"""Per-token log-probabilities and entropies without materialising [B, L, V] logits."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def logprobs_from_hidden(hidden: jax.Array, unembed: Callable[[jax.Array], jax.Array],
                         targets: jax.Array, mask: jax.Array | None = None, *,
                         temperature: float = 1.0, chunk_size: int = 128
                         ) -> tuple[jax.Array, jax.Array]:
  """log π(y_l | ·) and H(π) of tempered logits, chunked over L.

  z = unembed(h_l) / τ,  log π(y_l) = z[y_l] − logsumexp(z),  H = logsumexp(z) − Σ_v π_v z_v.

  Each chunk of C positions computes its [B, C, V] logits under `jax.checkpoint`, so neither the
  forward pass nor the gradient ever holds more than one chunk of logits.

  Args:
    hidden: [B, L, D] final-normed hidden states.
    unembed: maps [B, C, D] hidden states to float32 [B, C, V] logits.
    targets: int32 [B, L] token ids to score.
    mask: bool [B, L] or None; outputs are 0 where False.
    temperature: τ > 0 (the sampler and trainer score under softmax(logits / τ)).
    chunk_size: C, positions per chunk (L is padded up to a multiple of C).

  Returns:
    (logp, entropy): float32 [B, L] each.

  References:
    Levanter blockwise cross-entropy; tunix `chunk_size` log-probs.
  """
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  if chunk_size <= 0:
    raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
  b, l, d = hidden.shape
  if targets.shape != (b, l):
    raise ValueError(f"targets must be [B, L] = {(b, l)}, got {targets.shape}")
  c = min(chunk_size, l)
  n = -(-l // c)
  pad = n * c - l
  h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
  y = jnp.pad(targets.astype(jnp.int32), ((0, 0), (0, pad)))
  h = h.reshape(b, n, c, d).transpose(1, 0, 2, 3)   # [n, B, C, D]
  y = y.reshape(b, n, c).transpose(1, 0, 2)         # [n, B, C]
  inv_t = 1.0 / temperature

  @jax.checkpoint
  def chunk(h_c, y_c):
    z = unembed(h_c).astype(jnp.float32) * inv_t                   # [B, C, V]
    lse = jax.nn.logsumexp(z, axis=-1)
    picked = jnp.take_along_axis(z, y_c[..., None], axis=-1)[..., 0]
    p = jax.nn.softmax(z, axis=-1)
    ent = lse - jnp.sum(p * z, axis=-1)
    return picked - lse, ent

  def body(carry, xs):
    return carry, chunk(*xs)

  _, (logp, ent) = jax.lax.scan(body, None, (h, y))
  logp = logp.transpose(1, 0, 2).reshape(b, n * c)[:, :l]
  ent = ent.transpose(1, 0, 2).reshape(b, n * c)[:, :l]
  if mask is not None:
    logp = jnp.where(mask, logp, 0.0)
    ent = jnp.where(mask, ent, 0.0)
  return logp, ent


def token_logprobs(model, input_ids: jax.Array, positions: jax.Array, mask: jax.Array,
                   targets: jax.Array, *, temperature: float = 1.0, chunk_size: int = 128
                   ) -> tuple[jax.Array, jax.Array]:
  """Log-probabilities of `targets` under a decoder, and the entropy, chunked over L.

  logp[b, l] = log_softmax(logits[b, l] / τ)[targets[b, l]], with logits the model's output at
  position l (so for next-token scoring pass targets = input_ids shifted left by one).

  Args:
    model: a `botjax.models.Decoder`.
    input_ids: int32 [B, L] tokens.
    positions: int32 [B, L] position ids.
    mask: bool [B, L], the attention mask (True on real tokens); outputs are 0 where False.
    targets: int32 [B, L] tokens to score at each position.
    temperature: τ > 0.
    chunk_size: positions per chunk of logits.

  Returns:
    (logp, entropy): float32 [B, L] each.
  """
  hidden, _ = model(input_ids, positions, attention_mask=mask, return_hidden=True)
  return logprobs_from_hidden(hidden, model.unembed, targets, mask, temperature=temperature,
                              chunk_size=chunk_size)
