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

import jax
import jax.numpy as jnp
from flax import nnx

from botjax.models.config import DecoderConfig
from botjax.models.decoder import Decoder
from botjax.models.logprobs import token_logprobs
from botjax.models.presets import get_config
from botjax.models.sharding import MESH_AXES, RULES, logical_to_spec, parse_mesh_spec

_GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class DryRunPlan:
  """Per-device memory (bytes) and step FLOPs of a model on a mesh. `str()` gives a table."""

  model: str
  mesh: dict[str, int]
  batch_size: int
  seq_len: int
  num_params: int
  param_bytes: int           # per device
  grad_bytes: int            # per device (same dtype and sharding as the parameters)
  optimizer_bytes: int       # per device (`optimizer_states` copies of the parameters)
  activation_bytes: int      # per device, estimate of what the backward pass keeps
  kv_cache_bytes: int        # per device, for sampling `batch_size` rows of `seq_len` slots
  step_flops: float | None   # whole step (all devices), from the compiled cost analysis

  @property
  def num_devices(self) -> int:
    return math.prod(self.mesh.values())

  @property
  def train_bytes(self) -> int:
    """Per-device bytes of a training step: params + grads + optimizer + activations."""
    return self.param_bytes + self.grad_bytes + self.optimizer_bytes + self.activation_bytes

  def __str__(self) -> str:
    mesh = ",".join(f"{k}:{v}" for k, v in self.mesh.items())
    rows = [
        ("parameters", f"{self.num_params / 1e6:,.1f} M"),
        ("params / device", _gib(self.param_bytes)),
        ("grads / device", _gib(self.grad_bytes)),
        ("optimizer / device", _gib(self.optimizer_bytes)),
        ("activations / device", _gib(self.activation_bytes)),
        ("train total / device", _gib(self.train_bytes)),
        ("KV cache / device", _gib(self.kv_cache_bytes)),
        ("FLOPs / train step", "n/a" if self.step_flops is None
         else f"{self.step_flops:.3e} ({self.step_flops / self.num_devices:.3e} / device)"),
    ]
    width = max(len(r[0]) for r in rows)
    head = (f"Dry-run plan: {self.model} on mesh {mesh} ({self.num_devices} devices), "
            f"batch {self.batch_size} x {self.seq_len} tokens")
    return "\n".join([head] + [f"  {k:<{width}}  {v:>14}" for k, v in rows])


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
         rules=RULES, compute_flops: bool = True) -> DryRunPlan:
  """Memory and FLOPs of one training step of `model` on a (possibly absent) mesh.

  Activations are estimated for a step without rematerialisation: per layer and token,
  4·D residual/norm values, (2N+2K)·H/t attention values, 3·F/t MLP values in `dtype`, and
  N/t·L float32 attention probabilities (t = tensor-parallel size), plus one chunk of logits.
  With `remat=True` (`Decoder(..., remat=True)`) only each block's input is kept, plus one
  block's activations while it is recomputed.

  Args:
    model: a preset name or a `DecoderConfig`.
    mesh: mesh spec such as `data:2,fsdp:4` (see `sharding.make_mesh`); -1 fills
      `num_devices`.
    batch_size: B, global sequences per step.
    seq_len: L, tokens per sequence (also the KV-cache length).
    num_devices: devices of the planned slice (default: the spec's product, or all local
      devices when the spec has -1).
    param_dtype: storage dtype of parameters, gradients and optimizer state.
    dtype: computation dtype (activations, KV cache).
    optimizer_states: copies of the parameters the optimizer keeps (AdamW: 2).
    logprob_chunk: positions per log-prob chunk.
    remat: the model recomputes blocks in the backward pass.
    rules: logical-axis rules.
    compute_flops: compile the step abstractly for its FLOPs (seconds for a 3B model).

  Returns:
    A `DryRunPlan`.
  """
  name = model if isinstance(model, str) else model.model_type
  cfg = get_config(model) if isinstance(model, str) else model
  if batch_size <= 0 or seq_len <= 0:
    raise ValueError(f"batch_size and seq_len must be positive, got {batch_size}, {seq_len}")
  if num_devices is None:
    sizes = [int(s.split(":")[1]) for s in mesh.split(",") if ":" in s]
    num_devices = len(jax.devices()) if -1 in sizes else math.prod(sizes)
  axis_sizes = parse_mesh_spec(mesh, num_devices)
  amesh = jax.sharding.AbstractMesh(tuple(axis_sizes[a] for a in MESH_AXES), MESH_AXES)

  params = _param_shapes(cfg)
  num_params = sum(math.prod(shape) for shape, _ in params)
  param_bytes = sum(_local_bytes(shape, axes, amesh, param_dtype, rules)
                    for shape, axes in params)

  t = axis_sizes["tensor"]
  b = -(-batch_size // (axis_sizes["data"] * axis_sizes["fsdp"]))
  n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  n_t = -(-n // t) if n % t == 0 else n
  k_t = -(-k // t) if k % t == 0 else k
  f_t = cfg.intermediate_size // t if cfg.intermediate_size % t == 0 else cfg.intermediate_size
  itemsize = jnp.dtype(dtype).itemsize
  per_token_layer = (4 * cfg.hidden_size + 2 * (n_t + k_t) * h + 3 * f_t) * itemsize
  per_token_layer += n_t * seq_len * 4
  v_t = cfg.vocab_size // t if cfg.vocab_size % t == 0 else cfg.vocab_size
  kept_layers = 1 if remat else cfg.num_layers
  activation_bytes = (b * seq_len * kept_layers * per_token_layer
                      + (cfg.num_layers if remat else 1) * b * seq_len * cfg.hidden_size * itemsize
                      + 2 * b * min(logprob_chunk, seq_len) * v_t * 4)
  kv_cache_bytes = 2 * cfg.num_layers * b * seq_len * k_t * h * itemsize

  flops = None
  if compute_flops:
    abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0), dtype=dtype,
                                              param_dtype=param_dtype))
    flops = _step_flops(abstract, batch_size, seq_len)
  return DryRunPlan(
      model=name, mesh=axis_sizes, batch_size=batch_size, seq_len=seq_len,
      num_params=num_params, param_bytes=param_bytes, grad_bytes=param_bytes,
      optimizer_bytes=optimizer_states * param_bytes, activation_bytes=activation_bytes,
      kv_cache_bytes=kv_cache_bytes, step_flops=flops)


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
