"""Advantage estimators of the GRPO family, as pure jit-able functions.

Every function takes a padded batch: `[B]` sequence values or `[B, T]` token values with a bool `mask[B, T]`, and groups as `group_ids: int32[B]` plus a static
`num_groups` (ragged, non-contiguous groups allowed; statistics are segment sums over rows).
Sequence-level estimators return `[B]`, token-level ones `[B, T]`. All math is float32; token
results are exactly zero outside `mask`; no input that follows the conventions (empty
completions, groups of one, constant groups, fully masked rows) gives NaN or inf.

Nothing here is jitted: wrap calls in `jax.jit(fn, static_argnames=("num_groups", ...))`.
Each docstring gives its equations and the paper (and equation) they come from.
"""

from __future__ import annotations

import enum
import math

import chex
import jax
import jax.numpy as jnp

from botjax import ops
from botjax.ops import f32 as _f32
from botjax.types import Array

class GrpoScale(enum.StrEnum):
  """The std that `grpo` divides by. Plain strings work too.

  "group": the group's std (GRPO); "batch": the batch's std (TRL `scale_rewards="batch"`);
  "none": no division (Dr. GRPO).
  """
  GROUP = "group"
  BATCH = "batch"
  NONE = "none"


GRPO_SCALES = tuple(s.value for s in GrpoScale)


def grpo_scale(scale) -> GrpoScale:
  """Parses a GRPO scale (a `GrpoScale` or its string value)."""
  return ops.parse_enum(GrpoScale, scale, "GRPO scale")


def _check_groups(values: Array, group_ids, num_groups) -> Array:
  if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups < 1:
    raise ValueError(f"num_groups must be a positive Python int (static), got {num_groups!r}")
  group_ids = jnp.asarray(group_ids)
  if not jnp.issubdtype(group_ids.dtype, jnp.integer):
    raise ValueError(f"group_ids must be an integer array, got dtype {group_ids.dtype}")
  chex.assert_rank(group_ids, 1)
  if group_ids.shape[0] != values.shape[0]:
    raise ValueError(f"group_ids has {group_ids.shape[0]} rows but the values have "
                     f"{values.shape[0]} (shape {values.shape})")
  return group_ids.astype(jnp.int32)


def _check_eps(eps) -> None:
  if not eps >= 0.0:
    raise ValueError(f"eps must be >= 0, got {eps!r}")


def _safe_div(num: Array, den: Array) -> Array:
  """num / den where den > 0, else num / 1 (num is 0 there for every caller)."""
  return num / jnp.where(den > 0.0, den, 1.0)


def _group_varies(values: Array, valid: Array, group_ids: Array, num_groups: int) -> Array:
  """[B] bool: the valid values of the row's group are not all equal."""
  hi = ops.segment_max(values, group_ids, num_groups=num_groups, where=valid)
  lo = ops.segment_min(values, group_ids, num_groups=num_groups, where=valid)
  return ops.gather_groups(hi > lo, group_ids)


def _token_mask(values: Array, mask) -> Array:
  mask = jnp.asarray(mask, dtype=jnp.bool_)
  chex.assert_rank(mask, 2)
  if mask.shape != values.shape:
    raise ValueError(f"mask has shape {mask.shape}, expected {values.shape}")
  return mask


# --------------------------------------------------------------------------------------------
# Sequence-level estimators
# --------------------------------------------------------------------------------------------


def grpo(rewards, group_ids, *, num_groups: int, scale: str = "group", ddof: int = 1,
         eps: float = 1e-6, row_mask=None) -> Array:
  """Group-relative advantages Âᵢ = (Rᵢ − μ_g) / (σ_g + ε).

  μ_g is the mean reward of row i's group. σ_g depends on `scale`:
    "group": std of the group's rewards with `ddof` (1 = Bessel, as verl / TRL / tunix; 0 =
             the population std of the BoT-GRPO paper's eq. 1);
    "batch": std of all rewards of the batch with `ddof` (TRL `scale_rewards="batch"`);
    "none":  no division, Âᵢ = Rᵢ − μ_g (Dr. GRPO).
  Groups of one get 0 (TRL's convention); a constant group gets 0.

  Args:
    rewards: [B] float sequence rewards.
    group_ids: [B] int32 group of each row, in [0, num_groups).
    num_groups: number of groups (static).
    scale: a `GrpoScale` or its value "group", "batch" or "none".
    ddof: delta degrees of freedom of the std (1: unbiased, 0: population).
    eps: added to the std.
    row_mask: optional [B] bool; rows with False are left out of every statistic and get 0
      (e.g. padding rows of a batch filtered by dynamic sampling).

  Returns:
    [B] float32 advantages (broadcast them to the row's tokens).

  References:
    Shao et al., DeepSeekMath (GRPO), https://arxiv.org/abs/2402.03300
    Liu et al., Understanding R1-Zero-Like Training (Dr. GRPO), https://arxiv.org/abs/2503.20783
  """
  scale = grpo_scale(scale)
  if not isinstance(ddof, int) or ddof < 0:
    raise ValueError(f"ddof must be a non-negative int, got {ddof!r}")
  _check_eps(eps)
  r = _f32(rewards)
  chex.assert_rank(r, 1)
  group_ids = _check_groups(r, group_ids, num_groups)
  valid = jnp.ones(r.shape, jnp.bool_) if row_mask is None else jnp.asarray(row_mask, jnp.bool_)
  chex.assert_equal_shape([r, valid])

  count = ops.segment_count(group_ids, num_groups=num_groups, where=valid)   # [P]
  mean = ops.segment_mean(r, group_ids, num_groups=num_groups, where=valid)  # [P]
  varies = _group_varies(r, valid, group_ids, num_groups)                     # [B]
  # A constant group is centred to exactly 0: the rounded mean of equal values can differ
  # from them by an ulp, which ε would not hide once divided by a std of the same size.
  centred = jnp.where(valid & varies, r - ops.gather_groups(mean, group_ids), 0.0)  # [B]
  if scale is GrpoScale.GROUP:
    sq = ops.segment_sum(centred * centred, group_ids, num_groups=num_groups)
    std_g = jnp.sqrt(sq / jnp.maximum(count - ddof, 1.0))
    adv = _safe_div(centred, ops.gather_groups(std_g, group_ids) + eps)
  elif scale is GrpoScale.BATCH:
    std = jnp.sqrt(ops.masked_var(r, valid, ddof=ddof))
    adv = _safe_div(centred, std + eps)
  else:
    adv = centred
  in_group = ops.gather_groups(count, group_ids) >= 2.0
  return jnp.where(valid & in_group, adv, 0.0)


