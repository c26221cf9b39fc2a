"""Named model presets, written as Hugging Face `config.json` dicts (see MODELS.md).

A checkpoint's own `config.json` is authoritative: presets serve dry-run plans, random-init
benchmarks and shape tests. The Phi-4-mini preset carries unit LongRoPE factors (48 short +
48 long): the real factors come from the checkpoint's `config.json` when weights are loaded;
they change no shape, parameter count or FLOP count.
"""

from __future__ import annotations

from typing import Any

from botjax.models.config import DecoderConfig


def _qwen2(vocab, hidden, layers, heads, kv, inter, theta, tie, max_pos, bos=151643, eos=151643):
  return {
      "model_type": "qwen2", "vocab_size": vocab, "hidden_size": hidden,
      "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
      "intermediate_size": inter, "rope_theta": theta, "tie_word_embeddings": tie,
      "max_position_embeddings": max_pos, "rms_norm_eps": 1e-6, "bos_token_id": bos,
      "eos_token_id": eos,
  }


# Hub repos of the presets (the base model where a preset is a base config). Only looked up in the
# local HF cache by the experiments (`resolve_checkpoint(..., local_files_only=True)`).
HF_REPOS: dict[str, str] = {
    "qwen2.5-3b": "Qwen/Qwen2.5-3B", "qwen2.5-math-1.5b": "Qwen/Qwen2.5-Math-1.5B",
    "qwen2.5-math-7b": "Qwen/Qwen2.5-Math-7B", "qwen2.5-1.5b-instruct": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen2.5-7b-instruct": "Qwen/Qwen2.5-7B-Instruct", "smollm3-3b": "HuggingFaceTB/SmolLM3-3B",
    "phi-4-mini-reasoning": "microsoft/Phi-4-mini-reasoning",
    "llama-3.1-8b-instruct": "meta-llama/Llama-3.1-8B-Instruct",
}

HF_PRESETS: dict[str, dict[str, Any]] = {
    "qwen2.5-3b": _qwen2(151936, 2048, 36, 16, 2, 11008, 1e6, True, 32768),
    "qwen2.5-math-1.5b": _qwen2(151936, 1536, 28, 12, 2, 8960, 1e4, True, 4096),
    "qwen2.5-math-7b": _qwen2(152064, 3584, 28, 28, 4, 18944, 1e4, False, 4096),
    "qwen2.5-1.5b-instruct": _qwen2(151936, 1536, 28, 12, 2, 8960, 1e6, True, 32768,
                                    eos=151645),
    "qwen2.5-7b-instruct": _qwen2(152064, 3584, 28, 28, 4, 18944, 1e6, False, 32768,
                                  eos=151645),
    "smollm3-3b": {
        "model_type": "smollm3", "vocab_size": 128256, "hidden_size": 2048,
        "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4,
        "intermediate_size": 11008, "rope_theta": 5e6, "tie_word_embeddings": True,
        "max_position_embeddings": 65536, "rms_norm_eps": 1e-6, "no_rope_layer_interval": 4,
        "bos_token_id": 128000, "eos_token_id": 128012, "pad_token_id": 128004,
    },
    "phi-4-mini-reasoning": {
        "model_type": "phi3", "vocab_size": 200064, "hidden_size": 3072,
        "num_hidden_layers": 32, "num_attention_heads": 24, "num_key_value_heads": 8,
        "intermediate_size": 8192, "tie_word_embeddings": True,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "partial_rotary_factor": 0.75,
        "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 48,
                         "long_factor": [1.0] * 48},
        "rope_theta": 10000.0,
        "bos_token_id": 199999, "eos_token_id": 200020, "pad_token_id": 199999,
    },
    "llama-3.1-8b-instruct": {
        "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "tie_word_embeddings": False,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    },
    # ~0.3 M parameters: a Qwen2-style model for CPU tests and the quick-start.
    "tiny": {
        "model_type": "qwen2", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 256, "rope_theta": 10000.0, "tie_word_embeddings": True,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    },
}

PRESETS: dict[str, DecoderConfig] = {
    name: DecoderConfig.from_hf_config(hf) for name, hf in HF_PRESETS.items()}


def get_config(name: str) -> DecoderConfig:
  """The `DecoderConfig` of preset `name`; an unknown name raises, listing the valid ones."""
  if name not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; valid presets: {sorted(PRESETS)}")
  return PRESETS[name]
