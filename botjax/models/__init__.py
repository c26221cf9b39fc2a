"""Flax NNX ports of the target decoder families, with Hugging Face weights in and out.

  cfg = botjax.models.get_config("tiny")
  model = botjax.models.Decoder(cfg, rngs=nnx.Rngs(0))
  logits, _ = model(input_ids, positions, attention_mask=mask)
  model = botjax.models.load_pretrained("/path/to/Qwen2.5-3B", mesh=make_mesh("fsdp:-1"))
  print(botjax.models.plan("qwen2.5-3b", "fsdp:8", batch_size=64, seq_len=2048))

Mesh helpers live in `botjax.models.sharding` (make_mesh, RULES, shard_model, batch_sharding).
"""

from botjax.models.config import DecoderConfig
from botjax.models.decoder import Decoder, KVCache
from botjax.models.logprobs import logprobs_from_hidden, token_logprobs
from botjax.models.plan import DryRunPlan, plan
from botjax.models.presets import HF_REPOS, PRESETS, get_config
from botjax.models.weights import (load_pretrained, load_tokenizer, resolve_checkpoint,
                                   save_pretrained)

__all__ = [
    "HF_REPOS",
    "DecoderConfig", "Decoder", "KVCache", "PRESETS", "get_config", "token_logprobs",
    "logprobs_from_hidden", "load_pretrained", "save_pretrained", "load_tokenizer",
    "resolve_checkpoint", "plan", "DryRunPlan",
]
