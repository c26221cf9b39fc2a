"""Device meshes and the logical-axis rules that place parameters and activations on them.

The mesh always has the three axes `data`, `fsdp` and `tensor` (size 1 where the spec leaves
them out), so partition specs that name them are valid on every mesh. One rules table maps the
logical names the model uses to mesh axes:

* FSDP shards weights over `fsdp` (their `embed` dimension);
* tensor parallelism shards heads, the MLP width and the vocabulary over `tensor`;
* the batch is sharded over `data` and `fsdp` together.

A dimension whose size is not divisible by its mesh axes is left replicated (e.g. 2 kv heads on
a `tensor:4` mesh), so every preset runs on every mesh.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

# Logical axis name -> mesh axis (or tuple of axes, or None for replicated).
RULES: tuple[tuple[str, Any], ...] = (
    # parameters
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("norm", None),
    # activations and caches
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("act_embed", None),
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
    ("layers", None),
    ("cache_length", None),
)


# XLA:CPU options for botjax's own programs (sampler, RL update, scoring, SFT) on small CPU hosts.
# With XLA's defaults every parallel loop and GEMM is split over the intra-op pool while the
# thunk executor runs independent ops (the q/k/v or gate/up GEMMs, a GEMM and its weight
# gradient) on the same threads at once: on 2 cores two concurrent 2 ms GEMMs took 10 ms each.
# One thread per op plus the memory-optimised schedule (which orders ops for buffer reuse and so
# runs fewer of them side by side) measured, on the 2-core CI machine with the benchmark model
# of benchmarks/rl_step.py, in back-to-back runs: RL update 0.40 -> 0.34 s, 64-token sampling
# of 128 rows 0.38 -> 0.19 s (that machine's speed drifts by 20-40% over minutes; later runs of
# the same setting sampled in 0.23-0.29 s). Hosts with more cores keep XLA's defaults (not
# measured there).
CPU_COMPILER_OPTIONS: dict[str, Any] = {
    "xla_cpu_multi_thread_eigen": False,
    "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
}
# The decode loop adds: no YNNPACK fusions. YNNPACK takes over the decode step's fused
# multiply + sum over the KV cache (as a reduction or a [1, H] x [H, S] GEMM per row and head),
# which needs each layer's cache slice copied out first: 64-token sampling 0.33 -> 0.23 s.
# The RL update keeps them (its GEMMs are faster with YNNPACK: 0.28 -> 0.23 s).
DECODE_CPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_cpu_experimental_ynn_fusion_type": ""}
_SMALL_HOST_CORES = 4


def compiler_options(*, decode: bool = False) -> dict[str, Any] | None:
  """Per-program XLA options for botjax's jitted programs (`jax.jit(..., compiler_options=)`).

  `CPU_COMPILER_OPTIONS` (plus `DECODE_CPU_COMPILER_OPTIONS` for a sampler's decode loop when
  `decode`) when the default backend is CPU on a host with at most 4 cores, else None (XLA's
  defaults). The environment variable `BOTJAX_CPU_COMPILER_OPTIONS` overrides the choice: `on`
  applies them on any CPU host, `off` never.
  """
  choice = os.environ.get("BOTJAX_CPU_COMPILER_OPTIONS", "auto").strip().lower()
  if choice not in ("auto", "on", "off"):
    raise ValueError(f"BOTJAX_CPU_COMPILER_OPTIONS={choice!r}; valid: 'auto', 'on', 'off'")
  if choice == "off" or jax.default_backend() != "cpu":
    return None
  if choice == "auto" and (os.cpu_count() or 1) > _SMALL_HOST_CORES:
    return None
  return {**CPU_COMPILER_OPTIONS, **(DECODE_CPU_COMPILER_OPTIONS if decode else {})}


def _threefry2x32_unrolled(key1, key2, x1, x2):
  """Threefry-2x32 with 20 rounds (Salmon et al., 2011), the hash behind `jax.random`, unrolled.

  The same function as JAX's own lowering (key schedule k₂ = k₀ ⊕ k₁ ⊕ 0x1BD11BDA, rotations
  13 15 26 6 / 17 29 16 24, a key injection after every 4 rounds), written out in full.
  """
  def rotl(x, d):
    return jax.lax.shift_left(x, np.uint32(d)) | jax.lax.shift_right_logical(x, np.uint32(32 - d))

  rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
  ks = (key1, key2, key1 ^ key2 ^ np.uint32(0x1BD11BDA))
  x0, x1 = x1 + ks[0], x2 + ks[1]
  for i in range(5):
    for r in rotations[i % 2]:
      x0 = x0 + x1
      x1 = x0 ^ rotl(x1, r)
    x0 = x0 + ks[(i + 1) % 3]
    x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
  return x0, x1


_THREEFRY_UNROLLED = False


def unroll_threefry_on_cpu() -> None:
  """Lowers `jax.random`'s Threefry hash unrolled on CPU, for this process; same bits.

  JAX lowers the hash on CPU as a `while` loop over its 5 groups of 4 rounds (to keep compile
  times short), and XLA:CPU runs each group as separate small kernels that copy the state
  around: a sampler's per-step draws (`fold_in` per row, Gumbel noise over the vocabulary)
  became about 180 of the 280 kernels of a decode step. Unrolled, the hash fuses into its
  consumers (64-token sampling on the benchmark model of `benchmarks/rl_step.py`: 0.083 ->
  0.078 s, medians of 3 alternating processes each). The values are the same hash, so every key gives the same
  numbers as before. `botjax.sampling.Sampler` calls this on hosts where
  `compiler_options()` applies; programs compiled earlier keep their lowering.
  """
  global _THREEFRY_UNROLLED
  if _THREEFRY_UNROLLED:
    return
  from jax.extend.random import threefry2x32_p
  from jax.interpreters import mlir
  mlir.register_lowering(
      threefry2x32_p, mlir.lower_fun(_threefry2x32_unrolled, multiple_results=True),
      platform="cpu")
  _THREEFRY_UNROLLED = True


_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8   # glibc <malloc.h>


def tune_host_allocator() -> bool:
  """Keeps freed host memory in the process so XLA:CPU reuses it instead of faulting it in again.

  XLA:CPU allocates each execution's temporary buffer afresh (433 MB for the RL update of
  `benchmarks/rl_step.py`); glibc serves allocations that large with a new mmap and unmaps them
  on free, so every execution page-faults its whole working set again: 0.3 s for 433 MB on the
  2-core CI machine, most of that update's time. This sets glibc's malloc to one arena, no
  mmap and no trimming (`mallopt`), so freed buffers stay mapped and the next execution reuses
  them (update 0.45 -> 0.26 s, measured, 0 page faults instead of 105,800). The heap settles
  within a few executions: now and then a freed block has been split by smaller allocations
  and the heap grows once more, and that execution faults its buffers in as before.

  Call it before the first JAX computation: JAX's threads pick their malloc arena when they
  start, and those started earlier keep mmap-ing. Meant for CPU training (the quick-start, the
  ablations, the benchmarks): the process then keeps its peak host memory, which on an
  accelerator host would include the host copy of a loaded checkpoint. The same effect for any
  program, without code: `MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967295`
  or `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` in the environment.

  Returns:
    True when applied (Linux with glibc), False elsewhere (nothing changes).
  """
  import ctypes
  import ctypes.util
  import sys
  if not sys.platform.startswith("linux"):
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = libc.mallopt
  except (OSError, AttributeError):
    return False                        # not glibc (e.g. musl has no mallopt)
  mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
  return bool(mallopt(_M_ARENA_MAX, 1) and mallopt(_M_MMAP_MAX, 0)
              and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def parse_mesh_spec(spec: str, num_devices: int) -> dict[str, int]:
  """Parses `"data:2,fsdp:2,tensor:2"` into axis sizes; one axis may be -1 ("the rest").

  Args:
    spec: comma-separated `axis:size` pairs over `data`, `fsdp`, `tensor`.
    num_devices: devices to fill; the product of the sizes must equal it.

  Returns:
    {axis: size} for all three axes, in `MESH_AXES` order (missing axes get 1).
  """
  sizes: dict[str, int] = {}
  for item in filter(None, (s.strip() for s in spec.split(","))):
    name, sep, value = item.partition(":")
    if not sep or name not in MESH_AXES:
      raise ValueError(f"bad mesh spec item {item!r} in {spec!r}: expected axis:size with axis "
                       f"in {MESH_AXES}")
    if name in sizes:
      raise ValueError(f"mesh axis {name!r} given twice in {spec!r}")
    try:
      sizes[name] = int(value)
    except ValueError:
      raise ValueError(f"mesh axis size {value!r} in {spec!r} is not an integer") from None
    if sizes[name] == 0 or sizes[name] < -1:
      raise ValueError(f"mesh axis {name!r} has size {sizes[name]}; use a positive size or -1")
  rest = [k for k, v in sizes.items() if v == -1]
  if len(rest) > 1:
    raise ValueError(f"at most one mesh axis may be -1, got {rest} in {spec!r}")
  known = math.prod(v for v in sizes.values() if v != -1)
  if rest:
    if num_devices % known:
      raise ValueError(f"mesh spec {spec!r}: {num_devices} devices are not divisible by {known}")
    sizes[rest[0]] = num_devices // known
  full = {a: sizes.get(a, 1) for a in MESH_AXES}
  if math.prod(full.values()) != num_devices:
    raise ValueError(f"mesh spec {spec!r} uses {math.prod(full.values())} devices, but "
                     f"{num_devices} are available; use -1 on one axis for the rest")
  return full


def make_mesh(spec: str = "data:-1", devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A mesh with axes (`data`, `fsdp`, `tensor`) from a spec string such as `fsdp:-1,tensor:2`.

  Args:
    spec: comma-separated `axis:size`, one size may be -1 for the remaining devices.
    devices: devices to use (default: all of `jax.devices()`).

  Returns:
    A `jax.sharding.Mesh` with Auto axis types (GSPMD propagation).
  """
  devices = list(jax.devices() if devices is None else devices)
  sizes = parse_mesh_spec(spec, len(devices))
  shape = tuple(sizes[a] for a in MESH_AXES)
  if len(devices) == len(jax.devices()):
    return jax.make_mesh(shape, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3,
                         devices=devices)
  return Mesh(np.asarray(devices).reshape(shape), MESH_AXES)


