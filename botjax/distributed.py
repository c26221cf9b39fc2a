"""Multi-process runs (TPU pod slices, multi-node GPU): joining the cluster with clear errors,
who writes, which rows each process holds, process-local data <-> global arrays, and what
happens when a process is lost.

A multi-controller JAX program runs one process per host; each process sees only its own
(local) devices and all of them run the same program on global arrays. `initialize` joins the
cluster (`jax.distributed.initialize`) and must run before anything else touches JAX.

Rows. A batch array `[B, ...]` sharded over its first dimension lives in blocks: each process
holds the rows of its local devices' shards (`local_rows`). Host-side work (decoding, rewards,
judges) is done by each process for the rows it holds, and turned back into one global array
with `to_global`; `to_local` and `gather` go the other way.

Losing a process. The coordination service (in process 0) declares a process dead when it has
sent no heartbeat for `heartbeat_timeout_s` (heartbeats are sent every `heartbeat_timeout_s/2`,
checked about once a second) and then ends every other process (SIGABRT, JAX's message naming
the task). Before that, botjax's watchdog, a thread in every process that beats through the
coordination service's key-value store every `heartbeat_timeout_s/20` s, notices a peer silent
for `heartbeat_timeout_s/4` s and ends this process with exit code `EXIT_LOST_PROCESS` and a
message naming the lost process (its id, host and pid). A peer that ends with a Python error is
named the same way (exit code `EXIT_PEER_FAILED`). If process 0 itself is lost, the coordination
service goes with it and JAX ends the others at once (SIGABRT; its message says that the
"leader task", process 0, died or is unreachable); botjax cannot print first in that case.
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import hashlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

EXIT_LOST_PROCESS = 75      # EX_TEMPFAIL: a peer was lost, or the cluster did not form; restart
EXIT_PEER_FAILED = 1        # a peer process failed with an error

_PREFIX = "botjax"
_DEFAULT_HEARTBEAT_S = 60
_DEFAULT_INIT_TIMEOUT_S = 120
_DEFAULT_SHUTDOWN_TIMEOUT_S = 300


class ClusterError(RuntimeError):
  """A multi-process set-up problem: unreachable coordinator, port in use, processes that
  disagree on the run config, a mesh larger than the cluster."""


@dataclasses.dataclass(frozen=True)
class Settings:
  """How long the cluster waits for what (seconds); see the module docstring.

  Attributes:
    heartbeat_timeout_s: a process silent this long is dead for JAX's coordination service,
      which then ends every other process; botjax's watchdog names it after a quarter of this.
    init_timeout_s: how long to wait for the coordinator to be reachable and for every process
      to join.
    shutdown_timeout_s: how long a finishing process waits at exit for the others to finish too.
    watchdog: run botjax's watchdog thread (see the module docstring).
  """
  heartbeat_timeout_s: int = _DEFAULT_HEARTBEAT_S
  init_timeout_s: int = _DEFAULT_INIT_TIMEOUT_S
  shutdown_timeout_s: int = _DEFAULT_SHUTDOWN_TIMEOUT_S
  watchdog: bool = True

  def __post_init__(self):
    for name in ("heartbeat_timeout_s", "init_timeout_s", "shutdown_timeout_s"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        raise ClusterError(f"{name} must be a whole number of seconds >= 2, got {value!r}")

  @property
  def beat_interval_s(self) -> float:
    """How often the watchdog beats and looks at the others."""
    return self.heartbeat_timeout_s / 20

  @property
  def lost_after_s(self) -> float:
    """Silence after which the watchdog names a peer lost: a quarter of the heartbeat timeout,
    so that it fires (after 0.2-0.3 x the timeout) before JAX's own detection (after 0.5-1 x)."""
    return self.heartbeat_timeout_s / 4


_settings: Settings | None = None
_watchdog: _Watchdog | None = None
# This process's id and the process count, kept from start-up: at exit JAX clears its backends
# before its shutdown waits for the others, and asking JAX then would start a new one.
_me, _count = 0, 1


# -- start-up ---------------------------------------------------------------------------------

