"""The Node toolchain (esbuild, ESLint 9, TypeScript, Tailwind CSS) behind a pool of worker processes.

Each worker is a long-lived `node node/worker.mjs` process that reads one JSON request per line and
answers one JSON line, so transpiling, linting and bundling an item costs milliseconds instead of a
Node start-up. Model-written code is only parsed and bundled here, never executed. Every request has
a time limit; a worker that times out or dies is killed (with its process group) and replaced, and
its item is scored as a failure. Each worker runs in a fresh temporary directory (its cwd, HOME and
TMPDIR) that is removed when the worker ends, with a V8 heap limit.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

NODE_DIR = pathlib.Path(__file__).resolve().parent / "node"
WORKER_SCRIPT = NODE_DIR / "worker.mjs"
# A directory to use instead of NODE_DIR: a copy of it where `npm ci` was run (e.g. when the
# package directory is read-only).
TOOLCHAIN_ENV = "BOTJAX_REACT_TOOLCHAIN"
# Modules a component may import; each is served from a vendor bundle built once per worker.
ALLOWED_MODULES = ("react", "react-dom", "react-dom/client", "react/jsx-runtime", "lucide-react")
INSTALL_HINT = (f"install the pinned toolchain with `cd {NODE_DIR} && npm ci --no-audit --no-fund` "
                "(or `bash scripts/setup.sh test` from the repository root)")


def toolchain_dir() -> pathlib.Path:
  """The toolchain directory (worker.mjs, package.json, node_modules/): $BOTJAX_REACT_TOOLCHAIN
  when set, else `NODE_DIR`."""
  env = os.environ.get(TOOLCHAIN_ENV)
  return pathlib.Path(env).resolve() if env else NODE_DIR


def _install_hint(directory: pathlib.Path) -> str:
  if directory == NODE_DIR:
    return INSTALL_HINT
  return (f"{TOOLCHAIN_ENV}={directory} must hold a copy of {NODE_DIR} with its packages installed "
          f"(`cp -r {NODE_DIR}/. {directory} && cd {directory} && npm ci --no-audit --no-fund`), "
          f"or unset {TOOLCHAIN_ENV} and {INSTALL_HINT}")


class ToolchainError(RuntimeError):
  """Node, the pinned npm packages or Chromium are missing or broken."""


def find_node(node: str | None = None) -> str:
  """Path of the `node` binary: `node`, else $BOTJAX_NODE, else `node` on PATH.

  Also checks, without starting Node, that the toolchain directory (`toolchain_dir()`) holds the
  worker script and the pinned npm packages.

  Raises:
    ToolchainError: when none is found or the toolchain's node_modules are not installed.
  """
  directory = toolchain_dir()
  path = node or os.environ.get("BOTJAX_NODE") or shutil.which("node")
  if not path or not os.path.exists(path):
    raise ToolchainError(f"Node.js (>= 18) was not found (looked at {node or 'BOTJAX_NODE'} and "
                         f"PATH): install it, e.g. `apt-get install nodejs npm`, then "
                         f"{_install_hint(directory)}")
  if not (directory / "worker.mjs").exists():
    raise ToolchainError(f"the React toolchain's worker script {directory / 'worker.mjs'} is "
                         f"missing: {_install_hint(directory)}")
  for pkg in ("esbuild", "eslint", "typescript", "tailwindcss", "react", "lucide-react"):
    if not (directory / "node_modules" / pkg / "package.json").exists():
      raise ToolchainError(f"the npm package {pkg!r} of the React toolchain is missing from "
                           f"{directory / 'node_modules'}: {_install_hint(directory)}")
  return path


def find_chromium(chromium: str | None = None) -> str:
  """Path of a Chromium binary: `chromium`, else $BOTJAX_CHROMIUM, else chromium on PATH.

  Raises:
    ToolchainError: when none is found.
  """
  candidates = [chromium, os.environ.get("BOTJAX_CHROMIUM"), shutil.which("chromium"),
                shutil.which("chromium-browser"), shutil.which("google-chrome")]
  for path in candidates:
    if path and os.path.exists(path):
      return path
  raise ToolchainError("Chromium was not found: install Debian's package (`apt-get install "
                       "chromium`), or pass chromium=/path/to/chrome or set BOTJAX_CHROMIUM")


@dataclasses.dataclass(frozen=True)
class Diagnostic:
  """A compiler diagnostic. `line` is the 0-based code line, -1 when it has no location;
  `source` is "esbuild", "import" (a module outside the allowed set), "tsc" or "toolchain"."""
  line: int
  column: int
  message: str
  source: str


@dataclasses.dataclass(frozen=True)
class LintMessage:
  """An ESLint message. `line` is the 0-based code line; `severity` is fatal, error or warning."""
  line: int
  column: int
  severity: str
  rule: str | None
  message: str


@dataclasses.dataclass(frozen=True)
class CompileResult:
  """What the toolchain says about one component.

  Attributes:
    ok: the component transpiles and bundles, and imports only allowed modules.
    diagnostics: compiler diagnostics (and tsc's when type-checking is on).
    lint: ESLint messages (empty when linting is off or the worker failed).
    bundle: the IIFE bundle that mounts the component (when asked and ok).
    css: the Tailwind CSS for the component's classes (when asked and ok).
    vendors: names of the vendor bundles the page must load before `bundle`.
    error: a toolchain failure (time limit, crashed worker), else None.
    ms: timings of the worker's stages in milliseconds.
  """
  ok: bool
  diagnostics: tuple[Diagnostic, ...] = ()
  lint: tuple[LintMessage, ...] = ()
  bundle: str | None = None
  css: str | None = None
  vendors: tuple[str, ...] = ()
  error: str | None = None
  ms: dict[str, float] = dataclasses.field(default_factory=dict)


def _failure(message: str) -> CompileResult:
  return CompileResult(ok=False, diagnostics=(Diagnostic(-1, 0, message, "toolchain"),),
                       error=message)


class NodeWorker:
  """One `node worker.mjs` process; not thread-safe (the pool hands each to one thread at a time)."""

  def __init__(self, node: str, *, memory_mb: int = 768, startup_timeout_s: float = 60.0):
    self.node = node
    self.script = toolchain_dir() / "worker.mjs"
    self.memory_mb = int(memory_mb)
    self.startup_timeout_s = float(startup_timeout_s)
    self.proc: subprocess.Popen | None = None
    self.tmpdir: str | None = None
    self.restarts = -1
    self.versions: dict[str, str] = {}
    self._lines: queue.Queue = queue.Queue()
    self._next_id = 0

  def _start(self) -> None:
    self.tmpdir = tempfile.mkdtemp(prefix="botjax-node-")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.tmpdir,
           "TMPDIR": self.tmpdir, "NODE_ENV": "production"}
    with open(os.path.join(self.tmpdir, "stderr.log"), "wb") as stderr:
      self.proc = subprocess.Popen(
          [self.node, f"--max-old-space-size={self.memory_mb}", str(self.script)],
          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
          cwd=self.tmpdir, env=env, start_new_session=True)
    self._lines = queue.Queue()
    threading.Thread(target=self._read, args=(self.proc, self._lines), daemon=True).start()
    self.restarts += 1
    try:
      hello = self._lines.get(timeout=self.startup_timeout_s)
    except queue.Empty:
      hello = None
    if not hello or not json.loads(hello).get("ready"):
      detail = self._stderr_tail()
      self.kill()
      raise ToolchainError(f"the Node toolchain worker did not start: {detail or 'no output'}; "
                           f"{INSTALL_HINT}")
    self.versions = {k: v for k, v in json.loads(hello).items() if k != "ready"}

  @staticmethod
  def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
    for line in proc.stdout:
      lines.put(line)
    lines.put(None)

  def _stderr_tail(self, n: int = 1500) -> str:
    try:
      with open(os.path.join(self.tmpdir, "stderr.log"), "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - n))
        return f.read().decode("utf-8", "replace").strip()
    except (OSError, TypeError):
      return ""

  def kill(self) -> None:
    """Kills the worker and its children (esbuild's service) and removes its directory."""
    proc, self.proc = self.proc, None
    if proc is not None:
      try:
        os.killpg(proc.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
      try:
        proc.wait(timeout=5)
      except subprocess.TimeoutExpired:
        pass
      for stream in (proc.stdin, proc.stdout):
        try:
          stream.close()
        except OSError:
          pass
    if self.tmpdir:
      shutil.rmtree(self.tmpdir, ignore_errors=True)
      self.tmpdir = None

  def request(self, req: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Sends one request and waits for its reply.

    Raises:
      TimeoutError: no reply within `timeout_s` (the worker is killed).
      RuntimeError: the worker died (it is restarted on the next request).
    """
    if self.proc is None or self.proc.poll() is not None:
      self.kill()
      self._start()
    self._next_id += 1
    req = dict(req, id=self._next_id)
    deadline = time.monotonic() + timeout_s  # the limit counts from before the write
    try:
      self.proc.stdin.write((json.dumps(req) + "\n").encode())
      self.proc.stdin.flush()
    except (BrokenPipeError, OSError) as e:
      self.kill()
      raise RuntimeError(f"toolchain worker died: {e}") from e
    while True:
      try:
        line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
      except queue.Empty:
        self.kill()
        raise TimeoutError(f"toolchain worker exceeded the time limit of {timeout_s:g} s") from None
      if line is None:
        detail = self._stderr_tail(300)
        self.kill()
        raise RuntimeError(f"toolchain worker died{': ' + detail if detail else ''}")
      reply = json.loads(line)
      if reply.get("id") == self._next_id:
        return reply


def _close_workers(workers: list[NodeWorker]) -> None:
  for w in workers:
    w.kill()


class NodePool:
  """A pool of Node toolchain workers: compile (esbuild), lint (ESLint), type-check (tsc), CSS.

  Example:
    with NodePool(size=2) as pool:
      [res] = pool.check(["export default function App() { return <p>hi</p>; }"], bundle=True)
      res.ok, res.lint, len(res.bundle)
  """

  def __init__(self, size: int = 2, *, timeout_s: float = 20.0, memory_mb: int = 768,
               node: str | None = None, allowed_modules: Sequence[str] = ALLOWED_MODULES,
               max_source_chars: int = 200_000):
    if size < 1:
      raise ValueError(f"size must be >= 1, got {size}")
    if timeout_s <= 0:
      raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    unknown = sorted(set(allowed_modules) - set(ALLOWED_MODULES))
    if unknown:
      raise ValueError(f"allowed_modules {unknown} have no local bundle; choose from "
                       f"{ALLOWED_MODULES}")
    self.node = find_node(node)
    self.size = int(size)
    self.timeout_s = float(timeout_s)
    self.allowed_modules = tuple(allowed_modules)
    self.max_source_chars = int(max_source_chars)
    self._workers = [NodeWorker(self.node, memory_mb=memory_mb) for _ in range(self.size)]
    self._free: queue.Queue = queue.Queue()
    for w in self._workers:
      self._free.put(w)
    self._executor = concurrent.futures.ThreadPoolExecutor(self.size,
                                                           thread_name_prefix="botjax-node")
    self._vendors: dict[str, str] = {}
    self._vendor_lock = threading.Lock()
    self.failures = 0
    self._finalizer = weakref.finalize(self, _close_workers, self._workers)
    atexit.register(self._finalizer)

  @property
  def restarts(self) -> int:
    """Worker restarts after a crash or time limit so far."""
    return sum(max(0, w.restarts) for w in self._workers)

  def _call(self, req: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    worker = self._free.get()
    try:
      return worker.request(req, timeout_s)
    finally:
      self._free.put(worker)

  def vendor(self, name: str) -> str:
    """The vendor bundle `name` ("core", "lucide-react"): script text defining the allowed modules."""
    with self._vendor_lock:
      if name not in self._vendors:
        reply = self._call({"op": "vendor", "name": name}, timeout_s=max(self.timeout_s, 60.0))
        if "code" not in reply:
          raise ToolchainError(f"vendor bundle {name!r} failed: {reply.get('fatal')}")
        self._vendors[name] = reply["code"]
      return self._vendors[name]

  def _check_one(self, source: str, opts: dict[str, Any]) -> CompileResult:
    if len(source) > self.max_source_chars:
      return _failure(f"component has {len(source)} characters, over the limit of "
                      f"{self.max_source_chars}")
    try:
      reply = self._call(dict(opts, source=source), self.timeout_s)
    except (TimeoutError, RuntimeError) as e:
      self.failures += 1
      return _failure(str(e))
    if "fatal" in reply:
      self.failures += 1
      return _failure(f"toolchain error: {reply['fatal'][:500]}")
    diags = tuple(Diagnostic(int(d["line"]) - 1, int(d["column"]), d["message"], d["source"])
                  for d in reply["diagnostics"])
    lint = tuple(LintMessage(int(m["line"]) - 1, int(m["column"]), m["severity"], m["rule"],
                             m["message"]) for m in reply["lint"])
    return CompileResult(ok=bool(reply["ok"]), diagnostics=diags, lint=lint,
                         bundle=reply.get("bundle"), css=reply.get("css"),
                         vendors=tuple(reply.get("vendors") or ()), ms=dict(reply.get("ms", {})))

  def check(self, sources: Sequence[str], *, lint: bool = True, bundle: bool = False,
            css: bool = False, typecheck: bool = False, minify: bool = True) -> list[CompileResult]:
    """Compiles (and optionally lints, bundles, type-checks, builds CSS for) each source.

    Args:
      sources: component sources (TSX).
      lint: run ESLint (React + TypeScript rules).
      bundle: return the page bundle (needed for rendering).
      css: return the Tailwind CSS of the component's classes.
      typecheck: add `tsc --strict` diagnostics (slower; these do not change `ok`).
      minify: minify the bundle.

    Returns:
      One CompileResult per source, in order. Never raises for bad code, time limits or crashes.
    """
    opts = {"lint": bool(lint), "bundle": bool(bundle), "css": bool(css),
            "typecheck": bool(typecheck), "minify": bool(minify),
            "allowed": list(self.allowed_modules)}
    return list(self._executor.map(lambda s: self._check_one(s, opts), sources))

  def close(self) -> None:
    """Stops every worker and removes their directories."""
    self._executor.shutdown(wait=True)
    self._finalizer()

  def __enter__(self) -> NodePool:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def check_toolchain(*, node: str | None = None, chromium: str | None = None,
                    render: bool = True) -> dict[str, str]:
  """Checks that the React reward can run here and returns the versions it found.

  Starts one Node worker (esbuild, ESLint, TypeScript, Tailwind) and, when `render`, checks that
  Chromium and Playwright are present.

  Raises:
    ToolchainError: naming what is missing and how to install it.
  """
  worker = NodeWorker(find_node(node))
  try:
    worker.request({"op": "modules"}, timeout_s=60)
    versions = dict(worker.versions)
  finally:
    worker.kill()
  if render:
    versions["chromium"] = find_chromium(chromium)
    try:
      from importlib.metadata import version
      versions["playwright"] = version("playwright")
    except Exception as e:  # noqa: BLE001 - PackageNotFoundError and broken metadata alike
      raise ToolchainError("rendering needs playwright: `pip install 'playwright>=1.65,<1.66'` "
                           "(no `playwright install` needed; Chromium comes from Debian)") from e
  return versions