def dr_grpo(rewards, group_ids, *, num_groups: int, row_mask=None) -> Array:
  """Dr. GRPO advantages Âᵢ = Rᵢ − μ_g (no std); `grpo(..., scale="none")`.

  Args:
    rewards: [B] float sequence rewards.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    row_mask: optional [B] bool of rows that take part.

  Returns:
    [B] float32 advantages.

  References:
    Liu et al., Understanding R1-Zero-Like Training, https://arxiv.org/abs/2503.20783
  """
  return grpo(rewards, group_ids, num_groups=num_groups, scale="none", row_mask=row_mask)


def rloo(rewards, group_ids, *, num_groups: int, row_mask=None) -> Array:
  """Leave-one-out baseline Âᵢ = Rᵢ − (1/(G−1)) Σ_{j≠i} R_j = G/(G−1)·(Rᵢ − μ_g).

  Groups of one get 0 (tunix / verl `rloo_vectorized`). The advantages of a group sum to 0.

  Args:
    rewards: [B] float sequence rewards.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    row_mask: optional [B] bool of rows that take part (others get 0).

  Returns:
    [B] float32 advantages.

  References:
    Ahmadian et al., Back to Basics (RLOO), https://arxiv.org/abs/2402.14740
  """
  r = _f32(rewards)
  chex.assert_rank(r, 1)
  group_ids = _check_groups(r, group_ids, num_groups)
  valid = jnp.ones(r.shape, jnp.bool_) if row_mask is None else jnp.asarray(row_mask, jnp.bool_)
  count = ops.gather_groups(ops.segment_count(group_ids, num_groups=num_groups, where=valid),
                            group_ids)
  total = ops.gather_groups(
      ops.segment_sum(jnp.where(valid, r, 0.0), group_ids, num_groups=num_groups), group_ids)
  baseline = (total - r) / jnp.maximum(count - 1.0, 1.0)
  varies = _group_varies(r, valid, group_ids, num_groups)   # constant group: exactly 0
  return jnp.where(valid & varies & (count >= 2.0), r - baseline, 0.0)


def reinforce_pp_baseline(rewards, mask, group_ids, *, num_groups: int, eps: float = 1e-8,
                          ddof: int = 1) -> Array:
  """REINFORCE++-baseline: Aᵢ = Rᵢ − μ_g on every token, then global masked whitening.

  Â_{i,t} = (A_{i,t} − mean_m A) / sqrt(var_m A + ε), mean and variance over all scored tokens
  of the batch (verl `masked_whiten`, Bessel-corrected by default).

  Args:
    rewards: [B] float sequence rewards.
    mask: [B, T] bool scored tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    eps: added to the variance (verl: 1e-8).
    ddof: of the token variance (verl: 1).

  Returns:
    [B, T] float32 advantages, zero outside `mask`.

  References:
    Hu, REINFORCE++, https://arxiv.org/abs/2501.03262
  """
  _check_eps(eps)
  centred = grpo(rewards, group_ids, num_groups=num_groups, scale="none")
  mask = jnp.asarray(mask, jnp.bool_)
  chex.assert_rank(mask, 2)
  chex.assert_axis_dimension(mask, 0, centred.shape[0])
  tokens = jnp.where(mask, centred[:, None], 0.0)
  return ops.masked_whiten(tokens, mask, ddof=ddof, eps=eps)


# --------------------------------------------------------------------------------------------
# BoT-GRPO
# --------------------------------------------------------------------------------------------


def bot_token_rewards(seq_rewards, local_rewards, mask, *, w_global: float = 3.0,
                      w_local: float = 0.5) -> Array:
  """BoT-GRPO token rewards (eq. 4): r⁽ᵏ⁾_t = w_g·G_k + w_s·S⁽ᵏ⁾_t on every scored token.

  The global (sequence) reward is broadcast to every scored token and the local signal added.

  Args:
    seq_rewards: [B] float global rewards G_k.
    local_rewards: [B, T] float local signal S_t (or None for zeros).
    mask: [B, T] bool scored tokens.
    w_global: w_g (paper default 3.0).
    w_local: w_s (paper default 0.5).

  Returns:
    [B, T] float32 token rewards, zero outside `mask`.

  References:
    Yang et al., BoT-GRPO: Efficient Process-Reward RL for Reasoning via Bag-of-Token
    Aggregation, arXiv 2610.09804, eq. 4.
  """
  g = _f32(seq_rewards)
  chex.assert_rank(g, 1)
  mask = jnp.asarray(mask, jnp.bool_)
  chex.assert_rank(mask, 2)
  chex.assert_axis_dimension(mask, 0, g.shape[0])
  r = w_global * g[:, None] + jnp.zeros(mask.shape, jnp.float32)
  if local_rewards is not None:
    s = _f32(local_rewards)
    chex.assert_equal_shape([s, mask])
    r = r + w_local * jnp.where(mask, s, 0.0)
  return jnp.where(mask, r, 0.0)


BOT_WEIGHTINGS = ("inverse_length", "token", "row")


