"""The rollout-engine interface: the registry, and botjax's lockstep sampler as an engine."""

import jax
import numpy as np
import pytest
from flax import nnx

import botjax.models as bm
from botjax import xla_cpu
from botjax.sampling import (ENGINES, RolloutEngine, Sampler, SamplingConfig, SlotEngine,
                             make_engine, register_engine)

CFG = bm.DecoderConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=8, intermediate_size=64, qkv_bias=True, rope_theta=1e4)
SC = SamplingConfig(temperature=1.0, max_new_tokens=8, eos_token_ids=(1,))


def test_jax_engine_is_the_sampler_and_speaks_the_interface():
  model = bm.Decoder(CFG, rngs=nnx.Rngs(0))
  engine = make_engine("jax", model, SC)
  assert isinstance(engine, Sampler) and isinstance(engine, RolloutEngine)
  assert engine.exact_logp and engine.config == SC
  direct = Sampler(model, CFG, SC).generate([[5, 6, 7], [9]], jax.random.key(3), n=2)
  out = engine.generate([[5, 6, 7], [9]], jax.random.key(3), n=2)
  np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(direct.tokens))
  # set_params: another model's parameters change the completions of the same key
  engine.set_params(nnx.state(bm.Decoder(CFG, rngs=nnx.Rngs(1))))
  other = engine.generate([[5, 6, 7], [9]], jax.random.key(3), n=2)
  assert not np.array_equal(np.asarray(other.logp), np.asarray(out.logp))
  engine.close()


def test_unknown_and_duplicate_engine_names_are_refused():
  with pytest.raises(ValueError, match="unknown rollout engine 'nope'.*'jax'"):
    make_engine("nope", None, SC)
  with pytest.raises(ValueError, match="already registered"):
    register_engine("jax", ENGINES["jax"])
  with pytest.raises(ValueError, match="non-empty str"):
    register_engine("", ENGINES["jax"])


def test_auto_names_the_engine_for_the_budget_and_host(monkeypatch):
  """make_engine("auto") builds what `auto_engine` names: on this small CPU host the slot engine
  up to a 64-token budget and from a 256-token one, the lockstep sampler in between; all give
  the same completions."""
  monkeypatch.setenv(xla_cpu.ENV_VAR, "auto")
  monkeypatch.setattr(xla_cpu.os, "cpu_count", lambda: 2)
  model = bm.Decoder(CFG, rngs=nnx.Rngs(0))
  mid_sc = SamplingConfig(temperature=1.0, max_new_tokens=128, eos_token_ids=(1,))
  long_sc = SamplingConfig(temperature=1.0, max_new_tokens=256, eos_token_ids=(1,))
  short, mid, long = (make_engine("auto", model, sc) for sc in (SC, mid_sc, long_sc))
  assert type(short) is SlotEngine and type(mid) is Sampler and type(long) is SlotEngine
  want = Sampler(model, CFG, long_sc).generate([[5, 6, 7], [9]], jax.random.key(3), n=2,
                                               max_new_tokens=8)
  for e in (short, mid, long):
    out = e.generate([[5, 6, 7], [9]], jax.random.key(3), n=2, max_new_tokens=8)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(want.tokens))
    e.close()
