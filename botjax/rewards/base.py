"""Common types of the host-side reward layer: results, the RewardFn protocol, span/step mapping.

A reward function is host Python (no jax):

  fn(prompts: list[str], completions: list[str], metadata: list[dict]) -> list[RewardResult]

Each function declares what its results carry in a `RewardSpec` (its `spec` attribute): which
signals (the sequence reward, token spans, steps), which component is the verifier (correctness)
signal, and whether the global and local parts already carry the BoT-GRPO weights. A function
without a `spec` is a plain sequence reward (`reward_spec`). Per-item functions
`fn(prompt, completion, metadata) -> RewardResult | float` are adapted with `batched`. Character spans are mapped onto tokens through the sampler's per-token character offsets
(relative to the completion string): a token belongs to a span when its FIRST character does.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

Span = tuple[int, int, float]  # (char_start, char_end, value), half-open [start, end)


class RewardUnavailable(RuntimeError):
  """A reward service (e.g. a step judge) is gone for good.

  The one exception `RewardPool` lets through: training on fallback rewards alone would silently
  learn from no signal.
  """


@dataclasses.dataclass(frozen=True)
class RewardResult:
  """The score of one completion.

  Attributes:
    reward: the global (sequence) reward G_k.
    components: named parts of the reward, for logging (e.g. {"answer": 1.0, "format": 0.2}).
    token_spans: (char_start, char_end, value) triples; every token whose first character lies in
      [char_start, char_end) receives `value`; overlapping spans add (see `spans_to_token_values`).
    steps: (char_start, char_end, score) per reasoning step, in order, or None when the function
      has no step structure; consumed by step-level recipes (PURE, VeriGate, process GRPO).
    failed: True when the score is a fallback (exception, timeout, non-finite value, dead judge).
    error: a one-line description of the failure, or None.
    infra_failure: True when the row could not be scored for a reason that is not the model's
      fault (a worker timeout or crash, a browser crash, an unreachable judge): the trainer
      keeps such a row out of the loss and counts it (`rollouts/infra_failures`) instead of
      training on its fallback score. The model's own failures (compile errors, blank output,
      wrong answers) are scored and keep this False.
  """
  reward: float
  components: dict[str, float] = dataclasses.field(default_factory=dict)
  token_spans: list[Span] = dataclasses.field(default_factory=list)
  steps: list[Span] | None = None
  failed: bool = False
  error: str | None = None
  infra_failure: bool = False

  def is_finite(self) -> bool:
    """True when the reward, every component, span value and step score is a finite number."""
    try:
      values = [self.reward, *self.components.values(), *(v for _, _, v in self.token_spans)]
      if self.steps is not None:
        values.extend(s for _, _, s in self.steps)
      return all(math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):  # a non-number, or a span that is not a triple
      return False


class Signal(str, enum.Enum):
  """A signal a reward function's results carry."""
  SEQUENCE = "sequence"   # RewardResult.reward, the global reward G_k (always present)
  TOKEN = "token"         # RewardResult.token_spans, the local term S_t of BoT-GRPO eq. 4
  STEP = "step"           # RewardResult.steps, for PURE / VeriGate / process GRPO


