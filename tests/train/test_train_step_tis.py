"""The update with rollouts from another engine: the truncated importance-sampling correction
(`Recipe.tis_cap`) reads `RLBatch.behaviour_logp`; without it nothing changes."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from botjax import algorithms, models
from botjax.train import step as step_lib

B, LP, T = 8, 5, 8


@pytest.fixture(scope="module")
def model():
  cfg = dataclasses.replace(models.get_config("tiny"), vocab_size=48, num_layers=1,
                            hidden_size=16, head_dim=8, intermediate_size=32)
  return models.Decoder(cfg, rngs=nnx.Rngs(1))


def engine_batch(model, seed=0):
  """An RLBatch whose behaviour log-probs are another engine's: the trainer's plus an error."""
  rng = np.random.default_rng(seed)
  v = model.config.vocab_size
  ids = rng.integers(3, v, size=(B, LP + T)).astype(np.int32)
  clen = rng.integers(1, T + 1, size=B)
  attn = np.ones((B, LP + T), bool)
  attn[:, LP:] = np.arange(T)[None, :] < clen[:, None]
  pos = np.maximum(np.cumsum(attn, 1) - 1, 0).astype(np.int32)
  mask = attn[:, LP:]
  graphdef, params, rest = step_lib.split_model(model)
  logp, _ = step_lib.split_logprobs(graphdef, params, rest, ids, pos, attn, completion_len=T)
  old = np.where(mask, np.asarray(logp), 0.0).astype(np.float32)
  behaviour = np.where(mask, old + rng.normal(0.0, 0.7, size=(B, T)), 0.0).astype(np.float32)
  adv = np.where(mask, rng.normal(size=(B, T)), 0.0).astype(np.float32)
  return step_lib.RLBatch(
      input_ids=jnp.asarray(ids), positions=jnp.asarray(pos), attention_mask=jnp.asarray(attn),
      old_logp=jnp.asarray(old), ref_logp=jnp.zeros((B, T)), advantages=jnp.asarray(adv),
      loss_mask=jnp.asarray(mask), seq_weights=jnp.ones((B,), jnp.float32),
      behaviour_logp=jnp.asarray(behaviour))


def run(model, recipe, batch, num_micro=1):
  graphdef, params, rest = step_lib.split_model(model)
  opt = optax.sgd(1.0)
  state = step_lib.init_state(params, opt, 0)
  return step_lib.make_update_fn(graphdef, rest, recipe, opt, num_micro=num_micro,
                                 donate=False)(state, batch)


@pytest.mark.parametrize("num_micro", [1, 2])
def test_update_applies_the_tis_weights_and_reports_them(model, num_micro):
  batch = engine_batch(model)
  recipe = algorithms.get_recipe("dapo", tis_cap=2.0)
  out = run(model, recipe, batch, num_micro)
  old, beh, mask = (np.asarray(x) for x in (batch.old_logp, batch.behaviour_logp, batch.loss_mask))
  ratio = np.exp(old.astype(np.float64) - beh)
  w = np.where(mask, np.minimum(ratio, 2.0), 0.0)
  # on the policy that sampled (logp = old): the clipped surrogate is −A, token-mean of −w·A
  want_loss = np.sum(-w * np.asarray(batch.advantages)) / mask.sum()
  np.testing.assert_allclose(float(out.metrics["loss"]), want_loss, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(float(out.metrics["tis_weight"]), w.sum() / mask.sum(), rtol=1e-5)
  np.testing.assert_allclose(float(out.metrics["tis_capped_fraction"]),
                             np.sum(mask & (ratio > 2.0)) / mask.sum(), rtol=1e-6)
  assert 0.0 < float(out.metrics["tis_capped_fraction"]) < 1.0


def test_without_behaviour_logp_or_without_tis_cap_the_update_is_unchanged(model):
  batch = engine_batch(model, seed=1)
  plain = algorithms.get_recipe("dapo")
  base = run(model, plain, dataclasses.replace(batch, behaviour_logp=None))
  # tis_cap off: behaviour_logp is not read
  off = run(model, plain, batch)
  # tis_cap on, behaviour = old (botjax's own engine): every weight is 1
  same = run(model, algorithms.get_recipe("dapo", tis_cap=2.0),
             dataclasses.replace(batch, behaviour_logp=None))
  for out in (off, same):
    np.testing.assert_allclose(float(out.metrics["loss"]), float(base.metrics["loss"]),
                               rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                 out.state.params, base.state.params)
  assert "tis_weight" not in base.metrics and float(same.metrics["tis_weight"]) == pytest.approx(1.0)
  assert float(same.metrics["tis_capped_fraction"]) == 0.0
