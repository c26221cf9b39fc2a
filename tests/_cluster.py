"""A JAX cluster of N processes on this machine, joined over loopback, for the multi-process
tests: `from _cluster import Cluster` (pytest puts tests/ on sys.path).

Each process is a fresh `python` (a script with arguments, or `-c` code) on the CPU backend with
`devices_per_process` fake CPU devices (`--xla_force_host_platform_device_count`; the suite's
other XLA flags are kept), CPU collectives over gloo (`jax_cpu_collectives_implementation`, set
through its environment variable), and told its place in the cluster through the environment:

  CLUSTER_COORDINATOR    "127.0.0.1:PORT", a port that was free when the cluster started
  CLUSTER_NUM_PROCESSES  N
  CLUSTER_PROCESS_ID     0 .. N-1

and through the placeholders `{coordinator}`, `{num_processes}` and `{process_id}` in the
arguments. A process joins with `botjax.distributed.initialize(...)` (or
`jax.distributed.initialize(...)`) from those values.

Every process runs in its own process group (its children too), with its output going to files
(no pipe can fill up and block it). The helper always ends every group: on `wait`'s deadline, on
`stop`, when the `with` block ends (normally, on a failed assertion or on Ctrl-C), at interpreter
exit, and, through the kernel's parent-death signal, when the test process itself is killed.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence

from _util import ROOT, one_device_xla_flags

TESTS = os.path.join(ROOT, "tests")

# Each cluster process is started through this supervisor, the leader of the process's own
# group: it asks the kernel for SIGTERM when the process that started it (the test) dies
# (prctl PR_SET_PDEATHSIG), runs the command as its child in the same group, and mirrors how
# that child ends (exit code, or the same signal). On SIGTERM it kills its whole group: the
# command and every process the command started, however the test process died. No core files:
# a process that JAX aborts (SIGABRT) would write one into the working directory.
_SUPERVISOR = r"""
import ctypes, os, resource, signal, subprocess, sys
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
def end_group(*_):
  os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, end_group)
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)    # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
  end_group()                                                # the test died before prctl
code = subprocess.call(sys.argv[2:])
if code < 0:
  signal.signal(-code, signal.SIG_DFL)
  os.kill(os.getpid(), -code)