@dataclasses.dataclass(frozen=True)
class RewardSpec:
  """What a reward function gives, declared once (its `spec` attribute) and read by the trainer.

  Attributes:
    signals: the signals its results fill, a set of `Signal` (or their names); SEQUENCE is always
      included. A result carrying token spans or steps that its spec does not declare is an error
      (`check_results`).
    verifier: the component holding the correctness verdict (> 0 = correct), e.g. "answer"; the
      trainer passes it as the verifier signal (VeriGate, BPPO) and DAPO dynamic sampling filters
      groups on it (DAPO, arXiv 2503.14476, §3.2 eq. 11: on accuracy). None: no verifier, the
      sequence reward stands in for it.
    weighted: the sequence reward already holds w_g·(its correctness term) and the token-span
      values already hold w_s (`MathReward`, BoT-GRPO arXiv 2610.09804 eq. 8; `ReactReward`, eq.
      6): a token-level recipe must not weigh them again (`algorithms.recipe_for_reward` sets its
      w_global = w_local = 1).

  Example:
    RewardSpec({"sequence", "token"}, verifier="answer", weighted=True)
  """
  signals: frozenset = frozenset({Signal.SEQUENCE})
  verifier: str | None = None
  weighted: bool = False

  def __post_init__(self):
    raw = [self.signals] if isinstance(self.signals, (str, Signal)) else list(self.signals)
    valid = ", ".join(s.value for s in Signal)
    signals = set()
    for s in raw:
      try:
        signals.add(Signal(s))
      except ValueError:
        raise ValueError(f"unknown reward signal {s!r}; valid: {valid}") from None
    signals.add(Signal.SEQUENCE)
    object.__setattr__(self, "signals", frozenset(signals))
    if self.verifier is not None and not (isinstance(self.verifier, str) and self.verifier):
      raise ValueError(f"verifier must be a component name or None, got {self.verifier!r}")
    if not isinstance(self.weighted, bool):
      raise TypeError(f"weighted must be a bool, got {self.weighted!r}")

  @property
  def token_spans(self) -> bool:
    """The results carry token spans (a token-level local signal)."""
    return Signal.TOKEN in self.signals

  @property
  def steps(self) -> bool:
    """The results carry step scores."""
    return Signal.STEP in self.signals

  def check_results(self, results: Sequence[RewardResult], fn: Any = None) -> None:
    """Raises ValueError when results carry a signal the spec does not declare, or lack the
    verifier component (failed rows excepted)."""
    who = f"reward function {fn!r}" if fn is not None else "the reward function"
    for i, r in enumerate(results):
      if r.token_spans and not self.token_spans:
        raise ValueError(f"{who} returned token_spans (row {i}) but its spec declares signals "
                         f"{sorted(s.value for s in self.signals)}; declare them, e.g. "
                         f"`spec = RewardSpec({{'sequence', 'token'}})`")
      if r.steps and not self.steps:
        raise ValueError(f"{who} returned steps (row {i}) but its spec declares signals "
                         f"{sorted(s.value for s in self.signals)}; declare them, e.g. "
                         f"`spec = RewardSpec({{'sequence', 'step'}})`")
      if self.verifier is not None and not r.failed and self.verifier not in r.components:
        raise ValueError(f"{who} declares verifier {self.verifier!r} but row {i} has no such "
                         f"component (components: {sorted(r.components)})")

  def verifier_values(self, results: Sequence[RewardResult]) -> np.ndarray | None:
    """float32[B]: 1 where the verifier component is > 0, else 0 (failed rows 0); None without a
    verifier."""
    if self.verifier is None:
      return None
    return np.asarray([float(float(r.components.get(self.verifier, 0.0)) > 0) for r in results],
                      np.float32)


PLAIN = RewardSpec()   # a sequence reward, unweighted, no verifier


def reward_spec(fn: Any) -> RewardSpec:
  """The `RewardSpec` a reward function declares (its `spec` attribute), or the plain sequence
  spec for a function without one.

  Raises:
    TypeError: if `fn.spec` is something other than a RewardSpec.
  """
  spec = getattr(fn, "spec", None)
  if spec is None:
    return PLAIN
  if not isinstance(spec, RewardSpec):
    raise TypeError(f"{fn!r}.spec must be a botjax.rewards.RewardSpec, got "
                    f"{type(spec).__name__}: {spec!r}")
  return spec