def bot_grpo(token_rewards, mask, group_ids, *, num_groups: int, eps: float = 1e-6,
             weighting: str = "inverse_length") -> Array:
  """BoT-GRPO advantages: 1/L-weighted pooled group statistics over all tokens (eq. 1–3).

    μ_g  = (1/K) Σ_k (1/L_k) Σ_t r⁽ᵏ⁾_t
    σ_g² = (1/K) Σ_k (1/L_k) Σ_t (r⁽ᵏ⁾_t − μ_g)²      (population, length-weighted)
    A⁽ᵏ⁾_t = (r⁽ᵏ⁾_t − μ_g) / (σ_g + ε)

  K counts the group's non-empty rows (rows with L_k = 0 are dropped from the pool). A group of
  one non-empty row takes its statistics from its own tokens, so its advantages are not zero
  when its token rewards vary. With a zero local signal this is GRPO with population std.

  `weighting` chooses the weight of each token in μ_g and σ_g, to separate the paper's 1/L_k
  weighting from its token-level pooling (the paper's Limitations say it cannot; everything but
  the statistics stays the same, A = (r − μ_g) / (σ_g + ε) on every scored token):

    "inverse_length"  w_k = 1/L_k on each token of row k (the paper, eq. 2): every row weighs 1
                      in the pool, whatever its length.
    "token"           w = 1 on every token: μ_g and σ_g are the plain mean and population std of
                      the group's pooled tokens, so a row weighs L_k (long rows dominate).
    "row"             no pooling of tokens: the statistics of the rows' mean token rewards m_k,
                      one value per row, each row weighs 1 — μ_g = (1/K) Σ_k m_k (equal to the
                      paper's μ_g) and σ_g² = (1/K) Σ_k (m_k − μ_g)², the between-row variance
                      only (the paper's σ_g² adds the rows' own spread of token rewards). A group
                      whose row means have σ_g ≤ ε (a single row, equal means) gets 0, as GRPO
                      gives a constant group.

  The general form: μ_g = Σ_k Σ_t w_{k,t} r⁽ᵏ⁾_t / Σ_k Σ_t w_{k,t}, σ_g² likewise of
  (r − μ_g)²; "inverse_length" and "token" are that form with w = 1/L_k and w = 1.

  Cost: one fused reduction over the [B, T] tokens to per-row moments (count, Σ, Σ² of the
  rewards shifted by a reward of their group), segment sums over the B rows (no scatter over
  B·T elements), and one elementwise pass that writes the result.

  The result carries no gradient with respect to `token_rewards` (stop_gradient), like every
  advantage fed to the policy losses.

  Args:
    token_rewards: [B, T] float token rewards (e.g. from `bot_token_rewards`).
    mask: [B, T] bool scored tokens; L_k = Σ_t mask.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    eps: added to σ_g (paper: 1e-6).
    weighting: "inverse_length" (the paper), "token" or "row" (above).

  Returns:
    [B, T] float32 advantages, zero outside `mask`.

  References:
    Yang et al., BoT-GRPO, arXiv 2610.09804, eq. 1–3 (the weightings other than
    "inverse_length" are botjax's ablation of them).
  """
  _check_eps(eps)
  if weighting not in BOT_WEIGHTINGS:
    raise ValueError(f"weighting must be one of {BOT_WEIGHTINGS}, got {weighting!r}")
  # Advantages are constants of the policy loss; the variadic reduction below has no JVP rule.
  r = jax.lax.stop_gradient(_f32(token_rewards))
  chex.assert_rank(r, 2)
  mask = _token_mask(r, mask)
  group_ids = _check_groups(r, group_ids, num_groups)
  if r.shape[1] == 0:   # no tokens at all (static shape): nothing to normalise
    return jnp.zeros(r.shape, jnp.float32)

  # Shift every group by one of its own token rewards c_g (the first scored token of one of
  # its rows). A constant group then has x ≡ 0 exactly, so its advantages are exactly 0 (a
  # rounded mean would leave ulp-sized residues that ε does not hide), and the one-pass
  # moments below are well conditioned: |mean_g x| is of the order of the group's spread.
  first = jnp.argmax(mask, axis=-1)[:, None]                       # [B, 1] first scored token
  has_first = jnp.take_along_axis(mask, first, axis=1)[:, 0]
  r_first = jnp.take_along_axis(r, first, axis=1)[:, 0]
  ref_g = ops.segment_max(r_first, group_ids, num_groups=num_groups, where=has_first)
  ref = ops.gather_groups(jnp.where(jnp.isfinite(ref_g), ref_g, 0.0), group_ids)   # [B]
  x = jnp.where(mask, r - ref[:, None], 0.0)                       # [B, T]

  # One pass over the tokens: per-row count, Σx and Σx² as a single variadic reduction (XLA
  # CPU runs three separate row sums several times slower); then segment sums over rows.
  zero = jnp.zeros((), jnp.float32)
  length, row_s1, row_s2 = jax.lax.reduce(
      (mask.astype(jnp.float32), x, x * x), (zero, zero, zero),
      lambda a, b: (a[0] + b[0], a[1] + b[1], a[2] + b[2]), (1,))  # [B] each
  inv_len = 1.0 / jnp.maximum(length, 1.0)
  row_m1 = row_s1 * inv_len                                        # (1/L_k) Σ_t x
  row_m2 = row_s2 * inv_len                                        # (1/L_k) Σ_t x²
  if weighting == "token":                                         # w = 1: Σ over tokens / Σ L
    n_g = jnp.maximum(ops.segment_sum(length, group_ids, num_groups=num_groups), 1.0)
    m1_g = ops.segment_sum(row_s1, group_ids, num_groups=num_groups) / n_g
    m2_g = ops.segment_sum(row_s2, group_ids, num_groups=num_groups) / n_g
  else:                                                            # every non-empty row weighs 1
    k = jnp.maximum(ops.segment_count(group_ids, num_groups=num_groups, where=length > 0.0), 1.0)
    m1_g = ops.segment_sum(row_m1, group_ids, num_groups=num_groups) / k   # μ_g − c_g
    m2_g = ops.segment_sum(row_m2, group_ids, num_groups=num_groups) / k
  if weighting == "row":     # two passes, so that equal row means give exactly σ_g = 0
    dev = jnp.where(length > 0.0, row_m1 - ops.gather_groups(m1_g, group_ids), 0.0)
    var_g = ops.segment_sum(dev * dev, group_ids, num_groups=num_groups) / k
  else:
    var_g = jnp.maximum(m2_g - m1_g * m1_g, 0.0)                   # σ_g², shift-invariant
  denom = jnp.sqrt(var_g) + eps
  inv = 1.0 / jnp.where(denom > 0.0, denom, 1.0)
  if weighting == "row":     # a constant group: 0, as GRPO (its tokens may still vary)
    inv = jnp.where(jnp.sqrt(var_g) > eps, inv, 0.0)
  scale = ops.gather_groups(inv, group_ids)                        # [B]
  mean = ref + ops.gather_groups(m1_g, group_ids)                  # [B] μ_g (ref + 0 if constant)
  # From r, not x: x then feeds only the reduction and is fused into it, never materialised.
  return jnp.where(mask, (r - mean[:, None]) * scale[:, None], 0.0)