def parse_address(address: str) -> tuple[str, int]:
  """`"host:port"` (or `"[v6]:port"`) -> (host, port), with an error naming what is wrong."""
  host, sep, port = address.rpartition(":")
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ClusterError(f"coordinator address {address!r} is not host:port (e.g. 10.0.0.1:1234)")
  return host.strip("[]"), int(port)


def _check_port_free(port: int) -> None:
  """Process 0 serves the coordinator on every interface at `port` (JAX binds [::]:port).
  SO_REUSEADDR as gRPC sets it: only a listening socket makes the port busy, not the closed
  connections of an earlier run still in TIME_WAIT."""
  for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
    try:
      s = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
      continue                                          # no IPv6 on this host
    with s:
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      try:
        s.bind((addr, port))
        return
      except OSError as e:
        if e.errno != errno.EADDRINUSE:
          continue
        raise ClusterError(
            f"process 0 cannot serve the coordinator on port {port}: {e.strerror}. Another "
            "program (or an earlier run still ending) holds the port; choose another "
            "--coordinator port on every host.") from None


def wait_for_coordinator(address: str, timeout_s: float) -> float:
  """Waits until a TCP connection to the coordinator at `address` succeeds.

  Returns the seconds it took. Raises ClusterError naming host:port and the last error when
  `timeout_s` passes first, or at once when the host name does not resolve.
  """
  host, port = parse_address(address)
  t0 = time.monotonic()
  last = "no attempt"
  while True:
    remaining = timeout_s - (time.monotonic() - t0)
    try:
      with socket.create_connection((host, port), timeout=max(0.1, min(2.0, remaining))):
        return time.monotonic() - t0
    except socket.gaierror as e:
      raise ClusterError(f"coordinator {host}:{port}: cannot resolve host {host!r} "
                         f"({e.strerror})") from None
    except OSError as e:
      last = e.strerror or type(e).__name__
    if time.monotonic() - t0 >= timeout_s:
      raise ClusterError(
          f"coordinator {host}:{port} not reachable after {timeout_s:.0f} s (last error: "
          f"{last}). Is process 0 running with the same --coordinator, and is the port open "
          "between the hosts?")
    time.sleep(min(0.5, max(0.0, remaining)))


