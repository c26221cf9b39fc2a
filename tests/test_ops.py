"""botjax.ops against NumPy loop oracles: masked reductions, segment helpers, suffix sums."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botjax import ops
from _util import both

B, T, P = 9, 6, 4
GROUP_IDS = np.array([2, 0, 2, 1, 0, 2, 0, 1, 5], np.int32)   # group 3 empty, id 5 out of range



def make(seed):
  rng = np.random.default_rng(seed)
  mask = rng.random((B, T)) < 0.6
  mask[1] = False                                                 # a fully masked row
  x = rng.normal(size=(B, T)).astype(np.float32)
  x[~mask] = np.nan                                               # padding never leaks
  return x, mask


@pytest.mark.parametrize("jit", [False, True])
def test_masked_sum_mean_var_match_oracle(jit):
  s_fn = both(ops.masked_sum, "axis")[jit]
  m_fn = both(ops.masked_mean, "axis")[jit]
  v_fn = both(ops.masked_var, "axis", "ddof")[jit]
  x, mask = make(0)
  vals = [float(x[i, t]) for i in range(B) for t in range(T) if mask[i, t]]
  mu = sum(vals) / len(vals)
  assert float(s_fn(x, mask)) == pytest.approx(sum(vals), rel=1e-5)
  assert float(m_fn(x, mask)) == pytest.approx(mu, rel=1e-5)
  for ddof in (0, 1):
    want = sum((v - mu) ** 2 for v in vals) / (len(vals) - ddof)
    assert float(v_fn(x, mask, ddof=ddof)) == pytest.approx(want, rel=1e-5)
  rows = np.asarray(m_fn(x, mask, axis=-1))
  for i in range(B):
    r = [float(x[i, t]) for t in range(T) if mask[i, t]]
    assert rows[i] == pytest.approx(sum(r) / len(r) if r else 0.0, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("jit", [False, True])
def test_masked_whiten_matches_oracle(jit):
  fn = both(ops.masked_whiten, "ddof", "eps")[jit]
  x, mask = make(1)
  vals = [float(x[i, t]) for i in range(B) for t in range(T) if mask[i, t]]
  mu = sum(vals) / len(vals)
  var = sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)
  got = np.asarray(fn(x, mask))
  for i in range(B):
    for t in range(T):
      want = (float(x[i, t]) - mu) / math.sqrt(var + 1e-8) if mask[i, t] else 0.0
      assert got[i, t] == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_segment_helpers_match_oracle(jit):
  seg_sum, seg_count, seg_mean, seg_max, seg_min = (
      both(f, "num_groups")[jit] for f in (ops.segment_sum, ops.segment_count, ops.segment_mean,
                                           ops.segment_max, ops.segment_min))
  rng = np.random.default_rng(2)
  v = rng.normal(size=B).astype(np.float32)
  where = rng.random(B) < 0.7
  s = np.asarray(seg_sum(v, GROUP_IDS, num_groups=P))
  c = np.asarray(seg_count(GROUP_IDS, num_groups=P, where=where))
  m = np.asarray(seg_mean(v, GROUP_IDS, num_groups=P, where=where))
  hi = np.asarray(seg_max(v, GROUP_IDS, num_groups=P, where=where))
  lo = np.asarray(seg_min(v, GROUP_IDS, num_groups=P, where=where))
  for g in range(P):
    rows = [i for i in range(B) if GROUP_IDS[i] == g]
    sel = [i for i in rows if where[i]]
    assert s[g] == pytest.approx(sum(float(v[i]) for i in rows), abs=1e-6)
    assert c[g] == len(sel)
    assert m[g] == pytest.approx(sum(float(v[i]) for i in sel) / len(sel) if sel else 0.0,
                                 abs=1e-6)
    assert hi[g] == (max(float(v[i]) for i in sel) if sel else -np.inf)
    assert lo[g] == (min(float(v[i]) for i in sel) if sel else np.inf)
  back = np.asarray(ops.gather_groups(jnp.arange(P, dtype=jnp.float32) + 10.0, GROUP_IDS))
  np.testing.assert_array_equal(back, [12, 10, 12, 11, 10, 12, 10, 11, 0])  # id 5 reads 0


@pytest.mark.parametrize("jit", [False, True])
def test_suffix_sum_and_lengths(jit):
  fn = both(ops.suffix_sum, "axis")[jit]
  x = np.random.default_rng(3).normal(size=(B, T)).astype(np.float32)
  got = np.asarray(fn(x))
  for i in range(B):
    for j in range(T):
      assert got[i, j] == pytest.approx(sum(float(x[i, k]) for k in range(j, T)), abs=1e-5)
  got0 = np.asarray(fn(x, axis=0))
  assert got0[0, 0] == pytest.approx(float(x[:, 0].sum()), abs=1e-5)
  _, mask = make(3)
  np.testing.assert_array_equal(ops.lengths(mask), mask.sum(-1))


_softmax = jax.jit(ops.masked_softmax)
_softmax_grad = jax.jit(jax.grad(
    lambda z, m: jnp.sum(ops.masked_softmax(z, m) * jnp.arange(T, dtype=jnp.float32)[None, :])))


@settings(max_examples=20)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(0.01, 100.0))
def test_masked_softmax_matches_oracle_and_has_finite_grads(seed, scale):
  x, mask = make(seed)
  logits = np.where(mask, x * np.float32(scale), np.nan).astype(np.float32)
  got = np.asarray(_softmax(logits, mask))
  for i in range(B):
    valid = [t for t in range(T) if mask[i, t]]
    if not valid:
      assert np.all(got[i] == 0.0)
      continue
    hi = max(float(logits[i, t]) for t in valid)
    e = {t: math.exp(float(logits[i, t]) - hi) for t in valid}
    for t in range(T):
      assert got[i, t] == pytest.approx(e[t] / sum(e.values()) if t in e else 0.0, abs=1e-6)
  g = _softmax_grad(jnp.asarray(logits), mask)
  assert np.all(np.isfinite(np.asarray(g)))
  assert np.all(np.asarray(g)[~mask] == 0.0)