sys.exit(code)
"""

_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _stop_all():
  for cluster in list(_LIVE):
    cluster.stop()


def free_port() -> int:
  """A TCP port on 127.0.0.1 that was free a moment ago (the OS's pick)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@dataclasses.dataclass
class ProcessResult:
  """How one process of a cluster ended.

  Attributes:
    process_id: its id in the cluster.
    returncode: its exit status (negative: the signal that ended it, as in subprocess).
    stdout, stderr: everything it wrote.
    seconds: from the cluster's start to when the helper saw it exit.
    ended_by_helper: True when the helper killed it (deadline, `kill`, `stop`).
  """
  process_id: int
  returncode: int
  stdout: str
  stderr: str
  seconds: float
  ended_by_helper: bool

  def describe(self, tail: int = 3000) -> str:
    """The process's id, exit status and the last `tail` characters of its output."""
    how = " (ended by the test helper)" if self.ended_by_helper else ""
    return (f"--- process {self.process_id}: exit {self.returncode}{how} after "
            f"{self.seconds:.1f} s\n[stdout]\n{self.stdout[-tail:]}\n[stderr]\n"
            f"{self.stderr[-tail:]}")


def describe(results: Sequence[ProcessResult], tail: int = 3000) -> str:
  """Every process's exit status and output tail, for an assertion message."""
  return "\n".join(r.describe(tail) for r in results)


def check(results: Sequence[ProcessResult]) -> list[ProcessResult]:
  """`results` if every process exited 0; otherwise an AssertionError showing all of them."""
  if any(r.returncode != 0 for r in results):
    raise AssertionError("a cluster process failed:\n" + describe(results))
  return list(results)


def cluster_env(num_processes: int, process_id: int, coordinator: str,
                devices_per_process: int) -> dict[str, str]:
  """The environment variables that make a process one of the loopback cluster's."""
  flags = one_device_xla_flags()
  return {
      "JAX_PLATFORMS": "cpu",
      "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
      "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={devices_per_process}"
                   .strip(),
      "HF_HUB_OFFLINE": "1",
      "PYTHONUNBUFFERED": "1",
      "CLUSTER_COORDINATOR": coordinator,
      "CLUSTER_NUM_PROCESSES": str(num_processes),
      "CLUSTER_PROCESS_ID": str(process_id),
  }


class Cluster:
  """N Python processes started together as one JAX cluster on loopback.

  Use as a context manager, which starts the processes and always ends them:

      with Cluster(code=CHILD, num_processes=2, timeout=60) as c:
        c.wait_for(1, "step 2 started")
        c.kill(1)
        results = c.wait()
      assert results[0].returncode == 75, describe(results)

  Args:
    code: Python source run as `python -c code` in every process; or
    script: a script's path (relative to the repository root, or absolute).
    args: arguments after the code or script; `{process_id}`, `{num_processes}` and
      `{coordinator}` in them are replaced per process.
    num_processes: N.
    devices_per_process: fake CPU devices in each process.
    timeout: seconds from the start after which `wait` kills whatever still runs.
    env: extra environment variables (the same for every process), or a function of the process
      id giving them.
    cwd: working directory (default: the repository root).
  """

  def __init__(self, code: str | None = None, *, script: str | None = None,
               args: Sequence[str] = (), num_processes: int = 2, devices_per_process: int = 4,
               timeout: float = 60.0, env: Mapping[str, str] | None = None, cwd: str = ROOT):
    if (code is None) == (script is None):
      raise ValueError("give exactly one of code= and script=")
    self.code, self.script, self.args = code, script, list(args)
    self.num_processes, self.devices_per_process = num_processes, devices_per_process
    self.timeout, self.env, self.cwd = timeout, env, cwd
    self.coordinator = f"127.0.0.1:{free_port()}"
    self._procs: list[subprocess.Popen] = []
    self._ended: dict[int, tuple[float, bool]] = {}   # process id -> (seconds, by helper)
    self._killed: set[int] = set()
    self._dir: str | None = None
    self._outputs: dict[int, tuple[str, str]] = {}     # kept when the log files are removed
    self._t0 = 0.0

  # -- starting -------------------------------------------------------------------------------

  def argv(self, process_id: int) -> list[str]:
    """The command line of process `process_id`."""
    fill = {"process_id": process_id, "num_processes": self.num_processes,
            "coordinator": self.coordinator}
    args = [a.format(**fill) for a in self.args]
    if self.code is not None:
      return [sys.executable, "-c", self.code, *args]
    return [sys.executable, os.path.join(ROOT, self.script), *args]

  def start(self) -> Cluster:
    """Starts every process (each in a new session and process group)."""
    if self._procs:
      raise RuntimeError("this cluster was started already")
    self._dir = tempfile.mkdtemp(prefix="botjax-cluster-")
    path = os.pathsep.join(p for p in (ROOT, TESTS, os.environ.get("PYTHONPATH")) if p)
    _LIVE.add(self)
    self._t0 = time.monotonic()
    for i in range(self.num_processes):
      extra = self.env(i) if callable(self.env) else (self.env or {})
      env = {**os.environ, "PYTHONPATH": path,
             **cluster_env(self.num_processes, i, self.coordinator, self.devices_per_process),
             **extra}
      with open(self._log(i, "out"), "wb") as out, open(self._log(i, "err"), "wb") as err:
        self._procs.append(subprocess.Popen(
            [sys.executable, "-c", _SUPERVISOR, str(os.getpid()), *self.argv(i)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=self.cwd,
            start_new_session=True))
    return self

  def __enter__(self) -> Cluster:
    return self.start()

  def __exit__(self, *exc) -> None:
    self.stop()

  # -- watching -------------------------------------------------------------------------------

  def _log(self, i: int, kind: str) -> str:
    return os.path.join(self._dir, f"{i}.{kind}")

  def output(self, process_id: int) -> tuple[str, str]:
    """(stdout, stderr) of a process so far."""
    if process_id in self._outputs:
      return self._outputs[process_id]

    def read(kind):
      with open(self._log(process_id, kind), "rb") as f:
        return f.read().decode("utf-8", "replace")
    return read("out"), read("err")

  def _poll(self) -> None:
    for i, p in enumerate(self._procs):
      if i not in self._ended and p.poll() is not None:
        self._ended[i] = (time.monotonic() - self._t0, i in self._killed)

  def remaining(self) -> float:
    """Seconds left before the cluster's deadline."""
    return self.timeout - (time.monotonic() - self._t0)

  def wait_for(self, process_id: int, text: str, timeout: float | None = None) -> float:
    """Waits until `text` appears in the stdout of process `process_id`.

    Returns the seconds since the cluster started. Raises AssertionError (with every process's
    output) when the process exits first or the time runs out (at most the cluster's deadline);
    the processes are then ended.
    """
    deadline = time.monotonic() + min(timeout or self.timeout, max(self.remaining(), 0))
    while True:
      if text in self.output(process_id)[0]:
        return time.monotonic() - self._t0
      self._poll()
      if process_id in self._ended or time.monotonic() > deadline:
        why = ("exited" if process_id in self._ended else "timed out")
        self.stop()
        raise AssertionError(f"waiting for {text!r} from process {process_id}: {why}\n"
                             + describe(self.results()))
      time.sleep(0.05)

  def wait(self, timeout: float | None = None) -> list[ProcessResult]:
    """Waits for every process to exit, killing (SIGKILL, whole process group) those still
    running after `timeout` seconds (default: until the cluster's deadline). Returns one result
    per process, in process-id order."""
    deadline = time.monotonic() + min(timeout if timeout is not None else self.timeout,
                                      max(self.remaining(), 0))
    while True:
      self._poll()
      if len(self._ended) == len(self._procs):
        return self.results()
      if time.monotonic() > deadline:
        self.stop()
        return self.results()
      time.sleep(0.05)

  def results(self) -> list[ProcessResult]:
    """The results of the processes that have exited (all of them after `wait` or `stop`)."""
    self._poll()
    out = []
    for i, p in enumerate(self._procs):
      if i in self._ended:
        seconds, by_helper = self._ended[i]
        out.append(ProcessResult(i, p.returncode, *self.output(i), seconds, by_helper))
    return out

  # -- ending ---------------------------------------------------------------------------------

  def kill(self, process_id: int, sig: int = signal.SIGKILL) -> None:
    """Sends `sig` to process `process_id`'s whole process group (the process and its
    children)."""
    p = self._procs[process_id]
    self._killed.add(process_id)
    with contextlib.suppress(ProcessLookupError, PermissionError):
      os.killpg(p.pid, sig)

  def stop(self) -> None:
    """Kills every process group still running and reaps the processes (idempotent)."""
    for i, p in enumerate(self._procs):
      self._poll()
      if i not in self._ended:
        self.kill(i)
      else:   # its children may outlive it in the group
        with contextlib.suppress(ProcessLookupError, PermissionError):
          os.killpg(p.pid, signal.SIGKILL)
    for i, p in enumerate(self._procs):
      with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=10)
    self._poll()
    if self._dir is not None and os.path.isdir(self._dir):
      self._outputs = {i: self.output(i) for i in range(len(self._procs))}
      shutil.rmtree(self._dir, ignore_errors=True)
    _LIVE.discard(self)


def run_cluster(code: str | None = None, *, check_ok: bool = True, **kwargs) -> list[ProcessResult]:
  """Starts a `Cluster(code, **kwargs)`, waits for it, ends it and returns its results; with
  `check_ok`, raises AssertionError (every process's output) unless every process exited 0."""
  with Cluster(code, **kwargs) as c:
    results = c.wait()
  return check(results) if check_ok else results