def _client():
  """JAX's coordination-service client (the key-value store and barriers), as orbax reads it."""
  from jax._src import distributed as jax_distributed
  client = jax_distributed.global_state.client
  if client is None:
    raise ClusterError("jax.distributed is not initialized; call botjax.distributed.initialize "
                       "first")
  return client


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, settings: Settings | None = None,
               local_device_ids: Sequence[int] | None = None) -> None:
  """Joins the multi-process cluster: `jax.distributed.initialize` with checks and bounds.

  On TPU pods and SLURM / Open MPI clusters JAX finds the three values itself (leave them None);
  elsewhere give all three: the coordinator's host:port (process 0 serves it), the number of
  processes and this process's id (0 .. N-1). Call before any other JAX call, on every process,
  with the same program and flags.

  What it checks, each failing within a bounded time with an error that says what to fix:
  the address is host:port; process 0's port is free; the other processes can reach the
  coordinator within `init_timeout_s` (ClusterError naming host:port); every process joins
  within `init_timeout_s` (if not, this process prints which cluster did not form and exits
  with `EXIT_LOST_PROCESS`). Then it starts the watchdog and prints one line:
  `[botjax] jax.distributed: process i of N, L local / G global devices`.

  Raises:
    ClusterError: a bad address, the port in use, the coordinator not reachable.
  """
  global _settings, _watchdog, _me, _count
  settings = settings or Settings()
  given = (coordinator_address, num_processes, process_id)
  if any(v is not None for v in given) and any(v is None for v in given):
    raise ClusterError("give all of coordinator address, number of processes and process id, "
                       "or none of them (on TPU pods, SLURM and Open MPI JAX finds them)")
  if num_processes is not None:
    if num_processes < 1 or not 0 <= process_id < num_processes:
      raise ClusterError(f"process id {process_id} is not in 0..{num_processes - 1} "
                         f"(number of processes {num_processes})")
    parse_address(coordinator_address)
    if process_id == 0:
      _check_port_free(parse_address(coordinator_address)[1])
    else:
      wait_for_coordinator(coordinator_address, settings.init_timeout_s)
  where = coordinator_address or "the detected coordinator"
  # JAX's own deadline for the join ends the process with SIGABRT and a message that blames a
  # dead task; this timer ends it a little earlier with one that says what did not happen.
  joined = threading.Event()

  def join_deadline():
    if not joined.wait(settings.init_timeout_s):
      me = "" if process_id is None else f" (id {process_id})"
      every = "every process" if num_processes is None else f"all {num_processes} processes"
      _die(EXIT_LOST_PROCESS,
           f"the cluster at {where} did not form within {settings.init_timeout_s} s: this "
           f"process{me} reached the coordinator, but not {every} joined. Start the same "
           "command on every host, with the same --num_processes and a distinct --process_id "
           "each.")

  threading.Thread(target=join_deadline, name="botjax-join-deadline", daemon=True).start()
  kwargs = {k: v for k, v in (("coordinator_address", coordinator_address),
                              ("num_processes", num_processes), ("process_id", process_id),
                              ("local_device_ids", local_device_ids)) if v is not None}
  try:
    jax.distributed.initialize(**kwargs, initialization_timeout=settings.init_timeout_s,
                               heartbeat_timeout_seconds=settings.heartbeat_timeout_s,
                               shutdown_timeout_seconds=settings.shutdown_timeout_s)
  except jax.errors.JaxRuntimeError as e:
    raise ClusterError(f"joining the cluster at {where} failed: {e}") from None
  finally:
    joined.set()
  _settings = settings
  me = _me = jax.process_index()
  _count = jax.process_count()
  info = {"host": socket.gethostname(), "pid": os.getpid(),
          "local_devices": jax.local_device_count()}
  if jax.process_count() > 1:
    _client().key_value_set(f"{_PREFIX}/process/{me}", json.dumps(info))
    if settings.watchdog:
      _watchdog = _Watchdog(settings)
      _watchdog.start()
    atexit.register(_mark_exit)
  print(f"[botjax] jax.distributed: process {me} of {jax.process_count()}, "
        f"{jax.local_device_count()} local / {jax.device_count()} global devices", flush=True)


def _die(code: int, message: str) -> None:
  """Prints `[botjax] process i of N: message` to stderr and ends the process at once (a thread
  cannot unwind a main thread blocked in a collective)."""
  who = f"process {_me} of {_count}: " if _settings is not None else ""
  sys.stderr.write(f"[botjax] {who}{message}\n")
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except Exception:   # noqa: BLE001 - a closed stream must not keep the process alive
      pass
  os._exit(code)


def process_info(process_id: int) -> dict:
  """{"host", "pid", "local_devices"} that process `process_id` published at start-up ({} if
  it has not)."""
  try:
    return json.loads(_client().key_value_try_get(f"{_PREFIX}/process/{process_id}"))
  except Exception:   # noqa: BLE001 - absent key, or the service is gone
    return {}


def describe_process(process_id: int) -> str:
  """"process 1 of 2 (host h, pid 123)" for messages."""
  info = process_info(process_id)
  where = f" (host {info['host']}, pid {info['pid']})" if info else ""
  return f"process {process_id} of {_count}{where}"


# -- the watchdog -------------------------------------------------------------------------------