def pure_step_credit(local_rewards, step_mask, token_step, mask, *,
                     temperature: float = 0.1) -> Array:
  """PURE's min-form credit of a token-level signal, taken over the steps of each row.

    v_{i,k} = mean of S_{i,t} over the scored tokens t of step k      (the step's local value)
    w_{i,k} = exp(−v_{i,k}/T) / Σ_{k'} exp(−v_{i,k'}/T)              (softmin over the row's steps)
    C_{i,t} = Σ_{k ≥ k(t)} w_{i,k} · v_{i,k}   on the tokens of step k(t); 0 on tokens of no step

  Σ_k w_k v_k tends to min_k v_k as T → 0, so a step is credited with (about) the worst step
  value still ahead of it instead of the sum of them. C replaces S_t in the BoT-GRPO token reward
  w_g·G + w_s·C_t of the `bot_pure` recipe; tokens of no step (a `<think>` block, a preamble, the
  answer) keep only the global term w_g·G. [INFERRED] reading of the BoT-GRPO paper's PURE port
  (arXiv 2610.09804 §4.1, "the same global + token-level reward"): PURE's steps stay the units
  of its softmin and return-to-go, and their values are read from the token-level reward. The
  units are steps, not tokens: over tokens, the unscored text between steps (local value 0)
  would take the softmin of every row whose steps are all positive, and its good steps would be
  credited nothing.

  Args:
    local_rewards: [B, T] float local signal S_t (step verdicts or line penalties on tokens).
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none.
    mask: [B, T] bool scored tokens.
    temperature: T > 0 (PURE: 0.1).

  Returns:
    [B, T] float32 credited local values, zero outside `mask`, on tokens of no step, and on
    steps without scored tokens (which take no part in the softmin).

  References:
    Cheng et al., Stop Summation: Min-Form Credit Assignment Is All Process Reward Model Needs
    for Reasoning (PURE), https://arxiv.org/abs/2504.15275
  """
  if not temperature > 0.0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  x = _f32(local_rewards)
  chex.assert_rank(x, 2)
  mask = _token_mask(x, mask)
  step_mask = jnp.asarray(step_mask, jnp.bool_)
  chex.assert_rank(step_mask, 2)
  token_step = jnp.asarray(token_step, jnp.int32)
  chex.assert_equal_shape([token_step, mask])
  b, num_steps = step_mask.shape
  if b != x.shape[0]:
    raise ValueError(f"step_mask has {b} rows, local_rewards {x.shape[0]}")
  if num_steps == 0:
    return jnp.zeros(x.shape, jnp.float32)
  in_step = mask & ~stepless_tokens(step_mask, token_step, mask)
  # One segment per (row, step); tokens of no step go to the spare segment b·S.
  seg = jnp.where(in_step, jnp.arange(b, dtype=jnp.int32)[:, None] * num_steps + token_step,
                  b * num_steps)
  n = b * num_steps + 1
  sums = ops.segment_sum(jnp.where(in_step, x, 0.0).ravel(), seg.ravel(), num_groups=n)
  counts = ops.segment_count(seg.ravel(), num_groups=n, where=in_step.ravel())
  sums, counts = sums[:-1].reshape(b, num_steps), counts[:-1].reshape(b, num_steps)
  scored = step_mask & (counts > 0.0)
  values = sums / jnp.maximum(counts, 1.0)
  credit = ops.suffix_sum(pure_min_form(values, scored, temperature=temperature))
  return steps_to_tokens(credit, scored, token_step, mask)


# --------------------------------------------------------------------------------------------
# Step-level estimators
# --------------------------------------------------------------------------------------------


def _check_steps(step_rewards, step_mask) -> tuple[Array, Array]:
  r = _f32(step_rewards)
  chex.assert_rank(r, 2)
  step_mask = jnp.asarray(step_mask, jnp.bool_)
  if step_mask.shape != r.shape:
    raise ValueError(f"step_mask has shape {step_mask.shape}, expected {r.shape}")
  if r.shape[1] < 1:
    raise ValueError(f"step arrays need at least one step column, got shape {r.shape}")
  return r, step_mask


def steps_to_tokens(step_values, step_mask, token_step, mask) -> Array:
  """Gives every token the value of its step: out[i, t] = step_values[i, token_step[i, t]].

  Tokens get 0 where `mask` is False, where `token_step` is -1 (or outside [0, S)), and where
  their step is not valid in `step_mask`.

  Args:
    step_values: [B, S] float per-step values.
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none.
    mask: [B, T] bool scored tokens.

  Returns:
    [B, T] float32 token values, zero outside `mask`.
  """
  values, step_mask = _check_steps(step_values, step_mask)
  token_step = jnp.asarray(token_step, jnp.int32)
  mask = jnp.asarray(mask, jnp.bool_)
  chex.assert_rank([token_step, mask], 2)
  chex.assert_equal_shape([token_step, mask])
  chex.assert_axis_dimension(mask, 0, values.shape[0])
  num_steps = values.shape[1]
  in_range = (token_step >= 0) & (token_step < num_steps)
  idx = jnp.clip(token_step, 0, num_steps - 1)
  gathered = jnp.take_along_axis(values, idx, axis=1)
  step_ok = jnp.take_along_axis(step_mask, idx, axis=1)
  return jnp.where(mask & in_range & step_ok, gathered, 0.0)


def stepless_tokens(step_mask, token_step, mask) -> Array:
  """[B, T] bool: scored tokens that belong to no valid step.

  Such tokens are a reasoning model's `<think>` block or a preamble before the first step, text
  between or after steps (e.g. a `<final>` answer block), and every token of a row without
  steps: `mask` and (`token_step` is -1, outside [0, S), or names a step that `step_mask` marks
  invalid).

  Args:
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none.
    mask: [B, T] bool scored tokens.

  Returns:
    [B, T] bool.
  """
  step_mask = jnp.asarray(step_mask, jnp.bool_)
  chex.assert_rank(step_mask, 2)
  token_step = jnp.asarray(token_step, jnp.int32)
  mask = jnp.asarray(mask, jnp.bool_)
  chex.assert_rank([token_step, mask], 2)
  chex.assert_equal_shape([token_step, mask])
  num_steps = step_mask.shape[1]
  in_range = (token_step >= 0) & (token_step < num_steps)
  idx = jnp.clip(token_step, 0, max(num_steps - 1, 0))
  step_ok = jnp.take_along_axis(step_mask, idx, axis=1) if num_steps else jnp.zeros_like(mask)
  return mask & ~(in_range & step_ok)


