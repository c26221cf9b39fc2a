"""Metrics: pass@k, avg@n, maj@k, ABBA pairwise win rate, compile rate; the log-prob mismatch
between a rollout engine and the trainer.

The evaluation metrics are host-side NumPy (they run on evaluation results, not inside jit);
`logp_mismatch` is jax.numpy and jit-able (it runs on the batch, beside the update). Pure
functions.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Hashable, Sequence

import chex
import jax.numpy as jnp
import numpy as np

MISMATCH_RATIO_RANGE = (0.5, 2.0)
"""Token ratios π_train / π_engine outside this range count in `logp_mismatch`'s outside_frac."""

ROUND_ORDERS = ("AB", "BA", "BA", "AB")
"""Presentation order of the four pairwise-judge rounds (BoT-GRPO §4.1): A first in 1 and 4."""


def _pass_at_k_one(n: int, c: int, k: int) -> float:
  if n - c < k:
    return 1.0
  return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k(n, c, k):
  """Unbiased pass@k = 1 − C(n−c, k) / C(n, k), in the stable product form.

    pass@k = 1                                   if n − c < k
           = 1 − Π_{j=n−c+1}^{n} (1 − k/j)        otherwise

  Args:
    n: samples per problem (int or int array).
    c: correct samples per problem, 0 ≤ c ≤ n (int or int array).
    k: k ≤ n (int or int array); the three broadcast together.

  Returns:
    float for scalar inputs, else a float64 array of the broadcast shape (one value per
    problem; report the mean).

  References:
    Chen et al., Evaluating Large Language Models Trained on Code (HumanEval),
    https://arxiv.org/abs/2107.03374
  """
  n_a, c_a, k_a = np.broadcast_arrays(np.asarray(n), np.asarray(c), np.asarray(k))
  for name, x in (("n", n_a), ("c", c_a), ("k", k_a)):
    if x.size and not np.issubdtype(x.dtype, np.integer):
      if not np.all(np.equal(np.mod(x, 1), 0)):
        raise ValueError(f"{name} must hold integers, got {x!r}")
  n_a, c_a, k_a = n_a.astype(np.int64), c_a.astype(np.int64), k_a.astype(np.int64)
  if np.any(k_a < 1) or np.any(k_a > n_a):
    raise ValueError(f"need 1 <= k <= n, got n={n!r}, k={k!r}")
  if np.any(c_a < 0) or np.any(c_a > n_a):
    raise ValueError(f"need 0 <= c <= n, got n={n!r}, c={c!r}")
  out = np.empty(n_a.shape, np.float64)
  for idx in np.ndindex(n_a.shape):
    out[idx] = _pass_at_k_one(int(n_a[idx]), int(c_a[idx]), int(k_a[idx]))
  return float(out) if out.ndim == 0 else out


def avg_at_n(correct) -> float:
  """avg@n: the mean over problems of the fraction of a problem's n samples that are correct.

  Args:
    correct: [P, n] bool/0-1 array, or a list of per-problem sequences (n may vary).

  Returns:
    float in [0, 1].
  """
  rows = [np.asarray(r, dtype=np.float64).reshape(-1) for r in correct]
  if not rows or any(r.size == 0 for r in rows):
    raise ValueError("avg_at_n needs at least one problem and one sample per problem")
  return float(np.mean([r.mean() for r in rows]))


def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
  """The most frequent non-None answer; ties go to the answer that appears first.

  Args:
    answers: answers in sampling order; None marks an unparsed answer and never votes.

  Returns:
    The winning answer, or None when every answer is None.
  """
  votes = [a for a in answers if a is not None]
  if not votes:
    return None
  counts = collections.Counter(votes)
  best = max(counts.values())
  return next(a for a in votes if counts[a] == best)   # first occurrence among the tied


def maj_at_k(answers: Sequence[Sequence[Hashable | None]], references: Sequence[Hashable], k: int,
             *, equal: Callable[[Hashable, Hashable], bool] | None = None) -> float:
  """maj@k: fraction of problems whose majority answer over the first k samples is correct.

  Ties are broken deterministically by first occurrence (`majority_vote`); None answers do not
  vote, and a problem with no answer counts as wrong.

  Args:
    answers: per problem, its sampled answers in order (at least k each).
    references: per problem, the reference answer.
    k: number of samples that vote, ≥ 1.
    equal: answer comparison (default ==), e.g. a math-equivalence check.

  Returns:
    float in [0, 1].
  """
  if len(answers) != len(references) or not answers:
    raise ValueError(f"need one reference per problem and at least one problem, got "
                     f"{len(answers)} answer lists and {len(references)} references")
  if k < 1:
    raise ValueError(f"k must be >= 1, got {k!r}")
  eq = equal if equal is not None else (lambda a, b: a == b)
  hits = 0
  for i, (ans, ref) in enumerate(zip(answers, references)):
    if len(ans) < k:
      raise ValueError(f"problem {i} has {len(ans)} answers, fewer than k={k}")
    winner = majority_vote(list(ans)[:k])
    hits += winner is not None and bool(eq(winner, ref))
  return hits / len(answers)


