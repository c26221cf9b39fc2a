"""vLLM's side of botjax's weight sync on hosts without CUDA: a weight-transfer backend.

vLLM 0.32's RL weight-transfer API (`init_weight_transfer_engine`, `start_weight_update`,
`update_weights`, `finish_weight_update`, offline on `vllm.LLM` and over HTTP in
`vllm/entrypoints/rl/`) moves weights through a pluggable backend. Its built-in backends (CUDA
IPC, NCCL and their variants) need CUDA. This module registers a host-memory backend,
"botjax_host", in vLLM's worker registry (`WeightTransferEngineFactory`), with two transports:

  shm     the trainer packs the tensors into one POSIX shared-memory segment and sends its name;
          the worker maps it and loads from it (same host: colocated, or a server on this host)
  inline  the tensors travel base64-encoded inside the `update_weights` request (any host)

Either way the worker calls the model's own `load_weights` with Hugging Face names and shapes,
inside vLLM's layerwise reload (`start_weight_update` / `finish_weight_update`), as the IPC
backend does. Nothing is written to disk. The trainer's side (packing, and driving the four
calls offline or over HTTP) is `botjax.sampling.vllm`, which needs no vLLM in the trainer's
environment for a server; `HostUpdateInfo` is the contract between the two.

vLLM imports this module in its worker processes through `worker_extension_cls`
(`WORKER_EXTENSION`), which registers the backend before the worker builds its transfer engine:

  vllm serve CKPT --worker-extension-cls botjax.sampling.vllm_worker.WorkerExtension \\
      --weight-transfer-config '{"backend": "botjax_host"}' ...

It imports torch, numpy and vllm only (no jax).
"""

from __future__ import annotations

import base64
import dataclasses
import mmap
import os
from typing import Any

import numpy as np
import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

BACKEND = "botjax_host"
WORKER_EXTENSION = "botjax.sampling.vllm_worker.WorkerExtension"
TRANSPORTS = ("shm", "inline")

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                 "float16": torch.float16}


@dataclasses.dataclass
class HostInitInfo(WeightTransferInitInfo):
  """Worker-side init info: nothing to rendezvous (the transport travels with each update)."""


@dataclasses.dataclass
class HostUpdateInfo(WeightTransferUpdateInfo):
  """One update: where the packed bytes are, and each tensor's name, dtype, shape and offset.

  Attributes:
    names: Hugging Face tensor names.
    dtype_names: "float32", "bfloat16" or "float16", one per tensor.
    shapes: the Hugging Face shapes.
    offsets: byte offset of each tensor in the packed buffer.
    shm_name: the shared-memory segment holding the buffer (transport "shm"), or None.
    payload: the buffer, base64-encoded (transport "inline"), or None.
  """
  names: list[str]
  dtype_names: list[str]
  shapes: list[list[int]]
  offsets: list[int]
  shm_name: str | None = None
  payload: str | None = None

  def __post_init__(self):
    n = len(self.names)
    for field in ("dtype_names", "shapes", "offsets"):
      if len(getattr(self, field)) != n:
        raise ValueError(f"{field} has {len(getattr(self, field))} entries for {n} names")
    if (self.shm_name is None) == (self.payload is None):
      raise ValueError("exactly one of shm_name (transport 'shm') and payload (transport "
                       "'inline') must be given")
    bad = sorted(set(self.dtype_names) - set(_TORCH_DTYPES))
    if bad:
      raise ValueError(f"unsupported dtypes {bad}; valid: {sorted(_TORCH_DTYPES)}")


