"""`botjax.sampling.sample_logprobs`: a sample's log-probs under a model, inside `jit`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import botjax.models as bm
from botjax.sampling import Sampler, SamplingConfig, sample_logprobs

CFG = bm.DecoderConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=8, intermediate_size=64, qkv_bias=True, rope_theta=1e4)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18], [3]]


@pytest.fixture(scope="module")
def model():
  return bm.Decoder(CFG, rngs=nnx.Rngs(0))


@jax.jit(static_argnames=("graphdef", "temperature", "chunk_size", "share_prompts"))
def _helper(graphdef, params, out, temperature, chunk_size=128, share_prompts=True):
  return sample_logprobs(nnx.merge(graphdef, params), out, temperature=temperature,
                             chunk_size=chunk_size, share_prompts=share_prompts)


def _numpy_logprobs(model, out, temperature):
  """Oracle: every row's whole sequence through the model, log-softmax in NumPy, column loop."""
  prompt_ids, prompt_mask = np.asarray(out.prompt_ids), np.asarray(out.prompt_mask)
  tokens, mask = np.asarray(out.tokens), np.asarray(out.mask)
  want = np.zeros(tokens.shape, np.float64)
  graphdef, state = nnx.split(model)
  forward = jax.jit(lambda state, ids, pos: nnx.merge(graphdef, state)(ids, pos)[0])
  for b in range(tokens.shape[0]):
    seq = np.concatenate([prompt_ids[b][prompt_mask[b]], tokens[b][mask[b]]])
    pos = np.arange(len(seq), dtype=np.int32)[None]
    logits = forward(state, jnp.asarray(seq[None]), jnp.asarray(pos))   # no padding: one row
    z = np.asarray(logits[0], np.float64) / temperature
    z = z - z.max(-1, keepdims=True)
    logsm = z - np.log(np.exp(z).sum(-1, keepdims=True))
    m = int(prompt_mask[b].sum())
    for t in range(int(mask[b].sum())):
      want[b, t] = logsm[m + t - 1, tokens[b, t]]
  return want


@pytest.mark.parametrize("temperature,n", [(0.8, 3), (0.0, 1)])
def test_helper_under_jit_matches_the_samplers_logprobs(model, temperature, n):
  cfg = SamplingConfig(temperature=temperature, top_k=20, max_new_tokens=12, eos_token_ids=(1,))
  sampler = Sampler(model, CFG, cfg)
  out = sampler.generate(PROMPTS, jax.random.key(5), n=n)
  graphdef, params = nnx.split(model)
  tau = sampler.config.logp_temperature
  mask = np.asarray(out.mask)
  assert mask.sum() > 20 and (~mask).sum() > 0
  # n = 3: 4 prompts for 12 rows share their prompt's forward pass; chunks of 5 leave a remainder
  for share, chunk in ((True, 5), (False, 128)):
    logp, ent = _helper(graphdef, params, out, tau, chunk, share)
    assert logp.shape == ent.shape == out.tokens.shape and logp.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(logp)[mask], np.asarray(out.logp)[mask], atol=2e-5)
    assert np.all(np.asarray(logp)[~mask] == 0) and np.all(np.asarray(ent)[~mask] == 0)
    assert np.all(np.asarray(ent)[mask] > 0)


def test_helper_with_other_parameters_matches_a_numpy_oracle_and_its_gradient(model):
  sampler = Sampler(model, CFG, SamplingConfig(temperature=0.8, max_new_tokens=10))
  out = sampler.generate(PROMPTS, jax.random.key(1), n=2)
  other = bm.Decoder(CFG, rngs=nnx.Rngs(1))          # the "trained" parameters differ
  graphdef, params = nnx.split(other)
  logp, _ = _helper(graphdef, params, out, 0.8, 4)
  mask = np.asarray(out.mask)
  want = _numpy_logprobs(other, out, 0.8)
  np.testing.assert_allclose(np.asarray(logp)[mask], want[mask], atol=2e-5)
  assert np.abs(np.asarray(logp)[mask] - np.asarray(out.logp)[mask]).max() > 1e-2

  # the chunked, rematerialised gradient equals the gradient through full [B, L, V] logits
  tf = out.teacher_forcing()
  t = out.tokens.shape[1]

  def full(params):
    m = nnx.merge(graphdef, params)
    logits, _ = m(tf.input_ids, tf.positions, attention_mask=tf.attention_mask)
    lsm = jax.nn.log_softmax(logits / 0.8, axis=-1)
    lp = jnp.take_along_axis(lsm, tf.targets[..., None], axis=-1)[..., 0]
    return jnp.sum(jnp.where(out.mask, jax.lax.dynamic_slice_in_dim(lp, tf.start, t, 1), 0.0))

  def chunked(params):
    return jnp.sum(sample_logprobs(nnx.merge(graphdef, params), out, temperature=0.8,
                                       chunk_size=3)[0])
  g_full, g_chunk = jax.jit(jax.grad(full))(params), jax.jit(jax.grad(chunked))(params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(
      a, b, rtol=1e-3, atol=1e-5 * max(1.0, float(np.abs(b).max()))), g_chunk, g_full)
  assert max(float(np.abs(g).max()) for g in jax.tree.leaves(g_full)) > 1.0


def test_teacher_forcing_slice_works_inside_jit(model):
  """The documented by-hand route: `start` is traced once the NamedTuple enters jit."""
  sampler = Sampler(model, CFG, SamplingConfig(temperature=0.8, max_new_tokens=8))
  out = sampler.generate(PROMPTS, jax.random.key(2))
  graphdef, params = nnx.split(model)

  @jax.jit
  def by_hand(params, tf):
    logp_full, _ = bm.token_logprobs(nnx.merge(graphdef, params), tf.input_ids, tf.positions,
                                     tf.attention_mask, tf.targets, temperature=0.8)
    return jax.lax.dynamic_slice_in_dim(logp_full, tf.start, out.tokens.shape[1], axis=1)

  got = np.asarray(by_hand(params, out.teacher_forcing()))
  mask = np.asarray(out.mask)
  np.testing.assert_allclose(got[mask], np.asarray(out.logp)[mask], atol=2e-5)


def test_helper_rejects_a_non_positive_temperature(model):
  out = Sampler(model, CFG, SamplingConfig(max_new_tokens=4)).generate(PROMPTS[:1], jax.random.key(0))
  with pytest.raises(ValueError, match="temperature must be > 0"):
    sample_logprobs(model, out, temperature=0.0)