def abstract_mesh(spec: str, num_devices: int) -> jax.sharding.AbstractMesh:
  """A device-free mesh of the same shape (for dry-run plans of slices you do not have)."""
  sizes = parse_mesh_spec(spec, num_devices)
  return jax.sharding.AbstractMesh(tuple(sizes[a] for a in MESH_AXES), MESH_AXES)


def _axis_size(mesh, axis) -> int:
  if axis is None:
    return 1
  axes = axis if isinstance(axis, tuple) else (axis,)
  return math.prod(mesh.shape[a] for a in axes)


def logical_to_spec(axes: Sequence[str | None], *, rules=RULES, mesh=None,
                    shape: Sequence[int] | None = None) -> P:
  """PartitionSpec for logical axis names; with `mesh` and `shape`, undivisible dims replicate.

  Args:
    axes: one logical name (or None) per array dimension.
    rules: (logical name, mesh axis / tuple of axes / None) pairs.
    mesh: optional mesh to check divisibility against.
    shape: the array shape (with `mesh`).

  Returns:
    A `PartitionSpec` naming each mesh axis at most once.
  """
  table = dict(rules)
  used: set[str] = set()
  out = []
  for i, name in enumerate(axes):
    if name is not None and name not in table:
      raise ValueError(f"logical axis {name!r} has no rule; known: {sorted(table)}")
    axis = table.get(name) if name is not None else None
    flat = () if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    if mesh is not None:
      flat = tuple(a for a in flat if a in mesh.shape and mesh.shape[a] > 1)
    if any(a in used for a in flat):
      flat = ()
    if flat and mesh is not None and shape is not None and shape[i] % _axis_size(mesh, flat):
      flat = ()
    used.update(flat)
    out.append(None if not flat else (flat[0] if len(flat) == 1 else flat))
  return P(*out)


