"""botjax.xla_cpu: the XLA:CPU-only measures, their switch, and that they stay off other
targets."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botjax import xla_cpu


# -- reductions kept fused on XLA:CPU ---------------------------------------------------------

def _fused_cases():
  # (shape, axis): short axes (no folding), exact multiples of 32, ragged lengths (padding),
  # and a length that needs three folding levels (151936 = Qwen2.5's vocabulary).
  return [((3, 5), -1), ((2, 32), -1), ((2, 33), 1), ((4, 96), -1), ((2, 313), -1),
          ((3, 97, 2), 1), ((2, 24, 96), 1), ((1, 151936), -1)]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("shape,axis", _fused_cases())
def test_fused_reductions_match_numpy(shape, axis, jit):
  rng = np.random.default_rng(sum(shape))
  x = rng.normal(size=shape).astype(np.float32)
  x64 = x.astype(np.float64)
  wrap = jax.jit if jit else (lambda f, **_: f)
  got_sum = wrap(xla_cpu.fused_sum, static_argnames=("axis",))(x, axis=axis)
  np.testing.assert_allclose(got_sum, x64.sum(axis), rtol=1e-5, atol=1e-4)
  np.testing.assert_array_equal(wrap(xla_cpu.fused_max, static_argnames=("axis",))(x, axis=axis),
                                x.max(axis))
  np.testing.assert_array_equal(wrap(xla_cpu.fused_min, static_argnames=("axis",))(x, axis=axis),
                                x.min(axis))
  lse = np.log(np.exp(x64 - x64.max(axis, keepdims=True)).sum(axis)) + x64.max(axis)
  np.testing.assert_allclose(
      wrap(xla_cpu.fused_logsumexp, static_argnames=("axis",))(x, axis=axis),
                             lse, rtol=1e-6, atol=1e-5)
  p = np.exp(x64 - np.expand_dims(lse, axis))
  np.testing.assert_allclose(wrap(xla_cpu.fused_softmax, static_argnames=("axis",))(x, axis=axis),
                             p, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(
      wrap(xla_cpu.fused_log_softmax, static_argnames=("axis",))(x, axis=axis),
      x64 - np.expand_dims(lse, axis), rtol=1e-5, atol=1e-5)
  kept = xla_cpu.fused_sum(x, axis, keepdims=True)
  assert kept.shape == np.expand_dims(x64.sum(axis), axis).shape


def test_fused_reductions_integers_infinities_and_gradients():
  ids = np.array([[5, 1, 7] * 40, [2] * 120], np.int32)          # 120 > 32: folded, padded
  np.testing.assert_array_equal(xla_cpu.fused_min(ids), [1, 2])
  np.testing.assert_array_equal(xla_cpu.fused_max(ids), [7, 2])
  np.testing.assert_array_equal(xla_cpu.fused_sum(ids), ids.sum(-1))
  z = np.full((2, 100), -np.inf, np.float32)
  z[1, 37] = 3.0
  lse = np.asarray(xla_cpu.fused_logsumexp(z))
  assert lse[0] == -np.inf and lse[1] == pytest.approx(3.0)       # as jax.nn.logsumexp
  x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 100)).astype(np.float32))
  w = jnp.arange(100, dtype=jnp.float32)
  for fused, ref in ((xla_cpu.fused_logsumexp, lambda a: jax.nn.logsumexp(a, axis=-1)),
                     (lambda a: xla_cpu.fused_softmax(a) @ w, lambda a: jax.nn.softmax(a) @ w),
                     (lambda a: xla_cpu.fused_sum(a * a), lambda a: jnp.sum(a * a, -1))):
    g = jax.grad(lambda a: jnp.sum(fused(a)))(x)
    g_ref = jax.grad(lambda a: jnp.sum(ref(a)))(x)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5)


def test_fused_sum_compiles_without_a_materialised_reduce_window():
  # The reason these exist: with YNNPACK's reductions off (the sampler's decode programs),
  # XLA:CPU splits a long reduction into a reduce-window that writes its operand to memory.
  if jax.default_backend() != "cpu":
    pytest.skip("XLA:CPU only")
  opts = {"xla_cpu_experimental_ynn_fusion_type": ""}
  p = jnp.ones((16, 2, 2, 1, 96))
  v = jnp.ones((16, 2, 1, 24, 96))
  plain = jax.jit(lambda p, v: jnp.sum(p * v, -1), compiler_options=opts)
  fused = jax.jit(lambda p, v: xla_cpu.fused_sum(p * v), compiler_options=opts)
  assert "reduce-window(" in plain.lower(p, v).compile().as_text()
  assert "reduce-window(" not in fused.lower(p, v).compile().as_text()
  np.testing.assert_allclose(fused(p, v), plain(p, v))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**31 - 1))
def test_fused_sum_and_max_any_length(n, seed):
  x = np.random.default_rng(seed).normal(size=(2, n)).astype(np.float32)
  np.testing.assert_allclose(xla_cpu.fused_sum(x), x.astype(np.float64).sum(-1), rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_array_equal(xla_cpu.fused_max(x), x.max(-1))
  np.testing.assert_array_equal(xla_cpu.fused_min(x, axis=1, keepdims=True),
                                x.min(1, keepdims=True))


# -- the switch, and nothing on other targets ------------------------------------------------

def test_switch_values(monkeypatch):
  for raw, want in (("auto", "auto"), ("1", "on"), ("on", "on"), ("0", "off"), (" OFF ", "off")):
    monkeypatch.setenv(xla_cpu.ENV_VAR, raw)
    assert xla_cpu.mode() == want
  monkeypatch.setenv(xla_cpu.ENV_VAR, "fast")
  with pytest.raises(ValueError, match="BOTJAX_XLA_CPU_TUNING='fast'.*'auto', '1'"):
    xla_cpu.mode()


def _tpu_mesh():
  from jax._src.mesh import AbstractDevice
  return jax.sharding.AbstractMesh((8,), ("fsdp",), abstract_device=AbstractDevice(
      device_kind="TPU v5 lite", num_cores=None, platform="tpu"))


def test_compiler_options_follow_the_target_the_cores_and_the_switch(monkeypatch):
  monkeypatch.setenv(xla_cpu.ENV_VAR, "1")
  opts = xla_cpu.compiler_options()
  assert opts == xla_cpu.CPU_COMPILER_OPTIONS and opts is not xla_cpu.CPU_COMPILER_OPTIONS
  # XLA accepts them per program, and the program computes the same values
  x = jnp.arange(12.0).reshape(3, 4)

  def fn(a):
    return jnp.tanh(a @ a.T).sum(0)

  want = np.tanh(np.asarray(x) @ np.asarray(x).T).sum(0)
  np.testing.assert_allclose(np.asarray(jax.jit(fn, compiler_options=opts)(x)), want, rtol=1e-6)
  dec = xla_cpu.compiler_options(decode=True)
  assert dec == {**xla_cpu.CPU_COMPILER_OPTIONS, **xla_cpu.DECODE_CPU_COMPILER_OPTIONS}
  np.testing.assert_allclose(np.asarray(jax.jit(fn, compiler_options=dec)(x)), want, rtol=1e-6)
  assert xla_cpu.compiler_options(_tpu_mesh()) is None          # never for another target
  assert xla_cpu.default_host_threads(_tpu_mesh()) == 1
  monkeypatch.setenv(xla_cpu.ENV_VAR, "0")
  assert xla_cpu.compiler_options() is None and xla_cpu.default_host_threads() == 1
  monkeypatch.setenv(xla_cpu.ENV_VAR, "auto")
  monkeypatch.setattr(xla_cpu.os, "cpu_count", lambda: 64)
  assert xla_cpu.compiler_options() is None             # big hosts keep XLA's defaults
  monkeypatch.setattr(xla_cpu.os, "cpu_count", lambda: 2)
  assert xla_cpu.compiler_options() == xla_cpu.CPU_COMPILER_OPTIONS
  assert xla_cpu.default_host_threads() == 2
  mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(jax.sharding.AxisType.Auto,))
  assert xla_cpu.default_host_threads(mesh, mesh=mesh) == 1


def test_cpu_branches_are_not_in_programs_for_other_platforms():
  """`on_cpu` code (here the folded reduction) lowers for CPU only; TPU/CUDA get the plain op."""
  x = jax.ShapeDtypeStruct((4, 1000), jnp.float32)
  f = jax.jit(lambda x: xla_cpu.fused_sum(x * x))
  cpu = jax.export.export(f, platforms=("cpu",))(x).mlir_module()
  acc = jax.export.export(f, platforms=("tpu", "cuda"))(x).mlir_module()
  assert cpu.count("stablehlo.slice") >= 32                      # the fold's slices
  assert "stablehlo.slice" not in acc and acc.count("stablehlo.reduce") == 1


def test_switch_off_traces_only_the_portable_code(monkeypatch):
  monkeypatch.setenv(xla_cpu.ENV_VAR, "0")
  text = jax.jit(lambda x: xla_cpu.fused_sum(x)).lower(jnp.ones((2, 100))).as_text()
  assert "slice" not in text and "case" not in text


def test_update_fn_works_inside_a_users_jit(monkeypatch):
  """`make_update_fn` adds XLA:CPU options at top level and composes inside `jax.jit`."""
  import optax
  from flax import nnx

  from botjax import algorithms, models
  from botjax.train import step as step_lib
  monkeypatch.setenv(xla_cpu.ENV_VAR, "1")
  cfg = models.DecoderConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2,
                             num_kv_heads=1, head_dim=8, intermediate_size=24)
  model = models.Decoder(cfg, rngs=nnx.Rngs(0))
  graphdef, params, rest = step_lib.split_model(model)
  rng = np.random.RandomState(0)
  ids = jnp.asarray(rng.randint(0, 32, (4, 6)), jnp.int32)
  attn = jnp.ones((4, 6), bool)
  mask = jnp.ones((4, 3), bool)
  batch = step_lib.RLBatch(
      input_ids=ids, positions=jnp.broadcast_to(jnp.arange(6, dtype=jnp.int32), (4, 6)),
      attention_mask=attn, old_logp=jnp.full((4, 3), -3.0), ref_logp=jnp.full((4, 3), -3.0),
      advantages=jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), loss_mask=mask,
      seq_weights=jnp.ones((4,), jnp.float32))
  opt = optax.sgd(0.1)
  state = step_lib.init_state(params, opt, 0)
  update = step_lib.make_update_fn(graphdef, rest, algorithms.get_recipe("grpo"), opt,
                                   donate=False)
  top = update(state, batch)

  @jax.jit
  def users_step(state, batch):
    return update(state, batch).state.params

  inner = users_step(state, batch)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               top.state.params, inner)
  assert jax.tree.leaves(top.state.params)[0] is not jax.tree.leaves(params)[0]


# -- Threefry, allocator ------------------------------------------------------------------------

def _draws(key):
  keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(4))
  return jax.vmap(lambda k: jax.random.gumbel(k, (7,)))(keys), jax.random.uniform(key, (3, 5))


def test_unrolled_threefry_gives_the_same_bits_only_inside_its_scope(monkeypatch):
  """Inside `threefry_unrolled()`: Random123's known answers, the same draws as JAX's rolled
  lowering, and no loop; programs lowered outside the scope keep JAX's own lowering."""
  from jax.extend.random import threefry_2x32
  monkeypatch.setenv(xla_cpu.ENV_VAR, "1")
  kat = [((0, 0), (0, 0)), ((0xffffffff,) * 2, (0xffffffff,) * 2),
         ((0x13198a2e, 0x03707344), (0x243f6a88, 0x85a308d3))]
  # Salmon et al. (2011) known-answer vectors of Threefry-2x32-20
  want = [[0x6b200159, 0x99ba4efe], [0x1cb996fc, 0xbb002be7], [0xc4923a9c, 0x483df7a0]]
  key = jax.random.key(11)

  def run():
    hashes = [[int(v) for v in jax.jit(lambda k, c: threefry_2x32(k, c))(
        jnp.array(k, jnp.uint32), jnp.array(c, jnp.uint32))] for k, c in kat]
    f = jax.jit(lambda k: _draws(k))
    return hashes, f(key), f.lower(key).compile().as_text().count(" while(")

  rolled = run()
  with xla_cpu.threefry_unrolled():
    unrolled = run()
  after = run()
  assert rolled[0] == want and unrolled[0] == want
  for a, b in zip(rolled[1], unrolled[1]):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert rolled[2] > 0 and unrolled[2] == 0 and after[2] == rolled[2]


