"""botjax.advantages against NumPy loop oracles written from the equations, plus properties.

Each oracle below is a plain Python loop over rows, groups and tokens, written from the
papers' equations (each estimator's docstring names them), never a vectorised copy of the implementation. The random batches
are ragged: empty completions, groups of one, constant groups, non-contiguous groups, an unused
group id, holes in the mask and NaN padding.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botjax import advantages as adv
from _util import both, pure_credit_loop

B, T, S, P = 12, 9, 4, 5
# Non-contiguous groups: 0 and 1 interleave, group 3 is a singleton, group 4 is unused.
GROUP_IDS = np.array([0, 1, 0, 2, 1, 0, 3, 1, 2, 0, 1, 2], np.int32)



def make_batch(seed, *, nan_padding=True):
  rng = np.random.default_rng(seed)
  rewards = rng.choice([0.0, 1.0, 0.5, -1.0], size=B).astype(np.float32)
  rewards[GROUP_IDS == 2] = 0.5                        # a constant group
  lengths = rng.integers(0, T + 1, size=B)
  lengths[5] = 0                                       # an empty completion
  lengths[0] = T                                       # a full-width one
  mask = np.arange(T)[None, :] < lengths[:, None]
  holes = rng.random((B, T)) < 0.15                    # e.g. tool tokens inside a completion
  holes[:, 0] = False
  mask &= ~holes
  token_rewards = rng.normal(size=(B, T)).astype(np.float32)
  if nan_padding:
    token_rewards[~mask] = np.nan
  step_mask = np.arange(S)[None, :] < rng.integers(0, S + 1, size=B)[:, None]
  step_mask[5] = False
  step_rewards = rng.uniform(-1, 1, size=(B, S)).astype(np.float32)
  if nan_padding:
    step_rewards[~step_mask] = np.nan
  # Tokens split evenly into the row's steps; some tokens (-1) belong to no step.
  token_step = np.full((B, T), -1, np.int32)
  for i in range(B):
    n_steps = int(step_mask[i].sum())
    if n_steps:
      token_step[i] = np.minimum(np.arange(T) * n_steps // T, n_steps - 1)
      token_step[i, rng.random(T) < 0.1] = -1
  return dict(rewards=rewards, mask=mask, token_rewards=token_rewards, step_rewards=step_rewards,
              step_mask=step_mask, token_step=token_step, lengths=lengths)


def members(i):
  return [j for j in range(B) if GROUP_IDS[j] == GROUP_IDS[i]]


# ------------------------------------------------------------------------------------------
# Oracles
# ------------------------------------------------------------------------------------------


def grpo_oracle(r, scale="group", ddof=1, eps=1e-6):
  out = np.zeros(B)
  batch_mean = sum(r) / B
  batch_std = math.sqrt(sum((x - batch_mean) ** 2 for x in r) / max(B - ddof, 1))
  for i in range(B):
    m = members(i)
    if len(m) < 2:
      continue
    mu = sum(r[j] for j in m) / len(m)
    if scale == "group":
      std = math.sqrt(sum((r[j] - mu) ** 2 for j in m) / (len(m) - ddof))
      out[i] = (r[i] - mu) / (std + eps)
    elif scale == "batch":
      out[i] = (r[i] - mu) / (batch_std + eps)
    else:
      out[i] = r[i] - mu
  return out


def rloo_oracle(r):
  out = np.zeros(B)
  for i in range(B):
    others = [j for j in members(i) if j != i]
    if others:
      out[i] = r[i] - sum(r[j] for j in others) / len(others)
  return out


def bot_oracle(tr, mask, eps=1e-6, weighting="inverse_length"):
  out = np.zeros((B, T))
  for i in range(B):
    rows = [k for k in members(i) if mask[k].sum() > 0]
    if mask[i].sum() == 0:
      continue
    toks = {k: [tr[k, t] for t in range(T) if mask[k, t]] for k in rows}
    if weighting == "row":        # one value per row, its mean token reward; rows weigh 1
      means = [sum(toks[k]) / len(toks[k]) for k in rows]
      mu = sum(means) / len(means)
      sd = math.sqrt(sum((m - mu) ** 2 for m in means) / len(means))
      scale = 1.0 / (sd + eps) if sd > eps else 0.0
    else:                         # pooled tokens, token t of row k weighing w_k
      w = {k: (1.0 / len(toks[k]) if weighting == "inverse_length" else 1.0) for k in rows}
      total = sum(w[k] * len(toks[k]) for k in rows)
      mu = sum(w[k] * x for k in rows for x in toks[k]) / total
      var = sum(w[k] * (x - mu) ** 2 for k in rows for x in toks[k]) / total
      scale = 1.0 / (math.sqrt(var) + eps)
    for t in range(T):
      if mask[i, t]:
        out[i, t] = (tr[i, t] - mu) * scale
  return out


def group_steps(values, step_mask, i):
  return [values[k, j] for k in members(i) for j in range(S) if step_mask[k, j]]


def process_oracle(sr, sm, ts, mask, eps=1e-6):
  out = np.zeros((B, T))
  for i in range(B):
    pool = group_steps(sr, sm, i)
    if not pool:
      continue
    mu = sum(pool) / len(pool)
    std = math.sqrt(sum((x - mu) ** 2 for x in pool) / len(pool))
    for t in range(T):
      j = ts[i, t]
      if mask[i, t] and j >= 0 and sm[i, j]:
        out[i, t] = sum((sr[i, k] - mu) / (std + eps) for k in range(j, S) if sm[i, k])
    # steps whose end >= t are exactly the steps k >= j of token t
  return out


def future_cumulated(sr, sm):
  c = np.zeros((B, S))
  for i in range(B):
    for j in range(S):
      c[i, j] = sum(sr[i, k] for k in range(j, S) if sm[i, k])
  return c


def step_return_z_oracle(sr, sm, eps=1e-6):
  """[B, S] (c_{i,j} − mean_g c) / (popstd_g c + ε) on valid steps."""
  c = future_cumulated(sr, sm)
  z = np.zeros((B, S))
  for i in range(B):
    pool = group_steps(c, sm, i)
    if not pool:
      continue
    mu = sum(pool) / len(pool)
    std = math.sqrt(sum((x - mu) ** 2 for x in pool) / len(pool))
    for j in range(S):
      if sm[i, j]:
        z[i, j] = (c[i, j] - mu) / (std + eps) if max(pool) > min(pool) else 0.0
  return z


def has_step(sm, ts, i, t):
  j = ts[i, t]
  return 0 <= j < S and sm[i, j]


def step_return_oracle(sr, sm, ts, mask, eps=1e-6):
  z = step_return_z_oracle(sr, sm, eps)
  out = np.zeros((B, T))
  for i in range(B):
    for t in range(T):
      if mask[i, t] and has_step(sm, ts, i, t):
        out[i, t] = z[i, ts[i, t]]
  return out


def fill_stepless_oracle(tokens, stepless, sm, ts, mask):
  out = np.array(tokens, np.float64)
  for i in range(B):
    for t in range(T):
      if mask[i, t] and not has_step(sm, ts, i, t):
        out[i, t] = stepless[i]
  return out


def min_form_oracle(sr, sm, temp):
  out = np.zeros((B, S))
  for i in range(B):
    valid = [j for j in range(S) if sm[i, j]]
    if not valid:
      continue
    lo = min(-sr[i, j] / temp for j in valid)
    zs = {j: math.exp(-sr[i, j] / temp - lo) for j in valid}  # shift cancels in the ratio
    total = sum(zs.values())
    for j in valid:
      out[i, j] = zs[j] / total * sr[i, j]
  return out


def verigate_oracle(v, sr, sm, ts, mask, eps=1e-6, ddof=1):
  g = grpo_oracle(v, ddof=ddof)
  z = step_return_z_oracle(sr, sm, eps)
  out = np.zeros((B, T))
  for i in range(B):
    vals = [v[j] for j in members(i)]
    mixed = max(vals) != min(vals)
    steps = [j for j in range(S) if sm[i, j]]
    for t in range(T):
      if not mask[i, t]:
        continue
      if mixed:
        out[i, t] = g[i]
      elif max(vals) < 0.5:           # all wrong: PRM; a token of no step gets the first step's
        if has_step(sm, ts, i, t):    # value, the normalised return of the whole trajectory
          out[i, t] = z[i, ts[i, t]]
        elif steps:
          out[i, t] = z[i, steps[0]]
  return out


def with_think_block(d, width=3):
  """d with a `<think>` block: the first `width` scored tokens of half the rows in no step."""
  e = dict(d)
  ts = d["token_step"].copy()
  for i in range(0, B, 2):
    ts[i, :width] = -1
  e["token_step"] = ts
  return e


# ------------------------------------------------------------------------------------------
# Sequence-level estimators
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("jit", [False, True])
def test_grpo_matches_oracle(scale, ddof, jit):
  fn = both(adv.grpo, "num_groups", "scale", "ddof", "eps")[jit]
  for seed in range(3):
    r = make_batch(seed)["rewards"]
    got = fn(r, GROUP_IDS, num_groups=P, scale=scale, ddof=ddof)
    np.testing.assert_allclose(got, grpo_oracle(r, scale, ddof), rtol=1e-5, atol=1e-6)
    assert got[GROUP_IDS == 3][0] == 0.0                # group of one
    assert np.all(np.asarray(got)[GROUP_IDS == 2] == 0.0)  # constant group


def test_grpo_golden():
  # Group {1, 0}: mean 0.5, Bessel std sqrt(0.5) = 0.7071 -> ±0.5/0.7071 = ±0.7071.
  got = adv.grpo(jnp.array([1.0, 0.0]), jnp.array([0, 0]), num_groups=1)
  np.testing.assert_allclose(got, [0.5 / (math.sqrt(0.5) + 1e-6), -0.5 / (math.sqrt(0.5) + 1e-6)])


def test_grpo_row_mask_excludes_rows():
  r = make_batch(0)["rewards"]
  keep = np.ones(B, bool)
  keep[[1, 2]] = False
  got = adv.grpo(r, GROUP_IDS, num_groups=P, row_mask=keep)
  sub = adv.grpo(r[keep], GROUP_IDS[keep], num_groups=P)
  np.testing.assert_allclose(np.asarray(got)[keep], sub, rtol=1e-6)
  assert np.all(np.asarray(got)[~keep] == 0.0)


def test_grpo_bad_scale():
  with pytest.raises(ValueError, match="group, batch, none"):
    adv.grpo(jnp.zeros(2), jnp.zeros(2, jnp.int32), num_groups=1, scale="std")
  r = make_batch(0)["rewards"]
  for scale in adv.GrpoScale:
    np.testing.assert_array_equal(adv.grpo(r, GROUP_IDS, num_groups=P, scale=scale),
                                  adv.grpo(r, GROUP_IDS, num_groups=P, scale=scale.value))
  with pytest.raises(ValueError, match="num_groups"):
    adv.grpo(jnp.zeros(2), jnp.zeros(2, jnp.int32), num_groups=0)


@pytest.mark.parametrize("jit", [False, True])
def test_rloo_matches_oracle(jit):
  fn = both(adv.rloo, "num_groups")[jit]
  for seed in range(3):
    r = make_batch(seed)["rewards"]
    np.testing.assert_allclose(fn(r, GROUP_IDS, num_groups=P), rloo_oracle(r), atol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_reinforce_pp_baseline_matches_oracle(jit):
  fn = both(adv.reinforce_pp_baseline, "num_groups")[jit]
  d = make_batch(1)
  r, mask = d["rewards"], d["mask"]
  centred = grpo_oracle(r, "none")
  vals = [centred[i] for i in range(B) for t in range(T) if mask[i, t]]
  mu = sum(vals) / len(vals)
  var = sum((x - mu) ** 2 for x in vals) / (len(vals) - 1)
  want = np.zeros((B, T))
  for i in range(B):
    for t in range(T):
      if mask[i, t]:
        want[i, t] = (centred[i] - mu) / math.sqrt(var + 1e-8)
  np.testing.assert_allclose(fn(r, mask, GROUP_IDS, num_groups=P), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------
# BoT-GRPO
# ------------------------------------------------------------------------------------------


def test_bot_token_rewards_eq4():
  d = make_batch(2)
  got = np.asarray(adv.bot_token_rewards(d["rewards"], d["token_rewards"], d["mask"],
                                         w_global=3.0, w_local=0.5))
  for i in range(B):
    for t in range(T):
      want = 3.0 * d["rewards"][i] + 0.5 * d["token_rewards"][i, t] if d["mask"][i, t] else 0.0
      assert got[i, t] == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_bot_grpo_matches_oracle(jit):
  fn = both(adv.bot_grpo, "num_groups", "eps")[jit]
  for seed in range(4):
    d = make_batch(seed)
    got = np.asarray(fn(d["token_rewards"], d["mask"], GROUP_IDS, num_groups=P))
    assert np.all(np.isfinite(got))
    assert np.all(got[~d["mask"]] == 0.0)
    np.testing.assert_allclose(got, bot_oracle(d["token_rewards"], d["mask"]), rtol=2e-5,
                               atol=2e-5)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("weighting", ["inverse_length", "token", "row"])
def test_bot_grpo_weightings_match_oracle(jit, weighting):
  fn = both(adv.bot_grpo, "num_groups", "eps", "weighting")[jit]
  for seed in range(4):
    d = make_batch(seed)
    got = np.asarray(fn(d["token_rewards"], d["mask"], GROUP_IDS, num_groups=P,
                        weighting=weighting))
    assert np.all(np.isfinite(got)) and np.all(got[~d["mask"]] == 0.0)
    np.testing.assert_allclose(got, bot_oracle(d["token_rewards"], d["mask"],
                                               weighting=weighting), rtol=2e-5, atol=2e-5)


def test_bot_grpo_weightings_differ_where_lengths_and_spreads_do():
  # Two rows of one group: a short one of mean 1 and a long one of mean 0 with a spread.
  tr = np.array([[1.0, 1.0, 0.0, 0.0], [2.0, -2.0, 1.0, -1.0]], np.float32)
  mask = np.array([[True, True, False, False], [True] * 4])
  ids = jnp.array([0, 0])
  out = {w: np.asarray(adv.bot_grpo(tr, mask, ids, num_groups=1, weighting=w))
         for w in ("inverse_length", "token", "row")}
  # inverse_length: μ = (1 + 0)/2 = 0.5; σ² = (1/2)(0.25) + (1/2)(1/4)(2.25+6.25+0.25+2.25)
  sd = math.sqrt(0.5 * 0.25 + 0.5 * 11.0 / 4)
  np.testing.assert_allclose(out["inverse_length"][0, :2], [0.5 / (sd + 1e-6)] * 2, rtol=1e-5)
  # token: μ = (1 + 1 + 0) / 6 = 1/3 over the 6 pooled tokens
  toks = [1, 1, 2, -2, 1, -1]
  mu = sum(toks) / 6
  sd = math.sqrt(sum((x - mu) ** 2 for x in toks) / 6)
  np.testing.assert_allclose(out["token"][1], [(x - mu) / (sd + 1e-6) for x in toks[2:]],
                             rtol=1e-5)
  # row: the row means 1 and 0 give μ = 0.5 and σ = 0.5
  np.testing.assert_allclose(out["row"][1], [(x - 0.5) / (0.5 + 1e-6) for x in toks[2:]],
                             rtol=1e-5)


def test_bot_grpo_row_weighting_gives_zero_to_constant_row_means():
  # Equal row means (and a group of one) are a constant group for "row": 0, not (r − μ)/ε.
  tr = np.array([[0.0, 2.0], [1.0, 1.0], [3.0, -1.0]], np.float32)
  out = adv.bot_grpo(tr, np.ones((3, 2), bool), jnp.array([0, 0, 1]), num_groups=2,
                     weighting="row")
  assert np.all(np.asarray(out) == 0.0)
  with pytest.raises(ValueError, match="weighting must be one of .*'token'.*got 'length'"):
    adv.bot_grpo(tr, np.ones((3, 2), bool), jnp.array([0, 0, 1]), num_groups=2,
                 weighting="length")


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31 - 1), weighting=st.sampled_from(["inverse_length", "token", "row"]),
       scale=st.floats(0.25, 8.0), shift=st.floats(-5.0, 5.0), pad=st.integers(1, 4))
def test_bot_grpo_weightings_invariances(seed, weighting, scale, shift, pad):
  # Affine rewards (a > 0) leave the advantages unchanged up to ε; extra masked columns and a
  # permutation of the rows (with their group ids) change nothing.
  d = make_batch(seed, nan_padding=False)
  tr, mask = d["token_rewards"], d["mask"]
  base = np.asarray(adv.bot_grpo(tr, mask, GROUP_IDS, num_groups=P, weighting=weighting))
  affine = np.asarray(adv.bot_grpo(np.float32(scale) * tr + np.float32(shift), mask, GROUP_IDS,
                                   num_groups=P, weighting=weighting))
  np.testing.assert_allclose(affine, base, rtol=1e-3, atol=1e-3)
  padded = np.asarray(adv.bot_grpo(np.pad(tr, ((0, 0), (0, pad)), constant_values=7.0),
                                   np.pad(mask, ((0, 0), (0, pad))), GROUP_IDS, num_groups=P,
                                   weighting=weighting))
  np.testing.assert_allclose(padded[:, :T], base, rtol=1e-5, atol=1e-6)
  assert np.all(padded[:, T:] == 0.0)
  perm = np.random.default_rng(seed).permutation(B)
  permuted = np.asarray(adv.bot_grpo(tr[perm], mask[perm], GROUP_IDS[perm], num_groups=P,
                                     weighting=weighting))
  np.testing.assert_allclose(permuted, base[perm], rtol=1e-5, atol=1e-6)


def test_bot_grpo_constant_group_and_singleton():
  mask = np.ones((3, 4), bool)
  tr = np.full((3, 4), 2.0, np.float32)
  out = adv.bot_grpo(tr, mask, jnp.array([0, 0, 1]), num_groups=2)
  assert np.all(np.asarray(out) == 0.0)
  # K = 1 with varying token rewards: statistics of its own tokens, so not zero.
  tr1 = np.array([[1.0, 3.0]], np.float32)
  out1 = adv.bot_grpo(tr1, np.ones((1, 2), bool), jnp.array([0]), num_groups=1)
  np.testing.assert_allclose(out1, [[-1.0 / (1.0 + 1e-6), 1.0 / (1.0 + 1e-6)]], rtol=1e-6)


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31 - 1), value=st.floats(-50.0, 50.0, width=32))
def test_bot_grpo_constant_group_is_exactly_zero_and_offsets_are_harmless(seed, value):
  # A group whose scored tokens all hold the same (non-dyadic) value gets exactly 0, even
  # with ragged lengths and a leading hole in the mask; a large common offset on a varying
  # group does not lose precision (float64 oracle).
  d = make_batch(seed)
  mask = d["mask"].copy()
  mask[3, 0] = False
  tr = np.where(mask, d["token_rewards"], np.nan).astype(np.float32)
  tr[GROUP_IDS == 2] = np.float32(value)
  got = np.asarray(adv.bot_grpo(tr, mask, GROUP_IDS, num_groups=P))
  assert np.all(got[GROUP_IDS == 2] == 0.0)
  shifted = np.where(mask, tr + np.float32(1000.0), np.nan).astype(np.float32)
  want = bot_oracle(shifted.astype(np.float64), mask)
  np.testing.assert_allclose(adv.bot_grpo(shifted, mask, GROUP_IDS, num_groups=P), want,
                             atol=2e-3)


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31 - 1), k=st.sampled_from([2, 3]))
def test_bot_grpo_length_invariance(seed, k):
  # Repeating every token of every rollout k times leaves each token's advantage unchanged.
  d = make_batch(seed)
  base = np.asarray(adv.bot_grpo(d["token_rewards"], d["mask"], GROUP_IDS, num_groups=P))
  rep = np.asarray(adv.bot_grpo(np.repeat(d["token_rewards"], k, axis=1),
                                np.repeat(d["mask"], k, axis=1), GROUP_IDS, num_groups=P))
  np.testing.assert_allclose(rep, np.repeat(base, k, axis=1), rtol=1e-4, atol=1e-5)


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31 - 1), w_g=st.floats(0.5, 4.0))
def test_bot_grpo_reduces_to_population_grpo(seed, w_g):
  d = make_batch(seed)
  nonempty = d["mask"].sum(-1) > 0
  tr = adv.bot_token_rewards(d["rewards"], np.zeros((B, T), np.float32), d["mask"],
                             w_global=w_g, w_local=0.5)
  got = np.asarray(adv.bot_grpo(tr, d["mask"], GROUP_IDS, num_groups=P))
  g = np.asarray(adv.grpo(w_g * d["rewards"], GROUP_IDS, num_groups=P, ddof=0,
                          row_mask=nonempty))
  # A group whose only non-empty row is alone: GRPO gives 0 and so does BoT (constant tokens).
  want = np.where(d["mask"], g[:, None], 0.0)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_pure_step_credit_matches_oracle(jit):
  fn = both(adv.pure_step_credit, "temperature")[jit]
  for seed in range(3):
    d = make_batch(seed)
    x = np.where(d["mask"], 0.3 * d["token_rewards"], np.nan).astype(np.float32)
    args = (d["step_mask"], d["token_step"], d["mask"])
    for temp in (0.1, 1.0):
      got = np.asarray(fn(x, *args, temperature=temp))
      np.testing.assert_allclose(got, pure_credit_loop(x, *args, temp), rtol=1e-5, atol=1e-6)
      assert np.all(got[~d["mask"]] == 0.0)
      assert np.all(got[d["token_step"] < 0] == 0.0)
  with pytest.raises(ValueError, match="temperature"):
    adv.pure_step_credit(np.zeros((1, 2)), np.ones((1, 1), bool), np.zeros((1, 2), np.int32),
                         np.ones((1, 2), bool), temperature=0.0)


def test_pure_step_credit_ignores_the_unscored_text_between_steps():
  # Two steps of +1 with unscored text (local 0) around them: the min over steps is +1, so the
  # first step is credited 1 and the second 1/2 (uniform weights). A min over tokens would
  # take the text's 0 and credit both steps about nothing.
  x = np.array([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0]], np.float32)
  token_step = np.array([[-1, 0, 0, -1, 1, -1]], np.int32)
  got = np.asarray(adv.pure_step_credit(x, np.ones((1, 2), bool), token_step,
                                        np.ones((1, 6), bool)))
  np.testing.assert_allclose(got, [[0.0, 1.0, 1.0, 0.0, 0.5, 0.0]], atol=1e-6)
  # A bad second step is the min: the first step's return is about −1, the second's too.
  x[0, 4] = -1.0
  got = np.asarray(adv.pure_step_credit(x, np.ones((1, 2), bool), token_step,
                                        np.ones((1, 6), bool)))
  np.testing.assert_allclose(got[0, [1, 2, 4]], [-1.0, -1.0, -1.0], atol=1e-4)


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31 - 1))
def test_pure_step_credit_first_step_tends_to_the_min_step_value(seed):
  # The first scored step's credit is Σ_k w_k v_k, which tends to min_k v_k as T → 0.
  d = make_batch(seed)
  x = np.where(d["mask"], np.round(d["token_rewards"], 1), 0.0).astype(np.float32)
  got = np.asarray(adv.pure_step_credit(x, d["step_mask"], d["token_step"], d["mask"],
                                        temperature=1e-3))
  for i in range(B):
    ks = [k for k in range(S) if d["step_mask"][i, k]
          and np.any(d["mask"][i] & (d["token_step"][i] == k))]
    if not ks:
      assert np.all(got[i] == 0.0)
      continue
    values = [x[i][d["mask"][i] & (d["token_step"][i] == k)].mean() for k in ks]
    first = np.flatnonzero(d["mask"][i] & (d["token_step"][i] == ks[0]))[0]
    np.testing.assert_allclose(got[i, first], min(values), atol=1e-3)


# ------------------------------------------------------------------------------------------
# Step-level estimators
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_process_grpo_matches_oracle(jit):
  fn = both(adv.process_grpo, "num_groups", "eps")[jit]
  for seed in range(3):
    d = make_batch(seed)
    got = np.asarray(fn(d["step_rewards"], d["step_mask"], d["token_step"], d["mask"],
                        GROUP_IDS, num_groups=P, eps=1e-6))
    want = process_oracle(d["step_rewards"], d["step_mask"], d["token_step"], d["mask"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    assert np.all(got[d["token_step"] == -1] == 0.0)


@pytest.mark.parametrize("jit", [False, True])
def test_step_estimators_give_stepless_tokens_the_sequence_term(jit):
  # A think block / preamble before the first step (and any other token of no step) takes the
  # given [B] sequence-level values; step tokens are unchanged.
  pg = both(adv.process_grpo, "num_groups", "eps")[jit]
  pure = both(adv.pure_grpo, "num_groups", "temperature")[jit]
  for seed in range(3):
    d = with_think_block(make_batch(seed))
    sr, sm, ts, mask = d["step_rewards"], d["step_mask"], d["token_step"], d["mask"]
    seq = grpo_oracle(d["rewards"], ddof=0)
    got = np.asarray(pg(sr, sm, ts, mask, GROUP_IDS, num_groups=P, eps=1e-6, stepless=seq))
    want = fill_stepless_oracle(process_oracle(sr, sm, ts, mask), seq, sm, ts, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    think = np.zeros((B, T), bool)
    think[::2, :3] = True
    think &= mask
    assert think.any() and np.all(got[think] == np.broadcast_to(seq[:, None], (B, T))[think]
                                  .astype(np.float32))
    base = np.asarray(pure(sr, sm, ts, mask, GROUP_IDS, num_groups=P, temperature=0.1,
                           outcome_rewards=d["rewards"]))
    got = np.asarray(pure(sr, sm, ts, mask, GROUP_IDS, num_groups=P, temperature=0.1,
                          outcome_rewards=d["rewards"], stepless=seq))
    np.testing.assert_allclose(got, fill_stepless_oracle(base, seq, sm, ts, mask), rtol=1e-6,
                               atol=1e-7)


@pytest.mark.parametrize("jit", [False, True])
def test_stepless_tokens_and_step_mean_match_loops(jit):
  fn = both(adv.stepless_tokens)[jit]
  mean = both(adv.step_mean)[jit]
  for seed in range(3):
    d = with_think_block(make_batch(seed))
    got = np.asarray(fn(d["step_mask"], d["token_step"], d["mask"]))
    for i in range(B):
      for t in range(T):
        assert got[i, t] == (d["mask"][i, t] and not has_step(d["step_mask"], d["token_step"],
                                                              i, t))
      steps = [d["step_rewards"][i, j] for j in range(S) if d["step_mask"][i, j]]
      want = sum(steps) / len(steps) if steps else 0.0
      assert float(mean(d["step_rewards"], d["step_mask"])[i]) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_pure_min_form_matches_oracle(jit):
  fn = both(adv.pure_min_form, "temperature")[jit]
  for seed in range(3):
    d = make_batch(seed)
    for temp in (0.1, 1.0):
      got = np.asarray(fn(d["step_rewards"], d["step_mask"], temperature=temp))
      want = min_form_oracle(d["step_rewards"], d["step_mask"], temp)
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31 - 1))
def test_pure_min_form_sum_tends_to_min(seed):
  d = make_batch(seed)
  sm = d["step_mask"]
  errs = []
  for temp in (1.0, 0.1, 0.01, 0.001):
    total = np.asarray(adv.pure_min_form(d["step_rewards"], sm, temperature=temp)).sum(-1)
    step_min = np.where(sm, np.nan_to_num(d["step_rewards"]), np.inf).min(-1)
    err = np.abs(np.where(sm.any(-1), total - step_min, 0.0))
    errs.append(err.max())
  assert errs[-1] < 1e-2
  assert errs[-1] <= errs[0] + 1e-6


def test_pure_min_form_single_step_keeps_reward():
  out = adv.pure_min_form(jnp.array([[0.3, 9.0]]), jnp.array([[True, False]]))
  np.testing.assert_allclose(out, [[0.3, 0.0]], rtol=1e-6)
  with pytest.raises(ValueError, match="temperature"):
    adv.pure_min_form(jnp.zeros((1, 2)), jnp.ones((1, 2), bool), temperature=0.0)


@pytest.mark.parametrize("jit", [False, True])
def test_step_return_and_pure_grpo_match_oracle(jit):
  fn = both(adv.pure_grpo, "num_groups", "temperature")[jit]
  for seed in range(3):
    d = make_batch(seed)
    got = adv.step_return_advantages(d["step_rewards"], d["step_mask"], d["token_step"],
                                     d["mask"], GROUP_IDS, num_groups=P)
    want = step_return_oracle(d["step_rewards"], d["step_mask"], d["token_step"], d["mask"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    # PURE: min-form, + outcome on the last valid step, then the same normalisation.
    # (min-form is checked against its oracle above; start from its float32 output so that an
    # ill-conditioned group, std ~1e-5, does not turn float64-vs-float32 rounding into misses)
    r_star = np.asarray(adv.pure_min_form(d["step_rewards"], d["step_mask"]), np.float64)
    for i in range(B):
      valid = [j for j in range(S) if d["step_mask"][i, j]]
      if valid:
        r_star[i, valid[-1]] += 1.0 * d["rewards"][i]
    want = step_return_oracle(r_star, d["step_mask"], d["token_step"], d["mask"])
    got = fn(d["step_rewards"], d["step_mask"], d["token_step"], d["mask"], GROUP_IDS,
             num_groups=P, temperature=0.1, outcome_rewards=d["rewards"])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("jit", [False, True])
def test_verigate_matches_oracle(jit):
  fn = both(adv.verigate, "num_groups", "eps")[jit]
  for seed in range(4):
    d = make_batch(seed)
    v = (d["rewards"] > 0.6).astype(np.float32)
    v[GROUP_IDS == 1] = 0.0                     # an all-wrong group
    v[GROUP_IDS == 2] = 1.0                     # an all-right group
    got = np.asarray(fn(v, d["step_rewards"], d["step_mask"], d["token_step"], d["mask"],
                        GROUP_IDS, num_groups=P, eps=1e-6))
    want = verigate_oracle(v, d["step_rewards"], d["step_mask"], d["token_step"], d["mask"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    assert np.all(got[GROUP_IDS == 2] == 0.0)


@pytest.mark.parametrize("jit", [False, True])
def test_verigate_think_block_and_population_std(jit):
  fn = both(adv.verigate, "num_groups", "eps", "ddof")[jit]
  for seed in range(3):
    d = with_think_block(make_batch(seed))
    v = (d["rewards"] > 0.6).astype(np.float32)
    v[GROUP_IDS == 1] = 0.0                     # an all-wrong group (rows 1, 4, 7, 10)
    for ddof in (0, 1):
      got = np.asarray(fn(v, d["step_rewards"], d["step_mask"], d["token_step"], d["mask"],
                          GROUP_IDS, num_groups=P, eps=1e-6, ddof=ddof))
      want = verigate_oracle(v, d["step_rewards"], d["step_mask"], d["token_step"], d["mask"],
                             ddof=ddof)
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    # the think block of an all-wrong row with steps is trained
    rows = [i for i in range(0, B, 2) if GROUP_IDS[i] == 1 and d["step_mask"][i].any()
            and d["mask"][i, :3].any()]
    assert rows and all(np.abs(got[i, :3][d["mask"][i, :3]]).sum() > 0 for i in rows)


# ------------------------------------------------------------------------------------------
# ReCo, BPPO, DAPO
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_reco_response_weights_matches_oracle(jit):
  fn = both(adv.reco_response_weights, "num_groups", "max_weight")[jit]
  d = make_batch(3)
  rng = np.random.default_rng(3)
  old_logp = (-rng.exponential(0.7, size=(B, T))).astype(np.float32)
  old_logp[~d["mask"]] = np.nan
  got = np.asarray(fn(old_logp, d["mask"], GROUP_IDS, num_groups=P, max_weight=5.0))
  for i in range(B):
    toks = [old_logp[i, t] for t in range(T) if d["mask"][i, t]]
    if not toks:
      assert got[i] == 0.0
      continue
    want = min(1.0 / (len(members(i)) * math.exp(sum(toks) / len(toks))), 5.0)
    assert got[i] == pytest.approx(want, rel=1e-5)


def test_reco_weights_no_overflow():
  out = adv.reco_response_weights(jnp.full((2, 3), -1e4), jnp.ones((2, 3), bool),
                                  jnp.array([0, 0]), num_groups=1, max_weight=3.0)
  np.testing.assert_allclose(out, [3.0, 3.0])


def bppo_oracle(r, mask, frac, min_prefix):
  out = np.zeros((B, T), bool)
  for g in range(P):
    rows = [i for i in range(B) if GROUP_IDS[i] == g and mask[i].sum() > 0]
    corr = [i for i in rows if r[i] > 0.5]
    wrong = [i for i in rows if r[i] <= 0.5]
    if not corr or not wrong:
      continue
    for cls in (corr, wrong):
      pick = min(cls, key=lambda i: (mask[i].sum(), i))
      n = int(mask[pick].sum())
      p = min(n, max(min_prefix, math.ceil(frac * n)))
      seen = 0
      for t in range(T):
        if mask[pick, t]:
          out[pick, t] = seen < p
          seen += 1
  return out


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("frac,min_prefix", [(0.5, 2), (0.25, 0), (1.0, 3), (0.75, 100)])
def test_bppo_loss_mask_matches_oracle(jit, frac, min_prefix):
  fn = both(adv.bppo_loss_mask, "num_groups", "prefix_fraction", "min_prefix")[jit]
  for seed in range(4):
    d = make_batch(seed)
    r = (d["rewards"] > 0.6).astype(np.float32)
    got = np.asarray(fn(r, d["mask"], GROUP_IDS, num_groups=P, prefix_fraction=frac,
                        min_prefix=min_prefix))
    np.testing.assert_array_equal(got, bppo_oracle(r, d["mask"], frac, min_prefix))


def test_bppo_ties_lowest_index_and_degenerate():
  mask = np.zeros((4, 6), bool)
  mask[:, :4] = True
  r = np.array([1.0, 1.0, 0.0, 0.0], np.float32)
  got = np.asarray(adv.bppo_loss_mask(r, mask, np.array([0, 0, 0, 0]), num_groups=1,
                                      prefix_fraction=0.5, min_prefix=1))
  np.testing.assert_array_equal(got.any(-1), [True, False, True, False])
  np.testing.assert_array_equal(got[0], [True, True, False, False, False, False])
  allright = adv.bppo_loss_mask(np.ones(4, np.float32), mask, np.zeros(4, np.int32),
                                num_groups=1)
  assert not np.asarray(allright).any()


@pytest.mark.parametrize("jit", [False, True])
def test_dapo_overlong_penalty(jit):
  fn = both(adv.dapo_overlong_penalty, "max_length", "cache_length")[jit]
  lengths = np.array([0, 100, 16384, 16385, 18432, 20480, 20481, 30000])
  got = np.asarray(fn(lengths, max_length=20480, cache_length=4096))
  want = []
  for n in lengths:
    if n <= 20480 - 4096:
      want.append(0.0)
    elif n <= 20480:
      want.append(((20480 - 4096) - n) / 4096)
    else:
      want.append(-1.0)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert got[4] == pytest.approx(-0.5)                  # |y| = L_max − L_cache/2
  with pytest.raises(ValueError, match="cache_length"):
    adv.dapo_overlong_penalty(lengths, max_length=10, cache_length=0)


@pytest.mark.parametrize("jit", [False, True])
def test_dynamic_sampling_keep(jit):
  fn = both(adv.dynamic_sampling_keep, "num_groups")[jit]
  for seed in range(3):
    r = make_batch(seed)["rewards"]
    got = np.asarray(fn(r, GROUP_IDS, num_groups=P))
    want = [len({float(r[j]) for j in members(i)}) > 1 for i in range(B)]
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------

_J = {name: jax.jit(getattr(adv, name), static_argnames="num_groups")
      for name in ("bot_grpo", "process_grpo", "verigate", "pure_grpo", "reinforce_pp_baseline",
                   "grpo")}
_J["pure_step_credit"] = jax.jit(adv.pure_step_credit)
TOKEN_ESTIMATORS = {   # jitted: the properties reuse one compilation per shape
    "bot_grpo": lambda d, ids: _J["bot_grpo"](d["token_rewards"], d["mask"], ids, num_groups=P),
    "process_grpo": lambda d, ids: _J["process_grpo"](d["step_rewards"], d["step_mask"],
                                                      d["token_step"], d["mask"], ids,
                                                      num_groups=P),
    "verigate": lambda d, ids: _J["verigate"]((d["rewards"] > 0.6).astype(np.float32),
                                              d["step_rewards"], d["step_mask"], d["token_step"],
                                              d["mask"], ids, num_groups=P),
    "pure_grpo": lambda d, ids: _J["pure_grpo"](d["step_rewards"], d["step_mask"],
                                                d["token_step"], d["mask"], ids, num_groups=P,
                                                outcome_rewards=d["rewards"]),
    "reinforce_pp": lambda d, ids: _J["reinforce_pp_baseline"](d["rewards"], d["mask"], ids,
                                                               num_groups=P),
    "process_grpo_stepless": lambda d, ids: _J["process_grpo"](
        d["step_rewards"], d["step_mask"], d["token_step"], d["mask"], ids, num_groups=P,
        stepless=_J["grpo"](d["rewards"], ids, num_groups=P)),
    "pure_step_credit": lambda d, ids: _J["pure_step_credit"](d["token_rewards"], d["step_mask"],
                                                              d["token_step"], d["mask"]),
}


@pytest.mark.parametrize("name", sorted(TOKEN_ESTIMATORS))
@settings(max_examples=8)
@given(seed=st.integers(0, 2**31 - 1))
def test_masked_values_and_padding_never_matter(name, seed):
  fn = TOKEN_ESTIMATORS[name]
  d = make_batch(seed, nan_padding=True)
  base = np.asarray(fn(d, GROUP_IDS))
  assert np.all(np.isfinite(base))
  assert np.all(base[~d["mask"]] == 0.0)
  rng = np.random.default_rng(seed)
  e = dict(d)
  e["token_rewards"] = np.where(d["mask"], d["token_rewards"], rng.normal(size=(B, T)) * 1e3)
  e["step_rewards"] = np.where(d["step_mask"], d["step_rewards"], rng.normal(size=(B, S)) * 1e3)
  # Extra padding columns (unscored tokens, invalid steps) change nothing either.
  pad = 3
  e["token_rewards"] = np.pad(e["token_rewards"], ((0, 0), (0, pad)), constant_values=7.0)
  e["mask"] = np.pad(d["mask"], ((0, 0), (0, pad)))
  e["token_step"] = np.pad(d["token_step"], ((0, 0), (0, pad)), constant_values=0)
  e["step_rewards"] = np.pad(e["step_rewards"], ((0, 0), (0, pad)), constant_values=5.0)
  e["step_mask"] = np.pad(d["step_mask"], ((0, 0), (0, pad)))
  other = np.asarray(fn(e, GROUP_IDS))
  np.testing.assert_allclose(other[:, :T], base, rtol=1e-5, atol=1e-5)
  assert np.all(other[:, T:] == 0.0)


@pytest.mark.parametrize("name", sorted(TOKEN_ESTIMATORS))
@settings(max_examples=8)
@given(seed=st.integers(0, 2**31 - 1))
def test_permuting_rows_permutes_outputs(name, seed):
  fn = TOKEN_ESTIMATORS[name]
  d = make_batch(seed)
  perm = np.random.default_rng(seed).permutation(B)
  e = {k: v[perm] for k, v in d.items()}
  np.testing.assert_allclose(np.asarray(fn(e, GROUP_IDS[perm])),
                             np.asarray(fn(d, GROUP_IDS))[perm], rtol=1e-5, atol=1e-5)


@settings(max_examples=20)
@given(seed=st.integers(0, 2**31 - 1), a=st.floats(0.5, 20.0), b=st.floats(-10.0, 10.0))
def test_grpo_affine_invariance_and_dr_grpo_shift_only(seed, a, b):
  r = make_batch(seed)["rewards"]
  base = np.asarray(adv.grpo(r, GROUP_IDS, num_groups=P))
  moved = np.asarray(adv.grpo(a * r + b, GROUP_IDS, num_groups=P))
  np.testing.assert_allclose(moved, base, rtol=1e-3, atol=1e-3)   # equal up to eps
  dr = np.asarray(adv.dr_grpo(r, GROUP_IDS, num_groups=P))
  np.testing.assert_allclose(np.asarray(adv.dr_grpo(r + b, GROUP_IDS, num_groups=P)), dr,
                             atol=1e-4)
  np.testing.assert_allclose(np.asarray(adv.dr_grpo(a * r, GROUP_IDS, num_groups=P)), a * dr,
                             rtol=1e-5, atol=1e-5)


@settings(max_examples=20)
@given(seed=st.integers(0, 2**31 - 1))
def test_rloo_sums_to_zero_per_group(seed):
  r = np.random.default_rng(seed).normal(size=B).astype(np.float32)
  out = np.asarray(adv.rloo(r, GROUP_IDS, num_groups=P))
  for g in range(P):
    assert abs(out[GROUP_IDS == g].sum()) < 1e-5


@pytest.mark.parametrize("name", sorted(TOKEN_ESTIMATORS))
def test_gradient_free_estimators_are_finite_on_degenerate_batches(name):
  # Every row empty, no steps, all groups constant: everything is 0, nothing is NaN.
  d = make_batch(0)
  d["mask"] = np.zeros((B, T), bool)
  d["step_mask"] = np.zeros((B, S), bool)
  d["rewards"] = np.ones(B, np.float32)
  out = np.asarray(TOKEN_ESTIMATORS[name](d, GROUP_IDS))
  assert np.all(out == 0.0)


@pytest.mark.parametrize("name", ["grpo", "rloo", "dynamic_sampling_keep"])
@settings(max_examples=10)
@given(seed=st.integers(0, 2**31 - 1))
def test_sequence_estimators_permute_with_rows(name, seed):
  fn = getattr(adv, name)
  r = make_batch(seed)["rewards"]
  perm = np.random.default_rng(seed).permutation(B)
  np.testing.assert_allclose(fn(r[perm], GROUP_IDS[perm], num_groups=P),
                             np.asarray(fn(r, GROUP_IDS, num_groups=P))[perm], rtol=1e-6)