def _variable_axes(var) -> tuple | None:
  return var.get_metadata().get("logical_axes")


def state_shardings(state, mesh, rules=RULES):
  """NamedSharding for every variable of an `nnx.State`, from its `logical_axes` metadata."""

  def f(var):
    axes = _variable_axes(var)
    value = var.get_value()
    if axes is None:
      spec = P()
    else:
      spec = logical_to_spec(axes, rules=rules, mesh=mesh, shape=value.shape)
    return var.replace(NamedSharding(mesh, spec))

  return jax.tree.map(f, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def shard_model(model: nnx.Module, mesh: Mesh, rules=RULES) -> nnx.Module:
  """Moves every parameter of `model` onto its sharding on `mesh` (in place) and returns it."""
  state = nnx.state(model)
  shardings = state_shardings(state, mesh, rules)
  values = jax.tree.map(lambda v: v.get_value(), state,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))
  target = jax.tree.map(lambda v: v.get_value(), shardings,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))
  placed = jax.device_put(values, target)
  nnx.update(model, placed)
  return model


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
  """Sharding of a batch array: the leading (batch) dim over (`data`, `fsdp`), rest replicated."""
  return NamedSharding(mesh, P(("data", "fsdp"), *([None] * (ndim - 1))))


def constrain(x: jax.Array, axes: Sequence[str | None], rules=RULES) -> jax.Array:
  """`with_sharding_constraint` by logical names, under the mesh set with `jax.set_mesh`.

  Without a mesh in context (or on a single device) this returns `x` unchanged.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh is None or mesh.empty or mesh.size == 1:
    return x
  if any(a not in mesh.shape for a in MESH_AXES):
    return x
  spec = logical_to_spec(axes, rules=rules, mesh=mesh, shape=x.shape)
  return jax.lax.with_sharding_constraint(x, spec)


def initialize_distributed(enabled: bool, *, coordinator_address: str | None = None,
                           num_processes: int | None = None, process_id: int | None = None,
                           **kwargs: Any) -> None:
  """Multi-host start-up: calls `jax.distributed.initialize(...)` when `enabled`.

  On TPU pods and SLURM / Open MPI / Kubernetes GPU clusters JAX discovers the arguments itself;
  elsewhere (plain multi-node GPU) give all three: the coordinator's host:port (process 0), the
  number of processes and this process's id. None leaves an argument to JAX. Call this before
  any other JAX call, on every host, with the same script and flags.
  """
  if not enabled:
    return
  given = {"coordinator_address": coordinator_address, "num_processes": num_processes,
           "process_id": process_id}
  jax.distributed.initialize(**{k: v for k, v in given.items() if v is not None}, **kwargs)
  print(f"[botjax] jax.distributed: process {jax.process_index()} of {jax.process_count()}, "
        f"{jax.local_device_count()} local / {jax.device_count()} global devices", flush=True)