def _fill_stepless(tokens: Array, stepless, step_mask, token_step, mask) -> Array:
  """tokens with the [B] values `stepless` written on the scored tokens of no step."""
  if stepless is None:
    return tokens
  v = _f32(stepless)
  chex.assert_shape(v, (tokens.shape[0],))
  return jnp.where(stepless_tokens(step_mask, token_step, mask), v[:, None], tokens)


def step_mean(step_rewards, step_mask) -> Array:
  """Mean of each row's valid step rewards: (1/S_i) Σ_k r_{i,k}; 0 for a row without steps.

  Args:
    step_rewards: [B, S] float step rewards.
    step_mask: [B, S] bool valid steps.

  Returns:
    [B] float32.
  """
  r, step_mask = _check_steps(step_rewards, step_mask)
  count = jnp.sum(step_mask, axis=-1, dtype=jnp.float32)
  return jnp.sum(jnp.where(step_mask, r, 0.0), axis=-1) / jnp.maximum(count, 1.0)


def normalize_group_steps(step_values, step_mask, group_ids, *, num_groups: int,
                          eps: float = 1e-6, ddof: int = 0) -> Array:
  """Z-scores step values over all valid steps of each group: (x − mean_g) / (std_g + ε).

  Args:
    step_values: [B, S] float per-step values.
    step_mask: [B, S] bool valid steps.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    eps: added to the std.
    ddof: of the std over the group's Σ S_i step values (0: population).

  Returns:
    [B, S] float32 normalised values, zero at invalid steps; 0 for a group whose valid steps
    all hold the same value.
  """
  _check_eps(eps)
  x, step_mask = _check_steps(step_values, step_mask)
  group_ids = _check_groups(x, group_ids, num_groups)
  row_count = jnp.sum(step_mask, axis=-1, dtype=jnp.float32)
  row_sum = jnp.sum(jnp.where(step_mask, x, 0.0), axis=-1)
  count = ops.segment_sum(row_count, group_ids, num_groups=num_groups)
  mean_g = ops.segment_sum(row_sum, group_ids, num_groups=num_groups) / jnp.maximum(count, 1.0)
  hi = ops.segment_max(jnp.max(jnp.where(step_mask, x, -jnp.inf), axis=-1), group_ids,
                       num_groups=num_groups)
  lo = ops.segment_min(jnp.min(jnp.where(step_mask, x, jnp.inf), axis=-1), group_ids,
                       num_groups=num_groups)
  varies = ops.gather_groups(hi > lo, group_ids)     # constant group: exactly 0
  centred = jnp.where(step_mask, x - ops.gather_groups(mean_g, group_ids)[:, None], 0.0)
  sq = ops.segment_sum(jnp.sum(centred * centred, axis=-1), group_ids, num_groups=num_groups)
  std_g = jnp.sqrt(sq / jnp.maximum(count - ddof, 1.0))
  denom = ops.gather_groups(std_g, group_ids) + eps
  scale = jnp.where(varies, 1.0 / jnp.where(denom > 0.0, denom, 1.0), 0.0)
  return centred * scale[:, None]


def process_grpo(step_rewards, step_mask, token_step, mask, group_ids, *, num_groups: int,
                 eps: float = 1e-6, ddof: int = 0, stepless=None) -> Array:
  """DeepSeekMath process supervision: z-score every step of the group, then suffix-sum.

    r̃_{i,k} = (r_{i,k} − mean(R_g)) / (std(R_g) + ε),  R_g = all valid steps of the group
    A_{i,t} = Σ_{k ≥ j(t)} r̃_{i,k}                     (j(t) = the step of token t)
    A_{i,t} = stepless_i                                (tokens of no step, see `stepless_tokens`)

  i.e. a token of step j receives the normalised rewards of its step and every later step.
  The paper does not say which std; this uses the population std (`ddof=0`), as VeriGate
  does for the same pool. Tokens of no step (a `<think>` block, a preamble, a `<final>` block)
  carry no step reward; the recipes give them the sequence-level outcome advantage
  `grpo(rewards)` through `stepless`, as the BoT-GRPO backbone gives tokens without a local
  signal the global term (arXiv 2610.09804, eq. 4).

  Args:
    step_rewards: [B, S] float step rewards (step k ends before step k+1 starts).
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none (those tokens get 0).
    mask: [B, T] bool scored tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    eps: added to the std.
    ddof: of the std (0: population).
    stepless: optional [B] float advantage of the row's tokens that belong to no step (e.g.
      `grpo(rewards)`); None leaves them at 0.

  Returns:
    [B, T] float32 advantages, zero outside `mask`.

  References:
    Shao et al., DeepSeekMath §4.1.3, https://arxiv.org/abs/2402.03300
  """
  z = normalize_group_steps(step_rewards, step_mask, group_ids, num_groups=num_groups, eps=eps,
                            ddof=ddof)
  tokens = steps_to_tokens(ops.suffix_sum(z), step_mask, token_step, mask)
  return _fill_stepless(tokens, stepless, step_mask, token_step, mask)


def step_return_advantages(step_rewards, step_mask, token_step, mask, group_ids, *,
                           num_groups: int, eps: float = 1e-6) -> Array:
  """Return-to-go of step rewards, normalised over all steps of the group, on tokens.

    c_{i,j} = Σ_{k ≥ j} r_{i,k}                                 (future-cumulated step value)
    Ã_{i,j} = (c_{i,j} − mean_g c) / (popstd_g c + ε)          (over all Σ S_i valid steps)
    every token of step j of row i receives Ã_{i,j}

  This is VeriGate's PRM branch (S2–S3) and the group normalisation of `pure_grpo`.

  Args:
    step_rewards: [B, S] float step rewards.
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none (those tokens get 0).
    mask: [B, T] bool scored tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    eps: added to the population std.

  Returns:
    [B, T] float32 advantages, zero outside `mask`.

  References:
    Agrawal et al., VeriGate, https://arxiv.org/abs/2605.30451
  """
  z = _normalized_step_returns(step_rewards, step_mask, group_ids, num_groups=num_groups,
                               eps=eps)
  return steps_to_tokens(z, step_mask, jnp.asarray(token_step, jnp.int32), mask)


