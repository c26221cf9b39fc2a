"""Everything botjax does only for XLA:CPU, behind one switch.

botjax's programs are written for accelerators; on CPU hosts a few XLA:CPU-specific measures
make them faster, and all of them live here:

* `fused_*` reductions that keep XLA:CPU from splitting long sums into a materialised
  reduce-window;
* per-program XLA:CPU compiler options (`compiler_options`, `jit`);
* an unrolled lowering of `jax.random`'s Threefry hash, used only while botjax's sampler
  lowers its own programs (`threefry_unrolled`);
* glibc allocator settings for CPU training processes (`tune_host_allocator`, called
  explicitly by the scripts that want it);
* host threads that run parts of a batch as separate programs side by side
  (`default_host_threads`, `HostThreads`; the sampler splits its prompts with them, and
  `botjax.train.step.ParallelUpdate` the rows of an update);
* the rollout engine that `rollout.engine="auto"` picks (`prefers_slots`): the slot engine
  where it was measured faster than the lockstep sampler, the lockstep sampler elsewhere.

The switch is the environment variable `BOTJAX_XLA_CPU_TUNING`:

* `auto` (default): the in-program measures (fused reductions, Threefry, the `"cpu"` attention
  of `botjax.models.attention_cpu`) apply when the target is CPU; compiler options, host threads
  and the engine choice apply on CPU hosts with at most 4 cores (where they were measured);
* `1` (or `on`): as `auto`, also on CPU hosts with more cores;
* `0` (or `off`): nothing here applies; every program is the portable one.

Nothing here runs on a GPU or TPU target: in-program measures are emitted through
`jax.lax.platform_dependent` with a CPU branch, so a program lowered for TPU or CUDA (also
with `jax.export` from a CPU host) contains only the portable branch; compiler options and
host threads are chosen from the platform of the devices a program runs on. Nothing here
changes process-wide JAX state: the Threefry lowering applies only inside
`threefry_unrolled()`, and the allocator only changes when `tune_host_allocator` is called.

A leaf of botjax: it imports nothing of botjax but `botjax.types`, so every layer may use it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import functools
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from botjax.types import Array

ENV_VAR = "BOTJAX_XLA_CPU_TUNING"
_MODES = {"auto": "auto", "1": "on", "on": "on", "0": "off", "off": "off"}
_SMALL_HOST_CORES = 4


def mode() -> str:
  """The switch: 'auto', 'on' or 'off', from `BOTJAX_XLA_CPU_TUNING` (read at each call)."""
  raw = os.environ.get(ENV_VAR, "auto").strip().lower()
  if raw not in _MODES:
    raise ValueError(f"{ENV_VAR}={raw!r}; valid: 'auto', '1' (or 'on'), '0' (or 'off')")
  return _MODES[raw]


def cpu_model() -> str:
  """The host CPU's model name (`/proc/cpuinfo`'s "model name"; `platform.processor()`
  elsewhere), or "" when unknown."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.lower().startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  import platform
  return platform.processor()


def numerics_environment() -> dict[str, Any]:
  """What, besides the code and the seeds, decides the floating-point results of a run on this
  host: the JAX version, the backend and its devices, the CPU model (XLA:CPU emits code for the
  host's instruction set, so reductions and fused kernels round differently from one CPU family
  to another), `XLA_FLAGS` (e.g. the test suite's `--xla_backend_optimization_level=0`), the
  tuning switch (`BOTJAX_XLA_CPU_TUNING`) and the thread settings. Values are strings or
  numbers (JSON-ready)."""
  import jax
  import jaxlib
  devices = jax.devices()
  return {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
          "backend": jax.default_backend(), "devices": len(devices),
          "device_kind": devices[0].device_kind, "cpu": cpu_model(),
          "cores": os.cpu_count() or 0,
          "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""), ENV_VAR: mode(),
          "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")}


def _normalize(platform: str) -> str:
  platform = platform.lower()
  return "gpu" if platform in ("cuda", "rocm", "gpu") else platform


def platform_of(where: Any = None) -> str:
  """The platform ('cpu', 'gpu' or 'tpu') of the devices a model or program is placed on.

  Args:
    where: a `jax.sharding.Mesh` or `AbstractMesh`, a device, a sequence of devices, or a
      pytree of arrays (e.g. an `nnx.State`; the first leaf with a sharding decides). None
      (or a pytree without concrete arrays): the mesh set with `jax.set_mesh` if any, else
      the default device (`jax.default_device`, else `jax.devices()[0]`).

  Returns:
    'cpu', 'gpu' (CUDA or ROCm) or 'tpu'.
  """
  return _placement(where)[0]


