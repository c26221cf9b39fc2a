"""--remat / --micro_batch_size / --device_memory: the 3B defaults fit one 80 GB GPU, and the plan
names the settings that make a step fit (the aime.py dry run on a v5e-8 is in test_aime_cli.py)."""

import os
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "experiments"))

import _cli  # noqa: E402  experiments/_cli.py
from botjax.train.config import RolloutConfig, TrainConfig  # noqa: E402

PAPER = RolloutConfig(prompts_per_step=8, group_size=8, max_prompt_tokens=384,
                      max_new_tokens=1024)


def test_plan_text_fits_one_80_gb_gpu_and_names_settings_when_not():
  cfg = TrainConfig(rollout=PAPER, remat=True, micro_batch_size=8)
  for model in ("qwen2.5-3b", "smollm3-3b"):
    text = _cli.plan_text(model, "fsdp:1", cfg, 80, compute_flops=False)
    assert "fits 80.00 GiB per device" in text and "NOT" not in text, text
  bare = TrainConfig(rollout=PAPER)                       # no remat, whole mini-batch
  text = _cli.plan_text("qwen2.5-3b", "fsdp:8", bare, 16, compute_flops=False)
  assert "does NOT fit 16.00 GiB" in text and "fits with: micro_batch_size=" in text, text


def test_memory_settings_applies_scan_layers_when_given():
  class Flags:
    remat = micro_batch_size = None
    scan_layers = False
  cfg = TrainConfig(remat=True, scan_layers=True)
  assert _cli.memory_settings(cfg, Flags).scan_layers is False
  Flags.scan_layers = None                                 # not given: the experiment's choice
  assert _cli.memory_settings(cfg, Flags).scan_layers is True