class HostWeightTransferEngine(WeightTransferEngine[HostInitInfo, HostUpdateInfo]):
  """Worker side: loads the tensors of a `HostUpdateInfo` into the model (vLLM's layerwise
  reload, as its IPC backend). A shared-memory segment stays mapped until the update finishes,
  because the layerwise loader may hold views of it until then."""

  init_info_cls = HostInitInfo
  update_info_cls = HostUpdateInfo

  def __init__(self, config, vllm_config, device, model):
    super().__init__(config, vllm_config, device, model)
    self._segments: list[mmap.mmap] = []
    self._held: list[Any] = []

  def init_transfer_engine(self, init_info: HostInitInfo) -> None:
    del init_info

  def start_weight_update(self) -> None:
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload
    initialize_layerwise_reload(self.model)

  def finish_weight_update(self) -> None:
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload
    try:
      finalize_layerwise_reload(self.model, self.model_config)
      _refresh_tied(self.model)
    finally:
      self._release()

  def update_weights(self, update_info: dict[str, Any]) -> None:
    # The base class synchronizes the accelerator, which a CPU worker has not.
    self.receive_weights(self.parse_update_info(update_info))
    if torch.accelerator.is_available():
      torch.accelerator.synchronize()

  def receive_weights(self, update_info: HostUpdateInfo) -> None:
    if update_info.shm_name is not None:
      buffer = _attach(update_info.shm_name)
      self._segments.append(buffer)
    else:
      buffer = bytearray(base64.b64decode(update_info.payload))
      self._held.append(buffer)
    weights = []
    for name, dtype_name, shape, offset in zip(update_info.names, update_info.dtype_names,
                                               update_info.shapes, update_info.offsets):
      count = int(np.prod(shape)) if shape else 1
      t = torch.frombuffer(buffer, dtype=_TORCH_DTYPES[dtype_name], count=count, offset=offset)
      weights.append((name, t.view(*shape)))
    from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check
    with disable_mtp_completeness_check():
      self.model.load_weights(weights)
    del weights

  def _release(self) -> None:
    self._held.clear()
    for segment in self._segments:
      try:
        segment.close()
      except BufferError:   # a tensor still views it: the mapping goes with the last view
        pass
    self._segments.clear()

  def shutdown(self) -> None:
    self._release()


def _refresh_tied(model: torch.nn.Module) -> None:
  """Re-runs the weight processing of layers that share a weight with another layer.

  With tied embeddings `lm_head.weight` is `embed_tokens.weight`, and on CPU vLLM keeps a
  packed GEMM copy of it in each layer (`UnquantizedEmbeddingMethod.process_weights_after_
  loading`). The layerwise reload re-processes the layer it loaded (the embedding) but not the
  other: `lm_head` computed the logits with its old packed copy (measured on a tied tiny
  Qwen2 in float32: probe |Δ log p| up to 1.1, against 1.4e-6 untied).
  """
  holders: dict[int, list[torch.nn.Module]] = {}
  for module in model.modules():
    weight = getattr(module, "weight", None)
    method = getattr(module, "quant_method", None)
    if isinstance(weight, torch.Tensor) and hasattr(method, "process_weights_after_loading"):
      holders.setdefault(id(weight), []).append(module)
  for modules in holders.values():
    if len(modules) > 1:
      for module in modules:
        module.quant_method.process_weights_after_loading(module)


def _attach(name: str) -> mmap.mmap:
  """Maps the trainer's shared-memory segment `name` (as `SharedMemory.name` gives it).

  `multiprocessing.shared_memory.SharedMemory(name)` would register the segment with this
  process's resource tracker, which vLLM's spawned workers share with their parent: the
  registration would then be the trainer's to lose. shm_open + mmap leave the tracker alone.
  """
  import _posixshmem
  fd = _posixshmem.shm_open("/" + name.lstrip("/"), os.O_RDWR, mode=0o600)
  try:
    return mmap.mmap(fd, os.fstat(fd).st_size)
  finally:
    os.close(fd)


def register() -> None:
  """Registers the "botjax_host" backend in vLLM's worker registry (idempotent)."""
  # The registry's own keys: a second registration of a name raises there.
  if BACKEND not in WeightTransferEngineFactory._registry:  # noqa: SLF001
    WeightTransferEngineFactory.register_engine(BACKEND, HostWeightTransferEngine)


class WorkerExtension:
  """Named as vLLM's `worker_extension_cls` so that importing this module in the worker
  registers the "botjax_host" backend; it adds no methods to the worker."""


register()
