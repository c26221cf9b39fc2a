"""Logit filters and the per-step sampling rule (pure functions, jit-able).

Removed tokens get logit -inf, so `softmax` gives them probability exactly 0 and neither
`jax.random.categorical` nor `argmax` can pick them. Hyperparameters are Python scalars (static):
they select which ops are traced.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from botjax import xla_cpu


def _check_logits(logits: jax.Array) -> None:
  chex.assert_rank(logits, 2)
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")


def _top_p_threshold(sorted_desc: jax.Array, top_p: float,
                     log_norm: jax.Array | None = None) -> jax.Array:
  """Smallest kept logit of the nucleus, from logits sorted in descending order. [B, 1].

  `log_norm` [B, 1] is the log-normaliser of the distribution when `sorted_desc` holds only its
  head (the top-k values); by default the sorted values are the whole distribution.
  """
  if log_norm is None:
    log_norm = jax.nn.logsumexp(sorted_desc, axis=-1, keepdims=True)
  probs = jnp.exp(sorted_desc - log_norm)
  mass_before = jnp.cumsum(probs, axis=-1) - probs       # probability of strictly better tokens
  keep = mass_before < top_p                             # always True for the first token
  return jnp.min(jnp.where(keep, sorted_desc, jnp.inf), axis=-1, keepdims=True)


def top_k_filter(logits: jax.Array, *, top_k: int) -> jax.Array:
  """Keeps the k largest logits of each row: z'ᵥ = zᵥ if zᵥ ≥ z₍ₖ₎ else −∞.

  z₍ₖ₎ is the k-th largest logit of the row; tokens tied with it are kept, so more than k tokens
  survive only on exact ties.

  Args:
    logits: [B, V] float logits.
    top_k: k ≥ 0 (static); 0 or k ≥ V returns `logits` unchanged.

  Returns:
    [B, V] logits with the removed entries set to −∞.

  References:
    Fan et al., Hierarchical Neural Story Generation, https://arxiv.org/abs/1805.04833
  """
  _check_logits(logits)
  if top_k < 0:
    raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
  if top_k == 0 or top_k >= logits.shape[-1]:
    return logits
  kth = jax.lax.top_k(logits, top_k)[0][:, -1:]          # [B, 1]
  return jnp.where(logits < kth, -jnp.inf, logits)


def top_p_filter(logits: jax.Array, *, top_p: float) -> jax.Array:
  """Nucleus filter: keeps the smallest set of most likely tokens with total mass ≥ p.

  With tokens sorted by probability π₍₁₎ ≥ π₍₂₎ ≥ …, token (i) is kept iff
  Σ_{j<i} π₍ⱼ₎ < p, so the most likely token is always kept. Tokens tied with the last kept
  logit are kept as well.

  Args:
    logits: [B, V] float logits (already divided by the temperature).
    top_p: p in (0, 1] (static); 1 returns `logits` unchanged.

  Returns:
    [B, V] logits with the removed entries set to −∞.

  References:
    Holtzman et al., The Curious Case of Neural Text Degeneration, https://arxiv.org/abs/1904.09751
  """
  _check_logits(logits)
  if not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_p must lie in (0, 1] (1 = off), got {top_p}")
  if top_p >= 1.0:
    return logits
  sorted_desc = -jnp.sort(-logits, axis=-1)
  return jnp.where(logits < _top_p_threshold(sorted_desc, top_p), -jnp.inf, logits)


def filter_logits(logits: jax.Array, *, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
  """Top-k, then top-p, in one pass: the nucleus is computed over the k survivors only.

  Equal to `top_p_filter(top_k_filter(logits, top_k=k), top_p=p)`, ties with the k-th logit
  included; with both active it sorts k values per row instead of V.

  Args:
    logits: [B, V] float logits (already divided by the temperature).
    top_k: k ≥ 0 (static), 0 = off.
    top_p: p in (0, 1] (static), 1 = off.

  Returns:
    [B, V] logits with the removed entries set to −∞.
  """
  _check_logits(logits)
  if top_k < 0:
    raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
  if not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_p must lie in (0, 1] (1 = off), got {top_p}")
  use_k = 0 < top_k < logits.shape[-1]
  if not use_k:
    return top_p_filter(logits, top_p=top_p)
  top_vals = jax.lax.top_k(logits, top_k)[0]            # [B, k], descending
  threshold = top_vals[:, -1:]
  if top_p < 1.0:
    # Normalise over every top-k survivor (ties with the k-th value included), as the chained
    # filters do; the nucleus then never reaches past the k-th value.
    survivors = jnp.where(logits < threshold, -jnp.inf, logits)
    log_norm = jax.nn.logsumexp(survivors, axis=-1, keepdims=True)
    threshold = _top_p_threshold(top_vals, top_p, log_norm)   # ≥ the k-th value
  return jnp.where(logits < threshold, -jnp.inf, logits)


def _first_argmax(z: jax.Array) -> jax.Array:
  """`jnp.argmax(z, -1)` for finite-or-(-inf) rows: the first index of the row's maximum.

  Args:
    z: [B, V] float scores.

  Returns:
    [B] int32 indices (V − 1 for a row holding NaN, which has no maximum).
  """
  v = z.shape[-1]
  top = xla_cpu.fused_max(z, keepdims=True)
  idx = xla_cpu.fused_min(jnp.where(z == top, jnp.arange(v, dtype=jnp.int32), v))
  return jnp.minimum(idx, v - 1).astype(jnp.int32)


class Draw(NamedTuple):
  """One decoding step's draw for B rows (`draw`).

  Attributes:
    tokens: [B] int32 sampled ids.
    logp: [B] float32 log-probabilities of `tokens` (see `draw`).
    support: [B] float32 support threshold, in log-probability under the tempered softmax:
      the kept tokens are those with log_softmax(z / τ) ≥ support; −inf where nothing was cut
      (no top-k / top-p, greedy decoding, or `truncated=False`).
  """
  tokens: jax.Array
  logp: jax.Array
  support: jax.Array


def support_threshold(scaled: jax.Array, filtered: jax.Array) -> jax.Array:
  """The kept support of a filtered row as one log-probability threshold. [B].

  Top-k and top-p keep exactly the tokens whose logit reaches some cut value, so the support
  is {v : zᵥ ≥ c}. The threshold recorded is the midpoint between the smallest kept logit and
  the largest removed one, minus the row's log-normaliser:

    support = (min_{kept} zᵥ + max_{removed} zᵥ) / 2 − logsumexp(z)

  so that recomputing log_softmax(z)ᵥ ≥ support under the same parameters selects the same
  tokens with a margin of half the gap between them (a recomputation that rounds differently
  by less than that margin keeps the same set). −inf where nothing was removed.

  Args:
    scaled: [B, V] tempered logits z = logits / τ.
    filtered: [B, V] the same with removed tokens at −inf (`filter_logits`).

  Returns:
    [B] float32 thresholds.
  """
  kept = jnp.isfinite(filtered)
  lowest_kept = xla_cpu.fused_min(jnp.where(kept, scaled, jnp.inf))
  highest_cut = xla_cpu.fused_max(jnp.where(kept, -jnp.inf, scaled))
  cut = jnp.where(jnp.isfinite(highest_cut), 0.5 * (lowest_kept + highest_cut), -jnp.inf)
  return (cut - xla_cpu.fused_logsumexp(scaled)).astype(jnp.float32)


def draw(keys: jax.Array, logits: jax.Array, *, temperature: float, top_k: int = 0,
         top_p: float = 1.0, truncated: bool = False) -> Draw:
  """Draws one token per row; its log-probability, and the kept support when truncated.

    greedy (τ = 0):  y = argmax_v zᵥ,                 log π(y) = log_softmax(z)[y]
    sampling:        y ~ softmax(filter(z / τ)),       log π(y) = log_softmax(z / τ)[y]
    truncated:       y ~ softmax(filter(z / τ)),       log π(y) = log_softmax(filter(z / τ))[y]

  Untruncated, the reported log-probability ignores the top-k / top-p cut: it is what the
  trainer recomputes with `token_logprobs(..., temperature=τ)` (τ = 1 for greedy). Truncated,
  it is the log-probability under the distribution the token was drawn from (the cut,
  renormalised), and `Draw.support` records the cut so that the trainer's log-probs
  (`botjax.models.logprobs.logprobs_from_hidden(..., support=)`) are taken under the same
  truncated distribution: then the behaviour policy of the PPO ratio is the one that sampled.

  Args:
    keys: [B] typed PRNG keys (or [B, 2] raw uint32 keys), one per row, so a row's draw does
      not depend on the other rows of the batch.
    logits: [B, V] float logits of the next token.
    temperature: τ ≥ 0 (static); 0 = greedy (keys unused).
    top_k: k ≥ 0 (static), 0 = off.
    top_p: p in (0, 1] (static), 1 = off.
    truncated: report log-probs under the truncated distribution and record its support
      (static; no effect when greedy or when neither top-k nor top-p is set).

  Returns:
    `Draw` of [B] arrays.
  """
  _check_logits(logits)
  if temperature < 0:
    raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
  logits = logits.astype(jnp.float32)
  no_support = jnp.full(logits.shape[:1], -jnp.inf, jnp.float32)
  if temperature == 0:
    tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logp_all = xla_cpu.fused_log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, tokens[:, None], axis=-1)[:, 0]
    return Draw(tokens, logp, no_support)
  scaled = logits / jnp.float32(temperature)
  filtered = filter_logits(scaled, top_k=top_k, top_p=top_p)
  # jax.random.categorical's Gumbel-max draw, with its argmax written as max + first index:
  # XLA:CPU runs argmax's (value, index) reduction unvectorised, ~0.5 ms per [128, 313] step.
  noise = jax.vmap(lambda k: jax.random.gumbel(k, filtered.shape[-1:], filtered.dtype))(keys)
  tokens = _first_argmax(noise + filtered)
  cut = truncated and (0 < top_k < logits.shape[-1] or top_p < 1.0)
  logp_all = xla_cpu.fused_log_softmax(filtered if cut else scaled)
  logp = jnp.take_along_axis(logp_all, tokens[:, None], axis=-1)[:, 0]
  support = support_threshold(scaled, filtered) if cut else no_support
  return Draw(tokens, logp, support)


def sample_logits(keys: jax.Array, logits: jax.Array, *, temperature: float, top_k: int = 0,
                  top_p: float = 1.0) -> tuple[jax.Array, jax.Array]:
  """Draws one token per row and returns its log-probability under the tempered softmax.

    greedy (τ = 0):  y = argmax_v zᵥ,                 log π(y) = log_softmax(z)[y]
    sampling:        y ~ softmax(filter(z / τ)),       log π(y) = log_softmax(z / τ)[y]

  The reported log-probability ignores the top-k / top-p truncation: it is the value the trainer
  recomputes with `token_logprobs(..., temperature=τ)` (τ = 1 for greedy), so importance ratios
  start at exactly 1. `draw(..., truncated=True)` reports it under the truncated distribution.

  Args:
    keys: [B] typed PRNG keys (or [B, 2] raw uint32 keys), one per row.
    logits: [B, V] float logits of the next token.
    temperature, top_k, top_p: as `draw` (static).

  Returns:
    tokens: [B] int32 sampled ids.
    logp: [B] float32 log-probabilities of `tokens`.
  """
  out = draw(keys, logits, temperature=temperature, top_k=top_k, top_p=top_p)
  return out.tokens, out.logp