def _normalized_step_returns(step_rewards, step_mask, group_ids, *, num_groups: int,
                             eps: float) -> Array:
  """[B, S] (c_{i,j} − mean_g c) / (popstd_g c + ε) with c_{i,j} = Σ_{k ≥ j} r_{i,k}."""
  r, step_mask = _check_steps(step_rewards, step_mask)
  returns = ops.suffix_sum(jnp.where(step_mask, r, 0.0))
  return normalize_group_steps(returns, step_mask, group_ids, num_groups=num_groups, eps=eps,
                               ddof=0)


def pure_min_form(step_rewards, step_mask, *, temperature: float = 0.1) -> Array:
  """PURE min-form credit assignment over the valid steps of one response.

    w_{i,k} = exp(−r_{i,k}/T) / Σ_{k'} exp(−r_{i,k'}/T)     (masked softmax over valid steps)
    r*_{i,k} = w_{i,k} · r_{i,k}                            Σ_k r*_{i,k} → min_k r_{i,k} as T → 0

  Args:
    step_rewards: [B, S] float step rewards (PURE: PRM p(correct) − p(incorrect) ∈ [−1, 1]).
    step_mask: [B, S] bool valid steps.
    temperature: T > 0 (PURE: 0.1).

  Returns:
    [B, S] float32 transformed step rewards, zero at invalid steps (and for rows without
    steps). A row with one step keeps its reward (weight 1).

  References:
    Cheng et al., Stop Summation: Min-Form Credit Assignment Is All Process Reward Model Needs
    for Reasoning (PURE), https://arxiv.org/abs/2504.15275
  """
  if not temperature > 0.0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  r, step_mask = _check_steps(step_rewards, step_mask)
  r = jnp.where(step_mask, r, 0.0)
  w = ops.masked_softmax(-r / temperature, step_mask, axis=-1)
  return jnp.where(step_mask, w * r, 0.0)


def pure_grpo(step_rewards, step_mask, token_step, mask, group_ids, *, num_groups: int,
              temperature: float = 0.1, eps: float = 1e-6, outcome_rewards=None,
              outcome_coef: float = 1.0, stepless=None) -> Array:
  """PURE on a GRPO backbone: min-form step rewards → return-to-go → group normalisation.

    r*_{i,k} = pure_min_form(r)_{i,k}  (+ outcome_coef·R_i on the row's last valid step)
    c_{i,j}  = Σ_{k ≥ j} r*_{i,k}
    A_{i,t}  = (c_{i,j(t)} − mean_g c) / (popstd_g c + ε)   over all valid steps of the group
    A_{i,t}  = stepless_i                                    tokens of no step

  [INFERRED]: the GRPO-backbone normalisation of the BoT-GRPO paper's PURE port is not
  published. Return-to-go is taken *before* the group normalisation, as in both PURE code branches
  (returns, then baseline, then whitening) and VeriGate; normalising first (DeepSeekMath) would
  make a response's first-token advantage grow with its number of steps, the summation bias that
  min-form removes. The group statistic is the mean and population std over all valid steps of
  the group, like `step_return_advantages`. The optional outcome (verifiable) reward is added to
  the last step, as PURE's PRMVR mode adds it at the EOS token, so it enters every step's return.
  Tokens of no step (`stepless_tokens`: a `<think>` block, a preamble, a `<final>` block) get
  `stepless`; the recipes pass the sequence-level outcome advantage grpo(outcome_coef·R).

  Args:
    step_rewards: [B, S] float PRM step rewards.
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none (those tokens get 0).
    mask: [B, T] bool scored tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    temperature: softmin temperature (PURE: 0.1).
    eps: added to the population std.
    outcome_rewards: optional [B] float verifiable reward.
    outcome_coef: its weight (PURE `verifiable_reward_coef` = 1.0).
    stepless: optional [B] float advantage of the row's tokens that belong to no step; None
      leaves them at 0.

  Returns:
    [B, T] float32 advantages, zero outside `mask`.

  References:
    Cheng et al., PURE, https://arxiv.org/abs/2504.15275
  """
  r_star = pure_min_form(step_rewards, step_mask, temperature=temperature)
  step_mask = jnp.asarray(step_mask, jnp.bool_)
  if outcome_rewards is not None:
    outcome = _f32(outcome_rewards)
    chex.assert_shape(outcome, (r_star.shape[0],))
    num_steps = r_star.shape[1]
    # Index of the last valid step: the largest k with step_mask[i, k].
    last = jnp.max(jnp.where(step_mask, jnp.arange(num_steps, dtype=jnp.int32)[None, :], -1),
                   axis=-1)
    is_last = jnp.arange(num_steps, dtype=jnp.int32)[None, :] == last[:, None]
    r_star = r_star + jnp.where(is_last & step_mask, outcome_coef * outcome[:, None], 0.0)
  tokens = step_return_advantages(r_star, step_mask, token_step, mask, group_ids,
                                  num_groups=num_groups, eps=eps)
  return _fill_stepless(tokens, stepless, step_mask, token_step, mask)


