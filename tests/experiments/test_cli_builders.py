"""experiments/_cli.py's builders that take values: the end-of-turn stop ids of a chat template."""

import os
import sys

from tokenizers import Tokenizer, models as tok_models
from transformers import PreTrainedTokenizerFast

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "experiments"))

import _cli  # noqa: E402  experiments/_cli.py
from botjax import data  # noqa: E402


def test_turn_end_ids_stop_at_chatml_turn_ends_only_when_the_tokenizer_has_them(tmp_path):
  # the Qwen2-style tiny tokenizer: ChatML turns, <|im_end|> a special token of its own
  tok = data.build_tokenizer(tmp_path / "tok", ["1 + 2 = 3"] * 8, vocab_size=300)
  [im_end] = _cli.turn_end_ids(tok)
  assert tok.convert_ids_to_tokens(im_end) == "<|im_end|>"
  plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(tok_models.WordLevel(
      {"<unk>": 0, "<eos>": 1, "a": 2}, unk_token="<unk>")), eos_token="<eos>")
  assert _cli.turn_end_ids(plain) == ()


def test_the_dry_run_plan_counts_the_slots_the_run_engine_gets():
  """`plan_text`'s slot count: the engine's default for the budget (128 where it keeps a region
  per slot, up to 64 tokens; 64 above), or `rollout.engine_options`' num_slots / kv_cache."""
  import dataclasses
  from botjax.train import config as config_lib

  def cfg(budget, **options):
    return config_lib.TrainConfig(rollout=config_lib.RolloutConfig(
        max_new_tokens=budget, engine="slots", engine_options=tuple(options.items())))

  assert _cli.slot_engine_slots(cfg(64)) == 128 and _cli.slot_engine_slots(cfg(65)) == 64
  assert _cli.slot_engine_slots(cfg(1024)) == 64
  assert _cli.slot_engine_slots(cfg(64, kv_cache="paged")) == 64
  assert _cli.slot_engine_slots(cfg(1024, kv_cache="regions")) == 128
  assert _cli.slot_engine_slots(cfg(64, num_slots=12)) == 12
  text = _cli.plan_text("tiny", "fsdp:1", dataclasses.replace(cfg(64), workdir="unused"),
                        compute_flops=False)
  assert "KV cache / device (128 slots)" in text and "rollout engine" in text
