"""Cross-platform lowering: the sampler's prefill and decode step and the RL update, exported
with `jax.export` for TPU and CUDA from this CPU host.

Qwen2.5-3B's real width, heads and vocabulary at 2 layers, bf16, on an `fsdp:8` mesh of the 8
fake CPU devices (tests/conftest.py). `attention="xla"` names the portable implementation
explicitly: `"auto"` would resolve to the CPU path here, because the mesh's devices are CPUs
(the last test shows the check catching that). What is checked in the StableHLO text:

* the attention is `jax.nn.dot_product_attention`'s (its functions appear in the locations);
* no CPU-only piece: neither the `"cpu"` attention (`botjax.models.attention_cpu`) nor
  `botjax.xla_cpu`'s folded reductions (they are emitted through `jax.lax.platform_dependent`,
  whose CPU branch is not lowered for TPU or CUDA);
* the KV cache has the `[layers, B, S, K, H]` layout.

Not covered here: cuDNN's flash attention (`attention="cudnn"`) cannot be traced on a host
without the jax CUDA plugin (jax checks the local cuDNN version when tracing it), so it is
chosen at run time on GPU hosts and tested there (tests/models/test_models_attention.py). TPU
Pallas kernels (splash attention) are not used by the decoder.
"""

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

import botjax.models as bm
from botjax import algorithms
from botjax.models import sharding as sh
from botjax.sampling import Sampler, SamplingConfig
from botjax.sampling.filtering import sample_logits
from botjax.train import step as step_lib

PLATFORMS = ("tpu", "cuda")
CPU_ONLY = ("attend_cpu", "_attend_dkv_cpu", "_fold")     # function names in the locations
B, LP, T = 8, 32, 32


@pytest.fixture(scope="module")
def mesh():
  return sh.make_mesh("fsdp:8")


def _config(attention="xla"):
  return dataclasses.replace(bm.get_config("qwen2.5-3b"), num_layers=2, attention=attention)


def _abstract(cfg, mesh):
  """(graphdef, abstract params with their FSDP shardings, rest) of a bf16 model."""
  model = nnx.eval_shape(lambda: bm.Decoder(cfg, rngs=nnx.Rngs(0), dtype=jnp.bfloat16,
                                            param_dtype=jnp.bfloat16))
  graphdef, params, rest = step_lib.split_model(model)
  shardings = sh.state_shardings(params, mesh)

  def place(var, sharding):
    return jax.ShapeDtypeStruct(var.shape, var.dtype, sharding=sharding)

  params = jax.tree.map(lambda v, s: v.replace(place(v.get_value(), s.get_value())), params,
                        shardings, is_leaf=lambda x: isinstance(x, nnx.Variable))
  return graphdef, params, rest


def _rows(mesh, shape, dtype):
  spec = P(("data", "fsdp"), *([None] * (len(shape) - 1)))
  return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


def _export(fn, mesh, *args):
  with jax.set_mesh(mesh):
    exported = jax.export.export(jax.jit(fn), platforms=PLATFORMS)(*args)
  assert exported.platforms == PLATFORMS
  return exported, exported.mlir_module()


def _functions(text):
  """Python function names in the module's locations (e.g. 'attend_cpu')."""
  return {name.rsplit(".", 1)[-1] for name in re.findall(r'loc\("([^"]+)"', text)}


def _assert_portable_attention(text):
  names = _functions(text)
  assert "dot_product_attention" in names       # botjax.models.attention's (jax.nn's inside)
  assert not names & set(CPU_ONLY), names & set(CPU_ONLY)


def _sampler(graphdef, cfg):
  return Sampler(graphdef, cfg, SamplingConfig(max_new_tokens=T, temperature=1.0, top_p=0.95,
                                               eos_token_ids=(151643,)),
                 cache_dtype=jnp.bfloat16)