@runtime_checkable
class RewardFn(Protocol):
  """Batch reward protocol: one RewardResult per (prompt, completion, metadata) triple.

  `spec` declares what the results carry (see `RewardSpec`); a callable without it is read as a
  plain sequence reward (`reward_spec`).
  """

  spec: RewardSpec

  def __call__(self, prompts: Sequence[str], completions: Sequence[str],
               metadata: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
    ...


ItemRewardFn = Callable[[str, str, Mapping[str, Any]], "RewardResult | float"]


def as_result(value: RewardResult | float | int) -> RewardResult:
  """Wraps a bare number as RewardResult(reward=value); passes a RewardResult through.

  Raises:
    TypeError: for anything else (a string, None, an array with more than one element).
  """
  if isinstance(value, RewardResult):
    return value
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
    raise TypeError(f"a reward function must return a RewardResult or a number, got "
                    f"{type(value).__name__}: {value!r}")
  return RewardResult(reward=float(value))


class _Batched:
  """RewardFn built from a per-item function (see `batched`)."""

  def __init__(self, item_fn: ItemRewardFn, name: str | None = None,
               spec: RewardSpec | None = None):
    self.item_fn = item_fn
    self.__name__ = name or getattr(item_fn, "__name__", type(item_fn).__name__)
    self.spec = spec if spec is not None else reward_spec(item_fn)
    if not isinstance(self.spec, RewardSpec):
      raise TypeError(f"spec must be a RewardSpec, got {spec!r}")

  def __call__(self, prompts, completions, metadata):
    check_batch(prompts, completions, metadata)
    return [as_result(self.item_fn(p, c, m)) for p, c, m in zip(prompts, completions, metadata)]

  def __repr__(self):
    return f"batched({self.__name__})"


def batched(item_fn: ItemRewardFn, *, name: str | None = None,
            spec: RewardSpec | None = None) -> RewardFn:
  """Adapts `item_fn(prompt, completion, metadata) -> RewardResult | float` to a RewardFn.

  Args:
    item_fn: the per-item function.
    name: its name in logs (default: the function's).
    spec: what its results carry (default: `item_fn.spec`, else a plain sequence reward).
  """
  if not callable(item_fn):
    raise TypeError(f"batched() needs a callable, got {item_fn!r}")
  return _Batched(item_fn, name, spec)


def check_batch(prompts: Sequence[str], completions: Sequence[str],
                metadata: Sequence[Mapping[str, Any]]) -> None:
  """Raises ValueError unless the three batch lists have the same length."""
  if not len(prompts) == len(completions) == len(metadata):
    raise ValueError(f"prompts, completions and metadata must have the same length, got "
                     f"{len(prompts)}, {len(completions)} and {len(metadata)}")


def call_reward_fn(fn: RewardFn, prompts: Sequence[str], completions: Sequence[str],
                   metadata: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
  """Calls a RewardFn and checks its answer: one RewardResult (or number) per item.

  Raises:
    ValueError: if the batch lists differ in length or the function returns the wrong count.
    TypeError: if an element is neither a RewardResult nor a number.
  """
  check_batch(prompts, completions, metadata)
  out = fn(list(prompts), list(completions), list(metadata))
  if out is None or len(out) != len(completions):
    got = "None" if out is None else f"{len(out)} results"
    raise ValueError(f"reward function {fn!r} returned {got} for a batch of {len(completions)}")
  return [as_result(r) for r in out]


def rewards_array(results: Sequence[RewardResult]) -> np.ndarray:
  """The sequence rewards of a batch as float32[B]."""
  return np.asarray([r.reward for r in results], dtype=np.float32).reshape(len(results))


def _token_starts(offsets, name: str = "offsets") -> np.ndarray:
  """First-character offsets int64[n] of a (start, end)-per-token sequence or [n, 2] array."""
  arr = np.asarray(offsets, dtype=np.int64)
  if arr.size == 0:
    return np.zeros((0,), np.int64)
  if arr.ndim != 2 or arr.shape[1] != 2:
    raise ValueError(f"{name} must be a list of (start, end) pairs or an [n, 2] array, got shape "
                     f"{arr.shape}")
  return arr[:, 0]


def _check_spans(spans: Sequence[Span], what: str) -> None:
  for i, span in enumerate(spans):
    if len(span) != 3:
      raise ValueError(f"{what}[{i}] must be (char_start, char_end, value), got {span!r}")
    start, end, value = span
    if not (0 <= int(start) <= int(end)):
      raise ValueError(f"{what}[{i}] = {span!r} needs 0 <= char_start <= char_end")
    if not math.isfinite(float(value)):
      raise ValueError(f"{what}[{i}] = {span!r} has a non-finite value")


def spans_to_token_values(spans: Sequence[Span], offsets, T: int) -> np.ndarray:
  """Maps character spans onto tokens: v[t] = Σ_{(a, b, x) ∈ spans : a ≤ start(t) < b} x.

  A token gets the value of every span containing its first character; overlapping spans add;
  tokens past `len(offsets)` (padding) get 0; offsets past T are ignored.

  Args:
    spans: (char_start, char_end, value) triples, half-open, relative to the completion string.
    offsets: per-token (start, end) character offsets relative to the completion string, as the
      sampler (or a fast tokenizer with return_offsets_mapping=True) returns them; [n, 2].
    T: the padded number of completion tokens.

  Returns:
    float32[T] token values.
  """
  if T < 0:
    raise ValueError(f"T must be >= 0, got {T}")
  _check_spans(spans, "spans")
  starts = _token_starts(offsets)[:T]
  values = np.zeros((T,), np.float32)
  n = starts.shape[0]
  for start, end, value in spans:
    inside = (starts >= int(start)) & (starts < int(end))
    values[:n] += np.where(inside, np.float32(value), np.float32(0.0))
  return values


def _token_step_row(steps: Sequence[Span], starts: np.ndarray) -> np.ndarray:
  """Step index per token: the last step starting at or before the token's first character
  (so the step holding it, or, in a gap or after the last step, the step before); -1 before the
  first step."""
  step_starts = np.asarray([int(a) for a, _, _ in steps], np.int64)
  if np.any(np.diff(step_starts) < 0):
    raise ValueError(f"steps must be in text order, got starts {step_starts.tolist()}")
  return (np.searchsorted(step_starts, starts, side="right") - 1).astype(np.int32)


def steps_to_arrays(steps_per_row: Sequence[Sequence[Span] | None],
                    offsets_per_row: Sequence, T: int, S_max: int, *,
                    on_overflow: str = "error") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Packs ragged per-row step scores into the padded step layout of the algorithms.

  step_rewards[b, s] = score of step s of row b;  step_mask[b, s] = s < S_b;
  token_step[b, t] = the step whose character span holds token t's first character; a token in a
  gap between steps belongs to the step before it, and a token after the end of the last step to
  the last step (every token after a step boundary belongs to that step, as in PURE's step credit,
  arXiv 2504.15275); tokens before the first step and padding get -1. A row with steps None or [] has no steps.

  Args:
    steps_per_row: B lists of (char_start, char_end, score), in text order, or None.
    offsets_per_row: B per-token (start, end) character offsets (as in `spans_to_token_values`).
    T: padded number of completion tokens.
    S_max: padded number of steps.
    on_overflow: what a row with more than S_max steps does: "error" raises ValueError;
      "truncate" keeps the first S_max steps and gives the tokens of the rest to the last kept step.

  Returns:
    (step_rewards float32[B, S_max], step_mask bool[B, S_max], token_step int32[B, T]).
  """
  if on_overflow not in ("error", "truncate"):
    raise ValueError(f"on_overflow must be 'error' or 'truncate', got {on_overflow!r}")
  if S_max < 1 or T < 0:
    raise ValueError(f"need S_max >= 1 and T >= 0, got S_max={S_max}, T={T}")
  if len(steps_per_row) != len(offsets_per_row):
    raise ValueError(f"steps_per_row has {len(steps_per_row)} rows but offsets_per_row has "
                     f"{len(offsets_per_row)}")
  B = len(steps_per_row)
  step_rewards = np.zeros((B, S_max), np.float32)
  step_mask = np.zeros((B, S_max), bool)
  token_step = np.full((B, T), -1, np.int32)
  for b, (steps, offsets) in enumerate(zip(steps_per_row, offsets_per_row)):
    steps = list(steps or [])
    _check_spans(steps, f"steps_per_row[{b}]")
    if len(steps) > S_max and on_overflow == "error":
      raise ValueError(f"row {b} has {len(steps)} steps but S_max={S_max}; raise S_max or pass "
                       f"on_overflow='truncate'")
    starts = _token_starts(offsets, f"offsets_per_row[{b}]")[:T]
    row = _token_step_row(steps, starts)
    kept = min(len(steps), S_max)
    row = np.minimum(row, kept - 1) if kept else row
    token_step[b, :row.shape[0]] = row
    step_rewards[b, :kept] = [float(s) for _, _, s in steps[:kept]]
    step_mask[b, :kept] = True
  return step_rewards, step_mask, token_step


def combine_results(results: Mapping[str, RewardResult],
                    weights: Mapping[str, float] | None = None) -> RewardResult:
  """Weighted sum of several functions' results for one completion.

  reward = Σ_i w_i·r_i; components gain "<name>" = r_i and "<name>/<component>" (unweighted);
  token spans are concatenated with values scaled by w_i; steps (unscaled verdicts/scores) come
  from the one function that returns them; failed = any failed, infra_failure = any
  infra_failure, errors joined.

  Raises:
    ValueError: if more than one function returns steps for the same completion.
  """
  weights = dict(weights or {})
  reward = 0.0
  components: dict[str, float] = {}
  spans: list[Span] = []
  steps, steps_from, errors, infra = None, None, [], False
  for name, res in results.items():
    w = float(weights.get(name, 1.0))
    reward += w * float(res.reward)
    components[name] = float(res.reward)
    for key, val in res.components.items():
      components[f"{name}/{key}"] = float(val)
    spans.extend((a, b, w * float(v)) for a, b, v in res.token_spans)
    if res.steps is not None:
      if steps is not None:
        raise ValueError(f"both {steps_from!r} and {name!r} return steps; combine keeps the steps "
                         f"of one function only")
      steps, steps_from = list(res.steps), name
    if res.failed:
      errors.append(f"{name}: {res.error or 'failed'}")
    infra = infra or res.infra_failure
  return RewardResult(reward=reward, components=components, token_spans=spans, steps=steps,
                      failed=bool(errors), error="; ".join(errors) or None, infra_failure=infra)


def combined_spec(specs: Mapping[str, RewardSpec]) -> RewardSpec:
  """The spec of a weighted sum of named functions (`combine`).

  signals: the union; verifier: "<name>/<component>" of the one function that declares one;
  weighted: True when any part is weighted (its weights are inside the sum, so the sum must not
  be weighted again; the other parts weigh what `combine`'s weights say).

  Raises:
    ValueError: if more than one function declares a verifier (pass `spec=` to `combine`).
  """
  verifiers = [f"{name}/{s.verifier}" for name, s in specs.items() if s.verifier is not None]
  if len(verifiers) > 1:
    raise ValueError(f"several combined functions declare a verifier ({', '.join(verifiers)}); "
                     f"pass combine(..., spec=RewardSpec(..., verifier=<one of them>))")
  return RewardSpec(frozenset().union(*(s.signals for s in specs.values())),
                    verifier=verifiers[0] if verifiers else None,
                    weighted=any(s.weighted for s in specs.values()))


class CombinedReward:
  """RewardFn summing named reward functions with weights (see `combine_results`); its spec is
  `combined_spec` of the parts' unless given."""

  def __init__(self, fns: Mapping[str, RewardFn], weights: Mapping[str, float] | None = None,
               spec: RewardSpec | None = None):
    if not fns:
      raise ValueError("combine() needs at least one reward function")
    unknown = set(weights or {}) - set(fns)
    if unknown:
      raise ValueError(f"weights name unknown functions {sorted(unknown)}; known: {sorted(fns)}")
    for name, w in (weights or {}).items():
      if not math.isfinite(float(w)):
        raise ValueError(f"weight of {name!r} must be finite, got {w}")
    self.fns = dict(fns)
    self.weights = {name: float((weights or {}).get(name, 1.0)) for name in self.fns}
    if spec is not None and not isinstance(spec, RewardSpec):
      raise TypeError(f"spec must be a RewardSpec, got {spec!r}")
    self.spec = spec or combined_spec({name: reward_spec(fn) for name, fn in self.fns.items()})

  def __call__(self, prompts, completions, metadata):
    per_fn = {name: call_reward_fn(fn, prompts, completions, metadata)
              for name, fn in self.fns.items()}
    return [combine_results({name: per_fn[name][i] for name in self.fns}, self.weights)
            for i in range(len(completions))]

  def __repr__(self):
    return f"combine({self.weights})"


def combine(fns: Mapping[str, RewardFn], weights: Mapping[str, float] | None = None, *,
            spec: RewardSpec | None = None) -> CombinedReward:
  """RewardFn whose reward is Σ_i w_i·r_i over named functions (default weight 1).

  Args:
    fns: name -> RewardFn (adapt per-item functions with `batched`).
    weights: name -> weight; missing names weigh 1.0.
    spec: the sum's RewardSpec (default: `combined_spec` of the parts').

  Returns:
    A RewardFn; its components are namespaced "<name>" and "<name>/<component>".
  """
  return CombinedReward(fns, weights, spec)
