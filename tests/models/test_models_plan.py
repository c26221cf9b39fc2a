"""Dry-run plan: parameter counts, per-device bytes under the rules, FLOPs of a step."""

import dataclasses

import jax
import pytest
from flax import nnx

import botjax.models as bm

# MODELS.md, counted on torch's meta device with transformers 5.24.
MODELS_MD_PARAMS = {"qwen2.5-3b": 3085.9e6, "smollm3-3b": 3075.1e6,
                    "phi-4-mini-reasoning": 3836.0e6}


def _true_count(cfg):
  return sum(x.size for x in jax.tree.leaves(nnx.state(bm.Decoder(cfg, rngs=nnx.Rngs(0)))))


def test_tiny_plan_counts_exactly():
  cfg = bm.get_config("tiny")
  true = _true_count(cfg)
  p = bm.plan("tiny", "fsdp:8", batch_size=8, seq_len=32, compute_flops=False)
  assert p.num_params == true
  assert p.mesh == {"data": 1, "fsdp": 8, "tensor": 1}
  # fsdp:8 shards every matrix over its width D = 64; norms and q/k/v biases stay whole
  whole = (2 * cfg.num_layers + 1) * cfg.hidden_size
  whole += cfg.num_layers * (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
  assert p.param_bytes == 4 * ((true - whole) // 8 + whole)
  assert p.grad_bytes == p.param_bytes and p.optimizer_bytes == 2 * p.param_bytes
  text = str(p)
  assert "tiny on mesh data:1,fsdp:8,tensor:1 (8 devices)" in text and "n/a" in text


def test_step_flops_from_the_compiled_step():
  cfg = dataclasses.replace(bm.get_config("tiny"), num_layers=1)  # a cheap compile
  true = _true_count(cfg)
  p = bm.plan(cfg, "fsdp:8", batch_size=8, seq_len=32)
  # forward + backward ≈ 6 FLOPs per parameter per token, plus attention and softmax
  ratio = p.step_flops / (6 * true * 8 * 32)
  assert 1.0 < ratio < 1.6, ratio
  assert "FLOPs / train step" in str(p) and "e+" in str(p)


def test_step_flops_of_the_stack_from_two_layers_equal_the_full_stacks():
  """The plan counts one- and two-layer models (per kind of layer: RoPE or NoPE, window) and
  adds up; on a stack mixing every kind that equals XLA's count of the whole stack."""
  import importlib
  import jax.numpy as jnp
  plan_lib = importlib.import_module("botjax.models.plan")   # botjax.models.plan is the function
  cfg = dataclasses.replace(bm.get_config("tiny"), num_layers=5, no_rope_layers=(1, 0, 1, 0, 1),
                            sliding_window=4, sliding_layers=(0, 0, 1, 1, 1))
  assert len({(cfg.uses_rope(i), cfg.window(i)) for i in range(5)}) == 4
  full = plan_lib._step_flops(nnx.eval_shape(lambda: bm.Decoder(cfg, rngs=nnx.Rngs(0))), 2, 16)
  stacked = plan_lib._stack_flops(cfg, 2, 16, dtype=jnp.float32, param_dtype=jnp.float32)
  one = plan_lib._step_flops(nnx.eval_shape(
      lambda: bm.Decoder(dataclasses.replace(cfg, num_layers=1), rngs=nnx.Rngs(0))), 2, 16)
  assert stacked == full and full > 3 * one


@pytest.mark.parametrize("name", sorted(MODELS_MD_PARAMS))
def test_target_presets_match_models_md(name):
  p = bm.plan(name, "fsdp:8", batch_size=8, seq_len=1024, compute_flops=False)
  assert abs(p.num_params / MODELS_MD_PARAMS[name] - 1) < 0.005
  assert p.step_flops is None and "n/a" in str(p)


def test_tensor_parallel_and_kv_cache_bytes():
  cfg = bm.get_config("qwen2.5-3b")
  a = bm.plan("qwen2.5-3b", "data:8", batch_size=16, seq_len=256, compute_flops=False)
  b = bm.plan("qwen2.5-3b", "data:4,tensor:2", batch_size=16, seq_len=256, compute_flops=False)
  # data-parallel only: every device holds all parameters
  assert a.param_bytes == 4 * a.num_params
  assert b.param_bytes < 0.6 * a.param_bytes
  # KV cache: 2·layers·(B/4)·L·(K/2)·H bf16 bytes
  assert b.kv_cache_bytes == 2 * cfg.num_layers * 4 * 256 * 1 * cfg.head_dim * 2
  assert a.kv_cache_bytes == 2 * cfg.num_layers * 2 * 256 * 2 * cfg.head_dim * 2
  r = bm.plan("qwen2.5-3b", "data:8", batch_size=16, seq_len=256, remat=True,
              compute_flops=False)
  assert r.activation_bytes < a.activation_bytes / 4 and r.param_bytes == a.param_bytes
  # planning a 64-chip slice needs no such devices here
  c = bm.plan("qwen2.5-3b", "fsdp:-1", num_devices=64, batch_size=64, seq_len=256,
              compute_flops=False)
  assert c.mesh["fsdp"] == 64 and c.param_bytes < a.param_bytes / 32


def test_plan_rejects_bad_input():
  with pytest.raises(ValueError, match="unknown model preset 'gpt5'"):
    bm.plan("gpt5", batch_size=1, seq_len=1)
  with pytest.raises(ValueError, match="must be positive"):
    bm.plan("tiny", batch_size=0, seq_len=8)


# -- the plan against XLA's memory analysis of the compiled update ---------------------------

def _against_compiler(name, remat, batch_size=4, prompt_len=128, completion_len=384,
                      scan_layers=False):
  """(plan, compiled) temporaries and peaks of the update at 2 layers of a preset's real width.

  float32 compute: XLA:CPU runs bfloat16 products in float32 through converted copies that an
  accelerator does not make, so a bfloat16 step on CPU is not what the plan describes."""
  import jax.numpy as jnp
  from _update_memory import peak_bytes, update_memory
  cfg = dataclasses.replace(bm.get_config(name), num_layers=2)
  p = bm.plan(cfg, "fsdp:1", batch_size=batch_size, seq_len=prompt_len + completion_len,
              completion_len=completion_len, dtype=jnp.float32, remat=remat,
              compute_flops=False, device_memory=None)
  m = update_memory(cfg, batch_size=batch_size, prompt_len=prompt_len,
                    completion_len=completion_len, dtype=jnp.float32, remat=remat,
                    scan_layers=scan_layers)
  plan_temp = p.grad_bytes + p.activation_bytes + p.logprob_bytes
  print(f"{name} remat={remat} scan_layers={scan_layers}: plan temp {plan_temp / 2**30:.3f} GiB, compiled "
        f"{m.temp_size_in_bytes / 2**30:.3f}; plan total {p.train_bytes / 2**30:.3f} GiB, "
        f"compiled {peak_bytes(m) / 2**30:.3f}")
  return plan_temp / m.temp_size_in_bytes, p.train_bytes / peak_bytes(m)


@pytest.mark.parametrize("remat,scan_layers", [(False, False), (True, False), (True, True)])
def test_plan_agrees_with_the_compiled_update(remat, scan_layers):
  """Unrolled and, as the 3B presets run, with remat and the layers scanned."""
  temp, total = _against_compiler("qwen2.5-3b", remat, scan_layers=scan_layers)
  assert 0.8 < temp < 1.2 and 0.8 < total < 1.2, (temp, total)


@pytest.mark.slow
@pytest.mark.parametrize("remat", [False, True])
@pytest.mark.parametrize("name", ["qwen2.5-3b", "smollm3-3b", "phi-4-mini-reasoning"])
def test_plan_agrees_with_the_compiled_update_for_every_target_preset(name, remat):
  temp, total = _against_compiler(name, remat, batch_size=8, prompt_len=256,
                                  completion_len=768)
  assert 0.8 < temp < 1.2 and 0.8 < total < 1.2, (temp, total)


def test_plan_says_whether_it_fits_and_what_would():
  gib = 1 << 30
  big = bm.plan("qwen2.5-3b", "fsdp:8", batch_size=64, seq_len=1408, completion_len=1024,
                device_memory=16 * gib, compute_flops=False)
  assert big.fits is False and big.suggestions
  assert "does NOT fit 16.00 GiB" in str(big) and "fits with: " in str(big)
  # the first suggestion fits when applied
  tip = big.suggestions[0]
  micro = int(tip.split("micro_batch_size=")[1].split()[0])
  fixed = bm.plan("qwen2.5-3b", "fsdp:8", batch_size=64, seq_len=1408, completion_len=1024,
                  device_memory=16 * gib, remat="remat" in tip, micro_batch_size=micro,
                  compute_flops=False)
  assert fixed.fits is True and "fits 16.00 GiB" in str(fixed)
  # micro-batching shrinks activations in proportion and adds a gradient accumulator
  half = bm.plan("qwen2.5-3b", "fsdp:8", batch_size=64, seq_len=1408, micro_batch_size=32,
                 compute_flops=False)
  full = bm.plan("qwen2.5-3b", "fsdp:8", batch_size=64, seq_len=1408, compute_flops=False)
  assert abs(half.activation_bytes / full.activation_bytes - 0.5) < 1e-9
  assert half.grad_bytes == 2 * full.grad_bytes
  assert bm.plan("tiny", batch_size=8, seq_len=32, compute_flops=False).fits is None
  with pytest.raises(ValueError, match="micro_batch_size=3 must divide batch_size=8"):
    bm.plan("tiny", batch_size=8, seq_len=32, micro_batch_size=3, compute_flops=False)
  from botjax.models.plan import device_memory
  assert device_memory("TPU v5 lite") == 16 * gib and device_memory("NVIDIA H200") == 140 * gib
  assert device_memory("a device nobody knows") is None
