"""Top-k / top-p filters and the per-step sampling rule, against NumPy oracles."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from botjax.sampling import filter_logits, sample_logits, top_k_filter, top_p_filter

B, V = 4, 16
# XLA on CPU flushes subnormals to zero, so they are left out of the drawn logits.
_logits = hnp.arrays(np.float32, (B, V),
                     elements=st.floats(-6, 6, width=32, allow_subnormal=False))


def _kept_top_k(z, k):
  """Oracle: token v survives iff fewer than k tokens are strictly larger."""
  return np.array([[np.sum(row > row[v]) < k for v in range(row.size)] for row in z])


def _kept_top_p(z, p):
  """Oracle: v survives iff the mass of tokens strictly more likely than v is below p."""
  probs = np.exp(z - z.max(-1, keepdims=True))
  probs = probs / probs.sum(-1, keepdims=True)
  out = np.zeros(z.shape, bool)
  for b in range(z.shape[0]):
    order = np.argsort(-z[b], kind="stable")
    before = np.cumsum(probs[b, order]) - probs[b, order]
    kept = order[before < p]
    out[b] = z[b] >= z[b, kept].min()          # ties with the last kept logit survive
  return out


_top_k_jit = jax.jit(top_k_filter, static_argnames="top_k")
_top_p_jit = jax.jit(top_p_filter, static_argnames="top_p")
_filter_jit = jax.jit(filter_logits, static_argnames=("top_k", "top_p"))


@given(z=_logits)
def test_top_k_keeps_exactly_the_k_largest(z):
  out = np.asarray(_top_k_jit(jnp.asarray(z), top_k=3))
  kept = np.isfinite(out)
  np.testing.assert_array_equal(kept, _kept_top_k(z, 3))
  np.testing.assert_array_equal(out[kept], z[kept])
  assert np.all(kept.sum(-1) >= 3)


@given(z=_logits)
def test_top_p_keeps_the_smallest_nucleus(z):
  out = np.asarray(_top_p_jit(jnp.asarray(z), top_p=0.7))
  kept = np.isfinite(out)
  np.testing.assert_array_equal(kept, _kept_top_p(z, 0.7))
  np.testing.assert_array_equal(out[kept], z[kept])


@given(z=_logits)
def test_combined_filter_equals_top_k_then_top_p(z):
  z = jnp.asarray(z)
  fused = np.asarray(_filter_jit(z, top_k=5, top_p=0.6))
  chained = np.asarray(_top_p_jit(_top_k_jit(z, top_k=5), top_p=0.6))
  np.testing.assert_array_equal(fused, chained)


def test_filters_off_return_logits_unchanged():
  z = jnp.asarray(np.random.default_rng(0).normal(size=(B, V)), jnp.float32)
  np.testing.assert_array_equal(filter_logits(z, top_k=0, top_p=1.0), z)
  np.testing.assert_array_equal(top_k_filter(z, top_k=V), z)


def test_crafted_distribution_top_k_and_top_p_never_leave_the_allowed_set():
  # Probabilities 0.4, 0.3, 0.2, 0.05, 0.05, then 11 tokens sharing ~1e-4 mass.
  probs = np.array([0.4, 0.3, 0.2, 0.05, 0.05] + [1e-5] * 11, np.float64)
  z = np.log(probs / probs.sum()).astype(np.float32)
  rows = 4096
  logits = jnp.asarray(np.tile(z, (rows, 1)))
  keys = jax.random.split(jax.random.key(0), rows)
  # top_p = 0.75: mass before token 2 is 0.7 < 0.75, before token 3 is 0.9 -> allowed {0, 1, 2}.
  # top_k = 2 -> allowed {0, 1}.
  for top_k, top_p, allowed in [(0, 0.75, {0, 1, 2}), (2, 1.0, {0, 1}), (4, 0.6, {0, 1})]:
    tokens, _ = jax.jit(sample_logits, static_argnames=("temperature", "top_k", "top_p"))(
        keys, logits, temperature=1.0, top_k=top_k, top_p=top_p)
    seen = set(np.asarray(tokens).tolist())
    assert seen == allowed, (top_k, top_p, seen)
  # Within the allowed set, the renormalised probabilities are respected (0.4 : 0.3 : 0.2).
  tokens, _ = sample_logits(keys, logits, temperature=1.0, top_p=0.75)
  freq = np.bincount(np.asarray(tokens), minlength=V)[:3] / rows
  np.testing.assert_allclose(freq, np.array([4, 3, 2]) / 9, atol=0.03)


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_sample_logits_reports_tempered_untruncated_logp(temperature):
  rng = np.random.default_rng(1)
  z = rng.normal(size=(B, V)).astype(np.float32) * 3
  keys = jax.random.split(jax.random.key(1), B)
  tokens, logp = sample_logits(keys, jnp.asarray(z), temperature=temperature, top_k=4,
                               top_p=0.9)
  tokens = np.asarray(tokens)
  tau = 1.0 if temperature == 0 else temperature
  scaled = z.astype(np.float64) / tau
  ref = scaled - np.log(np.exp(scaled).sum(-1, keepdims=True))
  np.testing.assert_allclose(np.asarray(logp), ref[np.arange(B), tokens], atol=1e-5)
  if temperature == 0:
    np.testing.assert_array_equal(tokens, z.argmax(-1))


def test_sampling_follows_the_tempered_distribution():
  z = np.log(np.array([0.5, 0.25, 0.125, 0.125], np.float32))
  rows = 8192
  keys = jax.random.split(jax.random.key(2), rows)
  tokens, _ = sample_logits(keys, jnp.asarray(np.tile(z, (rows, 1))), temperature=0.5)
  p = np.array([0.5, 0.25, 0.125, 0.125]) ** 2        # softmax(z / 0.5) ∝ p²
  np.testing.assert_allclose(np.bincount(np.asarray(tokens), minlength=4) / rows, p / p.sum(),
                             atol=0.02)


def test_bad_hyperparameters_raise():
  z = jnp.zeros((B, V))
  with pytest.raises(ValueError, match="top_k"):
    top_k_filter(z, top_k=-1)
  with pytest.raises(ValueError, match="top_p"):
    top_p_filter(z, top_p=0.0)
  with pytest.raises(ValueError, match="temperature"):
    sample_logits(jax.random.split(jax.random.key(0), B), z, temperature=-1.0)


@pytest.mark.parametrize("top_k", [0, 5])
def test_sampling_draws_the_same_tokens_as_jax_random_categorical(top_k):
  """The max + first-index Gumbel draw picks exactly what jax.random.categorical picks."""
  keys = jax.random.split(jax.random.key(3), 256)
  logits = jax.random.normal(jax.random.key(4), (256, 50)) * 3.0
  logits = logits.at[:, 7].set(-jnp.inf)
  filtered = filter_logits(logits, top_k=top_k, top_p=1.0)
  want = jax.vmap(jax.random.categorical)(keys, filtered)
  got, _ = jax.jit(lambda k, z: sample_logits(k, z, temperature=1.0, top_k=top_k))(keys, logits)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  # ties go to the first maximum, as argmax does
  from botjax.sampling.filtering import _first_argmax
  z = jnp.asarray([[1.0, 3.0, 3.0, -jnp.inf], [-jnp.inf, -jnp.inf, 0.0, 0.0]])
  np.testing.assert_array_equal(np.asarray(_first_argmax(z)), [1, 2])
