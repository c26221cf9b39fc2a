"""Named recipes of the GRPO family: which advantage, which surrogate, which defaults.

A `Recipe` is a frozen, hashable dataclass, so it can be a static argument of `jax.jit`:

  recipe = get_recipe("bot_grpo")                        # or get_recipe("dapo", eps_high=0.3)
  check_reward_inputs(recipe, has_step_rewards=False, has_token_rewards=True)   # config time
  out = compute_advantages(recipe, rewards=r, mask=m, group_ids=g, num_groups=P,
                           local_rewards=s)              # Advantages(advantages, loss_mask, seq_weights)
  per_token, metrics = policy_loss(recipe, logp, old_logp, out.advantages, out.loss_mask,
                                   ref_logp=ref_logp, seq_weights=out.seq_weights)
  num, den = losses.aggregate(per_token, out.loss_mask, mode=recipe.agg_mode,
                              norm=recipe.agg_norm)      # sum over micro-batches, then divide

Every default in `RECIPES` is the paper's (or the reference code's) and cites its source;
choices the sources leave open are marked [INFERRED] (see ALGORITHMS.md).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from botjax import advantages as adv
from botjax import losses

Array = jax.Array


class Granularity(str, enum.Enum):
  """The reward granularity a recipe reads: sequence rewards only, step rewards, token rewards."""
  SEQUENCE = "sequence"
  STEP = "step"
  TOKEN = "token"


# The granularity each advantage estimator needs.
ADVANTAGE_GRANULARITY: dict[str, Granularity] = {
    "grpo": Granularity.SEQUENCE,          # adv.grpo (scale "group" | "batch" | "none")
    "rloo": Granularity.SEQUENCE,          # adv.rloo
    "reinforce_pp": Granularity.SEQUENCE,  # adv.reinforce_pp_baseline
    "bot_grpo": Granularity.TOKEN,         # adv.bot_token_rewards + adv.bot_grpo
    "process_grpo": Granularity.STEP,      # adv.process_grpo
    "pure": Granularity.STEP,              # adv.pure_grpo
    "verigate": Granularity.STEP,          # adv.verigate
}
SURROGATES = ("clip", "gspo", "gspo_token", "reco")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
  """One algorithm: advantage estimator, policy surrogate, aggregation and hyper-parameters.

  The field defaults are the GRPO backbone (DeepSeekMath); `RECIPES` sets each algorithm's own.
  """
  name: str
  granularity: Granularity = Granularity.SEQUENCE
  advantage: str = "grpo"                 # a key of ADVANTAGE_GRANULARITY
  surrogate: str = "clip"                 # "clip" | "gspo" | "gspo_token" | "reco"
  agg_mode: str = "seq_mean_token_mean"   # losses.AggMode value; GRPO paper eq. 3
  agg_norm: float | None = None           # L_norm of "seq_sum_norm" (Dr. GRPO)
  eps_low: float = 0.2                    # PPO clip; 0.2 is TRL / verl / tunix default
  eps_high: float = 0.2
  dual_clip: float | None = None          # verl uses 3.0 by default; the papers do not
  kl_coef: float = 0.04                   # β, DeepSeekMath §4.2
  kl_kind: str = "k3"                     # DeepSeekMath eq. 4
  adv_eps: float = 1e-6                   # ε of the std (verl / tunix 1e-6; BoT-GRPO 1e-6)
  grpo_scale: str = "group"               # "group" | "batch" | "none" (Dr. GRPO)
  grpo_ddof: int = 1                      # Bessel std, as verl / TRL / tunix
  w_global: float = 3.0                   # BoT-GRPO w_g (paper §4, AIME and React)
  w_local: float = 0.5                    # BoT-GRPO w_s
  dynamic_sampling: bool = False          # DAPO §3.2: drop groups with constant rewards
  max_resample_rounds: int = 0            # DAPO: sampling rounds to refill the batch (trainer)
  overlong_max_length: int | None = None  # DAPO eq. 13 L_max (None: no overlong penalty)
  overlong_cache_length: int | None = None  # DAPO eq. 13 L_cache
  overlong_penalty_factor: float = 1.0    # verl reward manager `penalty_factor`
  bppo_select: bool = False               # BPPO: shortest correct + incorrect, prefixes only
  bppo_prefix_fraction: float = 0.5       # [INFERRED] ALGORITHMS.md §8 suggestion
  bppo_min_prefix: int = 32               # [INFERRED] ALGORITHMS.md §8 suggestion
  correct_threshold: float = 0.5          # reward above which a completion counts as correct
                                          # (BPPO classes, VeriGate all-right/all-wrong gate)
  reco_max_weight: float = 5.0            # ReCo w_max (reproduction's value; paper: unknown)
  pure_temperature: float = 0.1           # PURE softmin temperature (authors' code)
  pure_outcome_coef: float = 1.0          # PURE verifiable_reward_coef (authors' code)

  def __post_init__(self):
    try:
      object.__setattr__(self, "granularity", Granularity(self.granularity))
    except ValueError:
      raise ValueError(f"recipe {self.name!r}: unknown granularity {self.granularity!r}; valid: "
                       f"{', '.join(g.value for g in Granularity)}") from None
    if self.advantage not in ADVANTAGE_GRANULARITY:
      raise ValueError(f"recipe {self.name!r}: unknown advantage {self.advantage!r}; valid: "
                       f"{', '.join(ADVANTAGE_GRANULARITY)}")
    need = ADVANTAGE_GRANULARITY[self.advantage]
    if self.granularity is not need:
      raise ValueError(f"recipe {self.name!r}: advantage {self.advantage!r} is {need.value}-level,"
                       f" so granularity must be {need.value!r}, got "
                       f"{self.granularity.value!r}")
    if self.surrogate not in SURROGATES:
      raise ValueError(f"recipe {self.name!r}: unknown surrogate {self.surrogate!r}; valid: "
                       f"{', '.join(SURROGATES)}")
    object.__setattr__(self, "agg_mode", losses.agg_mode(self.agg_mode).value)
    if self.agg_mode == "seq_sum_norm":
      if self.agg_norm is None or not self.agg_norm > 0:
        raise ValueError(f"recipe {self.name!r}: agg_mode 'seq_sum_norm' needs agg_norm > 0 "
                         f"(e.g. the maximum completion length), got {self.agg_norm!r}")
    elif self.agg_norm is not None:
      raise ValueError(f"recipe {self.name!r}: agg_norm is only used by agg_mode "
                       f"'seq_sum_norm', got agg_norm={self.agg_norm!r} with {self.agg_mode!r}")
    if self.kl_kind not in losses.KL_KINDS:
      raise ValueError(f"recipe {self.name!r}: unknown kl_kind {self.kl_kind!r}; valid: "
                       f"{', '.join(losses.KL_KINDS)}")
    if self.grpo_scale not in adv.GRPO_SCALES:
      raise ValueError(f"recipe {self.name!r}: unknown grpo_scale {self.grpo_scale!r}; valid: "
                       f"{', '.join(adv.GRPO_SCALES)}")
    for field in ("eps_low", "eps_high", "kl_coef", "adv_eps"):
      if not getattr(self, field) >= 0:
        raise ValueError(f"recipe {self.name!r}: {field} must be >= 0, got "
                         f"{getattr(self, field)!r}")
    if self.dual_clip is not None and not self.dual_clip > 1:
      raise ValueError(f"recipe {self.name!r}: dual_clip must be > 1 or None, got "
                       f"{self.dual_clip!r}")
    if (self.overlong_max_length is None) != (self.overlong_cache_length is None):
      raise ValueError(f"recipe {self.name!r}: set both overlong_max_length and "
                       f"overlong_cache_length, or neither; got {self.overlong_max_length!r}, "
                       f"{self.overlong_cache_length!r}")
    if self.overlong_cache_length is not None and not (
        0 < self.overlong_cache_length <= self.overlong_max_length):
      raise ValueError(f"recipe {self.name!r}: need 0 < overlong_cache_length <= "
                       f"overlong_max_length, got {self.overlong_cache_length!r}, "
                       f"{self.overlong_max_length!r}")
    if not 0 < self.bppo_prefix_fraction <= 1:
      raise ValueError(f"recipe {self.name!r}: bppo_prefix_fraction must be in (0, 1], got "
                       f"{self.bppo_prefix_fraction!r}")
    if not self.pure_temperature > 0:
      raise ValueError(f"recipe {self.name!r}: pure_temperature must be > 0, got "
                       f"{self.pure_temperature!r}")
    if not self.reco_max_weight > 0:
      raise ValueError(f"recipe {self.name!r}: reco_max_weight must be > 0, got "
                       f"{self.reco_max_weight!r}")
    if self.max_resample_rounds < 0:
      raise ValueError(f"recipe {self.name!r}: max_resample_rounds must be >= 0, got "
                       f"{self.max_resample_rounds!r}")

  @property
  def needs_old_logp(self) -> bool:
    """`compute_advantages` needs `old_logp` (ReCo response weights)."""
    return self.surrogate == "reco"

  @property
  def needs_ref_logp(self) -> bool:
    """`policy_loss` adds a KL term when given `ref_logp`."""
    return self.kl_coef > 0


RECIPES: dict[str, Recipe] = {
    # DeepSeekMath (arXiv 2402.03300) §4.1–4.2: group z-score (Bessel std as verl/TRL/tunix,
    # ε 1e-6), clip 0.2, seq-mean-token-mean (eq. 3), in-loss k3 KL with β = 0.04.
    "grpo": Recipe(name="grpo"),
    # Dr. GRPO (arXiv 2503.20783, understand-r1-zero code): no std, Σ_t ℓ / L_norm averaged over
    # rows, β = 0. L_norm = generate_max_length of the authors' script (3000): set agg_norm to
    # your own maximum completion length.
    "dr_grpo": Recipe(name="dr_grpo", grpo_scale="none", agg_mode="seq_sum_norm",
                      agg_norm=3000.0, kl_coef=0.0),
    # DAPO (arXiv 2503.14476) §3–4.1: clip-higher 0.2 / 0.28, token-mean, no KL, dynamic
    # sampling (verl example max_num_gen_batches = 10), soft overlong punishment with
    # L_max = 20480, L_cache = 4096 (eq. 13): set these to your own generation budget.
    "dapo": Recipe(name="dapo", eps_high=0.28, agg_mode="token_mean", kl_coef=0.0,
                   dynamic_sampling=True, max_resample_rounds=10, overlong_max_length=20480,
                   overlong_cache_length=4096),
    # GSPO (arXiv 2507.18071) §4.1, §5.1: sequence ratio, ε 3e-4 / 4e-4, KL omitted,
    # seq-mean-token-mean (eq. 5).
    "gspo": Recipe(name="gspo", surrogate="gspo", eps_low=3e-4, eps_high=4e-4, kl_coef=0.0),
    # PURE (arXiv 2504.15275) on a GRPO backbone, as BoT-GRPO ports it: softmin T = 0.1 and
    # verifiable-reward coefficient 1.0 (authors' code), return-to-go then group normalisation
    # [INFERRED, see advantages.pure_grpo]; clip 0.2, seq-mean-token-mean (authors' code);
    # KL as the GRPO backbone.
    "pure": Recipe(name="pure", granularity=Granularity.STEP, advantage="pure"),
    # BoT-GRPO (ALGORITHMS.md §6): w_g = 3.0, w_s = 0.5, ε = 1e-6, PPO clip 0.2 / 0.2 and
    # seq-mean-token-mean [INFERRED implementation form]; KL follows the GRPO backbone.
    "bot_grpo": Recipe(name="bot_grpo", granularity=Granularity.TOKEN, advantage="bot_grpo"),
    # ReCo (arXiv 2607.26862): GRPO advantages, KL and clipping kept; variance-based detached
    # coefficient and response weights clipped at w_max = 5 (reproduction) [INFERRED form].
    "reco": Recipe(name="reco", surrogate="reco"),
    # BPPO (arXiv 2605.28028): full-group GRPO advantages on the shortest correct + incorrect
    # completions' prefixes; ρ_prefix 0.5, P_min 32 [INFERRED], seq-mean-token-mean.
    "bppo": Recipe(name="bppo", bppo_select=True),
    # VeriGate (arXiv 2605.30451): GRPO on mixed groups, PRM return-to-go on all-wrong groups;
    # clip / KL / aggregation of the GRPO baseline [INFERRED].
    "verigate": Recipe(name="verigate", granularity=Granularity.STEP, advantage="verigate"),
    # RLOO (arXiv 2402.14740) with the PPO clip; its KL lives in the reward, none here.
    "rloo": Recipe(name="rloo", advantage="rloo", kl_coef=0.0),
    # DeepSeekMath §4.1.3 process supervision: normalise step rewards, then suffix-sum.
    "process_grpo": Recipe(name="process_grpo", granularity=Granularity.STEP,
                           advantage="process_grpo"),
}


def get_recipe(name: str, **overrides) -> Recipe:
  """A recipe of `RECIPES` by name, with fields replaced by `overrides`.

  Args:
    name: a key of `RECIPES`.
    **overrides: `Recipe` fields to change, e.g. `eps_high=0.3`.

  Returns:
    The validated `Recipe`.

  Raises:
    ValueError: unknown name or field, or an invalid combination of values.
  """
  if name not in RECIPES:
    raise ValueError(f"unknown recipe {name!r}; valid: {', '.join(RECIPES)}")
  fields = {f.name for f in dataclasses.fields(Recipe)}
  unknown = sorted(set(overrides) - fields)
  if unknown:
    raise ValueError(f"unknown Recipe field(s) {', '.join(unknown)}; valid: "
                     f"{', '.join(sorted(fields))}")
  return dataclasses.replace(RECIPES[name], **overrides)


def check_reward_inputs(recipe: Recipe, *, has_step_rewards: bool,
                        has_token_rewards: bool) -> None:
  """Configuration-time check that the reward function gives what the recipe reads.

  Args:
    recipe: the recipe.
    has_step_rewards: the reward provides step scores (step_rewards, step_mask, token_step).
    has_token_rewards: the reward provides a token-level local signal (local_rewards).

  Raises:
    ValueError: naming the missing input and the recipes that would work without it.
  """
  sequence_recipes = ", ".join(n for n, r in RECIPES.items()
                               if r.granularity is Granularity.SEQUENCE)
  if recipe.granularity is Granularity.STEP and not has_step_rewards:
    raise ValueError(
        f"recipe {recipe.name!r} (advantage {recipe.advantage!r}) is step-level and needs step "
        f"rewards (step_rewards[B,S], step_mask[B,S], token_step[B,T]), but the reward "
        f"function provides none; use a reward with steps, or a sequence-level recipe "
        f"({sequence_recipes})")
  if recipe.granularity is Granularity.TOKEN and not has_token_rewards:
    raise ValueError(
        f"recipe {recipe.name!r} (advantage {recipe.advantage!r}) is token-level and needs a "
        f"token-level local reward (local_rewards[B,T], BoT-GRPO eq. 4 S_t), but the reward "
        f"function provides none; use a reward with token spans, or a sequence-level recipe "
        f"({sequence_recipes})")


class Advantages(NamedTuple):
  """Output of `compute_advantages`.

  Attributes:
    advantages: [B, T] float32, zero outside `loss_mask`.
    loss_mask: [B, T] bool tokens that carry loss (BPPO prefixes and DAPO dynamic sampling
      narrow it; otherwise it is `mask`).
    seq_weights: [B] float32 per-row loss weights (ReCo response weights; otherwise ones).
  """
  advantages: Array
  loss_mask: Array
  seq_weights: Array


def _require(recipe: Recipe, **inputs) -> None:
  missing = [k for k, v in inputs.items() if v is None]
  if missing:
    raise ValueError(f"recipe {recipe.name!r} (advantage {recipe.advantage!r}, surrogate "
                     f"{recipe.surrogate!r}) needs {', '.join(missing)}, got None")


def compute_advantages(recipe: Recipe, *, rewards, mask, group_ids, num_groups: int,
                       local_rewards=None, step_rewards=None, step_mask=None, token_step=None,
                       old_logp=None, verifier=None) -> Advantages:
  """Advantages, loss mask and row weights of a batch under `recipe` (jit with it static).

  Steps: lengths = Σ_t mask; DAPO overlong penalty added to `rewards` when configured; the
  recipe's estimator (sequence ones are broadcast to the row's tokens); DAPO dynamic sampling
  removes rows of groups whose raw `rewards` are constant from the loss mask (the DAPO
  constraint is on accuracy, so the filter reads the reward before overlong shaping); BPPO
  narrows the loss mask to its two prefixes per group; ReCo computes response weights.

  Args:
    recipe: the recipe (static).
    rewards: [B] float sequence (global) rewards.
    mask: [B, T] bool scored completion tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    local_rewards: [B, T] float token-level local signal S_t (BoT-GRPO eq. 4).
    step_rewards: [B, S] float step scores (PURE, VeriGate, process GRPO).
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none.
    old_logp: [B, T] float behaviour log-probs (ReCo).
    verifier: [B] float verifier rewards (VeriGate); defaults to `rewards`.

  Returns:
    `Advantages(advantages [B, T], loss_mask [B, T], seq_weights [B])`.

  Raises:
    ValueError: an input the recipe needs is None.
  """
  mask = jnp.asarray(mask, jnp.bool_)
  r = jnp.asarray(rewards, jnp.float32)
  chex.assert_rank([r, mask], [1, 2])
  chex.assert_axis_dimension(mask, 0, r.shape[0])
  shaped = r
  if recipe.overlong_max_length is not None:
    lengths = jnp.sum(mask, axis=-1, dtype=jnp.int32)
    shaped = r + adv.dapo_overlong_penalty(
        lengths, max_length=recipe.overlong_max_length,
        cache_length=recipe.overlong_cache_length,
        penalty_factor=recipe.overlong_penalty_factor)

  kind = recipe.advantage
  if kind in ("grpo", "rloo"):
    if kind == "grpo":
      seq = adv.grpo(shaped, group_ids, num_groups=num_groups, scale=recipe.grpo_scale,
                     ddof=recipe.grpo_ddof, eps=recipe.adv_eps)
    else:
      seq = adv.rloo(shaped, group_ids, num_groups=num_groups)
    tokens = jnp.where(mask, seq[:, None], 0.0)
  elif kind == "reinforce_pp":
    tokens = adv.reinforce_pp_baseline(shaped, mask, group_ids, num_groups=num_groups)
  elif kind == "bot_grpo":
    _require(recipe, local_rewards=local_rewards)
    token_rewards = adv.bot_token_rewards(shaped, local_rewards, mask, w_global=recipe.w_global,
                                          w_local=recipe.w_local)
    tokens = adv.bot_grpo(token_rewards, mask, group_ids, num_groups=num_groups,
                          eps=recipe.adv_eps)
  else:
    _require(recipe, step_rewards=step_rewards, step_mask=step_mask, token_step=token_step)
    if kind == "process_grpo":
      tokens = adv.process_grpo(step_rewards, step_mask, token_step, mask, group_ids,
                                num_groups=num_groups, eps=recipe.adv_eps)
    elif kind == "pure":
      tokens = adv.pure_grpo(step_rewards, step_mask, token_step, mask, group_ids,
                             num_groups=num_groups, temperature=recipe.pure_temperature,
                             eps=recipe.adv_eps, outcome_rewards=shaped,
                             outcome_coef=recipe.pure_outcome_coef)
    else:
      v = r if verifier is None else verifier
      tokens = adv.verigate(v, step_rewards, step_mask, token_step, mask, group_ids,
                            num_groups=num_groups, eps=recipe.adv_eps,
                            correct_threshold=recipe.correct_threshold)

  loss_mask = mask
  if recipe.dynamic_sampling:
    keep = adv.dynamic_sampling_keep(r, group_ids, num_groups=num_groups)
    loss_mask = loss_mask & keep[:, None]
  if recipe.bppo_select:
    loss_mask = loss_mask & adv.bppo_loss_mask(
        r, mask, group_ids, num_groups=num_groups, prefix_fraction=recipe.bppo_prefix_fraction,
        min_prefix=recipe.bppo_min_prefix, correct_threshold=recipe.correct_threshold)
  if recipe.surrogate == "reco":
    _require(recipe, old_logp=old_logp)
    seq_weights = adv.reco_response_weights(old_logp, mask, group_ids, num_groups=num_groups,
                                            max_weight=recipe.reco_max_weight)
  else:
    seq_weights = jnp.ones(r.shape, jnp.float32)
  return Advantages(advantages=jnp.where(loss_mask, tokens, 0.0), loss_mask=loss_mask,
                    seq_weights=seq_weights)


def policy_loss(recipe: Recipe, logp, old_logp, advantages, mask, *, ref_logp=None,
                seq_weights=None) -> tuple[Array, dict[str, Array]]:
  """Per-token policy loss of `recipe` (jit with it static), plus per-token metrics.

    ℓ_{i,t} = w_i · surrogate_{i,t}  +  β · KL_{i,t}      (KL only when `ref_logp` is given)

  surrogate: "clip" → `losses.clipped_surrogate` (eps_low, eps_high, dual_clip); "gspo" →
  `losses.gspo_surrogate` with the row's mean advantage (sequence ratio); "gspo_token" → the
  same with [B, T] advantages; "reco" → `losses.reco_surrogate` (weights inside).
  Aggregate with `losses.aggregate(per_token, mask, mode=recipe.agg_mode, norm=recipe.agg_norm)`.

  Args:
    recipe: the recipe (static).
    logp: [B, T] float current-policy log-probs (differentiable).
    old_logp: [B, T] float behaviour-policy log-probs.
    advantages: [B, T] float advantages (from `compute_advantages`).
    mask: [B, T] bool loss mask (`Advantages.loss_mask`).
    ref_logp: [B, T] float reference-policy log-probs, or None for no KL term.
    seq_weights: [B] float row weights (`Advantages.seq_weights`), or None for ones.

  Returns:
    per_token: [B, T] float32 loss, zero outside `mask`.
    metrics: dict of [B, T] float32 arrays, zero outside `mask` ("ratio", "clipped",
      "pg_loss", and "kl" when a KL term is added); sum them and divide by Σ mask for means
      (e.g. the clip fraction).
  """
  mask = jnp.asarray(mask, jnp.bool_)
  if recipe.surrogate == "clip":
    per_token, metrics = losses.clipped_surrogate(
        logp, old_logp, advantages, mask, eps_low=recipe.eps_low, eps_high=recipe.eps_high,
        dual_clip=recipe.dual_clip)
  elif recipe.surrogate in ("gspo", "gspo_token"):
    a = jnp.asarray(advantages, jnp.float32)
    if recipe.surrogate == "gspo" and a.ndim == 2:
      length = jnp.maximum(jnp.sum(mask, axis=-1, dtype=jnp.float32), 1.0)
      a = jnp.sum(jnp.where(mask, a, 0.0), axis=-1) / length
    per_token, metrics = losses.gspo_surrogate(logp, old_logp, a, mask,
                                               eps_low=recipe.eps_low, eps_high=recipe.eps_high)
  else:
    per_token, metrics = losses.reco_surrogate(logp, old_logp, advantages, mask,
                                               seq_weights=seq_weights, eps_low=recipe.eps_low,
                                               eps_high=recipe.eps_high)
  if seq_weights is not None and recipe.surrogate != "reco":
    w = jax.lax.stop_gradient(jnp.asarray(seq_weights, jnp.float32))
    chex.assert_shape(w, (per_token.shape[0],))
    per_token = per_token * w[:, None]
  metrics = dict(metrics)
  if ref_logp is not None and recipe.kl_coef > 0:
    kl = losses.kl(logp, ref_logp, kind=recipe.kl_kind, mask=mask)
    per_token = per_token + recipe.kl_coef * kl
    metrics["kl"] = kl
  return per_token, metrics


__all__ = [
    "Granularity", "Recipe", "RECIPES", "ADVANTAGE_GRANULARITY", "SURROGATES", "get_recipe",
    "check_reward_inputs", "Advantages", "compute_advantages", "policy_loss",
]
