"""Shared helpers for the model tests: tiny random HF checkpoints of each family, on disk."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

COMMON = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-6)

# name -> (config class, kwargs, causal-LM class). Each family's quirk is switched on.
FAMILY_CONFIGS = {
    "qwen2_bias_untied": ("Qwen2Config", dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        rope_theta=1e6, max_position_embeddings=256), "Qwen2ForCausalLM"),
    "qwen2_tied_kv1": ("Qwen2Config", dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True,
        rope_theta=1e4, max_position_embeddings=256), "Qwen2ForCausalLM"),
    "llama3_scaling": ("LlamaConfig", dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        max_position_embeddings=256,
        rope_parameters=dict(rope_type="llama3", rope_theta=5e5, factor=8.0,
                             low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=16)), "LlamaForCausalLM"),
    "llama_tied_bias": ("LlamaConfig", dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
        attention_bias=True, mlp_bias=True, max_position_embeddings=256,
        rope_theta=1e4), "LlamaForCausalLM"),
    "smollm3_nope": ("SmolLM3Config", dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        rope_theta=5e6, max_position_embeddings=256), "SmolLM3ForCausalLM"),
    "phi3_longrope": ("Phi3Config", dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        max_position_embeddings=64, original_max_position_embeddings=16,
        rope_parameters=dict(rope_type="longrope", rope_theta=1e4, partial_rotary_factor=0.5,
                             short_factor=[1.0, 1.3, 1.9, 2.5],
                             long_factor=[1.5, 2.0, 4.0, 7.0])), "Phi3ForCausalLM"),
    "phi3_sliding_window": ("Phi3Config", dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
        max_position_embeddings=256, sliding_window=5, rope_theta=1e4), "Phi3ForCausalLM"),
    "qwen2_sliding_window": ("Qwen2Config", dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        use_sliding_window=True, sliding_window=4, max_window_layers=1,
        max_position_embeddings=256), "Qwen2ForCausalLM"),
}


def make_hf_model(name: str, seed: int = 0, **overrides):
  """A random `transformers` model of family config `name`, float32, eval mode."""
  cfg_cls, kwargs, model_cls = FAMILY_CONFIGS[name]
  cfg = getattr(transformers, cfg_cls)(**{**COMMON, **kwargs, **overrides})
  torch.manual_seed(seed)
  model = getattr(transformers, model_cls)(cfg).eval()
  # HF's init gives tiny logits; wider weights make the parity check meaningful.
  with torch.no_grad():
    for pname, p in model.named_parameters():
      p.normal_(0.0, 0.15 if p.ndim > 1 else 0.3)
      if "norm" in pname:
        p.add_(1.0)
  return model


def left_padded_batch(batch: int, length: int, vocab: int, seed: int = 0):
  """(ids, mask, positions) with rows left-padded by 0, 1, 2, ... tokens."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(3, vocab, size=(batch, length)).astype(np.int32)
  mask = np.ones((batch, length), bool)
  for b in range(batch):
    mask[b, : min(b, length - 1)] = False
  ids = np.where(mask, ids, 0).astype(np.int32)
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
  return ids, mask, positions


def hf_logits(model, ids, mask, positions):
  with torch.no_grad():
    out = model(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(mask.astype(np.int64)),
                position_ids=torch.tensor(positions, dtype=torch.long))
  return out.logits.float().numpy()


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
  """Factory: name -> (directory of a saved random HF model, the torch model)."""
  cache = {}

  def make(name: str):
    if name not in cache:
      model = make_hf_model(name)
      path = tmp_path_factory.mktemp(name)
      model.save_pretrained(path)
      cache[name] = (str(path), model)
    return cache[name]

  return make