def _placement(where: Any = None) -> tuple[str, int]:
  """(platform, number of devices) of `where` as `platform_of` reads it; what `where` leaves
  open (None, a pytree without concrete arrays, an abstract mesh without a device kind) comes
  from the mesh set with `jax.set_mesh`, else the default device (one)."""
  platform = count = None
  if where is not None:
    if isinstance(where, jax.sharding.Mesh):
      platform, count = where.devices.flat[0].platform, where.size
    elif isinstance(where, jax.sharding.AbstractMesh):
      device = getattr(where, "abstract_device", None)
      platform, count = (device.platform if device is not None else None), where.size
    elif isinstance(where, jax.Device):
      platform, count = where.platform, 1
    elif isinstance(where, (list, tuple)) and where and all(
        isinstance(d, jax.Device) for d in where):
      platform, count = where[0].platform, len(where)
    else:
      for leaf in jax.tree.leaves(where):
        if isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer):
          devices = leaf.sharding.device_set
          platform, count = next(iter(devices)).platform, len(devices)
          break
  if platform is None or count is None:
    mesh = jax.sharding.get_abstract_mesh()
    device = getattr(mesh, "abstract_device", None)
    if count is None:
      count = 1 if mesh.empty else mesh.size
    if platform is None and not mesh.empty and device is not None:
      platform = device.platform
    if platform is None:
      default = jax.config.jax_default_device
      platform = default if isinstance(default, str) else (default or jax.devices()[0]).platform
  return _normalize(platform), int(count)


def enabled(where: Any = None) -> bool:
  """Whether the in-program XLA:CPU measures apply to a target (see `platform_of`)."""
  return mode() != "off" and platform_of(where) == "cpu"


def small_host(where: Any = None) -> bool:
  """Whether compiler options and host threads apply: a CPU target, and the switch is 'on',
  or 'auto' on a host with at most 4 cores."""
  if not enabled(where):
    return False
  return mode() == "on" or (os.cpu_count() or 1) <= _SMALL_HOST_CORES


def on_cpu(cpu_fn: Callable, portable_fn: Callable, *args):
  """`cpu_fn(*args)` in programs lowered for CPU, `portable_fn(*args)` for every other platform.

  Both must return the same shapes and dtypes. Emitted as `jax.lax.platform_dependent`, so
  the choice is made when the program is lowered for its platform (a program exported for
  TPU or CUDA holds only `portable_fn`); with the switch 'off' only `portable_fn` is traced.
  """
  if mode() == "off":
    return portable_fn(*args)
  return jax.lax.platform_dependent(*args, cpu=cpu_fn, default=portable_fn)


# -- reductions that XLA:CPU keeps fused ----------------------------------------------------

# XLA:CPU's TreeReductionRewriter turns every reduction over a dimension longer than 32 into a
# reduce-window over blocks of 32 plus a second reduce, and the reduce-window materialises its
# whole operand: `sum(p * v, axis=-1)` over 96 cache slots wrote the [B, K, G, H, S] product to
# memory and read it back instead of reducing it in one fused loop (3 layers of the benchmark
# model's decode step: 1.16 ms as written, 0.15 ms folded as below; measured). The rewrite is
# skipped when every reduced dimension is at most 32 long, and a reshape does not help (XLA
# merges the split dimensions back first). So on CPU the functions below first fold the axis:
# S -> ceil(S/n) by combining n <= 32 equal slices elementwise (padding with the reduction's
# identity), repeated until at most 32 remain, which one fused reduce then finishes. Other
# platforms reduce the axis as it is. The summation order differs from `jnp.sum`'s (rounding
# only).
_CPU_REDUCE_WINDOW = 32


