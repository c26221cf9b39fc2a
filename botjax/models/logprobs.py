"""Per-token log-probabilities and entropies without materialising [B, L, V] logits.

The one chunked log-prob implementation of botjax: the RL update, SFT, reference log-probs,
scoring and `botjax.sampling.completion_logprobs` all reach `logprobs_from_hidden`, which
computes the logits of one chunk of positions at a time and recomputes them in the backward
pass (`jax.checkpoint`), so the memory of the log-probs is that of one chunk, not of
[B, L, V] float32 logits (at Qwen2.5's V = 151,936, 64 rows x 1,024 tokens: 40 GB).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def logprobs_from_hidden(hidden: jax.Array, unembed: Callable[[jax.Array], jax.Array],
                         targets: jax.Array, mask: jax.Array | None = None, *,
                         temperature: float = 1.0, chunk_size: int = 128,
                         support: jax.Array | None = None,
                         cut: Callable[[jax.Array], jax.Array] | None = None) -> tuple:
  """log π(y_l | ·) and H(π) of tempered logits, chunked over L.

  z = unembed(h_l) / τ,  log π(y_l) = z[y_l] − logsumexp(z),  H = −Σ_v π_v log π_v.

  With `support` (the sampler's top-k / top-p cut, `SampleOutput.support_logp`), π is the
  tempered softmax cut to the kept tokens and renormalised, the distribution the token was
  drawn from:

    S_l = {v : z_v − logsumexp(z) ≥ support_l} ∪ {y_l},
    log π(y_l) = z[y_l] − logsumexp_{v ∈ S_l} z_v,   H = −Σ_{v ∈ S_l} π_v log π_v.

  At the sampling parameters S_l is the sampler's kept set (its threshold lies halfway between
  the kept and the removed logits), so these log-probs equal the sampler's; under other
  parameters the same threshold on the log-probabilities defines the support. y_l is always
  in it, so the log-prob stays finite when an update pushes the sampled token below the cut.

  Each chunk of C positions computes its [B, C, V] logits under `jax.checkpoint`, so neither the
  forward pass nor the gradient ever holds more than one chunk of logits.

  Args:
    hidden: [B, L, D] final-normed hidden states.
    unembed: maps [B, C, D] hidden states to float32 [B, C, V] logits.
    targets: int32 [B, L] token ids to score.
    mask: bool [B, L] or None; outputs are 0 where False.
    temperature: τ > 0 (the sampler and trainer score under softmax(logits / τ)).
    chunk_size: C, positions per chunk (L is padded up to a multiple of C).
    support: float32 [B, L] thresholds on the tempered log-probabilities (−inf: no cut), or
      None for the untruncated softmax.
    cut: instead of `support`, the sampling rule's cut: tempered logits [N, V] -> thresholds
      [N] (`botjax.sampling.filtering.support_threshold` of `filter_logits(z, top_k=,
      top_p=)`), applied to each chunk's own logits. For an engine that samples under top-k /
      top-p but does not return its cut (vLLM): the log-probs are then taken under the cut
      of these logits, which at the sampling parameters is the sampler's (up to rounding).

  Returns:
    (logp, entropy): float32 [B, L] each; with `cut`, (logp, entropy, support), the support
    [B, L] being what `support=` takes, so that an update scores under the same cut.

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

  if support is not None and cut is not None:
    raise ValueError("pass support (a recorded cut) or cut (a rule), not both")

  @jax.checkpoint
  def chunk(h_c, y_c, *sup):
    z = unembed(h_c).astype(jnp.float32) * inv_t                   # [B, C, V]
    lse = jax.nn.logsumexp(z, axis=-1)                             # [B, C]
    picked = jnp.take_along_axis(z, y_c[..., None], axis=-1)[..., 0]
    logp_all = z - lse[..., None]
    if cut is not None:                                            # the cut of these logits
      sup = (cut(z.reshape(-1, z.shape[-1])).astype(jnp.float32).reshape(z.shape[:-1]),)
    if sup:
      vocab = jnp.arange(z.shape[-1], dtype=jnp.int32).reshape((1,) * y_c.ndim + (-1,))
      kept = (logp_all >= sup[0][..., None]) | (vocab == y_c[..., None])
      lse_kept = jax.nn.logsumexp(jnp.where(kept, z, -jnp.inf), axis=-1)
      logq = jnp.where(kept, z - lse_kept[..., None], 0.0)
      ent = -jnp.sum(jnp.where(kept, jnp.exp(logq), 0.0) * logq, axis=-1)
      if cut is not None:
        return picked - lse_kept, ent, sup[0]
      return picked - lse_kept, ent
    # −Σ π log π: a sum of non-negative terms (lse − Σ π z would cancel two large ones in f32)
    ent = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    return picked - lse, ent

  def body(carry, xs):
    return carry, chunk(*xs)

  xs = (h, y)
  if support is not None:
    if support.shape != (b, l):
      raise ValueError(f"support must be [B, L] = {(b, l)}, got {support.shape}")
    sup = jnp.pad(support.astype(jnp.float32), ((0, 0), (0, pad)), constant_values=-jnp.inf)
    xs = (h, y, sup.reshape(b, n, c).transpose(1, 0, 2))
  _, outs = jax.lax.scan(body, None, xs)
  outs = [x.transpose(1, 0, 2).reshape(b, n * c)[:, :l] for x in outs]
  logp, ent = outs[:2]
  if mask is not None:
    logp = jnp.where(mask, logp, 0.0)
    ent = jnp.where(mask, ent, 0.0)
  return (logp, ent, outs[2]) if cut is not None else (logp, ent)


