"""The rollout-engine interface: prompts (token ids) in, a `SampleOutput` record out.

The trainer, the evaluations and a user's own loop call rollouts through this interface only;
which engine generates them is a name in a registry (`ENGINES`), chosen by a config field
(`RolloutConfig.engine`) or an experiment flag (`--engine=`):

  engine = make_engine("jax", model, sampling_config)      # botjax's lockstep one (default)
  engine = make_engine("slots", model, sampling_config)    # botjax's continuous batching
  out = engine.generate(prompt_ids, key, n=8)               # SampleOutput, B = P·n rows
  engine.set_params(new_params)                             # after every update
  engine.close()

An engine implements `RolloutEngine`: `generate`, `set_params`, `close`, its `config` (a
`SamplingConfig`) and `exact_logp`, which says whether its `SampleOutput.logp` are the
trainer's own teacher-forced log-probs (botjax's engines, to float tolerance) or another
program's (vLLM: other kernels and precision), in which case the trainer recomputes the PPO
ratio's old log-probs with its own forward pass.

New engines register a factory with `register_engine(name, factory)`; a factory is
`factory(model, sampling_config, *, mesh=None, **options) -> RolloutEngine`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
from flax import struct

from botjax.sampling.config import SamplingConfig

FINISH_STOP = 0      # the row emitted an EOS / stop token (kept as its last token)
FINISH_LENGTH = 1    # the row reached max_new_tokens


class TeacherForcing(NamedTuple):
  """Inputs that reproduce a `SampleOutput`'s log-probs with a full forward pass.

  `botjax.sampling.completion_logprobs(model, out, temperature=τ)` does all of this and
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
      (`botjax.sampling.completion_logprobs` passes it on).
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
    parameters, `botjax.sampling.completion_logprobs(model, self, temperature=τ)`.
    """
    input_ids = jnp.concatenate([self.prompt_ids, self.tokens], axis=1)
    attention_mask = jnp.concatenate([self.prompt_mask, self.mask], axis=1)
    positions = jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=1) - 1, 0)
    targets = jnp.concatenate([input_ids[:, 1:], self.tokens[:, -1:]], axis=1)
    support = None
    if self.support_logp is not None:
      lp = self.prompt_ids.shape[1]
      support = jnp.pad(self.support_logp, ((0, 0), (lp - 1, 1)), constant_values=-jnp.inf)
    return TeacherForcing(input_ids, positions, attention_mask, targets,
                          self.prompt_ids.shape[1] - 1, support)


@runtime_checkable
class RolloutEngine(Protocol):
  """What the trainer and the evaluations call to generate rollouts.

  Attributes:
    config: the `SamplingConfig` (decoding rule, stop ids, default budget).
    exact_logp: True when `SampleOutput.logp` equals the trainer's teacher-forced log-probs of
      the same tokens under the same parameters (to float tolerance); False for an engine that
      scores with other kernels (the trainer then recomputes them).
  """

  config: SamplingConfig
  exact_logp: bool

  def generate(self, prompts: Sequence[Sequence[int]], key: jax.Array, *, n: int = 1,
               max_new_tokens: int | None = None,
               stop_token_ids: Sequence[Sequence[int]] | None = None) -> SampleOutput:
    """n completions of each of P prompts (token-id lists), with the current parameters.

    Args:
      prompts: P token-id lists (no padding), each non-empty.
      key: a PRNG key; the same key, prompts and parameters give the same completions.
      n: completions per prompt (the group size G).
      max_new_tokens: this call's budget (default `config.max_new_tokens`).
      stop_token_ids: optional P lists of extra stop ids, one per prompt.

    Returns:
      `SampleOutput` with B = P·n rows, prompt p's rows adjacent (`group_ids = p`).
    """
    ...

  def set_params(self, params: Any) -> None:
    """Makes later `generate` calls use these parameters (an `nnx.State` or a module)."""
    ...

  def close(self) -> None:
    """Releases threads, processes and device memory the engine holds."""
    ...


EngineFactory = Callable[..., RolloutEngine]


def _jax_engine(model, sampling_config: SamplingConfig, *, mesh=None, **options) -> RolloutEngine:
  from botjax.sampling.sampler import Sampler   # local: sampler.py imports this module
  return Sampler(model, getattr(model, "config", None), sampling_config, mesh=mesh, **options)


ENGINES: dict[str, EngineFactory] = {"jax": _jax_engine}


def register_engine(name: str, factory: EngineFactory, *, replace: bool = False) -> None:
  """Adds an engine factory under `name` (`make_engine(name, ...)`, `--engine=name`).

  Raises:
    ValueError: `name` is taken (pass `replace=True` to replace it) or is not a str.
  """
  if not isinstance(name, str) or not name:
    raise ValueError(f"engine name must be a non-empty str, got {name!r}")
  if name in ENGINES and not replace:
    raise ValueError(f"engine {name!r} is already registered (replace=True replaces it)")
  ENGINES[name] = factory


def make_engine(name: str, model: Any, sampling_config: SamplingConfig, *, mesh=None,
                **options) -> RolloutEngine:
  """The engine registered as `name`, built for `model` and `sampling_config`.

  Raises:
    ValueError: unknown name (the message lists the registered ones).
  """
  if name not in ENGINES:
    raise ValueError(f"unknown rollout engine {name!r}; registered: {sorted(ENGINES)}")
  return ENGINES[name](model, sampling_config, mesh=mesh, **options)