def _fold(x: Array, axis: int, combine, fill) -> Array:
  """Shortens `axis` to <= 32 by combining equal slices of it elementwise."""
  w = _CPU_REDUCE_WINDOW
  while x.shape[axis] > w:
    s = x.shape[axis]
    n = min(w, -(-s // w))            # slices combined at this level
    c = -(-s // n)                    # their width
    if n * c != s:
      pads = [(0, 0)] * x.ndim
      pads[axis] = (0, n * c - s)
      x = jnp.pad(x, pads, constant_values=fill)
    acc = jax.lax.slice_in_dim(x, 0, c, axis=axis)
    for i in range(1, n):
      acc = combine(acc, jax.lax.slice_in_dim(x, i * c, (i + 1) * c, axis=axis))
    x = acc
  return x


def _reduce(x, axis: int, reducer, combine, fill, keepdims: bool) -> Array:
  x = jnp.asarray(x)
  axis = axis % x.ndim

  def portable(x):
    return reducer(x, axis=axis, keepdims=keepdims)

  if x.shape[axis] <= _CPU_REDUCE_WINDOW:
    return portable(x)
  return on_cpu(lambda x: portable(_fold(x, axis, combine, fill)), portable, x)


def _lowest(dtype):
  return -jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min


def _highest(dtype):
  return jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).max


def fused_sum(x, axis: int = -1, *, keepdims: bool = False) -> Array:
  """`jnp.sum(x, axis)` over one axis, kept as one fused reduction on XLA:CPU.

  Args:
    x: array.
    axis: the axis to reduce (an int).
    keepdims: keep it with size 1.

  Returns:
    The sums, dtype of x, shape of x without `axis` (or with it as 1).
  """
  return _reduce(x, axis, jnp.sum, jnp.add, 0, keepdims)


def fused_max(x, axis: int = -1, *, keepdims: bool = False) -> Array:
  """`jnp.max(x, axis)` over one axis, kept fused on XLA:CPU. Shapes as `fused_sum`."""
  x = jnp.asarray(x)
  return _reduce(x, axis, jnp.max, jnp.maximum, _lowest(x.dtype), keepdims)


def fused_min(x, axis: int = -1, *, keepdims: bool = False) -> Array:
  """`jnp.min(x, axis)` over one axis, kept fused on XLA:CPU. Shapes as `fused_sum`."""
  x = jnp.asarray(x)
  return _reduce(x, axis, jnp.min, jnp.minimum, _highest(x.dtype), keepdims)


def fused_logsumexp(x, axis: int = -1, *, keepdims: bool = False) -> Array:
  """log Σ exp over one axis, as `jax.nn.logsumexp(x, axis)` (a row of −inf gives −inf).

  Args:
    x: float array.
    axis: the axis to reduce (an int).
    keepdims: keep it with size 1.

  Returns:
    dtype of x, shape of x without `axis` (or with it as 1); its gradient is softmax(x).
  """
  x = jnp.asarray(x)
  m = fused_max(x, axis, keepdims=True)
  m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, jnp.zeros_like(m)))
  out = jnp.log(fused_sum(jnp.exp(x - m), axis, keepdims=True)) + m
  return out if keepdims else jnp.squeeze(out, axis)


def fused_softmax(x, axis: int = -1) -> Array:
  """`jax.nn.softmax(x, axis)`, kept fused on XLA:CPU; x must hold a finite value per row.

  Args:
    x: float array.
    axis: the softmax axis (an int).

  Returns:
    Probabilities, shape and dtype of x.
  """
  x = jnp.asarray(x)
  e = jnp.exp(x - jax.lax.stop_gradient(fused_max(x, axis, keepdims=True)))
  return e / fused_sum(e, axis, keepdims=True)


def fused_log_softmax(x, axis: int = -1) -> Array:
  """`jax.nn.log_softmax(x, axis)`, kept fused on XLA:CPU. Shapes as `fused_softmax`."""
  x = jnp.asarray(x)
  return x - fused_logsumexp(x, axis, keepdims=True)


# -- compiler options -----------------------------------------------------------------------

# XLA:CPU options for botjax's own programs (sampler, RL update, scoring, SFT) on small CPU hosts.
# With XLA's defaults every parallel loop and GEMM is split over the intra-op pool while the
# thunk executor runs independent ops (the q/k/v or gate/up GEMMs, a GEMM and its weight
# gradient) on the same threads at once: on 2 cores two concurrent 2 ms GEMMs took 10 ms each.
# One thread per op plus the memory-optimised schedule (which orders ops for buffer reuse and so
# runs fewer of them side by side) measured, on a 2-core machine with the benchmark model of
# benchmarks/rl_step.py, in back-to-back runs: RL update 0.40 -> 0.34 s, 64-token sampling of
# 128 rows 0.38 -> 0.19 s (that machine's speed drifts by 20-40% over minutes). Hosts with
# more cores keep XLA's defaults (not measured there).
CPU_COMPILER_OPTIONS: dict[str, Any] = {
    "xla_cpu_multi_thread_eigen": False,
    "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
}
# The decode loop adds: no YNNPACK fusions. YNNPACK takes over the decode step's fused
# multiply + sum over the KV cache (as a reduction or a [1, H] x [H, S] GEMM per row and head),
# which needs each layer's cache slice copied out first: 64-token sampling 0.33 -> 0.23 s.
# The RL update keeps them (its GEMMs are faster with YNNPACK: 0.28 -> 0.23 s).
DECODE_CPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_cpu_experimental_ynn_fusion_type": ""}


