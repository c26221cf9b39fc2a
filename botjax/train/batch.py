"""From scored rollouts to the update's batch: advantages, teacher-forcing inputs, log-probs.

`build_batch(recipe, rollouts, ...)` is a function of its arguments only (no trainer, no state):
the trainer calls it once per step, a user's own loop calls it the same way, and
`RLTrainer.inspect_batch` calls it to show a batch without training on it.

  batch, info = build_batch(recipe, roll, num_groups=P + 1)               # no KL term
  batch, info = build_batch(recipe, roll, num_groups=P + 1, ref_logp=fn)  # KL: reference policy

Log-probs it does not have come from callables `fn(input_ids, positions, attention_mask,
completion_len) -> [B, T]` (numpy or jax; the trainer passes its compiled log-prob program bound
to a set of parameters):

  ref_logp  the reference policy's, for a recipe with a KL term (`Recipe.needs_ref_logp`).
  old_logp  the behaviour policy's, recomputed by the trainer's own forward pass. This is the
            one place where an engine's log-probs are replaced: the trainer passes it when its
            engine's `exact_logp` is False (an engine that scores with other kernels or
            precision, e.g. vLLM); otherwise the engine's `Rollouts.logp` are the PPO ratio's
            old log-probs as they are. The engine's own log-probs then travel in
            `RLBatch.behaviour_logp` (read by the truncated importance-sampling correction,
            `Recipe.tis_cap`), and the gap between the two is measured
            (`metrics.logp_mismatch`: the `mismatch/*` keys of the step's metrics). Under
            top-k / top-p such an engine's log-probs are truncated but its cut unknown: the
            trainer's `old_logp` then returns its own cut with the log-probs (see
            `build_batch`).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from botjax import algorithms, metrics
from botjax.sampling import positions_from_mask
from botjax.train.rollouts import PROMPT_TRIM_MULTIPLE, TRIM_MULTIPLE, Rollouts, trim_columns
from botjax.train.step import RLBatch

class BatchPreview(NamedTuple):
  """One step's data as `RLTrainer.inspect_batch` shows it: `rollouts` (texts, rewards, token
  rewards `local` [B, T]), `batch` (`RLBatch`: advantages [B, T], loss mask), `info` (the
  sampling and advantage metrics)."""
  rollouts: Rollouts
  batch: RLBatch
  info: dict


# (input_ids [B, L], positions [B, L], attention_mask [B, L], completion_len T) -> logp [B, T]
LogpFn = Callable[[np.ndarray, np.ndarray, np.ndarray, int], object]


@functools.partial(jax.jit, static_argnames=("recipe", "num_groups"))
def _advantages(rewards, mask, group_ids, local, step_rewards, step_mask, token_step, old_logp,
                verifier, *, recipe: algorithms.Recipe, num_groups: int):
  return algorithms.compute_advantages(
      recipe, rewards=rewards, mask=mask, group_ids=group_ids, num_groups=num_groups,
      local_rewards=local if recipe.granularity is algorithms.Granularity.TOKEN else None,
      step_rewards=step_rewards, step_mask=step_mask, token_step=token_step,
      old_logp=old_logp, verifier=verifier)


def build_batch(recipe: algorithms.Recipe, roll: Rollouts, *, num_groups: int,
                ref_logp: LogpFn | None = None,
                old_logp: LogpFn | None = None) -> tuple[RLBatch, dict]:
  """The update's batch of one step's rollouts: advantages and teacher-forcing inputs.

  Columns no row uses are trimmed first (`trim_columns`: completions to a multiple of
  `TRIM_MULTIPLE`, prompts of `PROMPT_TRIM_MULTIPLE`), so the batch has T' ≤ T completion
  columns. The advantages are `algorithms.compute_advantages` under `recipe` in one jitted call
  (DAPO overlong shaping, dynamic-sampling and BPPO loss masks, ReCo weights included).

  Args:
    recipe: the run's recipe (`botjax.train.config.recipe_for_run`).
    roll: the step's `Rollouts` (B rows; `group_ids` in [0, num_groups)).
    num_groups: groups of the advantages: P prompts + 1 for the rows lost to infrastructure
      failures (`RolloutCollector.collect` puts them in group P).
    ref_logp: the reference policy's log-probs (`LogpFn`); required when the recipe has a KL
      term, unused otherwise (zeros).
    old_logp: recomputes the behaviour log-probs (`LogpFn`) instead of taking `roll.logp` (an
      engine whose `exact_logp` is False); None takes them as they are. When given,
      `roll.logp` (the engine's) becomes the batch's `behaviour_logp`. It may return
      (logp, support) [B, T] each: log-probs under the trainer's own top-k / top-p cut and
      that cut (`UpdatePrograms.logprobs_own_cut`, for an engine that samples truncated but
      returns no cut: vLLM); the cut then replaces `roll.support` as the batch's `support`,
      so the update scores under it too.

  Returns:
    (`RLBatch` of device arrays: input_ids / positions / attention_mask [B, Lp' + T'],
     old_logp / ref_logp / advantages / loss_mask [B, T'], seq_weights [B], behaviour_logp
     [B, T'] when `old_logp` is given (else None);
     info: adv_mean, adv_std, adv_abs_max over the loss tokens, loss_token_fraction = loss
     tokens / scored tokens; with `old_logp` also the engine's gap from the trainer over the
     scored completion tokens (`metrics.logp_mismatch`): mismatch/mean_abs_diff,
     mismatch/max_abs_diff (|Δ log p|) and mismatch/outside_frac (the share of tokens whose
     ratio π_train / π_engine lies outside [0.5, 2])).

  Raises:
    ValueError: the recipe has a KL term and `ref_logp` is None.
  """
  if recipe.needs_ref_logp and ref_logp is None:
    raise ValueError(f"recipe {recipe.name!r} has kl_coef={recipe.kl_coef:g} > 0: pass ref_logp "
                     f"(the reference policy's log-probs), or set kl_coef=0")
  roll = trim_columns(roll, TRIM_MULTIPLE, PROMPT_TRIM_MULTIPLE)
  input_ids = np.concatenate([roll.prompt_ids, roll.tokens], axis=1).astype(np.int32)
  attn = np.concatenate([roll.prompt_mask, roll.mask], axis=1)
  positions = positions_from_mask(attn)
  T = roll.tokens.shape[1]
  behaviour = roll.logp
  support = roll.support
  engine_logp, gap = None, {}
  if old_logp is not None:
    old = old_logp(input_ids, positions, attn, T)
    if isinstance(old, tuple):      # (logp, support): the trainer's own top-k / top-p cut
      old, support = old
      support = np.where(roll.mask, np.asarray(support), -np.inf).astype(np.float32)
    behaviour = np.where(roll.mask, np.asarray(old), 0.0).astype(np.float32)
    engine_logp = np.where(roll.mask, roll.logp, 0.0).astype(np.float32)
    gap = {f"mismatch/{k}": float(v) for k, v in
           metrics.logp_mismatch(behaviour, engine_logp, roll.mask).items() if k != "tokens"}
  opt = lambda x: None if x is None else jnp.asarray(x)  # noqa: E731
  a = _advantages(
      jnp.asarray(roll.rewards), jnp.asarray(roll.mask), jnp.asarray(roll.group_ids),
      jnp.asarray(roll.local), opt(roll.step_rewards), opt(roll.step_mask),
      opt(roll.token_step), jnp.asarray(behaviour), opt(roll.verifier),
      recipe=recipe, num_groups=num_groups)
  ref = np.zeros((input_ids.shape[0], T), np.float32)
  if recipe.needs_ref_logp:
    ref = ref_logp(input_ids, positions, attn, T)
  batch = RLBatch(
      input_ids=jnp.asarray(input_ids), positions=jnp.asarray(positions),
      attention_mask=jnp.asarray(attn), old_logp=jnp.asarray(behaviour),
      ref_logp=jnp.asarray(ref), advantages=a.advantages, loss_mask=a.loss_mask,
      seq_weights=a.seq_weights, behaviour_logp=opt(engine_logp),
      support=None if support is None else jnp.asarray(support))
  lm = np.asarray(a.loss_mask)
  av = np.asarray(a.advantages)[lm]
  info = {
      "adv_mean": float(av.mean()) if av.size else 0.0,
      "adv_std": float(av.std()) if av.size else 0.0,
      "adv_abs_max": float(np.abs(av).max()) if av.size else 0.0,
      "loss_token_fraction": float(lm.sum() / max(roll.mask.sum(), 1)),
      **gap,
  }
  return batch, info
