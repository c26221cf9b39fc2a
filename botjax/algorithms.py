"""Named recipes of the GRPO family: which advantage, which surrogate, which defaults.

A `Recipe` is a frozen, hashable dataclass, so it can be a static argument of `jax.jit`:

  recipe = get_recipe("bot_grpo", max_new_tokens=1024)   # or get_recipe("dapo", eps_high=0.3)
  recipe = recipe_for_reward(recipe, reward_fn.spec)      # config time: checks, no double weights
  out = compute_advantages(recipe, rewards=r, mask=m, group_ids=g, num_groups=P,
                           local_rewards=s)              # Advantages(advantages, loss_mask, seq_weights)
  per_token, metrics = policy_loss(recipe, logp, old_logp, out.advantages, out.loss_mask,
                                   ref_logp=ref_logp, seq_weights=out.seq_weights)
  num, den = losses.aggregate(per_token, out.loss_mask, mode=recipe.agg_mode,
                              norm=recipe.agg_norm)      # sum over micro-batches, then divide

`compute_advantages` dispatches on `Recipe.advantage` through `ESTIMATORS` (the built-in
`ADVANTAGE_FNS`, one function per `AdvantageKind`, plus the ones registered with
`register_estimator`), `policy_loss` on `Recipe.surrogate`. Every default in `RECIPES` is the
paper's (or the reference code's) and cites its source; choices the sources leave open are marked
[INFERRED].

A new estimator is a function `(recipe: Recipe, batch: Batch) -> advantages [B, T]` (or [B] for
a sequence-level one, broadcast to the row's tokens), registered under a name with the reward
granularity it reads; a recipe then names it like a built-in one, and a saved run config that
names it resumes once the script has registered it again (docs/extending.md):

  register_estimator("my_adv", my_adv, granularity="sequence")
  register_recipe(Recipe(name="mine", advantage="my_adv", kl_coef=0.0))  # recipe="mine"
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from typing import Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp

from botjax import advantages as adv
from botjax import losses
from botjax.types import Array


class Granularity(enum.StrEnum):
  """The reward granularity a recipe reads: sequence rewards only, step rewards, token rewards."""
  SEQUENCE = "sequence"
  STEP = "step"
  TOKEN = "token"


class AdvantageKind(enum.StrEnum):
  """The built-in advantage estimators of `compute_advantages`. Plain strings work too (and the
  names of estimators added with `register_estimator`).

  "grpo": group z-score of the sequence reward (`advantages.grpo`, scale per `GrpoScale`);
  "rloo": leave-one-out baseline; "reinforce_pp": REINFORCE++-baseline;
  "grpo_stepmean": "grpo" on R + w_local·(mean step reward), the step information pooled into
  the sequence reward; "bot_grpo": BoT-GRPO (eq. 1–4); "bot_pure": BoT-GRPO on PURE's min-form
  credit of the local signal over the steps (`advantages.pure_step_credit`); "process_grpo":
  DeepSeekMath process supervision; "pure": PURE on a GRPO backbone; "verigate": VeriGate.
  """
  GRPO = "grpo"
  RLOO = "rloo"
  REINFORCE_PP = "reinforce_pp"
  GRPO_STEPMEAN = "grpo_stepmean"
  BOT_GRPO = "bot_grpo"
  BOT_PURE = "bot_pure"
  PROCESS_GRPO = "process_grpo"
  PURE = "pure"
  VERIGATE = "verigate"


# The granularity each built-in advantage estimator reads (`ESTIMATORS` has every estimator's).
ADVANTAGE_GRANULARITY: dict[AdvantageKind, Granularity] = {
    AdvantageKind.GRPO: Granularity.SEQUENCE,
    AdvantageKind.RLOO: Granularity.SEQUENCE,
    AdvantageKind.REINFORCE_PP: Granularity.SEQUENCE,
    AdvantageKind.GRPO_STEPMEAN: Granularity.STEP,
    AdvantageKind.BOT_GRPO: Granularity.TOKEN,
    AdvantageKind.BOT_PURE: Granularity.TOKEN,
    AdvantageKind.PROCESS_GRPO: Granularity.STEP,
    AdvantageKind.PURE: Granularity.STEP,
    AdvantageKind.VERIGATE: Granularity.STEP,
}


class Surrogate(enum.StrEnum):
  """The policy surrogates of `policy_loss`. Plain strings work too.

  "clip": PPO clipped ratio per token (GRPO, DAPO's decoupled clip); "gspo": GSPO's sequence
  ratio with the row's mean advantage (arXiv 2507.18071 eq. 5–7); "gspo_token": GSPO-token,
  the sequence ratio with per-token advantages (eq. 13–14); "reco": ReCo's variance-based
  coefficient with response weights.
  """
  CLIP = "clip"
  GSPO = "gspo"
  GSPO_TOKEN = "gspo_token"
  RECO = "reco"


SURROGATES = tuple(s.value for s in Surrogate)

# DAPO (arXiv 2503.14476 §4.1): at most 20,480 generated tokens, the last 4,096 of them the soft
# overlong punishment's cache (eq. 13). `Recipe.for_budget` keeps this proportion.
DAPO_MAX_LENGTH = 20480
DAPO_CACHE_LENGTH = 4096


def _parse(recipe_name: str, field: str, cls: type[enum.StrEnum], value) -> enum.StrEnum:
  try:
    return cls(value)
  except ValueError:
    raise ValueError(f"recipe {recipe_name!r}: unknown {field} {value!r}; valid: "
                     f"{', '.join(m.value for m in cls)}") from None


def _estimator_name(recipe_name: str, advantage, granularity: Granularity | None):
  """`Recipe.advantage` as stored: an `AdvantageKind`, or a registered estimator's name (a
  function is registered under "<module>.<qualified name>")."""
  if callable(advantage) and not isinstance(advantage, str):
    known = [e.name for e in ESTIMATORS.values() if e.fn is advantage]
    if known:
      return known[0]
    if granularity is None:
      raise ValueError(f"recipe {recipe_name!r}: the estimator {advantage!r} is not registered; "
                       f"give its granularity (Recipe(..., granularity='sequence' | 'step' | "
                       f"'token')) or register it: algorithms.register_estimator(name, fn, "
                       f"granularity)")
    name = f"{advantage.__module__}.{advantage.__qualname__}"
    return register_estimator(name, advantage, granularity, replace=True)
  try:
    return AdvantageKind(advantage)
  except ValueError:
    pass
  if isinstance(advantage, str) and advantage in ESTIMATORS:   # defined below; read at call time
    return advantage
  raise ValueError(f"recipe {recipe_name!r}: unknown advantage {advantage!r}; valid: "
                   f"{', '.join(ESTIMATORS)} (add one with algorithms.register_estimator)")


def _granularity_of(advantage) -> Granularity:
  if isinstance(advantage, AdvantageKind):
    return ADVANTAGE_GRANULARITY[advantage]
  return ESTIMATORS[advantage].granularity


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
  """One algorithm: advantage estimator, policy surrogate, aggregation and hyper-parameters.

  The field defaults are the GRPO backbone (DeepSeekMath, arXiv 2402.03300); `RECIPES` sets
  each algorithm's own. Enum fields accept their string values ("token_mean", "k3", ...) and
  reject anything else when the recipe is built, naming the valid values.

  Attributes:
    name: the recipe's name (a key of `RECIPES` for the built-in ones).
    granularity: the reward signal the advantage reads (`Granularity`); must match the
      estimator's (`ESTIMATORS[advantage].granularity`), which it defaults to.
    advantage: the estimator: an `AdvantageKind`, the name of one added with
      `register_estimator`, or an estimator function (registered here under
      "<module>.<qualified name>" with `granularity`, which must then be given).
    surrogate: the policy surrogate (`Surrogate`).
    agg_mode: loss aggregation (`losses.AggMode`); GRPO "seq_mean_token_mean" (eq. 3).
    agg_norm: L_norm of "seq_sum_norm" (Dr. GRPO: the generation budget); None otherwise.
    eps_low, eps_high: PPO clip range 1 − ε_low .. 1 + ε_high (0.2 in TRL / verl / tunix).
    dual_clip: dual-clip constant c > 1 for negative advantages, or None (off).
    kl_coef: β of the in-loss KL term (DeepSeekMath §4.2: 0.04); `policy_loss` then needs
      `ref_logp`.
    kl_kind: the KL estimator (`losses.KlKind`; DeepSeekMath eq. 4 is "k3").
    adv_eps: ε added to the stds of the advantage estimators.
    grpo_scale: what "grpo" advantages divide by (`advantages.GrpoScale`; Dr. GRPO "none").
    grpo_ddof: ddof of the group std of GRPO-style z-scores: 1 (Bessel, TRL / verl / tunix) or
      0 (population, the BoT-GRPO paper's eq. 1). Also the std of the outcome term that
      step-level recipes give tokens outside steps, and of VeriGate's mixed groups.
    w_global, w_local: BoT-GRPO w_g and w_s (eq. 4 and 8: 3.0 and 0.5); "grpo_stepmean" adds
      w_local·(mean step reward) to the sequence reward.
    dynamic_sampling: DAPO §3.2: rows of groups whose rewards are all equal carry no loss.
    max_resample_rounds: DAPO: extra sampling rounds a trainer may run to refill the batch.
    overlong_max_length, overlong_cache_length: DAPO eq. 13 L_max and L_cache (both or neither;
      None: no overlong penalty). `for_budget` sets them from the generation budget.
    overlong_penalty_factor: scale of the overlong penalty (verl's `penalty_factor`).
    bppo_select: BPPO: the loss covers the prefixes of the shortest correct and shortest
      incorrect completion of each group.
    bppo_prefix_fraction, bppo_min_prefix: BPPO prefix length
      min(L, max(P_min, ⌈ρ·L⌉)) [INFERRED: 0.5 and 32 are suggestions, not the paper's].
    correct_threshold: reward above which a completion counts as correct (BPPO classes,
      VeriGate's all-right / all-wrong gate).
    reco_max_weight: ReCo w_max (the public reproduction's 5; the paper's is unknown).
    pure_temperature: PURE softmin temperature T (authors' code: 0.1).
    pure_outcome_coef: PURE verifiable-reward coefficient (authors' code: 1.0).
    tis_cap: C ≥ 1 of the truncated importance-sampling correction of rollouts from another
      engine (`losses.tis_weights`: the per-token surrogate times min(π_old / π_engine, C));
      None: off. The trainer turns it on (C = 2, TRL's default) with a rollout engine whose
      log-probs are not its own (vLLM).
    bot_weighting: the token weights of the bag-of-token statistics (`advantages.bot_grpo`'s
      `weighting`, one of `advantages.BOT_WEIGHTINGS`): "inverse_length" (the paper's 1/L_k,
      eq. 2), "token" (uniform per token) or "row" (between-row statistics of the rows' mean
      token rewards). Read by "bot_grpo" and "bot_pure".
  """
  name: str
  granularity: Granularity | None = None
  advantage: AdvantageKind | str = AdvantageKind.GRPO
  surrogate: Surrogate = Surrogate.CLIP
  agg_mode: losses.AggMode = losses.AggMode.SEQ_MEAN_TOKEN_MEAN
  agg_norm: float | None = None
  eps_low: float = 0.2                 # clip 0.2 / 0.2, KL 0.04 (k3), ε 1e-6: the GRPO
  eps_high: float = 0.2                # backbone's (DeepSeekMath), not stated by BoT-GRPO;
  dual_clip: float | None = None
  kl_coef: float = 0.04                # sources of every default: docs/defaults.md
  kl_kind: losses.KlKind = losses.KlKind.K3
  adv_eps: float = 1e-6
  grpo_scale: adv.GrpoScale = adv.GrpoScale.GROUP
  grpo_ddof: int = 1
  w_global: float = 3.0                # BoT-GRPO eq. 8 (AIME): w_g = 3.0, w_s = 0.5
  w_local: float = 0.5
  dynamic_sampling: bool = False
  max_resample_rounds: int = 0
  overlong_max_length: int | None = None
  overlong_cache_length: int | None = None
  overlong_penalty_factor: float = 1.0
  bppo_select: bool = False
  bppo_prefix_fraction: float = 0.5
  bppo_min_prefix: int = 32
  correct_threshold: float = 0.5
  reco_max_weight: float = 5.0
  pure_temperature: float = 0.1
  pure_outcome_coef: float = 1.0
  tis_cap: float | None = None
  bot_weighting: str = "inverse_length"

  def __post_init__(self):
    name = self.name
    for field, cls in (("surrogate", Surrogate), ("agg_mode", losses.AggMode),
                       ("kl_kind", losses.KlKind), ("grpo_scale", adv.GrpoScale)):
      object.__setattr__(self, field, _parse(name, field, cls, getattr(self, field)))
    if self.granularity is not None:
      object.__setattr__(self, "granularity",
                         _parse(name, "granularity", Granularity, self.granularity))
    object.__setattr__(self, "advantage", _estimator_name(name, self.advantage,
                                                          self.granularity))
    need = _granularity_of(self.advantage)
    if self.granularity is None:
      object.__setattr__(self, "granularity", need)
    if self.granularity is not need:
      raise ValueError(f"recipe {name!r}: advantage {str(self.advantage)!r} is {need.value}-"
                       f"level, so granularity must be {need.value!r}, got "
                       f"{self.granularity.value!r}")
    if self.agg_mode is losses.AggMode.SEQ_SUM_NORM:
      if self.agg_norm is None or not self.agg_norm > 0:
        raise ValueError(f"recipe {name!r}: agg_mode 'seq_sum_norm' needs agg_norm > 0 "
                         f"(e.g. the maximum completion length), got {self.agg_norm!r}")
    elif self.agg_norm is not None:
      raise ValueError(f"recipe {name!r}: agg_norm is only used by agg_mode "
                       f"'seq_sum_norm', got agg_norm={self.agg_norm!r} with "
                       f"{self.agg_mode.value!r}")
    for field in ("eps_low", "eps_high", "kl_coef", "adv_eps"):
      if not getattr(self, field) >= 0:
        raise ValueError(f"recipe {name!r}: {field} must be >= 0, got "
                         f"{getattr(self, field)!r}")
    if self.bot_weighting not in adv.BOT_WEIGHTINGS:
      raise ValueError(f"recipe {name!r}: bot_weighting must be one of "
                       f"{', '.join(adv.BOT_WEIGHTINGS)}, got {self.bot_weighting!r}")
    if not isinstance(self.grpo_ddof, int) or self.grpo_ddof not in (0, 1):
      raise ValueError(f"recipe {name!r}: grpo_ddof must be 0 (population std) or 1 (Bessel), "
                       f"got {self.grpo_ddof!r}")
    if self.dual_clip is not None and not self.dual_clip > 1:
      raise ValueError(f"recipe {name!r}: dual_clip must be > 1 or None, got "
                       f"{self.dual_clip!r}")
    if (self.overlong_max_length is None) != (self.overlong_cache_length is None):
      raise ValueError(f"recipe {name!r}: set both overlong_max_length and "
                       f"overlong_cache_length, or neither; got {self.overlong_max_length!r}, "
                       f"{self.overlong_cache_length!r}")
    if self.overlong_cache_length is not None and not (
        0 < self.overlong_cache_length <= self.overlong_max_length):
      raise ValueError(f"recipe {name!r}: need 0 < overlong_cache_length <= "
                       f"overlong_max_length, got {self.overlong_cache_length!r}, "
                       f"{self.overlong_max_length!r}")
    if not 0 < self.bppo_prefix_fraction <= 1:
      raise ValueError(f"recipe {name!r}: bppo_prefix_fraction must be in (0, 1], got "
                       f"{self.bppo_prefix_fraction!r}")
    if not self.pure_temperature > 0:
      raise ValueError(f"recipe {name!r}: pure_temperature must be > 0, got "
                       f"{self.pure_temperature!r}")
    if not self.reco_max_weight > 0:
      raise ValueError(f"recipe {name!r}: reco_max_weight must be > 0, got "
                       f"{self.reco_max_weight!r}")
    if self.tis_cap is not None and not self.tis_cap >= 1:
      raise ValueError(f"recipe {name!r}: tis_cap must be >= 1 or None (off), got "
                       f"{self.tis_cap!r}")
    if self.max_resample_rounds < 0:
      raise ValueError(f"recipe {name!r}: max_resample_rounds must be >= 0, got "
                       f"{self.max_resample_rounds!r}")

  @property
  def needs_old_logp(self) -> bool:
    """`compute_advantages` needs `old_logp` (ReCo response weights)."""
    return self.surrogate is Surrogate.RECO

  @property
  def needs_ref_logp(self) -> bool:
    """`policy_loss` needs `ref_logp` for its KL term."""
    return self.kl_coef > 0

  def for_budget(self, max_new_tokens: int) -> Recipe:
    """This recipe with its length constants set from the run's generation budget.

    DAPO's soft overlong punishment (eq. 13) was tuned for 20,480 generated tokens with a
    4,096-token cache; with a smaller budget it would never fire. When the recipe has an
    overlong penalty, L_max = max_new_tokens and L_cache = round(max_new_tokens·4096/20480)
    (at least 1), the paper's proportion. Dr. GRPO's constant normaliser ("seq_sum_norm")
    becomes agg_norm = max_new_tokens, the authors' generate_max_length. Other fields are
    unchanged; a recipe without either is returned as it is.

      get_recipe("dapo").for_budget(1024)   # L_max 1024, L_cache 205

    Args:
      max_new_tokens: the most tokens a completion may have, > 0.

    Returns:
      The adapted recipe.
    """
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    return dataclasses.replace(self, **self._budget_fields(max_new_tokens))

  def _budget_fields(self, max_new_tokens: int) -> dict:
    fields = {}
    if self.overlong_max_length is not None:
      cache = max(1, round(max_new_tokens * DAPO_CACHE_LENGTH / DAPO_MAX_LENGTH))
      fields.update(overlong_max_length=max_new_tokens, overlong_cache_length=cache)
    if self.agg_mode is losses.AggMode.SEQ_SUM_NORM:
      fields["agg_norm"] = float(max_new_tokens)
    return fields


RECIPES: dict[str, Recipe] = {
    # DeepSeekMath (arXiv 2402.03300) §4.1–4.2: group z-score, clip 0.2, seq-mean-token-mean
    # (eq. 3), in-loss k3 KL with β = 0.04. The std is Bessel-corrected (ddof = 1), TRL's, verl's
    # and tunix's choice (the paper says "std"); PAPER_PROTOCOL selects the BoT-GRPO paper's
    # population std.
    "grpo": Recipe(name="grpo"),
    # Dr. GRPO (arXiv 2503.20783, understand-r1-zero code): no std, Σ_t ℓ / L_norm averaged over
    # rows, β = 0. L_norm = generate_max_length of the authors' script (3000); `for_budget`
    # (or get_recipe(..., max_new_tokens=N)) sets it to the run's budget.
    "dr_grpo": Recipe(name="dr_grpo", grpo_scale="none", agg_mode="seq_sum_norm",
                      agg_norm=3000.0, kl_coef=0.0),
    # DAPO (arXiv 2503.14476) §3–4.1: clip-higher 0.2 / 0.28, token-mean, no KL, dynamic
    # sampling (verl example max_num_gen_batches = 10), soft overlong punishment with
    # L_max = 20480, L_cache = 4096 (eq. 13); `for_budget` scales them to the run's budget.
    "dapo": Recipe(name="dapo", eps_high=0.28, agg_mode="token_mean", kl_coef=0.0,
                   dynamic_sampling=True, max_resample_rounds=10,
                   overlong_max_length=DAPO_MAX_LENGTH, overlong_cache_length=DAPO_CACHE_LENGTH),
    # GSPO (arXiv 2507.18071) §4.1, §5.1: sequence ratio, ε 3e-4 / 4e-4, KL omitted,
    # seq-mean-token-mean (eq. 5).
    "gspo": Recipe(name="gspo", surrogate="gspo", eps_low=3e-4, eps_high=4e-4, kl_coef=0.0),
    # PURE (arXiv 2504.15275) on a GRPO backbone, as BoT-GRPO ports it: softmin T = 0.1 and
    # verifiable-reward coefficient 1.0 (authors' code), return-to-go then group normalisation
    # [INFERRED, see advantages.pure_grpo]; clip 0.2, seq-mean-token-mean (authors' code);
    # KL as the GRPO backbone.
    "pure": Recipe(name="pure", granularity=Granularity.STEP, advantage="pure"),
    # BoT-GRPO (arXiv 2610.09804): w_g = 3.0, w_s = 0.5 (eq. 8), ε = 1e-6, PPO clip 0.2 / 0.2
    # and seq-mean-token-mean [INFERRED implementation form of eq. 3]; KL follows the GRPO
    # backbone.
    "bot_grpo": Recipe(name="bot_grpo", granularity=Granularity.TOKEN, advantage="bot_grpo"),
    # The BoT-GRPO paper's common backbone (§4.1): GSPO, DAPO and PURE read the same global +
    # token-level reward through the bag-of-token advantages and keep their own surrogate,
    # clipping and filtering. GSPO with token advantages is GSPO-token (arXiv 2507.18071
    # eq. 13–14) with GSPO's ε and no KL.
    "bot_gspo": Recipe(name="bot_gspo", granularity=Granularity.TOKEN, advantage="bot_grpo",
                       surrogate="gspo_token", eps_low=3e-4, eps_high=4e-4, kl_coef=0.0),
    # DAPO on the backbone: clip-higher, token-mean, no KL, dynamic sampling on the global
    # reward, overlong penalty added to the global reward before the w_g weighting.
    "bot_dapo": Recipe(name="bot_dapo", granularity=Granularity.TOKEN, advantage="bot_grpo",
                       eps_high=0.28, agg_mode="token_mean", kl_coef=0.0, dynamic_sampling=True,
                       max_resample_rounds=10, overlong_max_length=DAPO_MAX_LENGTH,
                       overlong_cache_length=DAPO_CACHE_LENGTH),
    # PURE on the backbone: min-form credit (softmin T = 0.1, return-to-go) of the local signal
    # over the steps, then the bag-of-token advantages [INFERRED reading, see
    # advantages.pure_step_credit]; PURE's clip 0.2 and seq-mean-token-mean.
    "bot_pure": Recipe(name="bot_pure", granularity=Granularity.TOKEN, advantage="bot_pure"),
    # ReCo (arXiv 2607.26862): GRPO advantages, KL and clipping kept; variance-based detached
    # coefficient and response weights clipped at w_max = 5 (reproduction) [INFERRED form].
    "reco": Recipe(name="reco", surrogate="reco"),
    # BPPO (arXiv 2605.28028): full-group GRPO advantages on the shortest correct + incorrect
    # completions' prefixes; ρ_prefix 0.5, P_min 32 [INFERRED], seq-mean-token-mean. The paper's
    # adaptive completion scheduling is not specified publicly and not implemented (see
    # advantages.bppo_loss_mask).
    "bppo": Recipe(name="bppo", bppo_select=True),
    # VeriGate (arXiv 2605.30451): GRPO on mixed groups, PRM return-to-go on all-wrong groups;
    # clip / KL / aggregation of the GRPO baseline [INFERRED].
    "verigate": Recipe(name="verigate", granularity=Granularity.STEP, advantage="verigate"),
    # RLOO (arXiv 2402.14740) with the PPO clip; its KL lives in the reward, none here.
    "rloo": Recipe(name="rloo", advantage="rloo", kl_coef=0.0),
    # DeepSeekMath §4.1.3 process supervision: normalise step rewards, then suffix-sum.
    "process_grpo": Recipe(name="process_grpo", granularity=Granularity.STEP,
                           advantage="process_grpo"),
    # A control for BoT-GRPO's aggregation: the same information (outcome and step verdicts)
    # pooled into one sequence reward R + w_local·(mean step reward), e.g. 3·correct + format +
    # 0.5·(mean verdict) with MathReward, then GRPO.
    "grpo_stepmean": Recipe(name="grpo_stepmean", granularity=Granularity.STEP,
                            advantage="grpo_stepmean"),
    # Controls of BoT-GRPO's 1/L_k weighting (botjax's, beyond the paper, whose Limitations say
    # it cannot separate the weighting from the token pooling): "bot_grpo" with uniform token
    # weights (a row weighs its length) and with between-row statistics of the rows' mean token
    # rewards (no token pooling); everything else as "bot_grpo" (`advantages.bot_grpo`).
    "bot_grpo_token": Recipe(name="bot_grpo_token", granularity=Granularity.TOKEN,
                             advantage="bot_grpo", bot_weighting="token"),
    "bot_grpo_row": Recipe(name="bot_grpo_row", granularity=Granularity.TOKEN,
                           advantage="bot_grpo", bot_weighting="row"),
}

# Recipe overrides of the BoT-GRPO paper's experiments (arXiv 2610.09804): eq. 1's population
# std (ddof = 0) in every group z-score, GRPO's and the baselines' on its common backbone, so
# that BoT-GRPO with w_s = 0 is exactly GRPO. The recipes' own default is Bessel's std (ddof =
# 1), TRL's, verl's and tunix's choice.
#   get_recipe("grpo", **dict(PAPER_PROTOCOL))
PAPER_PROTOCOL: tuple[tuple[str, object], ...] = (("grpo_ddof", 0),)


def get_recipe(name: str, *, max_new_tokens: int | None = None, **overrides) -> Recipe:
  """A recipe of `RECIPES` by name, with fields replaced by `overrides`.

  Args:
    name: a key of `RECIPES` (built-in, or added with `register_recipe`).
    max_new_tokens: the run's generation budget; when given, the length constants the budget
      determines (DAPO's overlong L_max / L_cache, Dr. GRPO's agg_norm) follow it
      (`Recipe.for_budget`) unless `overrides` sets them.
    **overrides: `Recipe` fields to change, e.g. `eps_high=0.3`; `advantage=` (a name or an
      estimator function) also takes that estimator's granularity unless `granularity=` is
      given.

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
  if "advantage" in overrides and "granularity" not in overrides:
    overrides["granularity"] = None        # the new estimator's own
  recipe = dataclasses.replace(RECIPES[name], **overrides)
  if max_new_tokens is not None:
    recipe.for_budget(max_new_tokens)                       # validates the budget
    derived = recipe._budget_fields(max_new_tokens)
    if {"overlong_max_length", "overlong_cache_length"} & set(overrides):   # given: kept as a pair
      derived.pop("overlong_max_length", None)
      derived.pop("overlong_cache_length", None)
    if "agg_norm" in overrides:
      derived.pop("agg_norm", None)
    recipe = dataclasses.replace(recipe, **derived)
  return recipe


def _as_spec(spec):
  """A RewardSpec from a RewardSpec or a reward function (its declared `spec`, else plain)."""
  from botjax.rewards.base import RewardSpec, reward_spec  # numpy only; imported when used
  return spec if isinstance(spec, RewardSpec) else reward_spec(spec)


def check_reward_inputs(recipe: Recipe, spec=None, *, has_step_rewards: bool | None = None,
                        has_token_rewards: bool | None = None) -> None:
  """Configuration-time check that the reward gives what the recipe reads, as its spec declares.

  Args:
    recipe: the recipe.
    spec: the reward's `botjax.rewards.RewardSpec`, or a reward function (its `spec` is read; a
      function without one is a plain sequence reward).
    has_step_rewards, has_token_rewards: instead of `spec`, an unweighted reward that provides
      step scores (step_rewards, step_mask, token_step) / a token-level local signal.

  Raises:
    ValueError: naming the missing input and the recipes that would work without it; or, for a
      reward whose spec is `weighted`, a token-level recipe whose w_global / w_local are not 1
      (the weights would apply twice: use `recipe_for_reward`).
  """
  if spec is None:
    from botjax.rewards.base import RewardSpec, Signal
    spec = RewardSpec(frozenset({Signal.SEQUENCE}
                                | ({Signal.STEP} if has_step_rewards else set())
                                | ({Signal.TOKEN} if has_token_rewards else set())))
  elif has_step_rewards is not None or has_token_rewards is not None:
    raise ValueError("pass either a spec or has_step_rewards / has_token_rewards, not both")
  spec = _as_spec(spec)
  sequence_recipes = ", ".join(n for n, r in RECIPES.items()
                               if r.granularity is Granularity.SEQUENCE)
  def refuse(needs: str, fix: str):
    raise ValueError(f"recipe {recipe.name!r} (advantage {recipe.advantage!r}) {needs}, but the "
                     f"reward function provides none; {fix}")
  if recipe.granularity is Granularity.STEP and not spec.steps:
    refuse("is step-level and needs step rewards (step_rewards[B,S], step_mask[B,S], "
           "token_step[B,T])", f"use a reward with steps, or a sequence-level recipe "
           f"({sequence_recipes})")
  if recipe.granularity is Granularity.TOKEN and not spec.token_spans:
    refuse("is token-level and needs a token-level local reward (local_rewards[B,T], BoT-GRPO "
           "eq. 4 S_t)", f"use a reward with token spans, or a sequence-level recipe "
           f"({sequence_recipes})")
  if recipe.advantage is AdvantageKind.BOT_PURE and not spec.steps:
    refuse("takes PURE's min-form over steps and needs step boundaries (step_mask[B,S], "
           "token_step[B,T]) beside the token rewards", "use a reward with steps, or 'bot_grpo'")
  if (spec.weighted and recipe.granularity is Granularity.TOKEN
      and (recipe.w_global, recipe.w_local) != (1.0, 1.0)):
    raise ValueError(
        f"the reward already weighs its global and local parts (its spec is weighted, e.g. "
        f"MathReward's w_g / w_s, BoT-GRPO eq. 8, or ReactReward's, eq. 6), and recipe "
        f"{recipe.name!r} would weigh them again by w_global={recipe.w_global:g}, "
        f"w_local={recipe.w_local:g}; use algorithms.recipe_for_reward(recipe, reward.spec) "
        f"(w_global = w_local = 1), and set the weights on the reward function")


def recipe_for_reward(recipe: Recipe, spec) -> Recipe:
  """`recipe` adapted to a reward's spec, then checked (`check_reward_inputs`).

  A reward whose spec is `weighted` already holds w_g·G and w_s·S (BoT-GRPO, arXiv 2610.09804,
  eq. 6 and 8): a token-level recipe then reads them with w_global = w_local = 1, so that they
  are not weighted twice. Other recipes are returned unchanged.

    recipe = recipe_for_reward(get_recipe("bot_grpo"), MathReward(judge).spec)

  Args:
    recipe: the recipe.
    spec: the reward's `botjax.rewards.RewardSpec`, or the reward function.

  Returns:
    The recipe to use with that reward.

  Raises:
    ValueError: the reward lacks a signal the recipe needs.
  """
  spec = _as_spec(spec)
  if spec.weighted and recipe.granularity is Granularity.TOKEN:
    recipe = dataclasses.replace(recipe, w_global=1.0, w_local=1.0)
  check_reward_inputs(recipe, spec)
  return recipe


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
    raise ValueError(f"recipe {recipe.name!r} (advantage {str(recipe.advantage)!r}, surrogate "
                     f"{recipe.surrogate.value!r}) needs {', '.join(missing)}, got None")


class Batch(NamedTuple):
  """The inputs of one `compute_advantages` call, as the advantage functions (estimators) read
  them: `estimator(recipe, batch) -> [B, T]` (see `register_estimator`).

  Attributes:
    rewards: [B] float32 sequence rewards as given.
    shaped: [B] float32 `rewards` plus DAPO's overlong penalty when the recipe has one (what
      the built-in estimators read as the sequence reward).
    mask: [B, T] bool scored completion tokens.
    group_ids: [B] int32 group of each row, in [0, num_groups).
    num_groups: number of groups (static Python int).
    local_rewards: [B, T] float32 token-level local signal S_t (token-level recipes only; None
      otherwise).
    step_rewards: [B, S] float32 step scores, or None.
    step_mask: [B, S] bool valid steps, or None.
    token_step: [B, T] int32 step of each token (-1: none), or None.
    verifier: [B] float32 verifier (accuracy) rewards, or None.
  """
  rewards: Array
  shaped: Array
  mask: Array
  group_ids: Array
  num_groups: int
  local_rewards: Array | None
  step_rewards: Array | None
  step_mask: Array | None
  token_step: Array | None
  verifier: Array | None


def _broadcast(seq: Array, mask: Array) -> Array:
  return jnp.where(mask, seq[:, None], 0.0)


def _outcome(recipe: Recipe, b: Batch, rewards: Array) -> Array:
  """[B] group z-score of a sequence reward with the recipe's scale, ddof and ε."""
  return adv.grpo(rewards, b.group_ids, num_groups=b.num_groups, scale=recipe.grpo_scale,
                  ddof=recipe.grpo_ddof, eps=recipe.adv_eps)


def _require_steps(recipe: Recipe, b: Batch) -> None:
  _require(recipe, step_rewards=b.step_rewards, step_mask=b.step_mask, token_step=b.token_step)


def _adv_grpo(recipe: Recipe, b: Batch) -> Array:
  return _broadcast(_outcome(recipe, b, b.shaped), b.mask)


def _adv_rloo(recipe: Recipe, b: Batch) -> Array:
  return _broadcast(adv.rloo(b.shaped, b.group_ids, num_groups=b.num_groups), b.mask)


def _adv_reinforce_pp(recipe: Recipe, b: Batch) -> Array:
  return adv.reinforce_pp_baseline(b.shaped, b.mask, b.group_ids, num_groups=b.num_groups)


def _adv_grpo_stepmean(recipe: Recipe, b: Batch) -> Array:
  _require_steps(recipe, b)
  pooled = b.shaped + recipe.w_local * adv.step_mean(b.step_rewards, b.step_mask)
  return _broadcast(_outcome(recipe, b, pooled), b.mask)


def _adv_bot_grpo(recipe: Recipe, b: Batch) -> Array:
  _require(recipe, local_rewards=b.local_rewards)
  token_rewards = adv.bot_token_rewards(b.shaped, b.local_rewards, b.mask,
                                        w_global=recipe.w_global, w_local=recipe.w_local)
  return adv.bot_grpo(token_rewards, b.mask, b.group_ids, num_groups=b.num_groups,
                      eps=recipe.adv_eps, weighting=recipe.bot_weighting)


def _adv_bot_pure(recipe: Recipe, b: Batch) -> Array:
  _require(recipe, local_rewards=b.local_rewards, step_mask=b.step_mask, token_step=b.token_step)
  credit = adv.pure_step_credit(b.local_rewards, b.step_mask, b.token_step, b.mask,
                                temperature=recipe.pure_temperature)
  token_rewards = adv.bot_token_rewards(b.shaped, credit, b.mask, w_global=recipe.w_global,
                                        w_local=recipe.w_local)
  return adv.bot_grpo(token_rewards, b.mask, b.group_ids, num_groups=b.num_groups,
                      eps=recipe.adv_eps, weighting=recipe.bot_weighting)


def _adv_process_grpo(recipe: Recipe, b: Batch) -> Array:
  _require_steps(recipe, b)
  return adv.process_grpo(b.step_rewards, b.step_mask, b.token_step, b.mask, b.group_ids,
                          num_groups=b.num_groups, eps=recipe.adv_eps,
                          stepless=_outcome(recipe, b, b.shaped))


def _adv_pure(recipe: Recipe, b: Batch) -> Array:
  _require_steps(recipe, b)
  return adv.pure_grpo(b.step_rewards, b.step_mask, b.token_step, b.mask, b.group_ids,
                       num_groups=b.num_groups, temperature=recipe.pure_temperature,
                       eps=recipe.adv_eps, outcome_rewards=b.shaped,
                       outcome_coef=recipe.pure_outcome_coef,
                       stepless=_outcome(recipe, b, recipe.pure_outcome_coef * b.shaped))


def _adv_verigate(recipe: Recipe, b: Batch) -> Array:
  _require_steps(recipe, b)
  v = b.rewards if b.verifier is None else b.verifier
  return adv.verigate(v, b.step_rewards, b.step_mask, b.token_step, b.mask, b.group_ids,
                      num_groups=b.num_groups, eps=recipe.adv_eps,
                      correct_threshold=recipe.correct_threshold, ddof=recipe.grpo_ddof)


# One [B, T] advantage function per estimator: (recipe, Batch) -> advantages, zero outside the
# mask. Sequence estimators broadcast to the row's tokens. Step-level ones give the tokens
# outside every step (a `<think>` block, a preamble, a `<final>` block) the sequence-level term:
# GRPO's outcome z-score (process_grpo; pure on outcome_coef·R), VeriGate's gated term.
ADVANTAGE_FNS: dict[AdvantageKind, Callable[[Recipe, Batch], Array]] = {
    AdvantageKind.GRPO: _adv_grpo,
    AdvantageKind.RLOO: _adv_rloo,
    AdvantageKind.REINFORCE_PP: _adv_reinforce_pp,
    AdvantageKind.GRPO_STEPMEAN: _adv_grpo_stepmean,
    AdvantageKind.BOT_GRPO: _adv_bot_grpo,
    AdvantageKind.BOT_PURE: _adv_bot_pure,
    AdvantageKind.PROCESS_GRPO: _adv_process_grpo,
    AdvantageKind.PURE: _adv_pure,
    AdvantageKind.VERIGATE: _adv_verigate,
}


class Estimator(NamedTuple):
  """An advantage estimator of `ESTIMATORS`.

  Attributes:
    name: its name (`Recipe.advantage`).
    fn: `(recipe: Recipe, batch: Batch) -> advantages`, [B, T] float (or [B] for a
      sequence-level estimator: broadcast to the row's tokens); jit-traceable, since
      `compute_advantages` runs under `jax.jit` with the recipe static. Values outside
      `batch.mask` are ignored (set to 0).
    granularity: the reward signal it reads (`Granularity`): SEQUENCE reads `rewards` /
      `shaped` only, STEP also the step arrays, TOKEN also `local_rewards`; the trainer checks
      the reward against it (`check_reward_inputs`).
  """
  name: str
  fn: Callable[[Recipe, Batch], Array]
  granularity: Granularity


# Every estimator by name: the built-in ones and those added with `register_estimator`.
ESTIMATORS: dict[str, Estimator] = {
    str(kind): Estimator(str(kind), fn, ADVANTAGE_GRANULARITY[kind])
    for kind, fn in ADVANTAGE_FNS.items()}


def register_estimator(name: str, fn: Callable[[Recipe, Batch], Array],
                       granularity: Granularity | str, *, replace: bool = False) -> str:
  """Adds an advantage estimator that recipes can name (`Recipe(advantage=name)`).

    def centred(recipe, b):                  # (Recipe, Batch) -> [B] or [B, T]
      mean = jax.ops.segment_sum(b.shaped, b.group_ids, b.num_groups) / jnp.maximum(
          jax.ops.segment_sum(jnp.ones_like(b.shaped), b.group_ids, b.num_groups), 1)
      return b.shaped - mean[b.group_ids]
    register_estimator("centred", centred, granularity="sequence")

  A run whose config names the estimator resumes from its checkpoints when the script
  registers it again before building the trainer (the config records the name).

  Args:
    name: the name (not a built-in one).
    fn: the estimator (`Estimator.fn`).
    granularity: the reward signal it reads (`Granularity` or its name).
    replace: replace an estimator registered earlier under `name` (a function of the same
      module and qualified name, defined again, replaces it anyway).

  Returns:
    `name`.

  Raises:
    ValueError: a built-in or taken name (without `replace`), a non-callable `fn`, or an
      unknown granularity.
  """
  if not isinstance(name, str) or not name:
    raise ValueError(f"estimator name must be a non-empty str, got {name!r}")
  if name in {str(k) for k in AdvantageKind}:
    raise ValueError(f"{name!r} is a built-in estimator; choose another name")
  old = ESTIMATORS[name].fn if name in ESTIMATORS else None
  redefined = old is not None and all(   # the same function defined again (a re-run cell)
      getattr(old, k, None) == getattr(fn, k, 0) for k in ("__module__", "__qualname__"))
  if old is not None and old is not fn and not (replace or redefined):
    raise ValueError(f"estimator {name!r} is already registered (replace=True replaces it)")
  if not callable(fn):
    raise ValueError(f"estimator {name!r}: fn must be callable (recipe, batch) -> [B, T], got "
                     f"{fn!r}")
  ESTIMATORS[name] = Estimator(name, fn, _parse(name, "granularity", Granularity, granularity))
  return name


def register_recipe(recipe: Recipe, *, replace: bool = False) -> Recipe:
  """Adds `recipe` to `RECIPES` under `recipe.name`, so that `get_recipe(name)`,
  `TrainConfig(recipe=name)` and `--algo=name` find it (and a saved run config naming it
  resumes once the script has registered it again).

  Raises:
    ValueError: the name is taken (without `replace`).
  """
  if not isinstance(recipe, Recipe):
    raise ValueError(f"register_recipe takes a Recipe, got {recipe!r}")
  if recipe.name in RECIPES and not replace and RECIPES[recipe.name] != recipe:
    raise ValueError(f"recipe {recipe.name!r} is already registered (replace=True replaces it)")
  RECIPES[recipe.name] = recipe
  return recipe


def _token_recipes() -> str:
  return ", ".join(n for n, r in RECIPES.items() if r.granularity is Granularity.TOKEN)


def compute_advantages(recipe: Recipe, *, rewards, mask, group_ids, num_groups: int,
                       local_rewards=None, step_rewards=None, step_mask=None, token_step=None,
                       old_logp=None, verifier=None) -> Advantages:
  """Advantages, loss mask and row weights of a batch under `recipe` (jit with it static).

  Steps: lengths = Σ_t mask; DAPO overlong penalty added to `rewards` when configured; the
  recipe's estimator `ESTIMATORS[recipe.advantage]` (sequence ones are broadcast to the
  row's tokens; step-level ones give tokens outside every step the sequence-level term); DAPO
  dynamic sampling removes rows of groups whose raw `rewards` are constant from the loss mask
  (the DAPO constraint is on accuracy, so the filter reads the reward before overlong shaping);
  BPPO narrows the loss mask to its two prefixes per group; ReCo computes response weights.

  Args:
    recipe: the recipe (static).
    rewards: [B] float sequence (global) rewards.
    mask: [B, T] bool scored completion tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    local_rewards: [B, T] float token-level local signal S_t (BoT-GRPO eq. 4), read by the
      token-level recipes only; a recipe that does not read it warns (pass None).
    step_rewards: [B, S] float step scores (PURE, VeriGate, process GRPO, grpo_stepmean).
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none.
    old_logp: [B, T] float behaviour log-probs (ReCo).
    verifier: [B] float verifier rewards (VeriGate; DAPO dynamic sampling keeps the groups in
      which it varies); defaults to `rewards`.

  Returns:
    `Advantages(advantages [B, T], loss_mask [B, T], seq_weights [B])`.

  Raises:
    ValueError: an input the recipe needs is None.
  """
  mask = jnp.asarray(mask, jnp.bool_)
  r = jnp.asarray(rewards, jnp.float32)
  chex.assert_rank([r, mask], [1, 2])
  chex.assert_axis_dimension(mask, 0, r.shape[0])
  if local_rewards is not None and recipe.granularity is not Granularity.TOKEN:
    warnings.warn(
        f"recipe {recipe.name!r} is {recipe.granularity.value}-level and ignores local_rewards; "
        f"pass local_rewards=None, or use a token-level recipe that reads them "
        f"({_token_recipes()})", UserWarning, stacklevel=2)
  shaped = r
  if recipe.overlong_max_length is not None:
    lengths = jnp.sum(mask, axis=-1, dtype=jnp.int32)
    shaped = r + adv.dapo_overlong_penalty(
        lengths, max_length=recipe.overlong_max_length,
        cache_length=recipe.overlong_cache_length,
        penalty_factor=recipe.overlong_penalty_factor)
  batch = Batch(rewards=r, shaped=shaped, mask=mask, group_ids=group_ids, num_groups=num_groups,
                local_rewards=local_rewards, step_rewards=step_rewards, step_mask=step_mask,
                token_step=token_step, verifier=verifier)
  tokens = jnp.asarray(ESTIMATORS[recipe.advantage].fn(recipe, batch), jnp.float32)
  if tokens.ndim == 1:                     # a sequence-level estimator's [B]
    tokens = _broadcast(tokens, mask)
  chex.assert_shape(tokens, mask.shape)

  loss_mask = mask
  if recipe.dynamic_sampling:
    # DAPO (arXiv 2503.14476) §3.2 eq. 11 filters groups on accuracy: the verifier when given
    keep = adv.dynamic_sampling_keep(r if verifier is None else verifier, group_ids,
                                     num_groups=num_groups)
    loss_mask = loss_mask & keep[:, None]
  if recipe.bppo_select:
    loss_mask = loss_mask & adv.bppo_loss_mask(
        r, mask, group_ids, num_groups=num_groups, prefix_fraction=recipe.bppo_prefix_fraction,
        min_prefix=recipe.bppo_min_prefix, correct_threshold=recipe.correct_threshold)
  if recipe.surrogate is Surrogate.RECO:
    _require(recipe, old_logp=old_logp)
    seq_weights = adv.reco_response_weights(old_logp, mask, group_ids, num_groups=num_groups,
                                            max_weight=recipe.reco_max_weight)
  else:
    seq_weights = jnp.ones(r.shape, jnp.float32)
  return Advantages(advantages=jnp.where(loss_mask, tokens, 0.0), loss_mask=loss_mask,
                    seq_weights=seq_weights)


# The metric keys `policy_loss` returns, whatever the recipe.
POLICY_METRICS = ("ratio", "clipped", "dual_clipped", "pg_loss", "kl")


def policy_loss(recipe: Recipe, logp, old_logp, advantages, mask, *, ref_logp=None,
                seq_weights=None, behaviour_logp=None) -> tuple[Array, dict[str, Array]]:
  """Per-token policy loss of `recipe` (jit with it static), plus per-token metrics.

    ℓ_{i,t} = ρ_{i,t} · w_i · surrogate_{i,t}  +  β · KL_{i,t}   (KL when recipe.kl_coef = β > 0)

  ρ is 1, or with recipe.tis_cap = C the truncated importance weight min(π_old / π_μ, C) of
  `losses.tis_weights` (π_μ: the rollout engine's `behaviour_logp`); it weights the surrogate,
  not the KL term, as TRL and verl apply it.

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
    ref_logp: [B, T] float reference-policy log-probs; required when recipe.kl_coef > 0,
      unused otherwise.
    seq_weights: [B] float row weights (`Advantages.seq_weights`), or None for ones.
    behaviour_logp: [B, T] float the rollout engine's log-probs of the sampled tokens; required
      when recipe.tis_cap is set, unused otherwise (`old_logp` is then the trainer's own
      log-probs of the same tokens).

  Returns:
    per_token: [B, T] float32 loss, zero outside `mask`.
    metrics: dict of [B, T] float32 arrays, zero outside `mask`, with the keys
      `POLICY_METRICS` for every recipe: "ratio", "clipped", "dual_clipped" (0 unless the
      recipe dual-clips), "pg_loss" and "kl" (the recipe's estimator; 0 when kl_coef = 0). Sum
      them and divide by Σ mask for means (e.g. the clip fraction).

  Raises:
    ValueError: recipe.kl_coef > 0 and `ref_logp` is None, or recipe.tis_cap is set and
      `behaviour_logp` is None.
  """
  if recipe.tis_cap is not None and behaviour_logp is None:
    raise ValueError(
        f"recipe {recipe.name!r} has tis_cap={recipe.tis_cap:g} but behaviour_logp is None: pass "
        f"the rollout engine's log-probs of the sampled tokens as behaviour_logp, or build the "
        f"recipe with tis_cap=None to train without the importance-sampling correction")
  if recipe.kl_coef > 0 and ref_logp is None:
    raise ValueError(
        f"recipe {recipe.name!r} has kl_coef={recipe.kl_coef:g} > 0 but ref_logp is None: pass "
        f"the reference policy's log-probs as ref_logp, or build the recipe with kl_coef=0.0 "
        f"(e.g. get_recipe({recipe.name!r}, kl_coef=0.0)) to train without the KL term")
  mask = jnp.asarray(mask, jnp.bool_)
  if recipe.surrogate is Surrogate.CLIP:
    per_token, metrics = losses.clipped_surrogate(
        logp, old_logp, advantages, mask, eps_low=recipe.eps_low, eps_high=recipe.eps_high,
        dual_clip=recipe.dual_clip)
  elif recipe.surrogate in (Surrogate.GSPO, Surrogate.GSPO_TOKEN):
    a = jnp.asarray(advantages, jnp.float32)
    if recipe.surrogate is Surrogate.GSPO and a.ndim == 2:
      length = jnp.maximum(jnp.sum(mask, axis=-1, dtype=jnp.float32), 1.0)
      a = jnp.sum(jnp.where(mask, a, 0.0), axis=-1) / length
    per_token, metrics = losses.gspo_surrogate(logp, old_logp, a, mask,
                                               eps_low=recipe.eps_low, eps_high=recipe.eps_high)
  else:
    per_token, metrics = losses.reco_surrogate(logp, old_logp, advantages, mask,
                                               seq_weights=seq_weights, eps_low=recipe.eps_low,
                                               eps_high=recipe.eps_high)
  if seq_weights is not None and recipe.surrogate is not Surrogate.RECO:
    w = jax.lax.stop_gradient(jnp.asarray(seq_weights, jnp.float32))
    chex.assert_shape(w, (per_token.shape[0],))
    per_token = per_token * w[:, None]
  if recipe.tis_cap is not None:
    per_token = per_token * losses.tis_weights(old_logp, behaviour_logp, mask,
                                               cap=recipe.tis_cap)
  zeros = jnp.zeros(per_token.shape, jnp.float32)
  metrics = {"dual_clipped": zeros, **metrics}
  if recipe.kl_coef > 0:
    kl = losses.kl(logp, ref_logp, kind=recipe.kl_kind, mask=mask)
    per_token = per_token + recipe.kl_coef * kl
    metrics["kl"] = kl
  else:
    metrics["kl"] = zeros
  return per_token, {k: metrics[k] for k in POLICY_METRICS}


__all__ = [
    "Granularity", "AdvantageKind", "Surrogate", "Recipe", "RECIPES", "ADVANTAGE_GRANULARITY",
    "ADVANTAGE_FNS", "ESTIMATORS", "Estimator", "register_estimator", "register_recipe",
    "SURROGATES", "PAPER_PROTOCOL", "POLICY_METRICS", "Batch", "get_recipe",
    "check_reward_inputs", "recipe_for_reward", "Advantages", "compute_advantages", "policy_loss",
]