def compiler_options(where: Any = None, *, decode: bool = False) -> dict[str, Any] | None:
  """XLA:CPU options for a program that runs on `where` (see `platform_of`), or None.

  `CPU_COMPILER_OPTIONS` (plus `DECODE_CPU_COMPILER_OPTIONS` for a sampler's decode loop when
  `decode`) where `small_host(where)`, else None (XLA's defaults).
  """
  if not small_host(where):
    return None
  return {**CPU_COMPILER_OPTIONS, **(DECODE_CPU_COMPILER_OPTIONS if decode else {})}


def _tracing(tree) -> bool:
  return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


class _Program:
  """A jitted function that adds XLA:CPU options when called at top level on a small CPU host.

  JAX accepts `compiler_options` only for a top-level program; called inside another trace
  (a user's own `jax.jit`, `jax.grad`, ...) this is a plain `jax.jit` of the function, so it
  composes like any jitted function. At top level the platform of the arguments' devices (or
  of the mesh in context) decides.
  """

  def __init__(self, fn: Callable, decode: bool, kwargs: dict[str, Any]):
    self._plain = jax.jit(fn, **kwargs)
    nested = {k: v for k, v in kwargs.items() if k not in ("donate_argnums", "donate_argnames")}
    self._nested = jax.jit(fn, **nested)
    options = {**CPU_COMPILER_OPTIONS, **(DECODE_CPU_COMPILER_OPTIONS if decode else {})}
    self._tuned = jax.jit(fn, compiler_options=options, **kwargs)
    functools.update_wrapper(self, fn)

  def _pick(self, args, kwargs):
    if _tracing((args, kwargs)):
      return self._nested
    return self._tuned if small_host(args or None) else self._plain

  def __call__(self, *args, **kwargs):
    return self._pick(args, kwargs)(*args, **kwargs)

  def lower(self, *args, **kwargs):
    return self._pick(args, kwargs).lower(*args, **kwargs)

  def _cache_size(self) -> int:
    return sum(f._cache_size() for f in (self._plain, self._nested, self._tuned))


def jit(fn: Callable, *, decode: bool = False, **kwargs) -> Callable:
  """`jax.jit(fn, **kwargs)` with `compiler_options` on small CPU hosts, usable inside a jit.

  Args:
    fn: the function.
    decode: add `DECODE_CPU_COMPILER_OPTIONS` (a sampler's decode loop).
    **kwargs: `jax.jit` arguments (static_argnames, donate_argnums, ...).

  Returns:
    A callable with `lower`; see `_Program`.
  """
  return _Program(fn, decode, kwargs)


# -- Threefry ---------------------------------------------------------------------------------

