"""Logits parity with `transformers` (PyTorch, CPU) for tiny random models of every family."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

import botjax.models as bm
from botjax.models.layers import rope_inv_freq
from conftest import FAMILY_CONFIGS, hf_logits, left_padded_batch

ATOL = 1e-4


@pytest.mark.parametrize("name", sorted(FAMILY_CONFIGS))
def test_logits_match_transformers_left_padded(name, hf_checkpoint):
  path, hf = hf_checkpoint(name)
  model = bm.load_pretrained(path)
  ids, mask, pos = left_padded_batch(3, 12, hf.config.vocab_size, seed=1)
  ref = hf_logits(hf, ids, mask, pos)
  out, cache = model(jnp.asarray(ids), jnp.asarray(pos), attention_mask=jnp.asarray(mask))
  assert cache is None
  assert out.shape == ref.shape and out.dtype == jnp.float32
  err = np.abs(np.asarray(out) - ref)[mask].max()
  assert err <= ATOL, f"{name}: max |logits diff| {err}"
  assert np.abs(ref).max() > 0.5  # the comparison is not between two near-zero tensors


def test_phi3_longrope_switches_to_long_factors(hf_checkpoint):
  """Sequences beyond original_max_position_embeddings (16) use the long factors, as in HF."""
  path, hf = hf_checkpoint("phi3_longrope")
  model = bm.load_pretrained(path)
  ids, mask, pos = left_padded_batch(2, 24, hf.config.vocab_size, seed=2)
  ref = hf_logits(hf, ids, mask, pos)
  out, _ = model(jnp.asarray(ids), jnp.asarray(pos), attention_mask=jnp.asarray(mask))
  assert np.abs(np.asarray(out) - ref)[mask].max() <= ATOL
  # The same tokens scored with the short factors differ: the switch really happened.
  short_model_out, _ = model(jnp.asarray(ids[:, :16]), jnp.asarray(pos[:, :16]),
                             attention_mask=jnp.asarray(mask[:, :16]))
  diff = np.abs(np.asarray(short_model_out) - np.asarray(out)[:, :16])[mask[:, :16]].max()
  assert diff > 1e-3


def test_llama3_scaling_changes_the_frequencies(hf_checkpoint):
  path, _ = hf_checkpoint("llama3_scaling")
  cfg = bm.load_pretrained(path).config
  plain = rope_inv_freq(dataclasses.replace(cfg, rope_type="default"))
  scaled = rope_inv_freq(cfg)
  assert scaled.shape == plain.shape == (cfg.head_dim // 2,)
  # original context 16: wavelength 2π of the first pair lies between 16/4 and 16 (smoothed)
  assert plain[0] / 8.0 < scaled[0] < plain[0]
  np.testing.assert_allclose(scaled[-1], plain[-1] / 8.0, rtol=1e-6)  # low ones divided by factor


def test_smollm3_has_a_nope_layer(hf_checkpoint):
  path, _ = hf_checkpoint("smollm3_nope")
  cfg = bm.load_pretrained(path).config
  assert [cfg.uses_rope(i) for i in range(4)] == [True, True, True, False]


def test_sliding_window_configs_are_read(hf_checkpoint):
  phi = bm.load_pretrained(hf_checkpoint("phi3_sliding_window")[0]).config
  assert [phi.window(i) for i in range(2)] == [5, 5]
  qwen = bm.load_pretrained(hf_checkpoint("qwen2_sliding_window")[0]).config
  assert [qwen.window(i) for i in range(2)] == [None, 4]  # layers >= max_window_layers
