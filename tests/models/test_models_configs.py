"""model_configs/*.json agree with the presets, and transformers reads them the same way."""

import json
import os

import pytest

import botjax.models as bm
from conftest import transformers

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "model_configs")


@pytest.mark.parametrize("name", sorted(bm.PRESETS))
def test_config_file_matches_preset_and_transformers(name):
  with open(os.path.join(ROOT, f"{name}.json")) as f:
    hf = json.load(f)
  assert bm.DecoderConfig.from_hf_config(hf) == bm.PRESETS[name], (
      f"model_configs/{name}.json is stale; regenerate it (see model_configs/README.md)")
  # transformers parses the file and writes it back in its own layout; we read that too
  parsed = transformers.AutoConfig.for_model(**hf)
  assert type(parsed).__name__.startswith(hf["architectures"][0].replace("ForCausalLM", ""))
  assert bm.DecoderConfig.from_hf_config(parsed.to_dict()) == bm.PRESETS[name]
