"""A local step judge: a process reward model or a botjax decoder scoring each judged unit.

  LocalModelJudge(score_fn)              any callable texts -> probabilities that units are correct
  LocalModelJudge.from_model(model, ...) P("yes") / (P("yes") + P("no")) at a decoder's last token

Only `from_model` imports JAX (when it is called); the module itself is plain Python + numpy.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from botjax.rewards.judges import (JUDGE_SYSTEM_PROMPT, JudgeError, JudgeRequest, JudgeUnavailable,
                                   StepJudge, render_request)


def render_yes_no(req: JudgeRequest) -> str:
  """Default text of LocalModelJudge: the grading instructions, the unit, a yes/no question."""
  return (f"{JUDGE_SYSTEM_PROMPT}\n\n{render_request(req)}\n"
          f"Is the graded step correct? Answer yes or no:")


class LocalModelJudge(StepJudge):
  """A judge / process reward model run locally: p = score_fn(texts) ∈ [0, 1] per unit.

  verdict = +1 if p ≥ correct_at, −1 if p ≤ incorrect_at, else 0. `score_fn` receives one rendered
  text per unit (`render_yes_no` by default) and returns the probabilities that the units are
  correct; `from_model` builds it from a botjax decoder (P("yes") vs P("no") at the last token).

  Args:
    score_fn: list[str] -> sequence of floats in [0, 1].
    correct_at, incorrect_at: thresholds, 0 ≤ incorrect_at < correct_at ≤ 1.
    render: JudgeRequest -> str.
  """

  def __init__(self, score_fn: Callable[[list[str]], Sequence[float]], *,
               correct_at: float = 0.7, incorrect_at: float = 0.3,
               render: Callable[[JudgeRequest], str] | None = None,
               max_consecutive_failures: int = 32):
    super().__init__(max_consecutive_failures=max_consecutive_failures)
    if not 0.0 <= incorrect_at < correct_at <= 1.0:
      raise ValueError(f"need 0 <= incorrect_at < correct_at <= 1, got incorrect_at="
                       f"{incorrect_at}, correct_at={correct_at}")
    self.score_fn, self.correct_at, self.incorrect_at = score_fn, correct_at, incorrect_at
    self.render = render or render_yes_no

  def _verdicts(self, requests):
    probs = np.asarray(self.score_fn([self.render(r) for r in requests]), dtype=np.float64)
    if probs.shape != (len(requests),):
      raise JudgeError(f"score_fn returned shape {probs.shape} for {len(requests)} texts")
    out = []
    for p in probs:
      if not 0.0 <= p <= 1.0:  # also catches NaN
        out.append(JudgeError(f"score {p} outside [0, 1]"))
      else:
        out.append(1 if p >= self.correct_at else -1 if p <= self.incorrect_at else 0)
    return out

  def check_reachable(self) -> None:
    """Scores one short text; raises JudgeUnavailable unless a probability in [0, 1] comes back."""
    try:
      probs = np.asarray(self.score_fn(["Is 1 + 1 = 2 correct? Answer yes or no:"]), np.float64)
      if probs.shape != (1,) or not 0.0 <= probs[0] <= 1.0:
        raise JudgeError(f"score_fn returned {probs!r} for one text; expected one value in [0, 1]")
    except Exception as e:
      raise JudgeUnavailable(f"{self!r} cannot score: {type(e).__name__}: {e}") from e

  def __repr__(self):
    return (f"LocalModelJudge(score_fn={getattr(self.score_fn, '__name__', self.score_fn)!r}, "
            f"correct_at={self.correct_at}, incorrect_at={self.incorrect_at})")

  @classmethod
  def from_model(cls, model, encode: Callable[[str], Sequence[int]], *, yes_id: int, no_id: int,
                 pad_id: int = 0, bucket: int = 64, **kwargs) -> "LocalModelJudge":
    """A judge reading P(yes)/(P(yes)+P(no)) from a botjax decoder's next-token logits.

    The model is called as `model(input_ids, positions, attention_mask=mask)` -> (logits, _)
    (docs/CONTRACTS.md); texts are right-padded to a multiple of `bucket` tokens so shapes repeat.

    Args:
      model: a botjax.models.Decoder (or anything with that call signature).
      encode: text -> token ids (e.g. a tokenizer's `encode`).
      yes_id, no_id: token ids of the answers.
      pad_id: padding id.
      bucket: padding multiple.
      **kwargs: LocalModelJudge arguments (thresholds, render).
    """
    import jax  # the host accelerator; imported only when a model judge is built
    import jax.numpy as jnp

    from botjax.sampling.buckets import positions_from_mask

    def last_probs(m, ids, positions, mask, last):
      logits, _ = m(ids, positions, attention_mask=mask)
      rows = jnp.take_along_axis(logits, last[:, None, None], axis=1)[:, 0, :]
      pair = jnp.stack([rows[:, yes_id], rows[:, no_id]], axis=-1).astype(jnp.float32)
      return jax.nn.softmax(pair, axis=-1)[:, 0]

    from flax import nnx
    call = nnx.jit(last_probs) if isinstance(model, nnx.Module) else last_probs

    def score_fn(texts: list[str]) -> np.ndarray:
      encoded = [list(encode(t)) for t in texts]
      if any(not e for e in encoded):
        raise JudgeError("a judge prompt encoded to zero tokens")
      width = -(-max(len(e) for e in encoded) // bucket) * bucket
      ids = np.full((len(encoded), width), pad_id, np.int32)
      mask = np.zeros((len(encoded), width), bool)
      for i, e in enumerate(encoded):
        ids[i, :len(e)], mask[i, :len(e)] = e, True
      last = np.asarray([len(e) - 1 for e in encoded], np.int32)
      positions = positions_from_mask(mask)   # 0..len-1 on the real tokens of right-padded rows
      return np.asarray(jax.device_get(call(model, ids, positions, mask, last)))

    return cls(score_fn, **kwargs)
