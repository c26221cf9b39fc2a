"""Hugging Face checkpoints in and out: safetensors (single or sharded), config.json, tokenizer.

Loading builds the model abstractly (no memory), then reads one tensor at a time, transforms it
on the host and places it straight onto its mesh sharding; the host holds at most one tensor
(plus its transposed copy) at a time, never a second copy of the model.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open

from botjax.models import families
from botjax.models.config import DecoderConfig
from botjax.models.decoder import Decoder
from botjax.models.sharding import RULES, logical_to_spec

_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"


_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]
_TRUE = ("1", "on", "yes", "true")


def hub_offline() -> bool:
  """True when HF_HUB_OFFLINE is set, read now (huggingface_hub reads it once, at import)."""
  from huggingface_hub import constants
  return (os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE
          or bool(constants.HF_HUB_OFFLINE))


def looks_like_path(path_or_repo: str) -> bool:
  """True for strings that can only be a directory, never a Hub repo id (`owner/name`): they
  start with `/`, `.` or `~`, contain a backslash (Windows), or hold more than one `/`."""
  s = os.fspath(path_or_repo)
  return (s.startswith(("/", ".", "~")) or s.endswith("/") or s.count("/") > 1
          or any(sep and sep != "/" and sep in s for sep in (os.sep, os.altsep)))


def _missing_files(ckpt: str) -> list[str]:
  """Files a loadable checkpoint directory lacks: config.json and the safetensors it needs."""
  missing = [] if os.path.exists(os.path.join(ckpt, "config.json")) else ["config.json"]
  index = os.path.join(ckpt, _INDEX)
  if os.path.exists(index):
    with open(index) as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    missing += [s for s in shards if not os.path.exists(os.path.join(ckpt, s))]
  elif not os.path.exists(os.path.join(ckpt, _SINGLE)):
    missing.append(f"{_SINGLE} or {_INDEX}")
  return missing


def resolve_checkpoint(path_or_repo: str, *, local_files_only: bool | None = None,
                       cache_dir: str | None = None) -> str:
  """A local directory holding `config.json`: `path_or_repo` itself, or its HF-cache snapshot.

  A Hub repo id that is not (completely) in the HF cache is downloaded into it, with a progress
  bar, unless offline: `local_files_only=True`, or HF_HUB_OFFLINE=1 when `local_files_only` is
  None. Only the files a model needs are fetched (config and tokenizer files, safetensors).

  Args:
    path_or_repo: a directory, or a Hub repo id such as `Qwen/Qwen2.5-3B`.
    local_files_only: only look in the HF cache (default: True when HF_HUB_OFFLINE is set).
    cache_dir: the HF cache to use (default: the hub's, `HF_HUB_CACHE`).

  Returns:
    The directory path.

  Raises:
    FileNotFoundError: "no such directory: <path>" for a missing path; for a repo id offline and
      not cached, or a failed download, what to do about it.
  """
  path_or_repo = os.fspath(path_or_repo)
  path = os.path.expanduser(path_or_repo)
  if os.path.isdir(path):
    if not os.path.exists(os.path.join(path, "config.json")):
      raise FileNotFoundError(f"{path_or_repo} has no config.json: a checkpoint directory holds "
                              "config.json, *.safetensors and the tokenizer files")
    return path
  if looks_like_path(path_or_repo):
    raise FileNotFoundError(f"no such directory: {path_or_repo}" + (
        f" ({path})" if path != path_or_repo else "") + "; pass a checkpoint directory "
        "(config.json, *.safetensors, tokenizer files) or a Hub repo id such as Qwen/Qwen2.5-3B")
  import huggingface_hub  # only for repo ids; a local directory needs no hub code
  from huggingface_hub import constants

  repo = path_or_repo
  offline = hub_offline() if local_files_only is None else bool(local_files_only)
  cache = cache_dir or constants.HF_HUB_CACHE
  try:
    cached = huggingface_hub.snapshot_download(repo, local_files_only=True, cache_dir=cache,
                                               allow_patterns=_ALLOW_PATTERNS)
  except Exception:  # the hub raises several types for "not there", among them HFValidationError
    cached = None
  missing = _missing_files(cached) if cached else ["everything"]
  if not missing:
    return cached
  where = (f"the HF cache at {cache} has no snapshot of it" if cached is None else
           f"its snapshot in the HF cache at {cached} lacks {', '.join(missing)}")
  if offline:
    raise FileNotFoundError(
        f"checkpoint {repo!r} is not a local directory, and {where}. Offline "
        f"(HF_HUB_OFFLINE=1, --offline or local_files_only=True), so it is not downloaded. "
        f"To fix: run once with network and without HF_HUB_OFFLINE / --offline (it downloads "
        f"into the cache), or run `hf download {repo}` where there is network and copy the HF "
        f"cache here (HF_HUB_CACHE), or pass a local checkpoint directory.")
  print(f"checkpoint {repo!r}: {where}; downloading it from the Hugging Face Hub "
        f"({constants.ENDPOINT}) into {cache}", file=sys.stderr, flush=True)
  try:
    ckpt = huggingface_hub.snapshot_download(repo, cache_dir=cache,
                                             allow_patterns=_ALLOW_PATTERNS)
  except Exception as e:  # network, auth, unknown repo
    raise FileNotFoundError(
        f"could not download checkpoint {repo!r} into {cache}: {type(e).__name__}: {e}. Check "
        f"the repo id and the network (a gated repo needs `hf auth login` or HF_TOKEN), or set "
        f"HF_HUB_OFFLINE=1 and pass a local checkpoint directory.") from e
  missing = _missing_files(ckpt)
  if missing:
    raise FileNotFoundError(f"checkpoint {repo!r} downloaded to {ckpt} lacks {missing}: is it "
                            "a safetensors checkpoint of a causal language model?")
  return ckpt


def _weight_files(ckpt: str) -> list[str]:
  index = os.path.join(ckpt, _INDEX)
  if os.path.exists(index):
    with open(index) as f:
      weight_map = json.load(f)["weight_map"]
    return sorted({os.path.join(ckpt, v) for v in weight_map.values()})
  single = os.path.join(ckpt, _SINGLE)
  if os.path.exists(single):
    return [single]
  raise FileNotFoundError(f"{ckpt} has neither {_INDEX} nor {_SINGLE}")


def read_config(ckpt: str) -> DecoderConfig:
  with open(os.path.join(ckpt, "config.json")) as f:
    return DecoderConfig.from_hf_config(json.load(f))


def _rule_lookup(cfg: DecoderConfig) -> dict[str, tuple[families.WeightRule, tuple[str, ...]]]:
  return {name: (rule, paths) for rule, name, paths in families.all_names(cfg)}


def load_pretrained(path_or_repo: str, *, dtype=jnp.float32, param_dtype=jnp.float32,
                    mesh: jax.sharding.Mesh | None = None, rules=RULES,
                    local_files_only: bool | None = None,
                    cache_dir: str | None = None, remat: bool = False,
                    scan_layers: bool = False) -> Decoder:
  """Loads a Hugging Face checkpoint (Qwen2/2.5, Llama 3.x, SmolLM3, Phi-3/4-mini) as a Decoder.

  The config comes from the checkpoint's `config.json`. Every tensor of the safetensors files
  (single or sharded through `model.safetensors.index.json`, float32 or bfloat16) must map to a
  parameter with the right shape, and every parameter must be filled; otherwise a ValueError
  names the offending tensor.

  Args:
    path_or_repo: a local directory, or a Hub repo id: read from the HF cache, downloaded into
      it first when missing and online (see `resolve_checkpoint`).
    dtype: computation dtype of the model.
    param_dtype: storage dtype of the parameters.
    mesh: place each parameter on its sharding on this mesh (default: the first device).
    rules: logical-axis rules (see `botjax.models.sharding.RULES`).
    local_files_only: for repo ids: never go to the network (default: True when
      HF_HUB_OFFLINE is set).
    cache_dir: for repo ids: the HF cache directory (default: the hub's).
    remat: `Decoder(remat=)`: recompute each block in the backward pass (less memory).
    scan_layers: `Decoder(scan_layers=)`: the layers' parameters stacked on a leading
      [num_layers] axis and run with `jax.lax.scan` (one layer compiled, not all of them).
      Each stacked parameter is allocated once on its sharding and filled in place, one
      layer's tensor at a time.

  Returns:
    The `Decoder`, its config at `model.config`.
  """
  ckpt = resolve_checkpoint(path_or_repo, local_files_only=local_files_only, cache_dir=cache_dir)
  cfg = read_config(ckpt)
  abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0), dtype=dtype,
                                            param_dtype=param_dtype, remat=remat,
                                            scan_layers=scan_layers))
  graphdef, state = nnx.split(abstract)
  variables = {".".join(str(p) for p in path): var for path, var in nnx.to_flat_state(state)}
  if scan_layers:   # per-layer paths ("layers.3.attn.q_kernel") name slices of stacked ones
    stacked = {p: var for p, var in variables.items() if p.startswith("layers.")}
    variables = {p: var for p, var in variables.items() if p not in stacked}
    variables.update({_layer_path(p, i): _LayerSlice(var, i) for p, var in stacked.items()
                      for i in range(cfg.num_layers)})
  lookup = _rule_lookup(cfg)
  filled: dict[str, jax.Array] = {}
  stacks: dict[str, jax.Array] = {}
  for file in _weight_files(ckpt):
    with safe_open(file, "np") as f:
      for name in f.keys():
        if any(p.match(name) for p in families.IGNORED):
          continue
        if name not in lookup:
          if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # some tied checkpoints still write the (shared) head
          raise ValueError(f"checkpoint tensor {name!r} in {file} has no place in a "
                           f"{cfg.model_type} model with this config")
        rule, paths = lookup[name]
        tensor = f.get_tensor(name)
        wants = [variables[p].get_value() for p in paths]
        shape_error = ValueError(
            f"checkpoint tensor {name!r} has shape {tensor.shape}, which does not fit "
            f"{', '.join(f'{p} {tuple(w.shape)}' for p, w in zip(paths, wants))}")
        try:
          arrays = rule.split(tensor, cfg)
        except (ValueError, IndexError) as e:
          raise shape_error from e
        for path, array, want in zip(paths, arrays, wants):
          var = variables[path]
          if tuple(array.shape) != tuple(want.shape):
            raise shape_error
          if path in filled:
            raise ValueError(f"checkpoint tensor {name!r} fills {path} a second time")
          if isinstance(var, _LayerSlice):
            filled[path] = True
            stacks[var.key] = _fill_layer(stacks.get(var.key), np.asarray(array), want.dtype,
                                           var, mesh, rules)
          else:
            filled[path] = _place(np.asarray(array), want.dtype, var, mesh, rules)
  missing = sorted(set(variables) - set(filled))
  if missing:
    hf_of = {p: name for name, (_, paths) in lookup.items() for p in paths}
    raise ValueError(f"checkpoint {ckpt} lacks {len(missing)} tensors, e.g. "
                     f"{hf_of.get(missing[0], missing[0])!r} (for {missing[0]})")
  for path, var in variables.items():
    if isinstance(var, _LayerSlice):
      var.var.set_value(stacks[var.key])
    else:
      var.set_value(filled[path])
  return nnx.merge(graphdef, state)


def _layer_path(stacked_path: str, layer: int) -> str:
  """The per-layer path of one layer of a stacked parameter: layers.attn.q -> layers.3.attn.q."""
  return f"layers.{layer}.{stacked_path[len('layers.'):]}"


class _LayerSlice:
  """Layer `layer` of a stacked (`scan_layers`) parameter, as `load_pretrained` fills it.

  Quacks like the per-layer variable for the shape check: `get_value()` is the slice's
  abstract shape and dtype, `get_metadata()` the stacked axes without the leading one.
  """

  def __init__(self, var: nnx.Variable, layer: int):
    self.var, self.layer = var, layer
    self.key = id(var)             # one stacked parameter, whichever layer fills it
    whole = var.get_value()
    self._slice = jax.ShapeDtypeStruct(whole.shape[1:], whole.dtype)

  def get_value(self):
    return self._slice

  def get_metadata(self) -> dict:
    axes = self.var.get_metadata().get("logical_axes")
    return {"logical_axes": None if axes is None else tuple(axes)[1:]}


def _fill_layer(stack: jax.Array | None, array: np.ndarray, dtype, part: _LayerSlice, mesh,
                rules) -> jax.Array:
  """Writes one layer's host array into its stacked parameter, in place on the devices.

  The stacked array is allocated (zeros, on its sharding) by the first layer that arrives; each
  layer is then placed on the sharding of one slice and written into it by a jitted update that
  donates the stack, so the devices hold the stack once plus one layer, and the host one layer.
  """
  whole = part.var.get_value()
  if stack is None:
    if mesh is None:
      sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    else:
      axes = part.var.get_metadata().get("logical_axes")
      spec = (jax.sharding.PartitionSpec() if axes is None
              else logical_to_spec(axes, rules=rules, mesh=mesh, shape=whole.shape))
      sharding = jax.sharding.NamedSharding(mesh, spec)
    stack = jax.jit(lambda: jnp.zeros(whole.shape, dtype), out_shardings=sharding)()
  layer = _place(array, dtype, part, mesh, rules)
  return _set_layer(stack, layer, jnp.asarray(part.layer, jnp.int32))


@functools.partial(jax.jit, donate_argnums=0)
def _set_layer(stack: jax.Array, layer: jax.Array, index: jax.Array) -> jax.Array:
  """stack with stack[index] = layer (in place: the stack is donated)."""
  return jax.lax.dynamic_update_index_in_dim(stack, layer.astype(stack.dtype), index, 0)


def _place(array: np.ndarray, dtype, var: nnx.Variable, mesh, rules) -> jax.Array:
  """Puts one host array onto its sharding, each device receiving only its own slice."""
  array = array.astype(dtype)
  if mesh is None:
    return jax.device_put(array, jax.devices()[0])
  axes = var.get_metadata().get("logical_axes")
  spec = (jax.sharding.PartitionSpec() if axes is None
          else logical_to_spec(axes, rules=rules, mesh=mesh, shape=array.shape))
  sharding = jax.sharding.NamedSharding(mesh, spec)
  return jax.make_array_from_callback(array.shape, sharding, lambda idx: array[idx])


def save_pretrained(model: Decoder, path: str, *, dtype: Any = None,
                    max_shard_bytes: int = 2 << 30) -> None:
  """Writes `config.json` and safetensors in the Hugging Face layout that `transformers` loads.

  Tensors are gathered one at a time to host memory (across processes on multi-host meshes);
  only process 0 writes files.

  Args:
    model: the `Decoder`.
    path: output directory (created).
    dtype: dtype of the saved tensors (default: the parameters' own).
    max_shard_bytes: above this a checkpoint is split into several files with an index.
  """
  from jax.experimental import multihost_utils
  from safetensors.flax import save_file

  cfg: DecoderConfig = model.config
  writer = jax.process_index() == 0
  state = nnx.state(model)
  values = {".".join(str(p) for p in k): v.get_value() for k, v in nnx.to_flat_state(state)}
  if getattr(model, "scan_layers", False):   # stacked [num_layers, ...]: one entry per layer
    stacked = {p: values.pop(p) for p in [p for p in values if p.startswith("layers.")]}
    values.update({_layer_path(p, i): _StackedLayer(stack, i) for p, stack in stacked.items()
                   for i in range(cfg.num_layers)})
  host = jax.devices("cpu")[0]  # shards accumulate in host memory, not on an accelerator

  def fetch(array) -> np.ndarray:
    if isinstance(array, _StackedLayer):
      array = array.get()
    if not array.is_fully_addressable:
      array = multihost_utils.process_allgather(array, tiled=True)
    return np.asarray(jax.device_get(array)).astype(np.float32)

  shards: list[dict[str, jax.Array]] = [{}]
  size = 0
  out_dtype = jnp.dtype(dtype) if dtype is not None else None
  for rule, name, paths in families.all_names(cfg):
    tensor = np.ascontiguousarray(rule.join(tuple(fetch(values[p]) for p in paths), cfg))
    tensor_dtype = out_dtype or jnp.dtype(values[paths[0]].dtype)
    nbytes = tensor.size * tensor_dtype.itemsize
    if shards[-1] and size + nbytes > max_shard_bytes:
      shards.append({})
      size = 0
    if writer:
      shards[-1][name] = jax.device_put(jnp.asarray(tensor, dtype=tensor_dtype), host)
    size += nbytes
  if not writer:
    return
  os.makedirs(path, exist_ok=True)
  saved = out_dtype or jnp.dtype(values["embed"].dtype)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(cfg.to_hf_config(dtype=saved.name), f, indent=2)
  if len(shards) == 1:
    save_file(shards[0], os.path.join(path, _SINGLE), metadata={"format": "pt"})
    return
  weight_map, total = {}, 0
  for n, shard in enumerate(shards, start=1):
    fname = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
    save_file(shard, os.path.join(path, fname), metadata={"format": "pt"})
    for name, arr in shard.items():
      weight_map[name] = fname
      total += arr.size * arr.dtype.itemsize
  with open(os.path.join(path, _INDEX), "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


class _StackedLayer:
  """Layer `layer` of a stacked parameter, sliced on its devices only when `save_pretrained`
  fetches it (so the host never holds more than one layer's tensor)."""

  def __init__(self, stack: jax.Array, layer: int):
    self.stack, self.layer = stack, layer
    self.dtype = stack.dtype

  def get(self) -> jax.Array:
    return self.stack[self.layer]


def load_tokenizer(path_or_repo: str, *, local_files_only: bool | None = None,
                   cache_dir: str | None = None):
  """`transformers.AutoTokenizer` from the checkpoint directory (local files, chat template).

  `path_or_repo`, `local_files_only` and `cache_dir` as in `resolve_checkpoint`.
  """
  from transformers import AutoTokenizer

  ckpt = resolve_checkpoint(path_or_repo, local_files_only=local_files_only, cache_dir=cache_dir)
  return AutoTokenizer.from_pretrained(ckpt, local_files_only=True)