def test_prefill_exports_for_tpu_and_cuda(mesh):
  cfg = _config()
  graphdef, params, rest = _abstract(cfg, mesh)
  sampler = _sampler(graphdef, cfg)

  def prefill(params, ids, mask):
    model = nnx.merge(graphdef, params, rest)
    return sampler.prefill(model, ids, mask, n=2, gen_len=T)

  exported, text = _export(prefill, mesh, params, _rows(mesh, (B, LP), jnp.int32),
                           _rows(mesh, (B, LP), jnp.bool_))
  _assert_portable_attention(text)
  cache, logits = jax.tree.unflatten(exported.out_tree, exported.out_avals)
  assert cache.layout == "BSKH"
  assert cache.k.shape == (2, 2 * B, LP + T, 2, 128)          # [layers, B, S, K, H]
  assert logits.shape == (2 * B, cfg.vocab_size)


def test_decode_step_exports_for_tpu_and_cuda(mesh):
  cfg = _config()
  graphdef, params, rest = _abstract(cfg, mesh)
  sampler = _sampler(graphdef, cfg)
  cache = jax.eval_shape(lambda: bm.KVCache.init(cfg, batch_size=B, max_len=LP + T,
                                                 dtype=jnp.bfloat16))
  assert cache.layout == "BSKH"
  spec = sh.logical_to_spec(cache.logical_axes, mesh=mesh, shape=cache.k.shape)
  kv = jax.ShapeDtypeStruct(cache.k.shape, cache.k.dtype, sharding=NamedSharding(mesh, spec))
  cache = cache.replace(k=kv, v=kv, valid=_rows(mesh, cache.valid.shape, jnp.bool_))
  keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), B))

  def step(params, cache, tokens, positions, live, index, keys):
    model = nnx.merge(graphdef, params, rest)
    logits, cache = sampler.decode_step(model, cache, tokens, positions, live, index)
    tok, logp = sample_logits(keys, logits, temperature=1.0, top_k=0, top_p=0.95)
    return tok, logp, cache

  exported, text = _export(step, mesh, params, cache, _rows(mesh, (B,), jnp.int32),
                           _rows(mesh, (B,), jnp.int32), _rows(mesh, (B,), jnp.bool_),
                           jax.ShapeDtypeStruct((), jnp.int32), keys)
  _assert_portable_attention(text)
  _, _, cache = jax.tree.unflatten(exported.out_tree, exported.out_avals)
  assert cache.k.shape == (2, B, LP + T, 2, 128)


def test_rl_update_exports_for_tpu_and_cuda(mesh):
  cfg = _config()
  graphdef, params, rest = _abstract(cfg, mesh)
  opt = optax.adamw(1e-6)
  state = jax.eval_shape(lambda p: step_lib.init_state(p, opt, 0), params)
  state = state.replace(params=params)
  L = LP + T
  batch = step_lib.RLBatch(
      input_ids=_rows(mesh, (B, L), jnp.int32), positions=_rows(mesh, (B, L), jnp.int32),
      attention_mask=_rows(mesh, (B, L), jnp.bool_), old_logp=_rows(mesh, (B, T), jnp.float32),
      ref_logp=_rows(mesh, (B, T), jnp.float32), advantages=_rows(mesh, (B, T), jnp.float32),
      loss_mask=_rows(mesh, (B, T), jnp.bool_), seq_weights=_rows(mesh, (B,), jnp.float32))
  update = functools.partial(step_lib.update, graphdef=graphdef, rest=rest,
                             recipe=algorithms.get_recipe("grpo"), optimizer=opt)
  exported, text = _export(update, mesh, state, batch)
  _assert_portable_attention(text)


def test_auto_on_a_cpu_mesh_is_caught(mesh):
  """The check can fail: "auto" on this CPU mesh picks the CPU attention, even for export."""
  cfg = _config("auto")
  graphdef, params, rest = _abstract(cfg, mesh)
  sampler = _sampler(graphdef, cfg)

  def prefill(params, ids, mask):
    return sampler.prefill(nnx.merge(graphdef, params, rest), ids, mask, n=1, gen_len=T)

  _, text = _export(prefill, mesh, params, _rows(mesh, (B, LP), jnp.int32),
                    _rows(mesh, (B, LP), jnp.bool_))
  names = _functions(text)
  assert "attend_cpu" in names and "dot_product_attention" not in names
