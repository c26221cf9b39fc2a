"""Cross-platform lowering of the slot engine's two programs (refill and decode chunk), exported
with `jax.export` for TPU and CUDA from this CPU host, as tests/test_export.py does for the
sampler: Qwen2.5-3B's width, heads and vocabulary at 2 layers, bf16 parameters sharded on an
`fsdp:4,tensor:2` mesh, the KV cache placed as the engine places it (its KV heads over
`tensor`), `attention="xla"` (the portable implementation; the paged pool then has the
`[layers, NB, bs, K, H]` layout, the per-slot regions `[layers, S, R, K, H]`).

Checked in the StableHLO text: no CPU-only piece (`botjax.models.attention_cpu`, or
`botjax.xla_cpu`'s folded reductions, whose CPU branch is not lowered for TPU or CUDA).
"""

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

import botjax.models as bm
from botjax.models import sharding as sh
from botjax.sampling import SamplingConfig, SlotEngine
from botjax.sampling.paged import PagedKVCache
from botjax.sampling.regions import RegionKVCache
from botjax.train import step as step_lib

PLATFORMS = ("tpu", "cuda")
CPU_ONLY = ("attend_cpu", "_attend_dkv_cpu", "_fold")
S, BS, NB, LP, W = 16, 16, 64, 32, 4        # slots, block size, pool blocks, prompt cols, stops
R = LP + 64                                  # region slots: prompt cols + generation bucket


@pytest.fixture(scope="module")
def setup():
  mesh = sh.make_mesh("fsdp:4,tensor:2")
  cfg = dataclasses.replace(bm.get_config("qwen2.5-3b"), num_layers=2, attention="xla")
  model = nnx.eval_shape(lambda: bm.Decoder(cfg, rngs=nnx.Rngs(0), dtype=jnp.bfloat16,
                                            param_dtype=jnp.bfloat16))
  graphdef, params, rest = step_lib.split_model(model)
  shardings = sh.state_shardings(params, mesh)
  params = jax.tree.map(
      lambda v, s: v.replace(jax.ShapeDtypeStruct(v.get_value().shape, v.get_value().dtype,
                                                  sharding=s.get_value())),
      params, shardings, is_leaf=lambda x: isinstance(x, nnx.Variable))
  sc = SamplingConfig(max_new_tokens=64, temperature=1.0, top_p=0.95, eos_token_ids=(151643,))
  engine = SlotEngine(graphdef, cfg, sc, num_slots=S, lanes=1, block_size=BS, tile_blocks=16,
                      cache_dtype=jnp.bfloat16, mesh=mesh)

  def placed(cache):            # abstract k and v with the sharding the engine gives them
    heads = engine._pool_sharding(cache).k
    assert heads.spec == P(None, None, None, "tensor")    # [layers, B or S, ., K, H]: K sharded
    kv = jax.ShapeDtypeStruct(cache.k.shape, cache.k.dtype, sharding=heads)
    return cache.replace(k=kv, v=kv)

  pool = placed(jax.eval_shape(lambda: PagedKVCache.init(cfg, num_blocks=NB, block_size=BS,
                                                         dtype=jnp.bfloat16, layout="BSKH")))
  regions = placed(jax.eval_shape(lambda: RegionKVCache.init(
      cfg, num_slots=S, region=R, dtype=jnp.bfloat16, layout="BSKH")))
  i32 = functools.partial(jax.ShapeDtypeStruct, dtype=jnp.int32)
  state = {"tok": i32((S,)), "pos": i32((S,)), "gen": i32((S,)), "budget": i32((S,)),
           "live": jax.ShapeDtypeStruct((S,), jnp.bool_),
           "stopped": jax.ShapeDtypeStruct((S,), jnp.bool_),
           "rkey": jax.ShapeDtypeStruct((S, 2), jnp.uint32), "stops": i32((S, W))}
  return mesh, cfg, engine, (params, rest), {"paged": pool, "regions": regions}, state, i32


def _export(fn, mesh, *args):
  with jax.set_mesh(mesh):
    exported = jax.export.export(jax.jit(fn), platforms=PLATFORMS)(*args)
  assert exported.platforms == PLATFORMS
  text = exported.mlir_module()
  names = {n.rsplit(".", 1)[-1] for n in re.findall(r'loc\("([^"]+)"', text)}
  assert not names & set(CPU_ONLY), names & set(CPU_ONLY)
  return exported


@pytest.mark.parametrize("kv_cache,rows", [("paged", S), ("paged", S // 2), ("regions", S)])
def test_decode_chunk_exports_for_tpu_and_cuda(setup, kv_cache, rows):
  """Both caches, and a narrowed chunk of the pool (regions always run every slot)."""
  mesh, cfg, engine, params, caches, state, i32 = setup
  cache = caches[kv_cache]
  blocks = ((i32((NB,)), i32((NB,)), i32((rows, 8)), i32((rows, 2)), i32(()))
            if kv_cache == "paged" else (None,) * 5)
  exported = _export(lambda *a: engine._programs._chunk_impl(*a), mesh, params, cache,
                     dict(state, store=None), i32((rows,)), *blocks, i32(()), i32(()))
  out, _, (tok, logp, support, steps, *_) = jax.tree.unflatten(exported.out_tree,
                                                                 exported.out_avals)
  assert out.k.shape == cache.k.shape and out.layout == "BSKH"
  assert type(out) is type(cache)
  assert tok.shape == logp.shape == (rows, engine.drain_steps)


def test_a_narrowed_chunk_of_regions_is_refused(setup):
  """The host never narrows a chunk of regions; the program says so if asked to."""
  mesh, cfg, engine, params, caches, state, i32 = setup
  with pytest.raises(ValueError, match="a chunk of regions runs all 16 slots, got 8 rows"):
    _export(lambda *a: engine._programs._chunk_impl(*a), mesh, params, caches["regions"],
            dict(state, store=None), i32((S // 2,)), *(None,) * 5, i32(()), i32(()))


@pytest.mark.parametrize("kv_cache", ["paged", "regions"])
def test_refill_exports_for_tpu_and_cuda(setup, kv_cache):
  mesh, cfg, engine, params, caches, state, i32 = setup
  pool = caches[kv_cache]
  u, jp = 4, LP // BS
  store = (jax.ShapeDtypeStruct((2, LP, 2, 128), jnp.bfloat16),
           jax.ShapeDtypeStruct((2, LP, 2, 128), jnp.bfloat16),
           jax.ShapeDtypeStruct((cfg.vocab_size,), jnp.float32))
  row_keys = jax.ShapeDtypeStruct((S, 2), jnp.uint32)       # each new slot's key data
  fn = functools.partial(engine._programs._refill_impl, new_prompts=u)
  pblocks = i32((S, jp)) if kv_cache == "paged" else None
  exported = _export(fn, mesh, params, pool, dict(state, store=store), i32((u, LP)), i32((u,)),
                     i32((S,)), i32((S,)), row_keys, i32((S,)), i32((S, W)), pblocks,
                     i32((S,)), i32(()))
  cache, new_state, (tok, logp, support) = jax.tree.unflatten(exported.out_tree,
                                                              exported.out_avals)
  assert cache.k.shape == pool.k.shape and tok.shape == (S,)