def abba_outcomes(verdicts: Sequence[Sequence[str | None]], *, labels: str = "model"
                  ) -> np.ndarray:
  """Per-prompt outcome of model A over model B from four pairwise-judge rounds.

  Rounds show the two renderings in the orders AB, BA, BA, AB (`ROUND_ORDERS`). A prompt scores
  1 when A gets more votes than B (3–1, 4–0), 0 when B does (1–3, 0–4) and 0.5 for a tie (2–2).
  An unanswered round (None) votes for nobody: 2–1 with one unanswered round is a win, four
  unanswered rounds a tie.

  Args:
    verdicts: P prompts, each four answers "A", "B" or None (no answer).
    labels: "model" if a verdict names the model (the labels stay with the models and only
      the order changes), "position" if it names the screenshot shown first ("A") or second
      ("B") in that round.

  Returns:
    [P] float64 array of 1.0, 0.5 and 0.0.

  References:
    Yang et al., BoT-GRPO, arXiv 2610.09804, §4.1 (pairwise VLM judge).
  """
  if labels not in ("model", "position"):
    raise ValueError(f"labels must be 'model' or 'position', got {labels!r}")
  out = np.empty((len(verdicts),), np.float64)
  for i, rounds in enumerate(verdicts):
    rounds = [None if v is None else str(v).strip().upper() for v in rounds]
    if len(rounds) != 4 or any(v not in ("A", "B", None) for v in rounds):
      raise ValueError(f"prompt {i}: need four verdicts 'A', 'B' or None, got {list(rounds)!r}")
    if labels == "position":   # first-shown screenshot is model order[0] of that round
      rounds = [None if v is None else order[0] if v == "A" else order[1]
                for v, order in zip(rounds, ROUND_ORDERS)]
    a_votes, b_votes = rounds.count("A"), rounds.count("B")
    out[i] = 1.0 if a_votes > b_votes else 0.0 if a_votes < b_votes else 0.5
  return out


def abba_win_rate(verdicts: Sequence[Sequence[str | None]], *, labels: str = "model"
                  ) -> tuple[float, float]:
  """Pairwise win rate of model A over model B: the mean of `abba_outcomes` over prompts (a tie
  counts 0.5), and the tie rate, the fraction of tied prompts.

  Args:
    verdicts, labels: as in `abba_outcomes` (P ≥ 1 prompts).

  Returns:
    (win_rate, tie_rate) of model A, floats in [0, 1].

  References:
    Yang et al., BoT-GRPO, arXiv 2610.09804, §4.1 (pairwise VLM judge).
  """
  if not verdicts:
    raise ValueError("abba_win_rate needs at least one prompt")
  outcomes = abba_outcomes(verdicts, labels=labels)
  return float(outcomes.mean()), float(np.mean(outcomes == 0.5))


def compile_rate(results: Sequence[bool]) -> float:
  """Fraction of rollouts that transpile and render (BoT-GRPO §4.1).

  Args:
    results: one bool per held-out rollout.

  Returns:
    float in [0, 1].
  """
  arr = np.asarray(results)
  if arr.size == 0:
    raise ValueError("compile_rate needs at least one result")
  if arr.dtype != np.bool_ and not np.all(np.isin(arr, (0, 1))):
    raise ValueError(f"compile_rate needs booleans, got {results!r}")
  return float(np.mean(arr.astype(np.float64)))


def logp_mismatch(train_logp, engine_logp, mask) -> dict[str, jnp.ndarray]:
  """How far a rollout engine's log-probs are from the trainer's, over the completion tokens.

    Δ_{i,t} = lp_train − lp_engine,   r_{i,t} = exp(Δ_{i,t}) = π_train / π_engine
    mean_abs_diff = Σ m·|Δ| / Σ m        max_abs_diff = max over the mask of |Δ|
    outside_frac  = Σ m·[r < 0.5 or r > 2] / Σ m

  Both log-probs are of the same sampled tokens under the same parameters (the trainer's
  teacher-forced forward pass and the engine's own, e.g. vLLM's). An exact engine gives zeros;
  other kernels and precision give a small Δ (Yao et al. 2025 show it is not small for some
  tokens even with identical weights), and a stale engine (old weights) a large one. All three
  are 0 for an empty mask.

  Args:
    train_logp: [B, T] float the trainer's log-probs of the sampled tokens.
    engine_logp: [B, T] float the rollout engine's log-probs of the same tokens.
    mask: [B, T] bool completion tokens (padding may hold any value, NaN included).

  Returns:
    dict of float32 scalars: "mean_abs_diff", "max_abs_diff", "outside_frac" and "tokens"
    (Σ m, to combine batches: mean and share are per token).

  References:
    Yao et al., Your Efficient RL Framework Secretly Brings You Off-Policy RL Training (2025),
      https://fengyao.notion.site/off-policy-rl
  """
  a = jnp.asarray(train_logp, jnp.float32)
  b = jnp.asarray(engine_logp, jnp.float32)
  chex.assert_rank(a, 2)
  chex.assert_equal_shape([a, b])
  m = jnp.asarray(mask, jnp.bool_)
  if m.shape != a.shape:
    raise ValueError(f"mask has shape {m.shape}, expected {a.shape}")
  delta = jnp.where(m, a, 0.0) - jnp.where(m, b, 0.0)
  abs_delta = jnp.abs(delta)
  lo, hi = MISMATCH_RATIO_RANGE
  # r outside [lo, hi] ⇔ Δ outside [log lo, log hi]: the log form cannot overflow.
  outside = m & ((delta < math.log(lo)) | (delta > math.log(hi)))
  tokens = jnp.sum(m, dtype=jnp.float32)
  n = jnp.maximum(tokens, 1.0)
  return {
      "mean_abs_diff": jnp.sum(abs_delta) / n,
      "max_abs_diff": jnp.max(abs_delta, initial=0.0),
      "outside_frac": jnp.sum(outside, dtype=jnp.float32) / n,
      "tokens": tokens,
  }


__all__ = ["ROUND_ORDERS", "pass_at_k", "avg_at_n", "majority_vote", "maj_at_k",
           "abba_outcomes", "abba_win_rate", "compile_rate", "logp_mismatch",
           "MISMATCH_RATIO_RANGE"]