def _threefry2x32_unrolled(key1, key2, x1, x2):
  """Threefry-2x32 with 20 rounds (Salmon et al., 2011), the hash behind `jax.random`, unrolled.

  The same function as JAX's own lowering (key schedule k₂ = k₀ ⊕ k₁ ⊕ 0x1BD11BDA, rotations
  13 15 26 6 / 17 29 16 24, a key injection after every 4 rounds), written out in full.

  References:
    Salmon et al., Parallel random numbers: as easy as 1, 2, 3, SC 2011,
    https://doi.org/10.1145/2063384.2063405
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


_UNROLL = contextvars.ContextVar("botjax_threefry_unrolled", default=False)
_THREEFRY_RULE_INSTALLED = False


def _install_threefry_rule() -> None:
  """Wraps JAX's CPU lowering of Threefry in one that unrolls it inside `threefry_unrolled()`.

  Outside that scope the wrapper calls JAX's own CPU rule, so other programs lower as before.
  """
  global _THREEFRY_RULE_INSTALLED
  if _THREEFRY_RULE_INSTALLED:
    return
  from jax._src.interpreters import mlir as mlir_internal
  from jax.extend.random import threefry2x32_p
  from jax.interpreters import mlir
  original = mlir_internal._platform_specific_lowerings["cpu"].get(threefry2x32_p)
  unrolled = mlir.lower_fun(_threefry2x32_unrolled, multiple_results=True)
  if original is None:
    return                              # an unknown JAX layout: keep JAX's lowering

  def rule(ctx, *args, **params):
    if _UNROLL.get():
      return unrolled(ctx, *args, **params)
    return original.rule(ctx, *args, **params)

  mlir.register_lowering(threefry2x32_p, rule, platform="cpu", inline=original.inline)
  _THREEFRY_RULE_INSTALLED = True


@contextlib.contextmanager
def threefry_unrolled(where: Any = None):
  """Within this block, programs lowered for CPU compute `jax.random`'s hash unrolled; same bits.

  JAX lowers the hash on CPU as a `while` loop over its 5 groups of 4 rounds (to keep compile
  times short), and XLA:CPU runs each group as separate small kernels that copy the state
  around: a sampler's per-step draws (`fold_in` per row, Gumbel noise over the vocabulary)
  became about 180 of the 280 kernels of a decode step. Unrolled, the hash fuses into its
  consumers (64-token sampling on the benchmark model of `benchmarks/rl_step.py`: 0.083 ->
  0.078 s, medians of 3 alternating processes each). `botjax.sampling.Sampler` lowers its
  programs inside this block where `small_host()` holds; programs lowered elsewhere, and
  programs lowered for other platforms, keep JAX's lowering.
  """
  if not small_host(where):
    yield
    return
  _install_threefry_rule()
  token = _UNROLL.set(True)
  try:
    yield
  finally:
    _UNROLL.reset(token)


# -- host allocator ---------------------------------------------------------------------------

_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8   # glibc <malloc.h>


def tune_host_allocator() -> bool:
  """Keeps freed host memory in the process so XLA:CPU reuses it instead of faulting it in again.

  XLA:CPU allocates each execution's temporary buffer afresh (433 MB for the RL update of
  `benchmarks/rl_step.py`); glibc serves allocations that large with a new mmap and unmaps them
  on free, so every execution page-faults its whole working set again: 0.3 s for 433 MB on a
  2-core machine, most of that update's time. This sets glibc's malloc to one arena, no
  mmap and no trimming (`mallopt`), so freed buffers stay mapped and the next execution reuses
  them (update 0.45 -> 0.26 s, measured, 0 page faults instead of 105,800).

  Call it explicitly, before the first JAX computation, in CPU training scripts (the process
  then keeps its peak host memory, which on an accelerator host would include the host copy
  of a loaded checkpoint; botjax never calls it itself). The same effect without code:
  `MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967295` in the environment.
  With the switch `BOTJAX_XLA_CPU_TUNING=0` it does nothing.

  Returns:
    True when applied (Linux with glibc), False elsewhere (nothing changes).
  """
  import ctypes
  import ctypes.util
  import sys
  if mode() == "off" or not sys.platform.startswith("linux"):
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = libc.mallopt
  except (OSError, AttributeError):
    return False                        # not glibc (e.g. musl has no mallopt)
  mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
  return bool(mallopt(_M_ARENA_MAX, 1) and mallopt(_M_MMAP_MAX, 0)
              and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


# -- host threads -----------------------------------------------------------------------------

def default_host_threads(where: Any = None, *, mesh: Any = None) -> int:
  """Host threads for sampling and the update: 2 on small CPU hosts without a mesh, else 1.

  A decode step or an update of a small model is a chain of small kernels that XLA:CPU runs
  one after the other on one core; two independent programs keep both cores of a small host
  busy (64-token sampling of 128 rows on 2 cores: 2 halves in 2 threads took 0.75x the time of
  the whole batch in one loop; the RL update of `benchmarks/rl_step.py`: 0.85x, measured).
  """
  if mesh is not None:
    return 1
  return 2 if small_host(where) else 1


class HostThreads:
  """Runs contiguous parts of a batch as separate programs, one host thread per part.

  The parts of a call run side by side (see `default_host_threads` for why that pays on small
  CPU hosts); with one thread, or one part, everything runs in the calling thread. The threads
  start with the first call that has two parts.

  Args:
    threads: the most parts a batch is split into (>= 1).
    name: the threads' name prefix.
  """

  def __init__(self, threads: int, *, name: str = "botjax"):
    if not isinstance(threads, int) or threads < 1:
      raise ValueError(f"threads must be an int >= 1, got {threads!r}")
    self.threads = threads
    self._name = name
    self._pool: concurrent.futures.ThreadPoolExecutor | None = None

  @property
  def started(self) -> bool:
    """Whether the threads are running (a call had two parts or more, and no `close` since)."""
    return self._pool is not None

  def split(self, num: int, padded: Callable[[int], int], whole: int
            ) -> list[tuple[int, int, int]]:
    """Up to `threads` contiguous parts of `num` items, as (lo, hi, padded rows).

    Args:
      num: the items (e.g. prompts) of a call, >= 1.
      padded: the rows a part of m items is padded to (its batch bucket).
      whole: the rows the whole call is padded to.

    Returns:
      [(lo, hi, padded(hi − lo)), ...] in order, covering [0, num); or the whole call as one
      part, [(0, num, whole)], where the parts together would be padded to more rows than
      `whole` (or there is one thread or one item).
    """
    parts = min(self.threads, num)
    if parts > 1:
      bounds = np.linspace(0, num, parts + 1).round().astype(int)
      split = [(int(lo), int(hi), padded(int(hi - lo)))
               for lo, hi in zip(bounds[:-1], bounds[1:])]
      if sum(rows for _, _, rows in split) <= whole:
        return split
    return [(0, num, whole)]

  def map(self, fn: Callable, parts: list[tuple]) -> list:
    """[fn(*part) for part in parts], the parts run concurrently (one part: in this thread).

    `fn` should block until its results are computed (`jax.block_until_ready`), so that the
    parts' programs run in their own threads rather than queue behind each other.
    """
    if len(parts) == 1:
      return [fn(*parts[0])]
    if self._pool is None:
      self._pool = concurrent.futures.ThreadPoolExecutor(self.threads,
                                                         thread_name_prefix=self._name)
    return list(self._pool.map(lambda part: fn(*part), parts))

  def close(self) -> None:
    """Stops the threads (after any part in flight); a later `map` starts them again."""
    if self._pool is not None:
      self._pool.shutdown(wait=True)
      self._pool = None


# -- the rollout engine of rollout.engine="auto" ------------------------------------------------

# The generation budgets at which "auto" picks botjax's slot engine on a small CPU host: up to
# `SLOTS_MAX_SHORT_NEW_TOKENS` (the engine then keeps one KV region per slot,
# `botjax.sampling.slots.REGIONS_MAX_NEW_TOKENS`) and from `SLOTS_MIN_NEW_TOKENS` (its paged
# pool). Measured (docs/scaling.md, 2-core AMD EPYC): the quick-start (64-token budget, 0.34 M
# parameters, 16 x 8 rows) took 0.93-0.97x the lockstep sampler's time on the slot engine;
# `benchmarks/long_rollouts.py`'s length-skewed work (64 slots) gave 1.89-2.11x the sampler's
# useful tokens/s at budget 256 and 11.9-16.8x at 1,024 (two runs), and at 128 1.04x and 1.17x
# with 4x its compile time: budgets in between stay on the sampler until measured on the runs
# that use them (the React testbed's 192).
SLOTS_MAX_SHORT_NEW_TOKENS = 64
SLOTS_MIN_NEW_TOKENS = 256


def prefers_slots(max_new_tokens: int, where: Any = None) -> bool:
  """Whether `rollout.engine="auto"` (`botjax.sampling.auto_engine`) picks the slot engine.

  True on one device of a small CPU host (`small_host`: where it was measured) in a one-process
  run, for a budget of at most `SLOTS_MAX_SHORT_NEW_TOKENS` or at least `SLOTS_MIN_NEW_TOKENS`
  tokens. On GPU and TPU (lockstep decoding of a batch that fits the slots is bound by weight
  reads there, and the slot engine is not measured on them), on meshes of several devices (the
  slot cache is not split over the batch axes as the lockstep cache is), in multi-process runs,
  for budgets in between and with the switch off, "auto" is the lockstep sampler.

  Args:
    max_new_tokens: the run's generation budget.
    where: the model, its parameters or the mesh the engine will run on (see `platform_of`).
  """
  return (small_host(where) and jax.process_count() == 1 and _placement(where)[1] == 1
          and not SLOTS_MAX_SHORT_NEW_TOKENS < int(max_new_tokens) < SLOTS_MIN_NEW_TOKENS)