_FAULTS_SCRIPT = r"""
import resource, sys
from botjax import xla_cpu
applied = xla_cpu.tune_host_allocator() if sys.argv[1] == "tuned" else False
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
                         text=True, timeout=300,
                         env={**os.environ, "XLA_FLAGS": "", xla_cpu.ENV_VAR: "auto"})
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


# -- host threads -----------------------------------------------------------------------------

def _pow2(m):
  return 1 << (m - 1).bit_length()


@given(num=st.integers(1, 40), threads=st.integers(1, 5))
@settings(max_examples=60, deadline=None)
def test_host_threads_split_covers_the_items_in_order(num, threads):
  whole = _pow2(num)
  parts = xla_cpu.HostThreads(threads).split(num, _pow2, whole)
  if parts == [(0, num, whole)]:
    # one part: one thread, one item, or the parts' buckets would hold more rows than the call
    pieces = np.linspace(0, num, min(threads, num) + 1).round().astype(int)
    assert min(threads, num) == 1 or sum(_pow2(int(b - a)) for a, b in
                                         zip(pieces[:-1], pieces[1:])) > whole
    return
  assert len(parts) == min(threads, num) and parts[0][0] == 0 and parts[-1][1] == num
  assert all(a[1] == b[0] for a, b in zip(parts[:-1], parts[1:]))       # contiguous
  assert all(size == _pow2(hi - lo) and hi > lo for lo, hi, size in parts)
  assert max(hi - lo for lo, hi, _ in parts) - min(hi - lo for lo, hi, _ in parts) <= 1
  assert sum(size for _, _, size in parts) <= whole


def test_host_threads_run_parts_concurrently_in_order():
  import threading
  pool = xla_cpu.HostThreads(2, name="probe")
  barrier = threading.Barrier(2, timeout=30)   # passes only if both parts run at once

  def part(lo, hi, size):
    barrier.wait()
    return lo, hi, threading.current_thread().name

  out = pool.map(part, [(0, 3, 4), (3, 5, 2)])
  assert [o[:2] for o in out] == [(0, 3), (3, 5)] and pool.started
  assert all(o[2].startswith("probe") for o in out) and out[0][2] != out[1][2]
  pool.close()
  assert not pool.started
  # one part runs in the calling thread, without starting the threads
  here = pool.map(lambda lo, hi, size: threading.current_thread().name, [(0, 5, 8)])
  assert here == [threading.current_thread().name] and not pool.started
  with pytest.raises(ValueError, match="threads must be an int >= 1, got 0"):
    xla_cpu.HostThreads(0)


def test_auto_engine_is_the_slot_engine_only_where_it_was_measured_faster(monkeypatch):
  """`rollout.engine="auto"`: slots on small CPU hosts for budgets <= 64 (where the engine keeps
  one KV region per slot) and >= 256 (one process), the lockstep sampler for budgets in
  between, big hosts, other platforms and with the switch off."""
  from botjax.sampling import auto_engine
  from botjax.sampling.slots import REGIONS_MAX_NEW_TOKENS
  monkeypatch.setenv(xla_cpu.ENV_VAR, "auto")
  monkeypatch.setattr(xla_cpu.os, "cpu_count", lambda: 2)
  assert xla_cpu.SLOTS_MIN_NEW_TOKENS == 256
  assert xla_cpu.SLOTS_MAX_SHORT_NEW_TOKENS == REGIONS_MAX_NEW_TOKENS == 64
  assert auto_engine(256) == auto_engine(1024) == auto_engine(64) == auto_engine(1) == "slots"
  assert auto_engine(255) == auto_engine(128) == auto_engine(65) == "jax"
  assert auto_engine(1024, _tpu_mesh()) == "jax"                 # never for another target
  one = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("fsdp",))
  eight = jax.make_mesh((8,), ("fsdp",), axis_types=(jax.sharding.AxisType.Auto,))
  assert auto_engine(1024, one) == "slots" and auto_engine(1024, eight) == "jax"
  monkeypatch.setattr(xla_cpu.os, "cpu_count", lambda: 64)
  assert auto_engine(1024) == "jax"                              # not measured on big hosts
  monkeypatch.setenv(xla_cpu.ENV_VAR, "1")
  assert auto_engine(1024) == "slots"
  monkeypatch.setenv(xla_cpu.ENV_VAR, "0")
  assert auto_engine(1024) == "jax"
