"""Batched KV-cache generation with per-token log-probs, bucketed shapes and text helpers.

  from botjax.sampling import Sampler, SamplingConfig, generate_text
  sampler = Sampler(model, model.config, SamplingConfig(temperature=1.0, eos_token_ids=(eos,)))
  out = sampler.generate(prompt_token_lists, jax.random.key(0), n=8)     # SampleOutput
  texts = generate_text(sampler, tokenizer, ["What is 3 + 4?"], key, n=8)  # strings + offsets
  logp, _ = sample_logprobs(model, out, temperature=sampler.config.logp_temperature)  # [B, T]

Every engine implements `RolloutEngine` (botjax's: the lockstep `Sampler`, registered as "jax",
and the continuous-batching `SlotEngine`, "slots"); `make_engine(name, model, sampling_config)`
builds one by its registered name (`ENGINES`), "auto" being the one of the two that
`auto_engine` picks for the host and budget.
"""

from botjax.sampling.buckets import bucket_size, left_pad, positions_from_mask
from botjax.sampling.config import SamplingConfig
from botjax.sampling.filtering import filter_logits, sample_logits, top_k_filter, top_p_filter
from botjax.sampling.logprobs import sample_logprobs
from botjax.sampling.engine import (AUTO, ENGINES, RolloutEngine, auto_engine, make_engine,
                                    register_engine)
from botjax.sampling.output import FINISH_LENGTH, FINISH_STOP, SampleOutput, TeacherForcing
from botjax.sampling.sampler import Sampler
from botjax.sampling.slots import SlotEngine, SlotStats
from botjax.sampling.text import (
    TextSamples,
    TokenOffsets,
    decode_completions,
    decode_with_offsets,
    encode_prompts,
    generate_text,
)

__all__ = [
    "AUTO", "ENGINES", "RolloutEngine", "auto_engine", "make_engine", "register_engine",
    "FINISH_LENGTH", "FINISH_STOP",
    "SampleOutput", "sample_logprobs", "Sampler", "SamplingConfig", "SlotEngine", "SlotStats",
    "TeacherForcing", "TextSamples", "TokenOffsets", "bucket_size", "decode_completions",
    "decode_with_offsets", "encode_prompts", "filter_logits", "generate_text", "left_pad",
    "positions_from_mask", "sample_logits", "top_k_filter", "top_p_filter",
]