class _Watchdog(threading.Thread):
  """Beats through the key-value store and ends this process when a peer falls silent or
  reports a failure (see the module docstring)."""

  def __init__(self, settings: Settings):
    super().__init__(name="botjax-watchdog", daemon=True)
    self.settings = settings
    self.client = _client()
    self.me, self.n = _me, _count
    self.stopped = threading.Event()
    self.exiting = False       # this process is ending: the service may go away quietly

  def run(self) -> None:
    beat = 0
    seen: dict[str, tuple[str, float]] = {}    # key -> (last value, when it last changed)
    while not self.stopped.is_set():
      beat += 1
      now = time.monotonic()
      try:
        self.client.key_value_set(f"{_PREFIX}/beat/{self.me}", str(beat), allow_overwrite=True)
        beats = dict(self.client.key_value_dir_get(f"{_PREFIX}/beat/"))
        exits = dict(self.client.key_value_dir_get(f"{_PREFIX}/exit/"))
      except Exception as e:   # noqa: BLE001 - the coordination service is unreachable
        if self.stopped.is_set() or self.exiting:
          return
        _die(EXIT_LOST_PROCESS, f"lost contact with the coordinator (process 0): {e}")
      for p in range(self.n):
        if p == self.me:
          continue
        status = exits.get(f"{_PREFIX}/exit/{p}")
        if status is not None:
          if status.startswith("error"):
            _die(EXIT_PEER_FAILED, f"{describe_process(p)} failed ({status}); stopping this "
                                   "process too.")
          continue                               # it finished; JAX's shutdown waits for it
        value = beats.get(f"{_PREFIX}/beat/{p}")
        if value is None:
          continue                               # not beating yet (or not watched)
        last, since = seen.get(p, (None, now))
        if value != last:
          seen[p] = (value, now)
        elif now - since > self.settings.lost_after_s:
          _die(EXIT_LOST_PROCESS,
               f"lost {describe_process(p)}: no sign of life for {now - since:.1f} s. Stopping "
               f"(exit {EXIT_LOST_PROCESS}); restart the job on every host to resume from the "
               "last finished checkpoint.")
      self.stopped.wait(self.settings.beat_interval_s)


def _mark_exit() -> None:
  """At exit: tells the other processes whether this one ends with an error (an uncaught
  exception) or normally. The watchdog keeps watching the others while JAX's shutdown waits
  for them (a peer lost then is still named)."""
  err = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
  status = "ok" if err is None else f"error: {type(err).__name__}: {str(err)[:200]}"
  mark_exit(status)


def mark_exit(status: str) -> None:
  """Publishes this process's end ("ok" or "error: <what>") to the others; a watchdog that sees
  "error..." from a peer ends its own process (`EXIT_PEER_FAILED`). Called at exit; call it
  earlier when the program knows it is failing."""
  if _watchdog is not None:
    _watchdog.exiting = True
  try:
    _client().key_value_set(f"{_PREFIX}/exit/{_me}", status,
                            allow_overwrite=True)
  except Exception:   # noqa: BLE001 - the service may be gone already
    pass


# -- checks -------------------------------------------------------------------------------------

def config_hash(config: Any) -> str:
  """sha256 of the canonical JSON of `config` (a JSON-ready mapping, or anything `json.dumps`
  can write with `default=str`)."""
  text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
  if not isinstance(d, Mapping):
    return {prefix or "<value>": d}
  out: dict[str, Any] = {}
  for k, v in d.items():
    key = f"{prefix}.{k}" if prefix else str(k)
    out.update(_flatten(v, key) if isinstance(v, Mapping) else {key: v})
  return out


_checks: dict[str, int] = {}


