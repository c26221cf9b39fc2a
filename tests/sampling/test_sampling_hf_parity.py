"""Greedy generation equals `transformers` `generate(do_sample=False)` token for token.

Tiny random checkpoints of each family are written with `save_pretrained` and loaded with
`botjax.models.load_pretrained`, like any user checkpoint; prompts of different lengths are
left-padded into one batch on both sides.
"""

import jax
import numpy as np
import pytest

import botjax.models as bm
from botjax.sampling import FINISH_LENGTH, FINISH_STOP, Sampler, SamplingConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_attention_heads=4,
             num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
             rms_norm_eps=1e-6, max_position_embeddings=64)
FAMILIES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(num_hidden_layers=2, tie_word_embeddings=True, rope_theta=1e6)),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(num_hidden_layers=2, tie_word_embeddings=False, rope_theta=5e5)),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM",  # layer 3 has no RoPE
                dict(num_hidden_layers=4, tie_word_embeddings=True, rope_theta=5e6)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",  # partial rotary, fused qkv / gate_up
             dict(num_hidden_layers=2, tie_word_embeddings=False,
                  rope_parameters=dict(rope_type="default", rope_theta=1e4,
                                       partial_rotary_factor=0.5))),
}
PROMPTS = [[17, 33, 5], [9, 90, 44, 12, 71, 3, 64], [100, 21, 8, 55, 41, 120, 7, 19, 66, 30, 4]]
NEW = 12


def _hf_greedy(hf, prompts, eos):
  """transformers greedy generation from a left-padded batch; rows padded with 0 after EOS."""
  lp = max(map(len, prompts))
  ids = torch.zeros((len(prompts), lp), dtype=torch.long)
  mask = torch.zeros((len(prompts), lp), dtype=torch.long)
  for b, p in enumerate(prompts):
    ids[b, lp - len(p):] = torch.tensor(p)
    mask[b, lp - len(p):] = 1
  hf.generation_config.eos_token_id = eos
  with torch.no_grad():
    out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=0,
                      do_sample=False, pad_token_id=0, eos_token_id=eos)
  new = out[:, lp:].numpy()
  return np.pad(new, ((0, 0), (0, NEW - new.shape[1])))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_equals_transformers_generate(family, tmp_path):
  cfg_cls, model_cls, kwargs = FAMILIES[family]
  torch.manual_seed(0)
  hf_cfg = getattr(transformers, cfg_cls)(**{**SMALL, **kwargs})
  hf = getattr(transformers, model_cls)(hf_cfg).float().eval()
  hf.save_pretrained(tmp_path)
  model = bm.load_pretrained(str(tmp_path))
  sampler = Sampler(model, model.config, SamplingConfig(temperature=0.0, max_new_tokens=NEW,
                                                        pad_token_id=0))
  key = jax.random.key(0)

  # No stop token: NEW tokens on every row.
  ref = _hf_greedy(hf, PROMPTS, eos=None)
  out = sampler.generate(PROMPTS, key)
  np.testing.assert_array_equal(np.asarray(out.tokens)[:, :NEW], ref, err_msg=family)
  assert np.all(np.asarray(out.finish_reason) == FINISH_LENGTH)

  # An EOS that row 1 emits at its 5th step (or earlier): the same stops on both sides.
  eos = int(ref[1, 4])
  ref_eos = _hf_greedy(hf, PROMPTS, eos=eos)
  out = sampler.generate(PROMPTS, key, stop_token_ids=[[eos]] * len(PROMPTS))
  tokens, lengths = np.asarray(out.tokens)[:, :NEW], np.asarray(out.lengths)
  np.testing.assert_array_equal(tokens, ref_eos, err_msg=family)
  for b in range(len(PROMPTS)):
    hits = np.flatnonzero(ref[b] == eos)
    expected = NEW if hits.size == 0 else hits[0] + 1
    assert lengths[b] == expected
    assert out.finish_reason[b] == (FINISH_STOP if hits.size else FINISH_LENGTH)
  assert lengths[1] <= 5