def verigate(verifier_rewards, step_rewards, step_mask, token_step, mask, group_ids, *,
             num_groups: int, eps: float = 1e-6, correct_threshold: float = 0.5,
             ddof: int = 1) -> Array:
  """VeriGate: GRPO on mixed groups, PRM return-to-go advantages on all-wrong groups.

  Per group g (S1 gate on the verifier rewards v):
    mixed (some v_i ≠ v_j):   Ã_{i,t} = grpo(v, ddof=ddof)_i on every token (ε = 1e-6)
    all wrong (all v_i < correct_threshold, e.g. all 0):
        c_{i,j} = Σ_{k ≥ j} r_{i,k};  Ã_{i,j} = (c_{i,j} − mean_g c) / (popstd_g c + ε),
        mean and std over all valid steps of the group; tokens of step j get Ã_{i,j};
        tokens of no step (`stepless_tokens`) get the row's sequence-level PRM value
        Ã_{i,first}, the normalised return of its whole trajectory (0 without steps)
    all right (constant v ≥ correct_threshold): 0

  In an all-wrong group the outcome carries no signal and the PRM takes its place, so the
  sequence-level term of a token outside the steps (a `<think>` block, a preamble, a `<final>`
  block) is the PRM's value of the whole trajectory, c_{i,1} = Σ_k r_{i,k}, normalised with the
  group's step statistics [INFERRED: the paper does not discuss tokens outside steps].

  Args:
    verifier_rewards: [B] float verifier rewards (binary in the paper).
    step_rewards: [B, S] float PRM step scores.
    step_mask: [B, S] bool valid steps.
    token_step: [B, T] int32 step of each token, -1 for none (those tokens get 0).
    mask: [B, T] bool scored tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    eps: added to the population std of the PRM branch.
    correct_threshold: a constant group counts as all wrong when its reward is below this
      [INFERRED: the paper's verifier is binary {0, 1}].
    ddof: of the group std of the mixed branch's GRPO advantages (1: Bessel; 0: population,
      the BoT-GRPO paper's eq. 1).

  Returns:
    [B, T] float32 advantages, zero outside `mask`.

  References:
    Agrawal et al., VeriGate, https://arxiv.org/abs/2605.30451
  """
  v = _f32(verifier_rewards)
  chex.assert_rank(v, 1)
  group_ids = _check_groups(v, group_ids, num_groups)
  mask = jnp.asarray(mask, jnp.bool_)
  chex.assert_rank(mask, 2)
  chex.assert_axis_dimension(mask, 0, v.shape[0])
  v_max = ops.gather_groups(ops.segment_max(v, group_ids, num_groups=num_groups), group_ids)
  v_min = ops.gather_groups(ops.segment_min(v, group_ids, num_groups=num_groups), group_ids)
  mixed = v_max > v_min
  all_wrong = ~mixed & (v_max < correct_threshold)
  seq_adv = grpo(v, group_ids, num_groups=num_groups, ddof=ddof)
  z = _normalized_step_returns(step_rewards, step_mask, group_ids, num_groups=num_groups,
                               eps=eps)                                        # [B, S]
  step_mask = jnp.asarray(step_mask, jnp.bool_)
  first = jnp.argmax(step_mask, axis=-1)[:, None]                             # first valid step
  trajectory = jnp.where(jnp.any(step_mask, axis=-1), jnp.take_along_axis(z, first, axis=1)[:, 0],
                         0.0)                                                 # [B]
  token_step = jnp.asarray(token_step, jnp.int32)
  prm_adv = _fill_stepless(steps_to_tokens(z, step_mask, token_step, mask), trajectory,
                           step_mask, token_step, mask)
  out = jnp.where(mixed[:, None], seq_adv[:, None], 0.0)
  out = jnp.where(all_wrong[:, None], prm_adv, out)
  return jnp.where(mask, out, 0.0)


# --------------------------------------------------------------------------------------------
# ReCo, BPPO, DAPO helpers
# --------------------------------------------------------------------------------------------


def reco_response_weights(old_logp, mask, group_ids, *, num_groups: int,
                          max_weight: float = 5.0) -> Array:
  """ReCo expected-occurrence response weights wᵢ = min(1 / (G_g · π̄_old(oᵢ|q)), w_max).

  π̄_old(oᵢ|q) = exp((1/Lᵢ) Σ_t old_logp[i, t]) is the length-normalised sequence probability
  [INFERRED: the raw sequence probability makes 1/(Gπ) explode]; G_g is the
  number of rows in row i's group. Computed in log space, so it never overflows.

  Args:
    old_logp: [B, T] float behaviour-policy log-probs.
    mask: [B, T] bool scored tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    max_weight: w_max > 0 (the reproduction uses 5).

  Returns:
    [B] float32 weights in (0, max_weight]; empty rows get 0.

  References:
    Park et al., ReCo, https://arxiv.org/abs/2607.26862
  """
  if not max_weight > 0.0:
    raise ValueError(f"max_weight must be > 0, got {max_weight!r}")
  lp = _f32(old_logp)
  chex.assert_rank(lp, 2)
  mask = _token_mask(lp, mask)
  group_ids = _check_groups(lp, group_ids, num_groups)
  length = jnp.sum(mask, axis=-1, dtype=jnp.float32)
  mean_lp = jnp.sum(jnp.where(mask, lp, 0.0), axis=-1) / jnp.maximum(length, 1.0)
  size = ops.gather_groups(ops.segment_count(group_ids, num_groups=num_groups), group_ids)
  log_w = -mean_lp - jnp.log(jnp.maximum(size, 1.0))
  w = jnp.exp(jnp.minimum(log_w, math.log(max_weight)))
  return jnp.where(length > 0.0, w, 0.0)


