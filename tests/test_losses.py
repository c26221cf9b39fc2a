"""botjax.losses against NumPy loop oracles, plus gradient and aggregation properties."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botjax import advantages as adv
from botjax import losses
from _util import both

B, T, V = 10, 7, 11
MODES = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_sum_norm"]



def make(seed, *, nan_padding=True, off_policy=0.3):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(0, T + 1, size=B)
  lengths[2] = 0
  lengths[0] = T
  mask = np.arange(T)[None, :] < lengths[:, None]
  mask[4, 1] = False if lengths[4] > 2 else mask[4, 1]       # a hole
  old = (-rng.exponential(1.0, size=(B, T))).astype(np.float32)
  logp = (old + off_policy * rng.normal(size=(B, T))).astype(np.float32)
  logp = np.minimum(logp, -1e-3).astype(np.float32)
  ref = (old + 0.5 * rng.normal(size=(B, T))).astype(np.float32)
  a_seq = rng.normal(size=B).astype(np.float32)
  a_tok = rng.normal(size=(B, T)).astype(np.float32)
  if nan_padding:
    for x in (old, logp, ref, a_tok):
      x[~mask] = np.nan
  return dict(mask=mask, old=old, logp=logp, ref=ref, a_seq=a_seq, a_tok=a_tok)


def ppo_oracle(lp, old, a, mask, el, eh, dual=None):
  out = np.zeros((B, T))
  clipped = np.zeros((B, T))
  for i in range(B):
    for t in range(T):
      if not mask[i, t]:
        continue
      ai = a[i] if a.ndim == 1 else a[i, t]
      rho = math.exp(min(max(float(lp[i, t]) - float(old[i, t]), -20.0), 20.0))
      l1, l2 = -rho * ai, -min(max(rho, 1 - el), 1 + eh) * ai
      loss = max(l1, l2)
      clipped[i, t] = float(l2 > l1)
      if dual is not None and ai < 0:
        loss = min(loss, -dual * ai)
      out[i, t] = loss
  return out, clipped


def agg_oracle(x, mask, mode, norm=None):
  rows = [[x[i, t] for t in range(T) if mask[i, t]] for i in range(B)]
  nonempty = [r for r in rows if r]
  if mode == "token_mean":
    return sum(sum(r) for r in rows), sum(len(r) for r in rows)
  if mode == "seq_mean_token_mean":
    return sum(sum(r) / len(r) for r in nonempty), len(nonempty)
  if mode == "seq_mean_token_sum":
    return sum(sum(r) for r in nonempty), len(nonempty)
  return sum(sum(r) for r in rows) / norm, B


# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
@pytest.mark.parametrize("jit", [False, True])
def test_kl_matches_oracle(kind, jit):
  fn = both(losses.kl, "kind")[jit]
  d = make(0)
  got = np.asarray(fn(d["logp"], d["ref"], kind=kind, mask=d["mask"]))
  for i in range(B):
    for t in range(T):
      if not d["mask"][i, t]:
        assert got[i, t] == 0.0
        continue
      lp, rf = float(d["logp"][i, t]), float(d["ref"][i, t])
      want = {"k1": lp - rf, "k2": 0.5 * (lp - rf) ** 2,
              "k3": math.exp(rf - lp) - (rf - lp) - 1}[kind]
      assert got[i, t] == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_kl_k3_clamped_and_bad_kind():
  out = losses.kl(jnp.array([[0.0]]), jnp.array([[100.0]]), kind="k3")
  assert float(out[0, 0]) == 10.0                      # clamped like verl low_var_kl
  with pytest.raises(ValueError, match="k1, k2, k3"):
    losses.kl(jnp.zeros((1, 1)), jnp.zeros((1, 1)), kind="k4")


@pytest.mark.parametrize("jit", [False, True])
def test_kl_accepts_enum_members_like_their_strings(jit):
  fn = both(losses.kl, "kind")[jit]
  d = make(2)
  for kind in losses.KlKind:
    np.testing.assert_array_equal(fn(d["logp"], d["ref"], kind=kind, mask=d["mask"]),
                                  fn(d["logp"], d["ref"], kind=kind.value, mask=d["mask"]))
  assert losses.kl_kind("k2") is losses.KlKind.K2 and losses.KL_KINDS == ("k1", "k2", "k3")
  assert f"{losses.KlKind.K3}" == "k3" and f"{losses.AggMode.TOKEN_MEAN}" == "token_mean"


@pytest.mark.parametrize("adv_kind", ["a_seq", "a_tok"])
@pytest.mark.parametrize("clip", [(0.2, 0.2, None), (0.2, 0.28, None), (0.1, 0.3, 3.0)])
@pytest.mark.parametrize("jit", [False, True])
def test_clipped_surrogate_matches_oracle(adv_kind, clip, jit):
  el, eh, dual = clip
  fn = both(losses.clipped_surrogate, "eps_low", "eps_high", "dual_clip")[jit]
  for seed in range(2):
    d = make(seed, off_policy=0.4)
    a = d[adv_kind]
    got, metrics = fn(d["logp"], d["old"], a, d["mask"], eps_low=el, eps_high=eh,
                      dual_clip=dual)
    want, clipped = ppo_oracle(d["logp"], d["old"], a, d["mask"], el, eh, dual)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(metrics["clipped"], clipped)
    assert np.all(np.asarray(metrics["ratio"])[~d["mask"]] == 0.0)
    assert np.asarray(metrics["clipped"]).sum() > 0     # the case exercises clipping


def test_clipped_surrogate_rejects_bad_args():
  z = jnp.zeros((2, 3))
  with pytest.raises(ValueError, match="dual_clip"):
    losses.clipped_surrogate(z, z, jnp.zeros(2), jnp.ones((2, 3), bool), dual_clip=0.5)
  with pytest.raises(ValueError, match="advantages"):
    losses.clipped_surrogate(z, z, jnp.zeros((3,)), jnp.ones((2, 3), bool))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("jit", [False, True])
def test_aggregate_matches_oracle(mode, jit):
  fn = both(losses.aggregate, "mode", "norm")[jit]
  d = make(1)
  x = np.where(d["mask"], d["a_tok"], np.nan)
  norm = 16.0 if mode == "seq_sum_norm" else None
  num, den = fn(x, d["mask"], mode=mode, norm=norm)
  want_num, want_den = agg_oracle(x, d["mask"], mode, norm)
  assert float(num) == pytest.approx(want_num, rel=1e-5, abs=1e-6)
  assert float(den) == want_den


def test_aggregate_accepts_enum_and_rejects_unknown():
  m = jnp.ones((2, 3), bool)
  x = jnp.arange(6.0).reshape(2, 3)
  assert losses.aggregate(x, m, mode=losses.AggMode.TOKEN_MEAN) == losses.aggregate(
      x, m, mode="token_mean")
  with pytest.raises(ValueError, match="seq_mean_token_mean"):
    losses.aggregate(x, m, mode="sum")
  with pytest.raises(ValueError, match="norm"):
    losses.aggregate(x, m, mode="seq_sum_norm")
  with pytest.raises(ValueError, match="norm"):
    losses.aggregate(x, m, mode="token_mean", norm=3.0)


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_mean_takes_aggregates_arguments(mode):
  # aggregate_mean(per_token, mask, mode=, norm=) is num / max(den, 1) of aggregate's pair.
  d = make(3)
  norm = 16.0 if mode == "seq_sum_norm" else None
  num, den = losses.aggregate(d["a_tok"], d["mask"], mode=mode, norm=norm)
  got = losses.aggregate_mean(d["a_tok"], d["mask"], mode=mode, norm=norm)
  assert float(got) == pytest.approx(float(num) / max(float(den), 1.0), rel=1e-6)


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=10)
@given(seed=st.integers(0, 2**31 - 1), cut=st.integers(1, B - 1))
def test_microbatched_aggregation_equals_whole_batch(mode, seed, cut):
  d = make(seed)
  # Quarter-integers: every partial sum is exact in float32, so equality is exact.
  x = np.round(np.nan_to_num(d["a_tok"]) * 4) / 4
  norm = 8.0 if mode == "seq_sum_norm" else None
  num, den = losses.aggregate(x, d["mask"], mode=mode, norm=norm)
  parts = [losses.aggregate(x[s], d["mask"][s], mode=mode, norm=norm)
           for s in (slice(0, cut), slice(cut, B))]
  if mode != "seq_mean_token_mean":   # (its per-row 1/L_i is not exact in binary)
    assert float(sum(p[0] for p in parts)) == float(num)
  assert float(sum(p[1] for p in parts)) == float(den)
  # With arbitrary floats the sums agree to rounding.
  y = np.nan_to_num(d["a_tok"])
  num, den = losses.aggregate(y, d["mask"], mode=mode, norm=norm)
  parts = [losses.aggregate(y[s], d["mask"][s], mode=mode, norm=norm)
           for s in (slice(0, cut), slice(cut, B))]
  np.testing.assert_allclose(sum(p[0] for p in parts) / max(sum(p[1] for p in parts), 1),
                             num / max(den, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=10)
@given(seed=st.integers(0, 2**31 - 1))
def test_on_policy_gradient_is_minus_advantage(mode, seed):
  d = make(seed, nan_padding=False, off_policy=0.0)
  lp = jnp.asarray(d["old"])
  mask = d["mask"]
  a = d["a_tok"]
  norm = 5.0 if mode == "seq_sum_norm" else None

  def total(logp):
    per_tok, _ = losses.clipped_surrogate(logp, d["old"], a, mask)
    return losses.aggregate_mean(per_tok, mask, mode=mode, norm=norm)

  g = np.asarray(jax.grad(total)(lp))
  length = mask.sum(-1)
  want = np.zeros((B, T))
  for i in range(B):
    for t in range(T):
      if not mask[i, t]:
        continue
      if mode == "token_mean":
        w = 1.0 / mask.sum()
      elif mode == "seq_mean_token_mean":
        w = 1.0 / length[i] / (length > 0).sum()
      elif mode == "seq_mean_token_sum":
        w = 1.0 / (length > 0).sum()
      else:
        w = 1.0 / norm / B
      want[i, t] = -a[i, t] * w
  np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("surrogate", ["clip", "gspo", "gspo_token", "reco"])
def test_gradients_finite_with_nan_padding_and_fully_masked_rows(surrogate):
  d = make(3)
  mask = d["mask"].copy()
  mask[5] = False                                     # a fully masked row
  for x in (d["logp"], d["old"], d["ref"], d["a_tok"]):
    x[~mask] = np.nan

  def total(logp):
    if surrogate == "clip":
      per_tok, _ = losses.clipped_surrogate(logp, d["old"], d["a_tok"], mask, dual_clip=3.0)
    elif surrogate == "gspo":
      per_tok, _ = losses.gspo_surrogate(logp, d["old"], d["a_seq"], mask)
    elif surrogate == "gspo_token":
      per_tok, _ = losses.gspo_surrogate(logp, d["old"], d["a_tok"], mask)
    else:
      per_tok, _ = losses.reco_surrogate(logp, d["old"], d["a_tok"], mask,
                                         seq_weights=jnp.ones(B))
    per_tok = per_tok + 0.1 * losses.kl(logp, d["ref"], kind="k3", mask=mask)
    return losses.aggregate_mean(per_tok, mask, mode="seq_mean_token_mean")

  val, g = jax.value_and_grad(total)(jnp.asarray(d["logp"]))
  assert np.isfinite(float(val))
  g = np.asarray(g)
  assert np.all(np.isfinite(g))
  assert np.all(g[~mask] == 0.0)
  assert np.abs(g[mask]).sum() > 0


def gspo_oracle(lp, old, a, mask, el, eh):
  out = np.zeros((B, T))
  for i in range(B):
    toks = [t for t in range(T) if mask[i, t]]
    log_s = sum(float(lp[i, t]) - float(old[i, t]) for t in toks) / max(len(toks), 1)
    s = math.exp(min(max(log_s, -20.0), 10.0))
    for t in toks:
      ai = a[i] if a.ndim == 1 else a[i, t]
      out[i, t] = max(-s * ai, -min(max(s, 1 - el), 1 + eh) * ai)
  return out


@pytest.mark.parametrize("adv_kind", ["a_seq", "a_tok"])
@pytest.mark.parametrize("jit", [False, True])
def test_gspo_matches_oracle(adv_kind, jit):
  fn = both(losses.gspo_surrogate, "eps_low", "eps_high")[jit]
  for seed in range(2):
    d = make(seed, off_policy=0.002)
    got, metrics = fn(d["logp"], d["old"], d[adv_kind], d["mask"])
    want = gspo_oracle(d["logp"], d["old"], d[adv_kind], d["mask"], 3e-4, 4e-4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert np.asarray(metrics["clipped"]).sum() > 0


@settings(max_examples=10)
@given(seed=st.integers(0, 2**31 - 1), off=st.sampled_from([0.0, 1e-4, 0.01]))
def test_gspo_token_with_constant_advantage_equals_gspo(seed, off):
  d = make(seed, nan_padding=False, off_policy=off)
  if off == 0.0:
    # make() caps logp at -1e-3 but not old, so a token with old in (-1e-3, 0) (rare: seed
    # 45036605) was off-policy after all; on-policy means logp == old exactly (s_i = 1).
    d["logp"] = d["old"] = np.minimum(d["old"], -1e-3).astype(np.float32)
  a_seq = d["a_seq"]
  a_tok = np.broadcast_to(a_seq[:, None], (B, T)).copy()

  def total(logp, a):
    per_tok, _ = losses.gspo_surrogate(logp, d["old"], a, d["mask"])
    return losses.aggregate_mean(per_tok, d["mask"], mode="seq_mean_token_mean")

  lp = jnp.asarray(d["logp"])
  v1, g1 = jax.value_and_grad(total)(lp, a_seq)
  v2, g2 = jax.value_and_grad(total)(lp, a_tok)
  np.testing.assert_allclose(v1, v2, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-7)
  # Eq. 10 (unclipped at off = 0): ∇ = −(1/B') s_i A_i / L_i on every scored token.
  if off == 0.0:
    length = d["mask"].sum(-1)
    want = np.where(d["mask"], -a_seq[:, None] / np.maximum(length, 1)[:, None]
                    / (length > 0).sum(), 0.0)
    np.testing.assert_allclose(g1, want, rtol=1e-5, atol=1e-7)


def test_reco_surrogate_value_gradient_and_clip():
  d = make(4, nan_padding=False, off_policy=0.0)
  w = np.linspace(0.5, 2.0, B).astype(np.float32)
  a = d["a_tok"]

  def total(logp):
    per_tok, _ = losses.reco_surrogate(logp, d["old"], a, d["mask"], seq_weights=w)
    return losses.aggregate(per_tok, d["mask"], mode="token_mean")[0]

  lp = jnp.asarray(d["old"])
  g = np.asarray(jax.grad(total)(lp))
  # On-policy r_var = 1: ∇ = −w_i A_{i,t} on scored tokens (token sum).
  np.testing.assert_allclose(g, np.where(d["mask"], -w[:, None] * a, 0.0), rtol=1e-5,
                             atol=1e-6)
  # Off-policy: loop oracle of the coefficient and its clip mask.
  d = make(5, nan_padding=False, off_policy=0.5)
  per_tok, metrics = losses.reco_surrogate(d["logp"], d["old"], d["a_tok"], d["mask"],
                                           seq_weights=w, eps_low=0.2, eps_high=0.2)
  for i in range(B):
    for t in range(T):
      if not d["mask"][i, t]:
        continue
      p = min(max(math.exp(float(d["logp"][i, t])), 1e-5), 1 - 1e-5)
      q = min(max(math.exp(float(d["old"][i, t])), 1e-5), 1 - 1e-5)
      r = p * (1 - p) / (q * (1 - q))
      at = float(d["a_tok"][i, t])
      cut = (at > 0 and r > 1.2) or (at < 0 and r < 0.8)
      assert float(metrics["clipped"][i, t]) == float(cut)
      assert float(per_tok[i, t]) == pytest.approx(0.0 if cut else -w[i] * r * at, rel=1e-4,
                                                   abs=1e-6)
  assert np.asarray(metrics["clipped"]).sum() > 0


def test_dr_grpo_all_equal_rewards_gives_exactly_zero_loss():
  d = make(6, nan_padding=False, off_policy=0.3)
  ids = np.arange(B) % 3
  rewards = np.full(B, 0.7, np.float32)
  a = adv.grpo(rewards, ids, num_groups=3, scale="none")
  per_tok, _ = losses.clipped_surrogate(d["logp"], d["old"], a, d["mask"])
  num, den = losses.aggregate(per_tok, d["mask"], mode="seq_sum_norm", norm=100.0)
  assert float(num) == 0.0 and float(den) == B
  g = jax.grad(lambda lp: losses.aggregate(losses.clipped_surrogate(
      lp, d["old"], a, d["mask"])[0], d["mask"], mode="seq_sum_norm", norm=100.0)[0])(
          jnp.asarray(d["logp"]))
  assert np.all(np.asarray(g) == 0.0)


@pytest.mark.parametrize("jit", [False, True])
def test_entropy_from_logits_matches_oracle(jit):
  fn = both(losses.entropy_from_logits)[jit]
  rng = np.random.default_rng(0)
  logits = (3 * rng.normal(size=(4, 3, V))).astype(np.float32)
  logits[0, 0, :5] = -np.inf                           # masked vocabulary entries
  got = np.asarray(fn(logits))
  for idx in np.ndindex(4, 3):
    z = [float(v) for v in logits[idx]]
    zmax = max(z)
    e = [math.exp(v - zmax) for v in z]
    tot = sum(e)
    want = -sum((x / tot) * math.log(x / tot) for x in e if x > 0)
    assert got[idx] == pytest.approx(want, rel=1e-5, abs=1e-6)
  assert float(fn(jnp.zeros((V,)))) == pytest.approx(math.log(V), rel=1e-6)


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=8)
@given(seed=st.integers(0, 2**31 - 1))
def test_padding_columns_change_nothing(mode, seed):
  # Extra unscored columns (any values) leave the per-token loss and its aggregate unchanged.
  d = make(seed, off_policy=0.3)
  norm = 8.0 if mode == "seq_sum_norm" else None
  pad = lambda x, v: np.pad(x, ((0, 0), (0, 3)), constant_values=v)
  base, _ = _clip(d["logp"], d["old"], d["a_tok"], d["mask"])
  wide, _ = _clip(pad(d["logp"], 5.0), pad(d["old"], -9.0), pad(d["a_tok"], 3.0),
                  pad(d["mask"], False))
  np.testing.assert_array_equal(np.asarray(wide)[:, :T], base)
  assert np.all(np.asarray(wide)[:, T:] == 0.0)
  np.testing.assert_allclose(losses.aggregate(wide, pad(d["mask"], False), mode=mode, norm=norm),
                             losses.aggregate(base, d["mask"], mode=mode, norm=norm), rtol=1e-6)


_clip = jax.jit(losses.clipped_surrogate)


# --- truncated importance sampling (TIS) of another engine's rollouts ----------------------


def tis_oracle(old, beh, mask, cap):
  out = np.zeros((B, T))
  for i in range(B):
    for t in range(T):
      if mask[i, t]:
        out[i, t] = min(math.exp(float(old[i, t]) - float(beh[i, t])), cap)
  return out


def make_behaviour(d, seed, scale=0.8):
  """The engine's log-probs of the same tokens: the trainer's plus an engine error, NaN padding."""
  rng = np.random.default_rng(100 + seed)
  beh = (d["old"] + scale * rng.normal(size=(B, T))).astype(np.float32)
  beh[~d["mask"]] = np.nan
  return beh


@pytest.mark.parametrize("cap", [1.0, 2.0, 5.0])
@pytest.mark.parametrize("jit", [False, True])
def test_tis_weights_match_oracle(cap, jit):
  fn = both(losses.tis_weights, "cap")[jit]
  for seed in range(2):
    d = make(seed)
    beh = make_behaviour(d, seed)
    got = np.asarray(fn(d["old"], beh, d["mask"], cap=cap))
    want = tis_oracle(d["old"], beh, d["mask"], cap)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert np.all(got[~d["mask"]] == 0.0)
    if cap == 2.0:   # the case exercises both sides of the cap
      assert (want == cap).any() and ((want > 0) & (want < 1)).any()


def test_tis_weights_never_overflow_and_carry_no_gradient():
  old = jnp.array([[0.0, -200.0, 0.0]])
  beh = jnp.array([[-200.0, 0.0, 0.0]])
  m = jnp.array([[True, True, True]])
  np.testing.assert_allclose(losses.tis_weights(old, beh, m, cap=3.0), [[3.0, 0.0, 1.0]])
  g_old, g_beh = jax.grad(lambda a, b: jnp.sum(losses.tis_weights(a, b, m, cap=3.0)),
                          argnums=(0, 1))(old, beh)
  assert np.all(np.asarray(g_old) == 0.0) and np.all(np.asarray(g_beh) == 0.0)


@pytest.mark.parametrize("cap", [0.5, 0.0, -1.0, float("inf"), float("nan")])
def test_tis_weights_reject_a_cap_below_one(cap):
  z = jnp.zeros((2, 3))
  with pytest.raises(ValueError, match="cap must be a finite float >= 1"):
    losses.tis_weights(z, z, jnp.ones((2, 3), bool), cap=cap)


_LP = st.floats(-30.0, 0.0, width=32)


@settings(max_examples=40)
@given(data=st.data(), cap=st.sampled_from([1.0, 1.5, 2.0, 10.0]))
def test_tis_weights_properties(data, cap):
  old = np.array(data.draw(st.lists(_LP, min_size=B * T, max_size=B * T)), np.float32)
  beh = np.array(data.draw(st.lists(_LP, min_size=B * T, max_size=B * T)), np.float32)
  old, beh = old.reshape(B, T), beh.reshape(B, T)
  mask = np.array(data.draw(st.lists(st.booleans(), min_size=B * T, max_size=B * T))).reshape(B, T)
  w = np.asarray(losses.tis_weights(old, beh, mask, cap=cap))
  # cap respected, non-negative, zero off the mask
  assert np.all((w >= 0.0) & (w <= cap)) and np.all(w[~mask] == 0.0)
  # mask invariance: padding values change nothing
  junk = np.where(mask, 0.0, np.nan).astype(np.float32)
  np.testing.assert_array_equal(w, losses.tis_weights(old + junk, beh - junk, mask, cap=cap))
  # identity when the engine's log-probs equal the trainer's
  np.testing.assert_array_equal(losses.tis_weights(old, old, mask, cap=cap), mask.astype(np.float32))
  # monotone: a larger cap never lowers a weight
  assert np.all(np.asarray(losses.tis_weights(old, beh, mask, cap=cap + 1.0)) >= w)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("kl_coef", [0.0, 0.04])
def test_policy_loss_with_tis_cap_weights_the_surrogate_not_the_kl(jit, kl_coef):
  from botjax import algorithms as alg
  recipe = alg.get_recipe("grpo", kl_coef=kl_coef, tis_cap=2.0)
  plain = alg.get_recipe("grpo", kl_coef=kl_coef)
  fn = both(lambda *a, **k: alg.policy_loss(recipe, *a, **k))[jit]
  d = make(3, off_policy=0.4)
  beh = make_behaviour(d, 3)
  a = np.where(d["mask"], d["a_tok"], 0.0).astype(np.float32)
  got, _ = fn(d["logp"], d["old"], a, d["mask"], ref_logp=d["ref"], behaviour_logp=beh)
  ppo, _ = ppo_oracle(d["logp"], d["old"], a, d["mask"], 0.2, 0.2)
  kl = np.asarray(losses.kl(d["logp"], d["ref"], kind="k3", mask=d["mask"]))
  want = ppo * tis_oracle(d["old"], beh, d["mask"], 2.0) + kl_coef * kl
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # the engine agreeing with the trainer (behaviour = old) is the uncorrected loss
  same, _ = fn(d["logp"], d["old"], a, d["mask"], ref_logp=d["ref"], behaviour_logp=d["old"])
  base, _ = alg.policy_loss(plain, d["logp"], d["old"], a, d["mask"], ref_logp=d["ref"])
  np.testing.assert_allclose(same, base, rtol=1e-6, atol=1e-7)


def test_policy_loss_with_tis_cap_needs_behaviour_logp():
  from botjax import algorithms as alg
  z = jnp.zeros((2, 3))
  m = jnp.ones((2, 3), bool)
  with pytest.raises(ValueError, match="behaviour_logp is None"):
    alg.policy_loss(alg.get_recipe("dapo", tis_cap=2.0), z, z, z, m)
  with pytest.raises(ValueError, match="tis_cap must be >= 1"):
    alg.get_recipe("dapo", tis_cap=0.5)
