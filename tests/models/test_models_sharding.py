"""Sharding on 8 fake CPU devices: mesh specs, rules, sharded forward == single-device forward."""

import dataclasses
import os
import subprocess
import sys

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


def test_compiler_options_follow_the_backend_the_cores_and_the_override(monkeypatch):
  from botjax.models import sharding
  monkeypatch.setenv("BOTJAX_CPU_COMPILER_OPTIONS", "on")
  opts = sharding.compiler_options()
  assert opts == sharding.CPU_COMPILER_OPTIONS and opts is not sharding.CPU_COMPILER_OPTIONS
  # XLA accepts them per program, and the program computes the same values
  x = jnp.arange(12.0).reshape(3, 4)
  def fn(a):
    return jnp.tanh(a @ a.T).sum(0)
  want = np.tanh(np.asarray(x) @ np.asarray(x).T).sum(0)
  np.testing.assert_allclose(np.asarray(jax.jit(fn, compiler_options=opts)(x)), want, rtol=1e-6)
  dec = sharding.compiler_options(decode=True)
  assert dec == {**sharding.CPU_COMPILER_OPTIONS, **sharding.DECODE_CPU_COMPILER_OPTIONS}
  np.testing.assert_allclose(np.asarray(jax.jit(fn, compiler_options=dec)(x)), want, rtol=1e-6)
  monkeypatch.setenv("BOTJAX_CPU_COMPILER_OPTIONS", "off")
  assert sharding.compiler_options() is None
  monkeypatch.setenv("BOTJAX_CPU_COMPILER_OPTIONS", "auto")
  monkeypatch.setattr(sharding.os, "cpu_count", lambda: 64)
  assert sharding.compiler_options() is None            # big hosts keep XLA's defaults
  monkeypatch.setattr(sharding.os, "cpu_count", lambda: 2)
  assert sharding.compiler_options() == sharding.CPU_COMPILER_OPTIONS
  monkeypatch.setenv("BOTJAX_CPU_COMPILER_OPTIONS", "fast")
  with pytest.raises(ValueError, match="BOTJAX_CPU_COMPILER_OPTIONS='fast'.*'auto', 'on', 'off'"):
    sharding.compiler_options()


_FAULTS_SCRIPT = r"""
import resource, sys
from botjax.models import sharding
applied = sharding.tune_host_allocator() if sys.argv[1] == "tuned" else False
import jax, jax.numpy as jnp
f = jax.jit(lambda x, w: jnp.tanh(x @ w).T @ x)      # a [4096, 4096] f32 temporary (64 MB)
x, w = jnp.ones((4096, 64)), jnp.ones((64, 4096)) * 1e-3
faults = []
for _ in range(12):
  r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x, w).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)
print(applied, ",".join(map(str, faults)))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning")
def test_tuned_host_allocator_stops_xla_cpu_refaulting_its_buffers():
  """Plain glibc page-faults the 64 MB temporary in at every execution; tuned, the heap keeps it.

  The tuned heap settles within a few executions (a freed block can be split by smaller
  allocations, and the heap then grows once more), so executions are counted, not summed.
  """
  def faults(mode):
    out = subprocess.run([sys.executable, "-c", _FAULTS_SCRIPT, mode], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "XLA_FLAGS": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    applied, counts = out.stdout.split()[-2:]
    return applied, [int(c) for c in counts.split(",")]
  applied, tuned = faults("tuned")
  assert applied == "True"
  _, plain = faults("plain")
  pages = 64e6 / 4096
  assert all(n > pages / 2 for n in plain[1:]), plain     # every execution faults it in again
  reused = sum(n < pages / 20 for n in tuned[1:])
  assert reused >= 5, tuned                               # measured: 8 to 11 of 11 (8 runs)


_THREEFRY_PROBE = r"""
import json, sys
import jax, jax.numpy as jnp
from jax.extend.random import threefry_2x32
if sys.argv[1] == "unrolled":
  from botjax.models import sharding
  sharding.unroll_threefry_on_cpu()
  sharding.unroll_threefry_on_cpu()          # a second call changes nothing
kat = [((0, 0), (0, 0)), ((0xffffffff,) * 2, (0xffffffff,) * 2),
       ((0x13198a2e, 0x03707344), (0x243f6a88, 0x85a308d3))]
hashes = [[int(v) for v in jax.jit(threefry_2x32)(jnp.array(k, jnp.uint32),
                                                  jnp.array(c, jnp.uint32))] for k, c in kat]
def draws(key):
  keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(4))
  return jax.vmap(lambda k: jax.random.gumbel(k, (7,)))(keys), jax.random.uniform(key, (3, 5))
gumbel, uniform = jax.jit(draws)(jax.random.key(11))
text = jax.jit(draws).lower(jax.random.key(11)).compile().as_text()
print(json.dumps({"hashes": hashes, "gumbel": gumbel.tolist(), "uniform": uniform.tolist(),
                  "loops": text.count(" while(")}))
"""


def test_unrolled_threefry_gives_the_same_bits_without_loops():
  """The unrolled lowering computes JAX's Threefry: Random123's known answers, and the same
  fold_in / gumbel / uniform draws as JAX's own (rolled) lowering in a fresh process."""
  import json
  out = {}
  for mode in ("rolled", "unrolled"):
    run = subprocess.run([sys.executable, "-c", _THREEFRY_PROBE, mode], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert run.returncode == 0, run.stderr[-2000:]
    out[mode] = json.loads(run.stdout.strip().splitlines()[-1])
  # Salmon et al. (2011) known-answer vectors of Threefry-2x32-20
  want = [[0x6b200159, 0x99ba4efe], [0x1cb996fc, 0xbb002be7], [0xc4923a9c, 0x483df7a0]]
  assert out["rolled"]["hashes"] == want and out["unrolled"]["hashes"] == want
  assert out["unrolled"]["gumbel"] == out["rolled"]["gumbel"]
  assert out["unrolled"]["uniform"] == out["rolled"]["uniform"]
  assert out["rolled"]["loops"] > 0 and out["unrolled"]["loops"] == 0
