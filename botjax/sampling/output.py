"""What an engine returns: `SampleOutput` (B = P·n completions with their log-probs), its
`TeacherForcing` inputs and the finish reasons; and `generate_args`, the check of a `generate`
call's arguments that every engine makes. Every engine (`botjax.sampling.engine`) and every
consumer of rollouts imports them from here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from botjax.sampling.buckets import positions_from_mask

FINISH_STOP = 0      # the row emitted an EOS / stop token (kept as its last token)
FINISH_LENGTH = 1    # the row reached max_new_tokens


def generate_args(prompts, n, max_new_tokens, default_max_new_tokens):
  """The checked arguments of `RolloutEngine.generate`: (prompts as P lists, max_new: int).

  Args:
    prompts: P >= 1 token-id sequences (lists, tuples or a 2-D array); a str is refused.
    n: samples per prompt, an int >= 1.
    max_new_tokens: the call's budget, or None for `default_max_new_tokens` (the config's).

  Raises:
    ValueError naming the bad value and what is valid.
  """
  if isinstance(prompts, np.ndarray):
    prompts = prompts.tolist()
  if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not prompts:
    raise ValueError("prompts must be a non-empty list of token-id lists")
  if not isinstance(n, int) or n < 1:
    raise ValueError(f"n (samples per prompt) must be an int >= 1, got {n!r}")
  max_new = default_max_new_tokens if max_new_tokens is None else max_new_tokens
  if not isinstance(max_new, (int, np.integer)) or max_new < 1:
    raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new!r}")
  return prompts, int(max_new)


def checked_prompts(prompts, vocab_size: int) -> list[list[int]]:
  """A `generate` call's prompts as lists of ints, checked: none empty, every id in
  [0, vocab_size). Raises ValueError naming the prompt and its bad ids."""
  prompts = [list(map(int, p)) for p in prompts]
  for i, p in enumerate(prompts):
    if not p:
      raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
    bad = [t for t in p if not 0 <= t < vocab_size]
    if bad:
      raise ValueError(f"prompt {i} holds token ids {bad[:5]} outside [0, {vocab_size})")
  return prompts


def extra_stop_ids(stop_token_ids, num_prompts: int, vocab_size: int) -> list[list[int]]:
  """A `generate` call's per-prompt extra stop ids, checked: P lists of ids in [0, vocab_size)
  (P empty lists when `stop_token_ids` is None). Raises ValueError naming the bad list."""
  extra = ([list(s) for s in stop_token_ids] if stop_token_ids is not None
           else [[] for _ in range(num_prompts)])
  if len(extra) != num_prompts:
    raise ValueError(f"stop_token_ids has {len(extra)} lists for {num_prompts} prompts")
  for i, s in enumerate(extra):
    if any(not 0 <= t < vocab_size for t in s):
      raise ValueError(f"stop_token_ids[{i}] = {s} holds ids outside [0, {vocab_size})")
  return extra


class TeacherForcing(NamedTuple):
  """Inputs that reproduce a `SampleOutput`'s log-probs with a full forward pass.

  `botjax.sampling.sample_logprobs(model, out, temperature=τ)` does all of this and
  returns the [B, T] log-probs directly. By hand: with `logp_full, _ = token_logprobs(model,
  input_ids, positions, attention_mask, targets, temperature=config.logp_temperature,
  support=support)`,
  `jax.lax.dynamic_slice_in_dim(logp_full, start, T, axis=1)` equals `SampleOutput.logp`
  where `SampleOutput.mask` is True. (`start` is a leaf of this NamedTuple, so it is traced
  when a `TeacherForcing` enters a jitted function: a Python slice `[:, start:start + T]`
  works outside `jit` only.)

  Attributes:
    input_ids: [B, L] int32, prompt then completion (L = Lp + T).
    positions: [B, L] int32 positions (left padding at 0).
    attention_mask: [B, L] bool, True on prompt and generated tokens.
    targets: [B, L] int32, input_ids shifted left by one (last column: padding).
    start: Lp − 1, the column whose target is the first generated token.
    support: [B, L] float32 top-k / top-p support thresholds of the targets (−inf outside the
      completion), for `token_logprobs(..., support=)`; None when the sample recorded none.
  """
  input_ids: jax.Array
  positions: jax.Array
  attention_mask: jax.Array
  targets: jax.Array
  start: int
  support: jax.Array | None = None


@struct.dataclass
class SampleOutput:
  """Completions of one `Sampler.generate` call, B = P·n rows, prompt p's rows adjacent.

  Attributes:
    prompt_ids: [B, Lp] int32, left-padded prompt of each row.
    prompt_mask: [B, Lp] bool, True on prompt tokens.
    tokens: [B, T] int32 generated ids, `pad_token_id` after the end of a row.
    mask: [B, T] bool, True on generated tokens (the stop token included).
    logp: [B, T] float32 log-probabilities of `tokens` under softmax(logits / τ) (τ = 1 when
      greedy), or, when `support_logp` is set, under that softmax cut to each step's support
      and renormalised; 0 where `mask` is False.
    lengths: [B] int32 number of generated tokens, `mask.sum(-1)`.
    finish_reason: [B] int32, 0 = stop token (`FINISH_STOP`), 1 = length (`FINISH_LENGTH`).
    group_ids: [B] int32 prompt index of each row, in [0, num_groups).
    num_groups: P (static).
    support_logp: [B, T] float32 or None: each step's kept top-k / top-p support as a
      threshold on log_softmax(logits / τ) (tokens at or above it were kept; −inf: no cut),
      recorded when `SamplingConfig.logp_truncated`; None otherwise. The trainer's log-probs
      of these tokens are then taken under the same truncated distribution
      (`botjax.sampling.sample_logprobs` passes it on).
  """
  prompt_ids: jax.Array
  prompt_mask: jax.Array
  tokens: jax.Array
  mask: jax.Array
  logp: jax.Array
  lengths: jax.Array
  finish_reason: jax.Array
  group_ids: jax.Array
  num_groups: int = struct.field(pytree_node=False)
  support_logp: jax.Array | None = None

  def teacher_forcing(self) -> TeacherForcing:
    """Prompt + completion as one sequence, with targets for `botjax.models.token_logprobs`.

    Shapes as in `TeacherForcing` (L = Lp + T). For the completion log-probs under other
    parameters, `botjax.sampling.sample_logprobs(model, self, temperature=τ)`.
    """
    input_ids = jnp.concatenate([self.prompt_ids, self.tokens], axis=1)
    attention_mask = jnp.concatenate([self.prompt_mask, self.mask], axis=1)
    positions = positions_from_mask(attention_mask)
    targets = jnp.concatenate([input_ids[:, 1:], self.tokens[:, -1:]], axis=1)
    support = None
    if self.support_logp is not None:
      lp = self.prompt_ids.shape[1]
      support = jnp.pad(self.support_logp, ((0, 0), (lp - 1, 1)), constant_values=-jnp.inf)
    return TeacherForcing(input_ids, positions, attention_mask, targets,
                          self.prompt_ids.shape[1] - 1, support)
