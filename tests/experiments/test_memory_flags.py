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
  cfg = TrainConfig(remat=True, scan_layers=True)
  assert _cli.memory_settings(cfg, scan_layers=False).scan_layers is False
  assert _cli.memory_settings(cfg).scan_layers is True     # not given: the experiment's choice
  assert _cli.memory_settings(cfg, remat=False, micro_batch_size=4, verbose=True) == TrainConfig(
      remat=False, scan_layers=True, micro_batch_size=4, verbose=True)


def test_paper_config_merges_the_protocol_engine_and_overrides_in_order():
  from botjax import algorithms
  cfg = TrainConfig(recipe="bot_grpo", recipe_overrides=(("kl_coef", 0.0),), remat=True)
  out = _cli.paper_config(cfg, eval_every=5, engine="jax", remat=False,
                          sets=["rollout.group_size=4", "recipe.grpo_ddof=1"])
  assert out.eval_every == 5 and out.rollout.engine == "jax" and out.remat is False
  assert out.rollout.group_size == 4
  recipe = dict(out.recipe_overrides)
  # the paper's population std, the experiment's own overrides kept, --set last
  assert dict(algorithms.PAPER_PROTOCOL)["grpo_ddof"] == 0 and recipe["grpo_ddof"] == 1
  assert recipe["kl_coef"] == 0.0
  assert dict(_cli.paper_config(cfg, eval_every=5).recipe_overrides)["grpo_ddof"] == 0
  import pytest
  with pytest.raises(_cli.UserError, match="--engine='sglang': not a rollout engine"):
    _cli.paper_config(cfg, eval_every=5, engine="sglang")
