"""Dry-run memory and compute plan for a model on a mesh, from abstract shapes only.

`plan("qwen2.5-3b", "fsdp:8", batch_size=64, seq_len=2048)` reports, without allocating any
weights: the parameter count; per-device bytes of parameters, gradients, optimizer state,
activations and KV cache under the sharding rules; and the FLOPs of one training step (forward
and backward of the token log-probabilities) from XLA's cost analysis of the compiled step.
This is what sizes a TPU slice before booking it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from botjax.models.config import DecoderConfig
from botjax.models.decoder import Decoder
from botjax.models.logprobs import token_logprobs
from botjax.models.presets import get_config
from botjax.models.sharding import (MESH_AXES, RULES, logical_to_spec, parse_mesh_spec,
                                    spec_devices)

_GIB = 1 << 30


# Memory of one device of each kind, bytes (HBM as reported by the device, for planning when
# no such device is attached; with one attached, its own `memory_stats()["bytes_limit"]`).
DEVICE_MEMORY = {
    "TPU v4": 32 * _GIB, "TPU v5 lite": 16 * _GIB, "TPU v5e": 16 * _GIB, "TPU v5p": 95 * _GIB,
    "TPU v5": 95 * _GIB, "TPU v6 lite": 32 * _GIB, "TPU v6e": 32 * _GIB,
    "NVIDIA A100-SXM4-40GB": 40 * _GIB, "NVIDIA A100-SXM4-80GB": 80 * _GIB,
    "NVIDIA A100 80GB PCIe": 80 * _GIB, "NVIDIA H100 80GB HBM3": 80 * _GIB,
    "NVIDIA H100": 80 * _GIB, "NVIDIA H200": 140 * _GIB, "NVIDIA GH200": 96 * _GIB,
}
# Share of a device's memory a step may plan to use: XLA keeps some for itself and fragments.
HEADROOM = 0.9


def device_memory(kind: str | None = None) -> int | None:
  """Bytes of memory of one device: of `kind` (a `jax.Device.device_kind`), else of the first
  local accelerator (its allocator limit), else None (CPU hosts: no limit to plan against)."""
  if kind is None:
    dev = jax.devices()[0]
    if dev.platform == "cpu":
      return None
    stats = dev.memory_stats() or {}
    if "bytes_limit" in stats:
      return int(stats["bytes_limit"])
    kind = dev.device_kind
  for name in sorted(DEVICE_MEMORY, key=len, reverse=True):   # longest match first
    if kind.lower().startswith(name.lower()):
      return DEVICE_MEMORY[name]
  return None


@dataclasses.dataclass(frozen=True)
class DryRunPlan:
  """Per-device memory (bytes) and step FLOPs of a model on a mesh. `str()` gives a table.

  `train_bytes` is the peak of one update step on one device; `fits` compares it with
  `HEADROOM` of `device_memory` and `suggestions` names settings that would make it fit.
  """

  model: str
  mesh: dict[str, int]
  batch_size: int
  seq_len: int
  num_params: int
  param_bytes: int           # per device
  grad_bytes: int            # per device (the gradient, and its accumulator when micro-batched)
  optimizer_bytes: int       # per device (`optimizer_states` copies of the parameters)
  activation_bytes: int      # per device, what the backward pass of the layers keeps
  kv_cache_bytes: int        # per device, for sampling `batch_size` rows of `seq_len` slots
                             # (or, with `kv_slots`, the slot engine's pool)
  step_flops: float | None   # whole step (all devices), from the compiled cost analysis
  logprob_bytes: int = 0     # per device: one chunk's logits (kept, recomputed, backward) and
                             # the chunk loop's gradient of the unembedding matrix
  micro_batch_size: int = 0  # rows per gradient-accumulation slice (0: the whole batch)
  remat: bool = False
  device_memory: int | None = None     # bytes per device planned against (None: unknown)
  suggestions: tuple[str, ...] = ()    # settings that fit `device_memory` when this does not
  kv_slots: int = 0          # the slot engine's slots the KV cache holds (0: the lockstep
                             # sampler's `batch_size` rows)

  @property
  def num_devices(self) -> int:
    return math.prod(self.mesh.values())

  @property
  def train_bytes(self) -> int:
    """Per-device peak of a training step: params + grads + optimizer + activations + logits."""
    return (self.param_bytes + self.grad_bytes + self.optimizer_bytes + self.activation_bytes
            + self.logprob_bytes)

  @property
  def sample_bytes(self) -> int:
    """Per-device bytes while sampling: the train state stays resident next to the KV cache."""
    return self.param_bytes + self.optimizer_bytes + self.kv_cache_bytes

  @property
  def fits(self) -> bool | None:
    """Whether training and sampling fit `HEADROOM` of `device_memory` (None: unknown)."""
    if self.device_memory is None:
      return None
    return max(self.train_bytes, self.sample_bytes) <= HEADROOM * self.device_memory

  def __str__(self) -> str:
    mesh = ",".join(f"{k}:{v}" for k, v in self.mesh.items())
    rows = [
        ("parameters", f"{self.num_params / 1e6:,.1f} M"),
        ("params / device", _gib(self.param_bytes)),
        ("grads / device", _gib(self.grad_bytes)),
        ("optimizer / device", _gib(self.optimizer_bytes)),
        ("activations / device", _gib(self.activation_bytes)),
        ("log-probs / device", _gib(self.logprob_bytes)),
        ("train total / device", _gib(self.train_bytes)),
        ("KV cache / device" + (f" ({self.kv_slots} slots)" if self.kv_slots else ""),
         _gib(self.kv_cache_bytes)),
        ("FLOPs / train step", "n/a" if self.step_flops is None
         else f"{self.step_flops:.3e} ({self.step_flops / self.num_devices:.3e} / device)"),
    ]
    width = max(len(r[0]) for r in rows)
    micro = f"micro-batch {self.micro_batch_size}" if self.micro_batch_size else "no micro-batch"
    head = (f"Dry-run plan: {self.model} on mesh {mesh} ({self.num_devices} devices), "
            f"batch {self.batch_size} x {self.seq_len} tokens, {micro}, "
            f"remat {'on' if self.remat else 'off'}")
    lines = [head] + [f"  {k:<{width}}  {v:>14}" for k, v in rows]
    if self.device_memory is not None:
      need = max(self.train_bytes, self.sample_bytes)
      verdict = "fits" if self.fits else "does NOT fit"
      lines.append(f"  {verdict} {_gib(self.device_memory)} per device "
                   f"(needs {_gib(need)}, {HEADROOM:.0%} usable)")
      if not self.fits:
        lines.append("  fits with: " + ("; ".join(self.suggestions) if self.suggestions
                                         else "no setting tried (more devices or tensor:N)"))
    return "\n".join(lines)


def _gib(n: int) -> str:
  for unit, size in (("GiB", _GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
    if n >= size:
      return f"{n / size:,.2f} {unit}"
  return f"{n} B"


def _local_bytes(shape, axes, mesh, dtype, rules) -> int:
  spec = logical_to_spec(axes, rules=rules, mesh=mesh, shape=shape)
  local = []
  for dim, axis in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
    flat = () if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    local.append(-(-dim // math.prod(mesh.shape[a] for a in flat)))
  return math.prod(local) * jnp.dtype(dtype).itemsize


@functools.lru_cache(maxsize=32)
def _param_shapes(cfg: DecoderConfig) -> tuple[tuple[tuple[int, ...], tuple], ...]:
  """(shape, logical axes) of every parameter, from an abstract (weightless) model."""
  abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))
  return tuple((tuple(v.get_value().shape), v.get_metadata()["logical_axes"])
               for _, v in nnx.to_flat_state(nnx.state(abstract, nnx.Param)))


def plan(model: str | DecoderConfig, mesh: str = "fsdp:-1", *, batch_size: int, seq_len: int,
         num_devices: int | None = None, param_dtype=jnp.float32, dtype=jnp.bfloat16,
         optimizer_states: int = 2, logprob_chunk: int = 128, remat: bool = False,
         micro_batch_size: int = 0, completion_len: int | None = None,
         device_memory: int | None = None, rules=RULES, compute_flops: bool = True,
         kv_slots: int = 0) -> DryRunPlan:
  """Memory and FLOPs of one training step of `model` on a (possibly absent) mesh.

  Per device, with b = rows of one micro-batch on the device, L = seq_len, D width, N / K
  query / kv heads of size H, F the MLP width (N, K, F divided by t, the tensor-parallel size),
  s = itemsize of `dtype`:

  * layers, without remat: each layer keeps for its backward pass, per token,
    (4·D + 2·(N+K)·H + 4·F)·s values and the N·L float32 attention probabilities;
    with remat (`Decoder(remat=True)`) a layer keeps only its input (D·s per token) and
    one layer at a time recomputes its values. The backward pass of one layer adds its
    attention score gradients (2·N·L float32 per token).
  * log-probs: one chunk of C = min(logprob_chunk, T) positions holds [b, C, V] float32
    logits, probabilities and their gradient (3 buffers; the chunks are recomputed in the
    backward pass), plus the chunk loop's own float32 gradient of the [V, D] unembedding.
  * gradients: one copy of the parameters, two with gradient accumulation (the sum and the
    slice's gradient).

  Checked against XLA's memory analysis of the compiled update (tests/models).

  Args:
    model: a preset name or a `DecoderConfig`.
    mesh: mesh spec such as `data:2,fsdp:4` (see `sharding.make_mesh`); -1 fills
      `num_devices`.
    batch_size: B, global sequences per optimizer update (the mini-batch).
    seq_len: L, tokens per sequence, prompt and completion (also the KV-cache length).
    num_devices: devices of the planned slice (default: the spec's product, or all local
      devices when the spec has -1).
    param_dtype: storage dtype of parameters, gradients and optimizer state.
    dtype: computation dtype (activations, KV cache).
    optimizer_states: copies of the parameters the optimizer keeps (AdamW: 2).
    logprob_chunk: positions per log-prob chunk.
    remat: the model recomputes blocks in the backward pass.
    micro_batch_size: global rows per gradient-accumulation slice (`TrainConfig`), 0 = B.
    completion_len: T, the scored completion tokens (default L).
    device_memory: bytes of one device to plan against (default: `device_memory()` of the
      attached accelerator, None on CPU); when the step does not fit, `suggestions` lists
      micro-batch sizes, remat and meshes that do.
    rules: logical-axis rules.
    compute_flops: compile the step abstractly for its FLOPs (seconds for a 3B model).
    kv_slots: sampling with the slot engine (`botjax.sampling.SlotEngine`): its number of
      slots, whose cache of `seq_len` token slots each (one region per slot, or a paged pool
      of blocks for every slot at its full budget) every device holds for its share of the KV
      heads (heads over `tensor`, slots not sharded); 0: the lockstep sampler's cache of
      `batch_size` rows, sharded over the batch axes.

  Returns:
    A `DryRunPlan`.
  """
  name = model if isinstance(model, str) else model.model_type
  cfg = get_config(model) if isinstance(model, str) else model
  if batch_size <= 0 or seq_len <= 0:
    raise ValueError(f"batch_size and seq_len must be positive, got {batch_size}, {seq_len}")
  micro = micro_batch_size or batch_size
  if micro < 0 or batch_size % micro:
    raise ValueError(f"micro_batch_size={micro_batch_size} must divide batch_size={batch_size} "
                     "(0 = the whole batch)")
  if num_devices is None:
    num_devices = spec_devices(mesh)
  axis_sizes = parse_mesh_spec(mesh, num_devices)
  if device_memory is None:
    device_memory = _attached_memory()
  mem = _memory(cfg, axis_sizes, batch_size=batch_size, seq_len=seq_len, micro=micro,
                param_dtype=param_dtype, dtype=dtype, optimizer_states=optimizer_states,
                logprob_chunk=logprob_chunk, remat=remat, completion_len=completion_len,
                rules=rules, kv_slots=kv_slots)
  suggestions: tuple[str, ...] = ()
  if device_memory is not None and not _fits(mem, device_memory):
    suggestions = _suggest(cfg, axis_sizes, device_memory, batch_size=batch_size,
                           seq_len=seq_len, remat=remat, param_dtype=param_dtype, dtype=dtype,
                           optimizer_states=optimizer_states, logprob_chunk=logprob_chunk,
                           completion_len=completion_len, rules=rules, kv_slots=kv_slots)
  flops = None
  if compute_flops:
    flops = _stack_flops(cfg, batch_size, seq_len, dtype=dtype, param_dtype=param_dtype)
  return DryRunPlan(
      model=name, mesh=axis_sizes, batch_size=batch_size, seq_len=seq_len, step_flops=flops,
      micro_batch_size=micro_batch_size, remat=remat, device_memory=device_memory,
      suggestions=suggestions, kv_slots=kv_slots, **mem)


def _attached_memory() -> int | None:
  try:
    return device_memory()
  except Exception:  # noqa: BLE001  (a backend without memory stats: no limit to plan for)
    return None


def _memory(cfg: DecoderConfig, axis_sizes: dict[str, int], *, batch_size: int, seq_len: int,
            micro: int, param_dtype, dtype, optimizer_states: int, logprob_chunk: int,
            remat: bool, completion_len: int | None, rules, kv_slots: int = 0
            ) -> dict[str, int]:
  """The per-device byte counts of `plan` (see its docstring for the model)."""
  amesh = jax.sharding.AbstractMesh(tuple(axis_sizes[a] for a in MESH_AXES), MESH_AXES)
  params = _param_shapes(cfg)
  num_params = sum(math.prod(shape) for shape, _ in params)
  param_bytes = sum(_local_bytes(shape, axes, amesh, param_dtype, rules)
                    for shape, axes in params)
  t = axis_sizes["tensor"]
  shards = axis_sizes["data"] * axis_sizes["fsdp"]
  b = -(-micro // shards)                                          # rows of a slice per device
  n, k, h, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
  n_t = n // t if n % t == 0 else n
  k_t = k // t if k % t == 0 else k
  f_t = cfg.intermediate_size // t if cfg.intermediate_size % t == 0 else cfg.intermediate_size
  v_t = cfg.vocab_size // t if cfg.vocab_size % t == 0 else cfg.vocab_size
  s = jnp.dtype(dtype).itemsize
  tokens = b * seq_len
  layer = (4 * d + 2 * (n_t + k_t) * h + 4 * f_t) * s + n_t * seq_len * 4   # kept per token
  backward = 2 * n_t * seq_len * 4                                 # one layer's score grads
  if remat:
    activations = tokens * (cfg.num_layers * d * s + layer + backward)
  else:
    activations = tokens * (cfg.num_layers * layer + backward)
  c = min(logprob_chunk, completion_len or seq_len)
  unembed = _local_bytes((cfg.vocab_size, d), ("vocab", "embed"), amesh, jnp.float32, rules)
  logprob = 3 * b * c * v_t * 4 + unembed
  grad_bytes = param_bytes * (2 if micro < batch_size else 1)
  kv_rows = kv_slots if kv_slots else -(-batch_size // shards)
  kv_cache_bytes = 2 * cfg.num_layers * kv_rows * seq_len * k_t * h * s
  return dict(num_params=num_params, param_bytes=param_bytes, grad_bytes=grad_bytes,
              optimizer_bytes=optimizer_states * param_bytes, activation_bytes=activations,
              logprob_bytes=logprob, kv_cache_bytes=kv_cache_bytes)


def _fits(mem: dict[str, int], device_memory: int) -> bool:
  train = (mem["param_bytes"] + mem["grad_bytes"] + mem["optimizer_bytes"]
           + mem["activation_bytes"] + mem["logprob_bytes"])
  sample = mem["param_bytes"] + mem["optimizer_bytes"] + mem["kv_cache_bytes"]
  return max(train, sample) <= HEADROOM * device_memory


def _suggest(cfg: DecoderConfig, axis_sizes: dict[str, int], device_memory: int, *,
             batch_size: int, seq_len: int, remat: bool, **kw) -> tuple[str, ...]:
  """Settings that fit, cheapest first: the largest micro-batch without remat, then with
  remat, then (when nothing on this mesh fits) the smallest all-fsdp mesh that does."""
  shards = axis_sizes["data"] * axis_sizes["fsdp"]
  micros = [m for m in range(batch_size, 0, -1) if batch_size % m == 0 and m % shards == 0]
  for use_remat in ((False, True) if not remat else (True,)):
    for m in micros:
      mem = _memory(cfg, axis_sizes, batch_size=batch_size, seq_len=seq_len, micro=m,
                    remat=use_remat, **kw)
      if _fits(mem, device_memory):
        return (f"micro_batch_size={m}" + (" with remat" if use_remat else ""),)
  total = math.prod(axis_sizes.values())
  for devices in (2 ** i for i in range(1, 13)):
    if devices <= total:
      continue
    sizes = {"data": 1, "fsdp": devices, "tensor": 1}
    for m in (m for m in range(batch_size, 0, -1) if batch_size % m == 0 and m % devices == 0):
      mem = _memory(cfg, sizes, batch_size=batch_size, seq_len=seq_len, micro=m, remat=True,
                    **kw)
      if _fits(mem, device_memory):
        return (f"mesh fsdp:{devices} with remat and micro_batch_size={m}",)
  return ()


def _layers(cfg: DecoderConfig, layers: Sequence[int]) -> DecoderConfig:
  """`cfg` with only the given layers (their RoPE / NoPE and window settings kept)."""
  pick = lambda per_layer: (None if per_layer is None   # noqa: E731
                            else tuple(per_layer[i] for i in layers))
  return dataclasses.replace(cfg, num_layers=len(layers), no_rope_layers=pick(cfg.no_rope_layers),
                             sliding_layers=pick(cfg.sliding_layers))


def _stack_flops(cfg: DecoderConfig, batch_size: int, seq_len: int, *, dtype,
                 param_dtype) -> float:
  """FLOPs of the step of the whole stack from models of one and two layers: the one-layer
  model's count plus, for each further layer, what a second layer of its kind (RoPE or NoPE,
  window) adds to it. Layers of one kind do the same work, so this is the count of the full
  stack, and it traces two layers instead of `num_layers` (a 36-layer trace took 45 s)."""
  def count(layers):
    sub = _layers(cfg, layers)
    abstract = nnx.eval_shape(lambda: Decoder(sub, rngs=nnx.Rngs(0), dtype=dtype,
                                              param_dtype=param_dtype))
    return _step_flops(abstract, batch_size, seq_len)

  kinds = [(cfg.uses_rope(i), cfg.window(i)) for i in range(cfg.num_layers)]
  one = count([0])
  first = {}
  for i, kind in enumerate(kinds[1:], start=1):
    first.setdefault(kind, i)
  extra = {kind: count([0, i]) - one for kind, i in first.items()}
  return one + sum(extra[kind] for kind in kinds[1:])


def _step_flops(abstract: Decoder, batch_size: int, seq_len: int) -> float:
  """FLOPs of forward + backward of −mean log π(tokens), from XLA's compiled cost analysis."""
  graphdef, state = nnx.split(abstract)

  def loss(state, ids, positions, mask):
    model = nnx.merge(graphdef, state)
    targets = jnp.roll(ids, -1, axis=1)
    # one chunk: XLA's cost analysis counts a loop body once, whatever its trip count
    logp, _ = token_logprobs(model, ids, positions, mask, targets, chunk_size=seq_len)
    return -jnp.mean(logp)

  tokens = jax.ShapeDtypeStruct((batch_size, seq_len), jnp.int32)
  mask = jax.ShapeDtypeStruct((batch_size, seq_len), jnp.bool_)
  compiled = jax.jit(jax.grad(loss)).lower(state, tokens, tokens, mask).compile()
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0]
  return float(cost["flops"])