def check_same_config(config: Any, *, name: str = "run config",
                      timeout_s: float | None = None) -> str:
  """Checks that every process has the same `config`; returns its hash.

  Each process publishes its config through the coordination service and reads the others'
  (every process must call this, with the same `name`, in the same order). A single process
  returns at once.

  Raises:
    ClusterError: the configs differ. The message (the same on every process) groups the
      processes by hash and names up to 10 fields that differ, with their values.
  """
  digest = config_hash(config)
  if jax.process_count() == 1:
    return digest
  client = _client()
  count = _checks.get(name, 0)
  _checks[name] = count + 1
  key = f"{_PREFIX}/config/{name}/{count}"
  text = json.dumps(config, sort_keys=True, default=str)
  client.key_value_set(f"{key}/{jax.process_index()}", text)
  wait = timeout_s if timeout_s is not None else (_settings or Settings()).init_timeout_s
  configs = {}
  for p in range(jax.process_count()):
    try:
      configs[p] = json.loads(client.blocking_key_value_get(f"{key}/{p}", int(wait * 1000)))
    except Exception:   # noqa: BLE001 - DEADLINE_EXCEEDED
      raise ClusterError(f"{name}: {describe_process(p)} did not publish its config within "
                         f"{wait:.0f} s") from None
  hashes = {p: config_hash(c) for p, c in configs.items()}
  if len(set(hashes.values())) == 1:
    return digest
  groups: dict[str, list[int]] = {}
  for p, h in hashes.items():
    groups.setdefault(h, []).append(p)
  flat = {p: _flatten(c) for p, c in configs.items()}
  fields = sorted(set().union(*flat.values()))
  differing = [f for f in fields if len({json.dumps(flat[p].get(f, "<absent>"), default=str)
                                         for p in flat}) > 1]
  lines = [f"processes {ps} have {name} {h[:12]}" for h, ps in groups.items()]
  for f in differing[:10]:
    values = ", ".join(f"process {p}: {flat[p].get(f, '<absent>')!r}" for p in sorted(flat))
    lines.append(f"{f}: {values}")
  if len(differing) > 10:
    lines.append(f"... and {len(differing) - 10} more fields")
  raise ClusterError(f"the processes disagree on the {name} ({len(differing)} field(s) "
                     "differ); start every process with the same flags and files:\n  "
                     + "\n  ".join(lines))


def check_mesh(spec: str) -> dict[str, int]:
  """Parses a mesh spec against the whole cluster's devices; returns its axis sizes.

  Raises:
    ClusterError: the mesh needs more (or other) devices than the cluster has; the message says
      how many processes and local devices the cluster has.
  """
  from botjax.models.sharding import parse_mesh_spec
  try:
    return parse_mesh_spec(spec, jax.device_count())
  except ValueError as e:
    raise ClusterError(f"{e} (the cluster: {jax.process_count()} process(es) x "
                       f"{jax.local_device_count()} local devices)") from None


# -- who does what ------------------------------------------------------------------------------

def is_writer() -> bool:
  """True in the one process that writes a run's files, logs and progress bar: process 0."""
  return jax.process_index() == 0


def process_slice(n: int) -> slice:
  """This process's share of `n` items (prompts, rows) in equal contiguous blocks: process p
  of P gets items [p*n/P, (p+1)*n/P). `n` must divide by P."""
  p, count = jax.process_index(), jax.process_count()
  if n % count:
    raise ValueError(f"{n} items do not split evenly over {count} processes; use a multiple "
                     f"of {count}")
  per = n // count
  return slice(p * per, (p + 1) * per)


def local_rows(sharding: jax.sharding.Sharding, shape: Sequence[int]) -> slice:
  """The rows (first dimension) of a global array of `shape` that this process's devices hold
  under `sharding`, as one contiguous slice.

  With the batch sharding (rows over `data` x `fsdp`) on a mesh whose devices are ordered by
  process (what `make_mesh` builds), process p of P holds rows [p*B/P, (p+1)*B/P).

  Raises:
    ValueError: this process's rows are not one contiguous block.
  """
  n = shape[0]
  blocks = set()
  for index in sharding.addressable_devices_indices_map(tuple(shape)).values():
    start, stop, _ = (index[0] if index else slice(None)).indices(n)
    blocks.add((start, stop))
  blocks = sorted(blocks)
  start, stop = blocks[0]
  for a, b in blocks[1:]:
    if a > stop:
      raise ValueError(f"process {jax.process_index()} holds rows {blocks} of {n} under "
                       f"{sharding}: not one contiguous block")
    stop = max(stop, b)
  return slice(start, stop)