def bppo_loss_mask(rewards, mask, group_ids, *, num_groups: int, prefix_fraction: float = 0.5,
                   min_prefix: int = 32, correct_threshold: float = 0.5) -> Array:
  """BPPO loss mask: the prefixes of the shortest correct and shortest incorrect completion.

  Per group: C = non-empty rows with Rᵢ > correct_threshold, W = the other non-empty rows. If
  C or W is empty the group contributes nothing. Otherwise c* = argmin_{C} Lᵢ and
  w* = argmin_{W} Lᵢ (ties: lowest row index), and each keeps its first
  Pᵢ = min(Lᵢ, max(min_prefix, ⌈prefix_fraction·Lᵢ⌉)) scored tokens (counted along the mask;
  ⌈·⌉ in float32). Advantages stay those of the full group.

  What is implemented and what is not. The BPPO paper's full text and code are not public; its
  abstract specifies the update unit (shortest correct + shortest incorrect completion of a
  group), full-group advantage normalisation, and that only response prefixes are updated.
  Those are implemented. Not specified, so [INFERRED] here: the prefix length rule above
  (ρ_prefix = 0.5, P_min = 32 are suggestions, not the paper's values) and the class threshold
  for non-binary rewards. Not implemented: the abstract's "adaptive completion scheduling"
  (how many completions are sampled per prompt and when), whose rule the abstract does not give;
  groups are sampled with the run's fixed group size, and a group without both classes
  contributes nothing.

  Args:
    rewards: [B] float rewards (binary {0, 1} in the paper).
    mask: [B, T] bool scored tokens.
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    prefix_fraction: ρ_prefix in (0, 1] (suggested 0.5).
    min_prefix: P_min ≥ 0 tokens (suggested 32).
    correct_threshold: rewards above it count as correct.

  Returns:
    [B, T] bool loss mask, a subset of `mask`.

  References:
    Zhao et al., BPPO: Binary Prefix Policy Optimization, https://arxiv.org/abs/2605.28028
  """
  if not 0.0 < prefix_fraction <= 1.0:
    raise ValueError(f"prefix_fraction must be in (0, 1], got {prefix_fraction!r}")
  if not isinstance(min_prefix, int) or min_prefix < 0:
    raise ValueError(f"min_prefix must be a non-negative int, got {min_prefix!r}")
  r = _f32(rewards)
  chex.assert_rank(r, 1)
  group_ids = _check_groups(r, group_ids, num_groups)
  mask = jnp.asarray(mask, jnp.bool_)
  chex.assert_rank(mask, 2)
  chex.assert_axis_dimension(mask, 0, r.shape[0])
  length = jnp.sum(mask, axis=-1, dtype=jnp.int32)
  rows = jnp.arange(r.shape[0], dtype=jnp.int32)
  big = jnp.iinfo(jnp.int32).max

  def shortest(member: Array) -> tuple[Array, Array]:
    min_len = jax.ops.segment_min(jnp.where(member, length, big), group_ids,
                                  num_segments=num_groups)
    is_min = member & (length == ops.gather_groups(min_len, group_ids))
    first = jax.ops.segment_min(jnp.where(is_min, rows, big), group_ids, num_segments=num_groups)
    has = jax.ops.segment_max(member.astype(jnp.int32), group_ids, num_segments=num_groups) > 0
    return is_min & (rows == ops.gather_groups(first, group_ids)), ops.gather_groups(has,
                                                                                     group_ids)

  nonempty = length > 0
  correct = r > correct_threshold
  pick_c, has_c = shortest(nonempty & correct)
  pick_w, has_w = shortest(nonempty & ~correct)
  selected = (pick_c | pick_w) & has_c & has_w
  prefix = jnp.ceil(prefix_fraction * length.astype(jnp.float32)).astype(jnp.int32)
  prefix = jnp.minimum(length, jnp.maximum(min_prefix, prefix))
  rank = jnp.cumsum(mask, axis=-1, dtype=jnp.int32) - 1   # position among the scored tokens
  return mask & selected[:, None] & (rank < prefix[:, None])


def dapo_overlong_penalty(lengths, *, max_length: int, cache_length: int,
                          penalty_factor: float = 1.0) -> Array:
  """DAPO soft overlong punishment (eq. 13), in tokens.

    R_len(y) = 0                                   |y| ≤ L_max − L_cache
             = ((L_max − L_cache) − |y|) / L_cache  L_max − L_cache < |y| ≤ L_max
             = −1                                  |y| > L_max
  times `penalty_factor`; e.g. |y| = L_max − L_cache/2 gives −0.5.

  Args:
    lengths: [B] int or float response lengths |y| in tokens.
    max_length: L_max (paper: 20480).
    cache_length: L_cache > 0, ≤ L_max (paper: 4096).
    penalty_factor: scale of the punishment (verl `penalty_factor`, 1.0).

  Returns:
    [B] float32 penalties in [−penalty_factor, 0], added to the sequence reward.

  References:
    Yu et al., DAPO, https://arxiv.org/abs/2503.14476
  """
  if not cache_length > 0:
    raise ValueError(f"cache_length must be > 0, got {cache_length!r}")
  if not max_length >= cache_length:
    raise ValueError(f"max_length must be >= cache_length ({cache_length}), got {max_length!r}")
  n = _f32(lengths)
  chex.assert_rank(n, 1)
  expected = float(max_length - cache_length)
  ramp = (expected - n) / float(cache_length)
  pen = jnp.where(n <= expected, 0.0, jnp.where(n <= max_length, ramp, -1.0))
  return penalty_factor * pen


def dynamic_sampling_keep(rewards, group_ids, *, num_groups: int, row_mask=None) -> Array:
  """DAPO dynamic sampling: True for rows whose group has non-constant rewards.

  The DAPO constraint 0 < |{correct}| < G keeps a group exactly when its rewards are not all
  equal (for a binary reward).

  Args:
    rewards: [B] float rewards the filter reads (DAPO: accuracy).
    group_ids: [B] int32 group of each row.
    num_groups: number of groups (static).
    row_mask: optional [B] bool of rows that take part (others: False, and not counted).

  Returns:
    [B] bool.

  References:
    Yu et al., DAPO §3.2, https://arxiv.org/abs/2503.14476
  """
  r = _f32(rewards)
  chex.assert_rank(r, 1)
  group_ids = _check_groups(r, group_ids, num_groups)
  valid = jnp.ones(r.shape, jnp.bool_) if row_mask is None else jnp.asarray(row_mask, jnp.bool_)
  hi = ops.gather_groups(ops.segment_max(r, group_ids, num_groups=num_groups, where=valid),
                         group_ids)
  lo = ops.gather_groups(ops.segment_min(r, group_ids, num_groups=num_groups, where=valid),
                         group_ids)
  return valid & (hi > lo)


__all__ = [
    "GrpoScale", "GRPO_SCALES", "grpo_scale", "grpo", "dr_grpo", "rloo", "reinforce_pp_baseline",
    "bot_token_rewards", "bot_grpo", "pure_step_credit", "steps_to_tokens", "stepless_tokens",
    "step_mean", "normalize_group_steps", "process_grpo",
    "step_return_advantages", "pure_min_form", "pure_grpo", "verigate",
    "reco_response_weights", "bppo_loss_mask", "dapo_overlong_penalty", "dynamic_sampling_keep",
]
