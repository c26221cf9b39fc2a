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


def spec_devices(spec: str) -> int:
  """Devices a mesh spec asks for: the product of its sizes, or every device (`jax.devices()`)
  when one axis is -1 ("the rest")."""
  sizes = [int(s.split(":")[1]) for s in spec.split(",") if ":" in s]
  return len(jax.devices()) if -1 in sizes else math.prod(sizes)


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