def to_global(local: Any, where: jax.sharding.Mesh | jax.sharding.Sharding | Any,
              global_shape: Sequence[int] | None = None) -> Any:
  """Process-local numpy rows -> global arrays (a pytree, or one array).

  Each process passes the rows it holds (`local_rows`) of every leaf, `[B_local, ...]`; the
  result is a global `[B, ...]` array (B = B_local x the processes holding distinct rows).

  Args:
    local: a pytree of arrays with this process's rows.
    where: a mesh (each leaf's rows then go over `data` x `fsdp`, the batch sharding, whatever
      its rank), one sharding for all leaves, or a pytree of shardings.
    global_shape: the global shape, when JAX cannot infer it from the local rows.
  """
  def one(x, s):
    x = np.asarray(x)
    if isinstance(s, jax.sharding.Mesh):
      from botjax.models.sharding import batch_sharding
      s = batch_sharding(s, max(x.ndim, 1))
    shape = tuple(global_shape) if global_shape is not None else None
    return jax.make_array_from_process_local_data(s, x, shape)

  if isinstance(where, (jax.sharding.Mesh, jax.sharding.Sharding)):
    return jax.tree.map(lambda x: one(x, where), local)
  return jax.tree.map(one, local, where)


def to_local(x: jax.Array) -> np.ndarray:
  """A global array sharded over its rows -> this process's rows `[B_local, ...]` as numpy
  (each distinct row block once, in order; the other dimensions must be whole in each shard)."""
  blocks = {}
  for shard in x.addressable_shards:
    index = shard.index
    if any((s.start or 0) != 0 or (s.stop is not None and s.stop != dim)
           for s, dim in zip(index[1:], x.shape[1:])):
      raise ValueError(f"to_local: {x.shape} array is sharded beyond its rows "
                       f"({x.sharding}); use gather")
    rows = index[0] if index else slice(None)
    blocks.setdefault(rows.start or 0, shard)
  return np.concatenate([np.asarray(blocks[k].data) for k in sorted(blocks)], axis=0)


def gather(tree: Any) -> Any:
  """Every process gets the whole value of each global array in `tree`, as numpy (an
  all-gather across processes: use it for metrics and small results, not for weights).

  A `jax.Array` that this process already holds whole (fully addressable: e.g. the output of
  `botjax.sampling.SlotEngine`, assembled on every process from the same replicated tokens) is
  its value as it is; an array spanning other processes' devices is all-gathered, and a numpy
  leaf is this process's rows of a value tiled across the processes."""
  if jax.process_count() == 1:
    return jax.tree.map(np.asarray, tree)
  from jax.experimental import multihost_utils

  def one(x):
    if isinstance(x, jax.Array) and x.is_fully_addressable:
      return np.asarray(x)
    return multihost_utils.process_allgather(x, tiled=True)

  return jax.tree.map(one, tree)


def is_multiprocess() -> bool:
  """True in a cluster of more than one process (`jax.process_count() > 1`)."""
  return jax.process_count() > 1


def allgather_objects(obj: Any) -> list:
  """Every process's `obj` (any picklable value), in process order, on every process.

  The objects travel pickled, as one uint8 array per process padded to a common power-of-two
  length (a handful of shapes, so a handful of compiled all-gathers), through JAX's collectives
  (`process_allgather`). Every process must call it, in the same order. A single process gets
  `[obj]` back without pickling.
  """
  if jax.process_count() == 1:
    return [obj]
  import pickle
  from jax.experimental import multihost_utils
  blob = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.asarray([blob.size], np.int64)))
  width = 1 << max(4, int(sizes.max() - 1).bit_length())
  padded = np.zeros((width,), np.uint8)
  padded[:blob.size] = blob
  blobs = np.asarray(multihost_utils.process_allgather(padded))
  return [pickle.loads(blobs[p, :int(sizes[p, 0])].tobytes())
          for p in range(jax.process_count())]


def barrier(name: str, timeout_s: float | None = None) -> None:
  """Waits until every process reaches the barrier `name` (unique per use).

  Raises:
    ClusterError: not every process arrived within `timeout_s` (default: the init timeout).
  """
  if jax.process_count() == 1:
    return
  wait = timeout_s if timeout_s is not None else (_settings or Settings()).init_timeout_s
  try:
    _client().wait_at_barrier(f"{_PREFIX}/barrier/{name}", int(wait * 1000))
  except jax.errors.JaxRuntimeError as e:
    raise ClusterError(f"barrier {name!r}: not every process arrived within {wait:.0f} s: "
                       f"{str(e).splitlines()[0]}") from None
