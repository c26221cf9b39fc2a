"""Per-token policy losses, KL estimators and loss aggregation, as pure jit-able functions.

Losses return an unreduced per-token `[B, T]` array that is exactly zero outside `mask`, plus a
dict of per-token metric arrays (also zero outside `mask`); `aggregate` turns a per-token array
into a `(num, den)` pair whose sums over micro-batches (and devices) divide to the whole-batch
value. `old_logp`, `ref_logp` and advantages never carry gradients (`stop_gradient` inside).
Padding may hold any value, NaN included: it is replaced with `jnp.where` before arithmetic, so
neither values nor gradients see it.

Sources: PPO (arXiv 1707.06347) and DeepSeekMath (arXiv 2402.03300) for the ratio, clipping and
KL; DAPO (arXiv 2503.14476) and Dr. GRPO (arXiv 2503.20783) for the aggregation modes; GSPO
(arXiv 2507.18071); ReCo (arXiv 2607.26862); truncated importance sampling of another engine's
rollouts (Yao et al. 2025, see `tis_weights`).
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

LOG_RATIO_CLAMP = 20.0   # verl / tunix clamp of log(π/π_old) before exp
GSPO_LOG_RATIO_MAX = 10.0  # verl / tunix upper clamp of the GSPO log sequence ratio
KL_LOG_RATIO_CLAMP = 20.0  # verl `low_var_kl`: log r clamped to ±20 ...
KL_VALUE_CLAMP = 10.0      # ... and k3 to [−10, 10]
RECO_PROB_CLAMP = 1e-5     # ReCo reproduction: p clamped to [1e-5, 1 − 1e-5]

class KlKind(enum.StrEnum):
  """KL estimators of `kl` (Schulman's k1, k2, k3). Plain strings work too."""
  K1 = "k1"
  K2 = "k2"
  K3 = "k3"


KL_KINDS = tuple(k.value for k in KlKind)


class AggMode(enum.StrEnum):
  """Loss aggregation modes of `aggregate`. Plain strings work too.

  "token_mean" (DAPO §3.3), "seq_mean_token_mean" (GRPO, DeepSeekMath eq. 3),
  "seq_mean_token_sum", "seq_sum_norm" (Dr. GRPO's constant normaliser).
  """
  TOKEN_MEAN = "token_mean"
  SEQ_MEAN_TOKEN_MEAN = "seq_mean_token_mean"
  SEQ_MEAN_TOKEN_SUM = "seq_mean_token_sum"
  SEQ_SUM_NORM = "seq_sum_norm"


AGG_MODES = tuple(m.value for m in AggMode)


def agg_mode(mode) -> AggMode:
  """Parses an aggregation mode (an `AggMode` or its string value)."""
  return ops.parse_enum(AggMode, mode, "aggregation mode")


def kl_kind(kind) -> KlKind:
  """Parses a KL estimator name (a `KlKind` or its string value)."""
  try:
    return KlKind(kind)
  except ValueError:
    raise ValueError(f"unknown KL kind {kind!r}; valid: {', '.join(KL_KINDS)}") from None


def _mask_like(x: Array, mask) -> Array:
  mask = jnp.asarray(mask, jnp.bool_)
  if mask.shape != x.shape:
    raise ValueError(f"mask has shape {mask.shape}, expected {x.shape}")
  return mask


def _token_advantages(advantages, shape) -> Array:
  """[B] or [B, T] advantages as a stop-gradient [B, T] array."""
  a = jax.lax.stop_gradient(_f32(advantages))
  if a.ndim == 1 and a.shape[0] == shape[0]:
    return jnp.broadcast_to(a[:, None], shape)
  if a.shape != tuple(shape):
    raise ValueError(f"advantages must have shape [B] = ({shape[0]},) or [B, T] = {tuple(shape)},"
                     f" got {a.shape}")
  return a


def _log_ratio(logp, old_logp, mask) -> Array:
  """log π/π_old on the mask (0 elsewhere); the inner where keeps NaN padding out of gradients."""
  lp = jnp.where(mask, _f32(logp), 0.0)
  old = jnp.where(mask, jax.lax.stop_gradient(_f32(old_logp)), 0.0)
  return lp - old


def kl(logp, ref_logp, *, kind: str = "k3", mask=None) -> Array:
  """Per-token KL estimators between the current and the reference policy.

    k1 = lp − lp_ref
    k2 = ½ (lp − lp_ref)²
    k3 = exp(lp_ref − lp) − (lp_ref − lp) − 1      (log-ratio clamped to ±20 and the value to
                                                     [−10, 10], like verl `low_var_kl`)

  Gradients flow through `logp` only; `ref_logp` is stop-gradient.

  Args:
    logp: [B, T] float current-policy log-probs.
    ref_logp: [B, T] float reference-policy log-probs.
    kind: a `KlKind` or its value "k1", "k2" or "k3".
    mask: optional [B, T] bool; the result is zero outside it.

  Returns:
    [B, T] float32 KL estimate per token.

  References:
    Schulman, Approximating KL Divergence, http://joschu.net/blog/kl-approx.html
    Shao et al., DeepSeekMath eq. 4, https://arxiv.org/abs/2402.03300
  """
  kind = kl_kind(kind)
  lp = _f32(logp)
  ref = jax.lax.stop_gradient(_f32(ref_logp))
  chex.assert_equal_shape([lp, ref])
  if mask is not None:
    mask = _mask_like(lp, mask)
    lp = jnp.where(mask, lp, 0.0)
    ref = jnp.where(mask, ref, 0.0)
  diff = lp - ref
  if kind is KlKind.K1:
    out = diff
  elif kind is KlKind.K2:
    out = 0.5 * diff * diff
  else:
    log_r = jnp.clip(ref - lp, -KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    out = jnp.clip(jnp.expm1(log_r) - log_r, -KL_VALUE_CLAMP, KL_VALUE_CLAMP)
  return out if mask is None else jnp.where(mask, out, 0.0)


def clipped_surrogate(logp, old_logp, advantages, mask, *, eps_low: float = 0.2,
                      eps_high: float = 0.2, dual_clip: float | None = None
                      ) -> tuple[Array, dict[str, Array]]:
  """Per-token PPO clipped surrogate loss (GRPO / DAPO decoupled clip, optional dual clip).

    ρ_{i,t} = exp(clamp(lp − lp_old, −20, 20))
    ℓ_{i,t} = −min(ρ·A_{i,t}, clip(ρ, 1 − ε_low, 1 + ε_high)·A_{i,t})
    dual clip c:  ℓ_{i,t} ← min(ℓ_{i,t}, −c·A_{i,t})   where A_{i,t} < 0

  `old_logp` and `advantages` are stop-gradient. On-policy (lp = lp_old) the gradient of ℓ
  with respect to lp is −A.

  Args:
    logp: [B, T] float current-policy log-probs (differentiable).
    old_logp: [B, T] float behaviour-policy log-probs.
    advantages: [B] or [B, T] float advantages.
    mask: [B, T] bool scored tokens.
    eps_low: lower clip range ε_low ≥ 0.
    eps_high: upper clip range ε_high ≥ 0 (DAPO: 0.28).
    dual_clip: c > 1 or None (verl default 3.0; off here).

  Returns:
    per_token: [B, T] float32 loss, zero outside `mask`.
    metrics: dict of [B, T] float32 arrays, zero outside `mask`: "ratio" (ρ), "clipped" (1 where
      the clipped branch is taken, i.e. the gradient is cut), "dual_clipped", "pg_loss" (ℓ).

  References:
    Schulman et al., PPO, https://arxiv.org/abs/1707.06347
    Yu et al., DAPO (decoupled clip), https://arxiv.org/abs/2503.14476
    Ye et al., Dual-clip PPO, https://arxiv.org/abs/1912.09729
  """
  if not (eps_low >= 0.0 and eps_high >= 0.0):
    raise ValueError(f"eps_low and eps_high must be >= 0, got {eps_low!r}, {eps_high!r}")
  if dual_clip is not None and not dual_clip > 1.0:
    raise ValueError(f"dual_clip must be > 1 or None, got {dual_clip!r}")
  lp = _f32(logp)
  chex.assert_rank(lp, 2)
  mask = _mask_like(lp, mask)
  a = _token_advantages(advantages, lp.shape)
  a = jnp.where(mask, a, 0.0)
  log_ratio = jnp.clip(_log_ratio(lp, old_logp, mask), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
  ratio = jnp.exp(log_ratio)
  unclipped = -a * ratio
  clipped = -a * jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
  is_clipped = clipped > unclipped
  # A where (not jnp.maximum) so a tie takes the unclipped branch's full gradient.
  loss = jnp.where(is_clipped, clipped, unclipped)
  is_dual = jnp.zeros(lp.shape, jnp.bool_)
  if dual_clip is not None:
    cap = -dual_clip * a
    is_dual = (a < 0.0) & (cap < loss)
    loss = jnp.where(is_dual, cap, loss)
  loss = jnp.where(mask, loss, 0.0)
  metrics = {
      "ratio": jnp.where(mask, ratio, 0.0),
      "clipped": jnp.where(mask & is_clipped, 1.0, 0.0),
      "dual_clipped": jnp.where(mask & is_dual, 1.0, 0.0),
      "pg_loss": loss,
  }
  return loss, metrics


def gspo_surrogate(logp, old_logp, advantages, mask, *, eps_low: float = 3e-4,
                   eps_high: float = 4e-4) -> tuple[Array, dict[str, Array]]:
  """GSPO sequence-ratio clipped loss, or GSPO-token when advantages are [B, T].

    s_i = exp((1/L_i) Σ_t (lp − lp_old))                        (eq. 7, L_i clamped to ≥ 1)
    [B] advantages (GSPO):   ℓ_{i,t} = −min(s_i A_i, clip(s_i, 1 − ε_low, 1 + ε_high) A_i)
    [B, T] (GSPO-token):     log s_{i,t} = sg[log s_i] + lp_{i,t} − sg[lp_{i,t}]
                             ℓ_{i,t} = −min(s_{i,t} A_{i,t}, clip(s_{i,t}, ...) A_{i,t})

  The per-token value is repeated on every scored token of a row, so the "seq_mean_token_mean"
  aggregation gives eq. 5 (the mean of the sequence losses); for GSPO it also gives the exact
  sequence-ratio gradient. With a constant A_{i,t} = A_i both forms have the same value and
  gradient (§4.3). log s is clamped to [−20, 10] (verl / tunix clamp it at 10).

  Args:
    logp: [B, T] float current-policy log-probs (differentiable).
    old_logp: [B, T] float behaviour-policy log-probs.
    advantages: [B] (GSPO) or [B, T] (GSPO-token) float advantages.
    mask: [B, T] bool scored tokens.
    eps_low: lower clip range (paper: 3e-4).
    eps_high: upper clip range (paper: 4e-4).

  Returns:
    per_token: [B, T] float32 loss, zero outside `mask`.
    metrics: dict of [B, T] float32 arrays, zero outside `mask`: "ratio" (s), "clipped",
      "pg_loss".

  References:
    Zheng et al., Group Sequence Policy Optimization, https://arxiv.org/abs/2507.18071
  """
  if not (eps_low >= 0.0 and eps_high >= 0.0):
    raise ValueError(f"eps_low and eps_high must be >= 0, got {eps_low!r}, {eps_high!r}")
  lp = _f32(logp)
  chex.assert_rank(lp, 2)
  mask = _mask_like(lp, mask)
  a_raw = _f32(advantages)
  token_level = a_raw.ndim == 2
  a = jnp.where(mask, _token_advantages(advantages, lp.shape), 0.0)
  delta = _log_ratio(lp, old_logp, mask)
  length = jnp.maximum(jnp.sum(mask, axis=-1, dtype=jnp.float32), 1.0)
  log_s = jnp.sum(delta, axis=-1) / length                          # [B]
  if token_level:
    lp_m = jnp.where(mask, lp, 0.0)
    log_s_tok = jax.lax.stop_gradient(log_s)[:, None] + lp_m - jax.lax.stop_gradient(lp_m)
  else:
    log_s_tok = jnp.broadcast_to(log_s[:, None], lp.shape)
  log_s_tok = jnp.clip(log_s_tok, -LOG_RATIO_CLAMP, GSPO_LOG_RATIO_MAX)
  s = jnp.exp(log_s_tok)
  unclipped = -a * s
  clipped = -a * jnp.clip(s, 1.0 - eps_low, 1.0 + eps_high)
  is_clipped = clipped > unclipped
  loss = jnp.where(mask, jnp.where(is_clipped, clipped, unclipped), 0.0)
  metrics = {
      "ratio": jnp.where(mask, s, 0.0),
      "clipped": jnp.where(mask & is_clipped, 1.0, 0.0),
      "pg_loss": loss,
  }
  return loss, metrics


def reco_surrogate(logp, old_logp, advantages, mask, *, seq_weights=None, eps_low: float = 0.2,
                   eps_high: float = 0.2) -> tuple[Array, dict[str, Array]]:
  """ReCo loss: variance-based detached coefficient with a PPO-style clip mask, response weights.

    p = clamp(exp lp, 1e-5, 1 − 1e-5),  p_old likewise
    r^var_{i,t} = p(1 − p) / (p_old(1 − p_old))
    coef_{i,t}  = sg[r^var] · 1[not ((A > 0 and r^var > 1 + ε_high) or (A < 0 and r^var < 1 − ε_low))]
    ℓ_{i,t}     = −w_i · coef_{i,t} · A_{i,t} · exp(lp − sg[lp])

  so ∇ℓ = −w_i · coef · A · ∇lp (the quoted ReCo update) and the value is −w·coef·A (the PPO
  loss value on-policy). [INFERRED] form: the quoted ReCo update is consistent only with r^var
  used as a detached coefficient (its own gradient flips sign at p > 0.5).

  Args:
    logp: [B, T] float current-policy log-probs (differentiable).
    old_logp: [B, T] float behaviour-policy log-probs.
    advantages: [B] or [B, T] float advantages.
    mask: [B, T] bool scored tokens.
    seq_weights: optional [B] float response weights w_i (`reco_response_weights`); ones if None.
    eps_low: lower clip range.
    eps_high: upper clip range.

  Returns:
    per_token: [B, T] float32 loss, zero outside `mask`.
    metrics: dict of [B, T] float32 arrays, zero outside `mask`: "ratio" (r^var), "clipped",
      "pg_loss".

  References:
    Park et al., ReCo, https://arxiv.org/abs/2607.26862
  """
  if not (eps_low >= 0.0 and eps_high >= 0.0):
    raise ValueError(f"eps_low and eps_high must be >= 0, got {eps_low!r}, {eps_high!r}")
  lp = _f32(logp)
  chex.assert_rank(lp, 2)
  mask = _mask_like(lp, mask)
  a = jnp.where(mask, _token_advantages(advantages, lp.shape), 0.0)
  lp_m = jnp.where(mask, lp, 0.0)
  old_m = jnp.where(mask, jax.lax.stop_gradient(_f32(old_logp)), 0.0)
  p = jnp.clip(jnp.exp(jax.lax.stop_gradient(lp_m)), RECO_PROB_CLAMP, 1.0 - RECO_PROB_CLAMP)
  p_old = jnp.clip(jnp.exp(old_m), RECO_PROB_CLAMP, 1.0 - RECO_PROB_CLAMP)
  r_var = (p * (1.0 - p)) / (p_old * (1.0 - p_old))
  is_clipped = ((a > 0.0) & (r_var > 1.0 + eps_high)) | ((a < 0.0) & (r_var < 1.0 - eps_low))
  coef = jnp.where(is_clipped, 0.0, r_var)
  if seq_weights is None:
    w = jnp.ones((lp.shape[0],), jnp.float32)
  else:
    w = jax.lax.stop_gradient(_f32(seq_weights))
    chex.assert_shape(w, (lp.shape[0],))
  unit = jnp.exp(lp_m - jax.lax.stop_gradient(lp_m))   # value 1, gradient ∇lp
  loss = jnp.where(mask, -w[:, None] * coef * a * unit, 0.0)
  metrics = {
      "ratio": jnp.where(mask, r_var, 0.0),
      "clipped": jnp.where(mask & is_clipped, 1.0, 0.0),
      "pg_loss": loss,
  }
  return loss, metrics


def tis_weights(old_logp, behaviour_logp, mask, *, cap: float) -> Array:
  """Truncated importance-sampling (TIS) weights of tokens another engine sampled.

    w_{i,t} = min(exp(lp_old − lp_μ), C)        on the mask, 0 elsewhere; stop-gradient

  lp_old is the trainer's log-probability of the sampled token under the parameters that
  generated it (its own forward pass), lp_μ the rollout engine's (the behaviour policy μ that
  actually sampled, e.g. vLLM with other kernels and precision). The per-token policy loss is
  multiplied by w: the policy gradient is an expectation under π_old, the tokens come from μ,
  and w = π_old / μ reweights them, truncated at C to bound the variance (the bias of the cap
  is small when the two engines mostly agree). This is the token-level correction of TRL's
  `vllm_importance_sampling_correction` (its "token_truncate" mode, default cap 2) and of
  verl's rollout-correction token-level truncated IS. When lp_old = lp_μ every weight is 1.

  Computed as exp(min(lp_old − lp_μ, log C)), so a large log-ratio cannot overflow.

  Args:
    old_logp: [B, T] float the trainer's log-probs of the sampled tokens (π_old).
    behaviour_logp: [B, T] float the rollout engine's log-probs of the same tokens (μ).
    mask: [B, T] bool scored tokens.
    cap: C ≥ 1, the truncation.

  Returns:
    [B, T] float32 weights in [0, C], zero outside `mask`, without gradient.

  References:
    Yao et al., Your Efficient RL Framework Secretly Brings You Off-Policy RL Training (2025),
      https://fengyao.notion.site/off-policy-rl
    Ionides, Truncated Importance Sampling, J. Comput. Graph. Stat. 17(2), 2008.
    Espeholt et al., IMPALA (V-trace truncated IS weights), https://arxiv.org/abs/1802.01561
  """
  if not (isinstance(cap, (int, float)) and math.isfinite(cap) and cap >= 1.0):
    raise ValueError(f"cap must be a finite float >= 1 (the TIS truncation C), got {cap!r}")
  old = _f32(old_logp)
  chex.assert_rank(old, 2)
  chex.assert_equal_shape([old, _f32(behaviour_logp)])
  mask = _mask_like(old, mask)
  log_w = _log_ratio(old, behaviour_logp, mask)        # lp_old − lp_μ on the mask, 0 elsewhere
  w = jnp.exp(jnp.minimum(log_w, math.log(cap)))
  return jax.lax.stop_gradient(jnp.where(mask, w, 0.0))


def aggregate(per_token, mask, *, mode, norm: float | None = None) -> tuple[Array, Array]:
  """Reduces a per-token loss to a (numerator, denominator) pair; the loss is num / den.

  | mode | num | den |
  | --- | --- | --- |
  | "token_mean" (DAPO) | Σ_{i,t} m·ℓ | Σ_{i,t} m |
  | "seq_mean_token_mean" (GRPO) | Σ_i (Σ_t m·ℓ) / L_i | number of rows with L_i > 0 |
  | "seq_mean_token_sum" | Σ_i Σ_t m·ℓ | number of rows with L_i > 0 |
  | "seq_sum_norm" (Dr. GRPO) | Σ_i Σ_t m·ℓ / norm | number of rows B |

  Summing num and den over micro-batches (or devices) and then dividing gives the whole-batch
  value, because every term is a sum over rows: loss = Σ num / max(Σ den, 1). For one batch,
  `aggregate_mean(per_token, mask, mode=mode, norm=norm)` takes the same arguments and returns
  that quotient directly.

  Args:
    per_token: [B, T] float per-token values.
    mask: [B, T] bool scored tokens.
    mode: an `AggMode` or its string value.
    norm: the constant L_norm of "seq_sum_norm" (e.g. the maximum completion length), > 0;
      must be None for the other modes.

  Returns:
    (num, den): float32 scalars.

  References:
    Liu et al., Dr. GRPO, https://arxiv.org/abs/2503.20783
    Yu et al., DAPO §3.3, https://arxiv.org/abs/2503.14476
  """
  mode = agg_mode(mode)
  x = _f32(per_token)
  chex.assert_rank(x, 2)
  mask = _mask_like(x, mask)
  if mode is AggMode.SEQ_SUM_NORM:
    if norm is None or not norm > 0:
      raise ValueError(f"mode 'seq_sum_norm' needs a constant norm > 0 (e.g. the maximum "
                       f"completion length), got norm={norm!r}")
  elif norm is not None:
    raise ValueError(f"norm is only used by mode 'seq_sum_norm', got norm={norm!r} with mode "
                     f"{mode.value!r}")
  xm = jnp.where(mask, x, 0.0)
  length = jnp.sum(mask, axis=-1, dtype=jnp.float32)
  if mode is AggMode.TOKEN_MEAN:
    return jnp.sum(xm), jnp.sum(length)
  row_sum = jnp.sum(xm, axis=-1)
  nonempty = jnp.sum(length > 0.0, dtype=jnp.float32)
  if mode is AggMode.SEQ_MEAN_TOKEN_MEAN:
    return jnp.sum(row_sum / jnp.maximum(length, 1.0)), nonempty
  if mode is AggMode.SEQ_MEAN_TOKEN_SUM:
    return jnp.sum(row_sum), nonempty
  return jnp.sum(row_sum) / float(norm), jnp.asarray(x.shape[0], jnp.float32)


def aggregate_mean(per_token, mask, *, mode, norm: float | None = None) -> Array:
  """The loss of one batch: num / max(den, 1) of `aggregate` (0 for an empty batch).

  Args:
    per_token: [B, T] float per-token values.
    mask: [B, T] bool scored tokens.
    mode: an `AggMode` or its string value.
    norm: L_norm of "seq_sum_norm" (> 0); None for the other modes.

  Returns:
    float32 scalar.
  """
  num, den = aggregate(per_token, mask, mode=mode, norm=norm)
  return num / jnp.maximum(den, 1.0)


def entropy_from_logits(logits) -> Array:
  """Entropy H = −Σ_v p_v log p_v of softmax(logits) over the last axis.

  Stable for −inf logits (masked vocabulary entries contribute 0).

  Args:
    logits: [..., V] float logits.

  Returns:
    [...] float32 entropies.
  """
  z = _f32(logits)
  logp = jax.nn.log_softmax(z, axis=-1)
  p = jnp.exp(logp)
  terms = jnp.where(p > 0.0, p * jnp.where(p > 0.0, logp, 0.0), 0.0)
  return -jnp.sum(terms, axis=-1)


__all__ = [
    "AggMode", "AGG_MODES", "KlKind", "KL_KINDS", "agg_mode", "kl_kind", "kl", "clipped_surrogate", "gspo_surrogate",
    "reco_surrogate", "tis_weights", "aggregate", "aggregate_mean", "entropy_from_logits",
    "LOG_RATIO_CLAMP", "GSPO_LOG_RATIO_MAX",
]