def token_logprobs(model, input_ids: jax.Array, positions: jax.Array, mask: jax.Array,
                   targets: jax.Array, *, temperature: float = 1.0, chunk_size: int = 128,
                   support: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
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
    support: optional float32 [B, L] top-k / top-p support thresholds of the targets (see
      `logprobs_from_hidden`).

  Returns:
    (logp, entropy): float32 [B, L] each.
  """
  hidden, _ = model(input_ids, positions, attention_mask=mask, return_hidden=True)
  return logprobs_from_hidden(hidden, model.unembed, targets, mask, temperature=temperature,
                              chunk_size=chunk_size, support=support)


def group_prompts(prompt_ids: jax.Array, prompt_positions: jax.Array, prompt_mask: jax.Array,
                  num_prompts: int) -> tuple[jax.Array, jax.Array]:
  """Finds the distinct prompts of a batch (in-graph, static shapes).

  Two rows share a prompt when their prompt columns agree in ids, positions and mask (ids
  compared on real tokens only). The distinct prompts are numbered in order of their first
  row.

  Args:
    prompt_ids: int32 [B, P]; prompt_positions: int32 [B, P]; prompt_mask: bool [B, P].
    num_prompts: U ≥ the number of distinct prompts (static); slots beyond them repeat the
      first prompt.

  Returns:
    (rows int32 [B]: the prompt slot of each row, in [0, U); first int32 [U]: a row that
    holds each slot's prompt).
  """
  b = prompt_ids.shape[0]
  key = jnp.concatenate([jnp.where(prompt_mask, prompt_ids, -1), prompt_positions,
                         prompt_mask.astype(jnp.int32)], axis=1)          # [B, 3P]
  same = jnp.all(key[:, None, :] == key[None, :, :], axis=-1)             # [B, B]
  leader = jnp.argmax(same, axis=1)                                       # first row alike
  is_first = leader == jnp.arange(b)
  first = jnp.nonzero(is_first, size=num_prompts, fill_value=0)[0].astype(jnp.int32)
  slot = jnp.cumsum(is_first.astype(jnp.int32)) - 1
  return slot[leader].astype(jnp.int32), first


def completion_logprobs(model, input_ids: jax.Array, positions: jax.Array,
                        attention_mask: jax.Array, *, completion_len: int,
                        temperature: float = 1.0, chunk_size: int = 128, num_prompts: int = 0,
                        support: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Log-probs and entropies of the last T tokens of each row (prompt + completion rows).

  Column c ≥ P = L − T of `input_ids` is scored from the hidden state at column c − 1 (the
  first completion token from the prompt's last column, which left padding makes a real
  token): logp[b, t] = log softmax(logits[b, P + t − 1] / τ)[input_ids[b, P + t]]. The hidden
  states of the whole sequence are computed once; the unembedding, log-softmax and gather run
  per chunk of `chunk_size` positions under `jax.checkpoint` (`logprobs_from_hidden`), so the
  [B, T, V] logits never exist at once, in the forward pass or in the gradient.

  With `num_prompts` = U > 0, rows whose prompt columns are identical (a GRPO group) share
  one forward pass of their prompt (`Decoder.shared_prefix`): the prompt tokens go through
  the layers U times instead of B times. Same values up to float rounding.

  Args:
    model: a `botjax.models.Decoder`.
    input_ids: int32 [B, L] prompt (left-padded) followed by completion (right-padded).
    positions: int32 [B, L] position ids.
    attention_mask: bool [B, L], True on real prompt and completion tokens.
    completion_len: T < L (static), the number of trailing completion columns.
    temperature: τ > 0, the temperature the tokens were sampled at (the sampler reports its
      log-probs under softmax(logits / τ); `SamplingConfig.logp_temperature`).
    chunk_size: completion positions per chunk of logits.
    num_prompts: U (static), at least the number of distinct prompts among the B rows, or
      0 to run every row's prompt (no sharing).
    support: optional float32 [B, T] top-k / top-p support thresholds of the completion
      tokens (`SampleOutput.support_logp`): log-probs under the truncated distribution the
      tokens were drawn from (see `logprobs_from_hidden`); None: the untruncated softmax.

  Returns:
    (logp, entropy): float32 [B, T] each, also at padded completion columns (finite but
    meaningless there: mask them with the completion's mask).
  """
  h, targets = _completion_hidden(model, input_ids, positions, attention_mask, completion_len,
                                  num_prompts)
  return logprobs_from_hidden(h, model.unembed, targets, temperature=temperature,
                              chunk_size=chunk_size, support=support)


def _completion_hidden(model, input_ids, positions, attention_mask, completion_len: int,
                       num_prompts: int) -> tuple[jax.Array, jax.Array]:
  """(hidden [B, T, D] that predicts each completion token, the targets [B, T])."""
  B, L = input_ids.shape
  T = completion_len
  if not 0 < T < L:
    raise ValueError(f"completion_len must be in [1, L - 1 = {L - 1}] (at least one prompt "
                     f"column predicts the first completion token), got {T}")
  P = L - T
  targets = input_ids[:, P:]                                      # [B, T]
  if num_prompts > 0 and P > 0:
    rows, first = group_prompts(input_ids[:, :P], positions[:, :P], attention_mask[:, :P],
                                num_prompts)
    prompt_hidden, hidden = model.shared_prefix(
        input_ids[first, :P], positions[first, :P], attention_mask[first, :P], rows,
        targets, positions[:, P:], attention_mask[:, P:])
    h = jnp.concatenate([prompt_hidden[rows, P - 1][:, None], hidden[:, :T - 1]], axis=1)
  else:
    hidden, _ = model(input_ids, positions, attention_mask=attention_mask, return_hidden=True)
    h = hidden[:, P - 1:L - 1]                                    # [B, T, D]
  return h, targets


def completion_logprobs_own_cut(model, input_ids: jax.Array, positions: jax.Array,
                                attention_mask: jax.Array, cut: Callable, *,
                                completion_len: int, temperature: float,
                                chunk_size: int = 128, num_prompts: int = 0,
                                ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`completion_logprobs` under the model's own top-k / top-p cut (`logprobs_from_hidden`'s
  `cut`), from one forward pass: for an engine that samples truncated but returns no cut.

  Args:
    as `completion_logprobs`; cut: the sampling rule's cut (`logprobs_from_hidden`).

  Returns:
    (logp, entropy, support): float32 [B, T] each; `support` is what `completion_logprobs`'
    `support=` takes, so the update scores under the same cut.
  """
  h, targets = _completion_hidden(model, input_ids, positions, attention_mask, completion_len,
                                  num_prompts)
  return logprobs_from_hidden(h, model.unembed, targets, temperature=temperature,
                              chunk_size=chunk_size, cut=cut)
