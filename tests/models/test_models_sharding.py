"""Sharding on 8 fake CPU devices: mesh specs, rules, sharded forward == single-device forward."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

import botjax.models as bm
from botjax.models import sharding as sh

CFG = dataclasses.replace(bm.get_config("tiny"), num_layers=2)


def test_parse_mesh_spec():
  assert sh.parse_mesh_spec("data:2,fsdp:2,tensor:2", 8) == {"data": 2, "fsdp": 2, "tensor": 2}
  assert sh.parse_mesh_spec("fsdp:-1,tensor:2", 8) == {"data": 1, "fsdp": 4, "tensor": 2}
  assert sh.parse_mesh_spec("data:-1", 8) == {"data": 8, "fsdp": 1, "tensor": 1}
  for bad, msg in [("data:3", "uses 3 devices, but 8"), ("model:8", "axis in"),
                   ("data:-1,fsdp:-1", "at most one"), ("data:x", "not an integer"),
                   ("fsdp:-1,tensor:3", "not divisible by 3")]:
    with pytest.raises(ValueError, match=msg):
      sh.parse_mesh_spec(bad, 8)


def test_make_mesh_has_all_axes():
  mesh = sh.make_mesh("fsdp:8")
  assert mesh.axis_names == ("data", "fsdp", "tensor")
  assert dict(mesh.shape) == {"data": 1, "fsdp": 8, "tensor": 1}


def test_logical_to_spec_rules_and_divisibility():
  mesh = sh.make_mesh("data:2,fsdp:2,tensor:2")
  assert sh.logical_to_spec(("embed", "q_heads", "head_dim"), mesh=mesh,
                            shape=(64, 4, 16)) == P("fsdp", "tensor", None)
  # 3 kv heads do not divide over tensor:2 -> replicated on that dim
  assert sh.logical_to_spec(("embed", "kv_heads", "head_dim"), mesh=mesh,
                            shape=(64, 3, 16)) == P("fsdp", None, None)
  assert sh.logical_to_spec(("batch", "length"), mesh=mesh, shape=(8, 5)) == P(("data", "fsdp"),
                                                                                None)
  with pytest.raises(ValueError, match="logical axis 'nope' has no rule"):
    sh.logical_to_spec(("nope",))


@nnx.jit
def _forward(model, ids, pos, mask):
  return model(ids, pos, attention_mask=mask)[0]


@pytest.mark.parametrize("spec", ["data:2,fsdp:2,tensor:2", "fsdp:8", "data:2,tensor:4"])
def test_sharded_forward_equals_single_device(spec):
  rng = np.random.RandomState(0)
  ids = jnp.asarray(rng.randint(0, CFG.vocab_size, (8, 12)), jnp.int32)
  mask = jnp.asarray(np.arange(12)[None, :] >= np.arange(8)[:, None] % 4)
  pos = jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0).astype(jnp.int32)
  model = bm.Decoder(CFG, rngs=nnx.Rngs(0))
  ref = np.asarray(_forward(model, ids, pos, mask))
  mesh = sh.make_mesh(spec)
  sh.shard_model(model, mesh)
  sizes = dict(mesh.shape)
  q = model.layers[0].attn.q_kernel[...]
  expected_q = P("fsdp" if sizes["fsdp"] > 1 else None,
                 "tensor" if sizes["tensor"] > 1 else None, None)
  assert q.sharding.spec == expected_q
  # each device holds only its slice: [D/fsdp, N/tensor, H]
  assert q.addressable_shards[0].data.shape == (CFG.hidden_size // sizes["fsdp"],
                                                CFG.num_heads // sizes["tensor"], CFG.head_dim)
  down = model.layers[1].mlp.down[...]
  assert down.addressable_shards[0].data.shape == (
      CFG.intermediate_size // sizes["tensor"], CFG.hidden_size // sizes["fsdp"])
  assert model.layers[0].input_norm.scale[...].sharding.is_fully_replicated
  bs = sh.batch_sharding(mesh)
  with jax.set_mesh(mesh):
    out = _forward(model, *(jax.device_put(a, bs) for a in (ids, pos, mask)))
  assert out.addressable_shards[0].data.shape[0] == 8 // (sizes["data"] * sizes["fsdp"])
  np.testing.assert_allclose(np.asarray(out)[np.asarray(mask)], ref[np.asarray(mask)],
                             atol=2e-5)


def test_load_pretrained_places_parameters_on_the_mesh(hf_checkpoint):
  path, _ = hf_checkpoint("qwen2_bias_untied")
  mesh = sh.make_mesh("fsdp:4,tensor:2")
  model = bm.load_pretrained(path, mesh=mesh)
  head = model.lm_head[...]
  assert head.sharding.spec == P("fsdp", "tensor")
  assert head.addressable_shards[0].data.shape == (64 // 4, 128 // 2)
  single = bm.load_pretrained(path)
  np.testing.assert_array_equal(np.asarray(head), np.asarray(single.lm_head[...]))
