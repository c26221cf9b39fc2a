"""The rollout-engine interface: prompts (token ids) in, a `SampleOutput` record out.

The trainer, the evaluations and a user's own loop call rollouts through this interface only;
which engine generates them is a name in a registry (`ENGINES`), chosen by a config field
(`RolloutConfig.engine`) or an experiment flag (`--engine=`):

  engine = make_engine("auto", model, sampling_config)     # the faster of the two below here
  engine = make_engine("jax", model, sampling_config)      # botjax's lockstep one
  engine = make_engine("slots", model, sampling_config)    # botjax's continuous batching
  engine = make_engine("vllm", model, sampling_config)     # vLLM (botjax.sampling.vllm)
  out = engine.generate(prompt_ids, key, n=8)               # SampleOutput, B = P·n rows
  engine.set_params(new_params)                             # after every update
  engine.close()

An engine implements `RolloutEngine`: `generate`, `set_params`, `close`, its `config` (a
`SamplingConfig`) and `exact_logp`, which says whether its `SampleOutput.logp` are the
trainer's own teacher-forced log-probs (botjax's engines, to float tolerance) or another
program's (vLLM: other kernels and precision), in which case the trainer recomputes the PPO
ratio's old log-probs with its own forward pass.

"auto" (`RolloutConfig.engine`'s default) names one of botjax's two engines by where it runs
(`auto_engine`): the slot engine where it was measured faster (one device of a small CPU host,
one process, budgets of at most 64 or at least 256 tokens), the lockstep sampler elsewhere (GPU,
TPU, meshes, budgets in between). The trainer resolves it once per run and saves the engine it
chose; a resumed run keeps it.

New engines register a factory with `register_engine(name, factory)`; a factory is
`factory(model, sampling_config, *, mesh=None, **options) -> RolloutEngine`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import jax

from botjax import xla_cpu
from botjax.sampling.config import SamplingConfig
from botjax.sampling.output import SampleOutput

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
  from botjax.sampling.sampler import Sampler   # local: an engine is built when named
  return Sampler(model, getattr(model, "config", None), sampling_config, mesh=mesh, **options)


def _slots_engine(model, sampling_config: SamplingConfig, *, mesh=None,
                  **options) -> RolloutEngine:
  from botjax.sampling.slots import _slots_engine as factory   # local, as for "jax"
  return factory(model, sampling_config, mesh=mesh, **options)


def _vllm_engine(model, sampling_config: SamplingConfig, *, mesh=None,
                 **options) -> RolloutEngine:
  from botjax.sampling.vllm import VLLMEngine   # local: vLLM is an optional extra
  return VLLMEngine(model, sampling_config, mesh=mesh, **options)


AUTO = "auto"


def auto_engine(max_new_tokens: int, where: Any = None) -> str:
  """The engine that "auto" names: "slots" where `botjax.xla_cpu.prefers_slots` (one device of
  a small CPU host, one process, budgets <= `xla_cpu.SLOTS_MAX_SHORT_NEW_TOKENS` or >=
  `xla_cpu.SLOTS_MIN_NEW_TOKENS`), else "jax".

  Args:
    max_new_tokens: the generation budget.
    where: the model, its parameters or the mesh the engine runs on (None: the default device).
  """
  return "slots" if xla_cpu.prefers_slots(max_new_tokens, where) else "jax"


def _auto_engine(model, sampling_config: SamplingConfig, *, mesh=None,
                 **options) -> RolloutEngine:
  from flax import nnx   # local, as the factories'
  where = (mesh if mesh is not None else nnx.state(model) if isinstance(model, nnx.Module)
           else model[1] if isinstance(model, tuple) else None)
  name = auto_engine(sampling_config.max_new_tokens, where)
  return ENGINES[name](model, sampling_config, mesh=mesh, **options)


ENGINES: dict[str, EngineFactory] = {AUTO: _auto_engine, "jax": _jax_engine,
                                      "slots": _slots_engine, "vllm": _vllm_engine}


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
