"""A worker pool that scores a batch item by item with a per-item timeout and never crashes a run.

Every item runs `fn([prompt], [completion], [metadata])[0]` in a worker. An exception, a timeout, a
non-finite value or a dead worker process yields the fallback `RewardResult(fallback_reward,
failed=True, infra_failure=True, error=...)` and bumps a counter; the batch always completes.
None of these is the model's fault (a reward function scores the model's failures, it does not
raise on them), so the fallback is flagged as an infrastructure failure: the trainer keeps the row
out of the loss rather than training on the fallback value. A hung item never holds
the batch longer than its timeout: a process worker is killed and replaced, a thread worker is
abandoned (it is a daemon thread; its late answer is dropped) and replaced.

Only `RewardUnavailable` (e.g. a judge that stopped answering) propagates: training on fallbacks
alone would silently learn from no signal.

Kinds:
  "process": separate processes (multiprocessing "spawn" context by default): true hard kills, and
    the scorer runs in its process's main thread, so signal-based timeouts inside it (math-verify)
    work. `fn` and the results must pickle; workers start on first use and live until `close()`.
  "thread": daemon threads in this process: cheap, shares memory, for I/O-bound scorers (HTTP
    judges); a hung thread keeps running in the background until its call returns.
  "inline": the calling thread, one item at a time, no timeout (debugging); failures still fall
    back.
"""
from __future__ import annotations

import collections
import itertools
import math
import multiprocessing
import multiprocessing.connection
import pickle
import queue
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from botjax.rewards.base import (RewardFn, RewardResult, RewardSpec, RewardUnavailable,
                                 call_reward_fn, check_batch, combine, reward_spec)

_KINDS = ("thread", "process", "inline")
_READY = "ready"
_COUNTERS = ("items", "failures", "timeouts", "exceptions", "nonfinite", "worker_restarts")


def _score_item(fn: RewardFn, prompt: str, completion: str, meta: Mapping[str, Any]):
  """Runs fn on one item: ("ok", result), ("error", message) or ("fatal", the exception)."""
  try:
    return "ok", call_reward_fn(fn, [prompt], [completion], [meta])[0]
  except RewardUnavailable as e:
    return "fatal", e
  except Exception as e:  # a reward function may raise anything; the run must go on
    last = traceback.extract_tb(e.__traceback__)[-1:]
    where = f" at {last[0].filename}:{last[0].lineno}" if last else ""
    return "error", f"{type(e).__name__}: {e}{where}"


def _process_worker_main(conn, fn) -> None:
  """Loop of a process worker: say "ready" once `fn` is unpickled (its imports done), then receive
  (idx, prompt, completion, meta) and send (idx, status, value)."""
  conn.send(_READY)
  while True:
    try:
      task = conn.recv()
    except (EOFError, OSError):
      return
    if task is None:
      return
    idx, prompt, completion, meta = task
    status, value = _score_item(fn, prompt, completion, meta)
    try:
      conn.send((idx, status, value))
    except Exception as e:  # an unpicklable result must not kill the worker
      if status == "fatal":
        conn.send((idx, status, f"{type(value).__name__}: {value}"))
      else:
        conn.send((idx, "error", f"result could not be sent back: {type(e).__name__}: {e}"))


class _ThreadWorker:
  """A daemon thread fed through its own inbox; answers go to the pool's shared queue."""

  ready = True

  def __init__(self, fn, outbox: queue.Queue, token: int):
    self.token = token
    self._inbox: queue.Queue = queue.Queue()
    self._fn, self._outbox = fn, outbox
    self._thread = threading.Thread(target=self._loop, name=f"reward-worker-{token}", daemon=True)
    self._thread.start()

  def _loop(self):
    while (task := self._inbox.get()) is not None:
      idx, prompt, completion, meta = task
      status, value = _score_item(self._fn, prompt, completion, meta)
      self._outbox.put((self.token, idx, status, value))

  def submit(self, task) -> None:
    self._inbox.put(task)

  def retire(self) -> None:
    """Asks the thread to exit after its current item (a hung call cannot be interrupted)."""
    self._inbox.put(None)


class _ProcessWorker:
  """A worker process reached through a duplex pipe; `ready` once it has loaded `fn`."""

  def __init__(self, ctx, fn):
    self.conn, child = ctx.Pipe()
    self.proc = ctx.Process(target=_process_worker_main, args=(child, fn), daemon=True)
    self.proc.start()
    child.close()
    self.ready = False
    self.started = time.monotonic()

  def submit(self, task) -> None:
    self.conn.send(task)

  def retire(self) -> None:
    """Kills the process (SIGKILL) and releases its pipe."""
    if self.proc.is_alive():
      self.proc.kill()
    self.proc.join(timeout=5)
    self.conn.close()

  def stop(self) -> None:
    """Asks an idle worker to exit; kills it if it does not."""
    try:
      self.conn.send(None)
    except (OSError, ValueError):
      pass
    self.proc.join(timeout=1)
    self.retire()


class RewardPool:
  """Scores batches in a worker pool with per-item timeouts and failure counters.

  Args:
    fns: a RewardFn, or a mapping name -> RewardFn summed with `weights` (see `combine`).
    num_workers: number of concurrent workers (>= 1).
    timeout_s: per-item wall-clock limit in seconds, counted from when a worker takes the item.
    fallback_reward: the reward of a failed item.
    kind: "process", "thread" or "inline" (see the module docstring).
    weights: per-name weights when `fns` is a mapping.
    mp_context: multiprocessing start method for kind="process" ("spawn", "forkserver", "fork").
    startup_timeout_s: how long a new worker process may take to import and load `fn` (not
      counted against any item's timeout; a worker that takes longer raises RuntimeError).

  Metrics (`metrics()`, cumulative since `reset_metrics()`): items, failures (= timeouts +
  exceptions + nonfinite), timeouts, exceptions (including dead workers), nonfinite,
  worker_restarts.

  `spec` is the scored function's `RewardSpec` (the pool gives what the function gives).
  """

  def __init__(self, fns: RewardFn | Mapping[str, RewardFn], *, num_workers: int = 4,
               timeout_s: float = 10.0, fallback_reward: float = 0.0, kind: str = "thread",
               weights: Mapping[str, float] | None = None, mp_context: str = "spawn",
               startup_timeout_s: float = 120.0):
    if kind not in _KINDS:
      raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    if int(num_workers) < 1:
      raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
      raise ValueError(f"timeout_s must be a positive finite number of seconds, got {timeout_s}")
    if not math.isfinite(fallback_reward):
      raise ValueError(f"fallback_reward must be finite, got {fallback_reward}")
    if isinstance(fns, Mapping):
      fns = combine(fns, weights)
    elif weights is not None:
      raise ValueError("weights are only used when fns is a mapping name -> RewardFn")
    if not callable(fns):
      raise TypeError(f"fns must be a RewardFn or a mapping of them, got {fns!r}")
    if kind == "process":
      try:
        pickle.dumps(fns)
      except Exception as e:
        raise TypeError(f"kind='process' sends the reward function to worker processes, but "
                        f"{fns!r} cannot be pickled ({type(e).__name__}: {e}); define it at module "
                        f"level, or use kind='thread'") from e
    self.fn = fns
    self.spec: RewardSpec = reward_spec(fns)
    self.num_workers = int(num_workers)
    self.timeout_s = float(timeout_s)
    self.fallback_reward = float(fallback_reward)
    self.kind = kind
    self.startup_timeout_s = float(startup_timeout_s)
    self._ctx = multiprocessing.get_context(mp_context) if kind == "process" else None
    self._workers: list = []
    self._outbox: queue.Queue = queue.Queue()
    self._tokens = itertools.count()
    self._lock = threading.Lock()  # one batch at a time
    self._counters = collections.Counter({k: 0 for k in _COUNTERS})

  # ---- metrics ----------------------------------------------------------------------------------
  def metrics(self) -> dict[str, int]:
    """Cumulative counters: items, failures, timeouts, exceptions, nonfinite, worker_restarts."""
    return {k: int(self._counters[k]) for k in _COUNTERS}

  def reset_metrics(self) -> None:
    self._counters = collections.Counter({k: 0 for k in _COUNTERS})

  # ---- lifecycle --------------------------------------------------------------------------------
  def _new_worker(self):
    if self.kind == "process":
      return _ProcessWorker(self._ctx, self.fn)
    return _ThreadWorker(self.fn, self._outbox, next(self._tokens))

  def _ensure_workers(self) -> None:
    while len(self._workers) < self.num_workers:
      self._workers.append(self._new_worker())

  def close(self) -> None:
    """Stops the workers (process workers are joined or killed)."""
    workers, self._workers = self._workers, []
    for w in workers:
      w.stop() if self.kind == "process" else w.retire()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def __del__(self):
    try:
      self.close()
    except Exception:  # interpreter shutdown: modules may already be gone
      pass

  # ---- scoring ----------------------------------------------------------------------------------
  def _fallback(self, counter: str, error: str) -> RewardResult:
    self._counters["failures"] += 1
    self._counters[counter] += 1
    return RewardResult(reward=self.fallback_reward, failed=True, error=error, infra_failure=True)

  def _accept(self, status: str, value) -> RewardResult:
    if status == "fatal":
      raise value if isinstance(value, RewardUnavailable) else RewardUnavailable(value)
    if status in ("error", "dead"):
      return self._fallback("exceptions", value)
    if not value.is_finite():
      return self._fallback("nonfinite",
                            f"non-finite or malformed result (reward {value.reward!r})")
    return value

  def __call__(self, prompts: Sequence[str], completions: Sequence[str],
               metadata: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
    """Scores a batch; returns one RewardResult per item, failed ones replaced by the fallback.

    Raises:
      RewardUnavailable: if a scorer reports that its service is gone (after its own retries).
    """
    check_batch(prompts, completions, metadata)
    items = list(zip(prompts, completions, metadata))
    with self._lock:
      self._counters["items"] += len(items)
      if self.kind == "inline":
        return [self._accept(*_score_item(self.fn, *item)) for item in items]
      return self._run(items)

  def _run(self, items) -> list[RewardResult]:
    self._ensure_workers()
    results: list[RewardResult | None] = [None] * len(items)
    pending = collections.deque(range(len(items)))
    running: dict[int, tuple[int, float]] = {}  # worker slot -> (item index, deadline)
    try:
      while pending or running:
        for slot, worker in enumerate(self._workers):
          if slot not in running and pending and worker.ready:
            idx = pending.popleft()
            try:
              worker.submit((idx, *items[idx]))
            except OSError:  # an idle process worker died (OOM killer, ...): a new one takes over
              pending.appendleft(idx)
              self._replace(slot)
              continue
            running[slot] = (idx, time.monotonic() + self.timeout_s)
        # Sleep until the first deadline, or (nothing running: every idle worker is starting)
        # until a worker reports ready.
        wait_s = self.startup_timeout_s if not running else max(
            0.0, min(d for _, d in running.values()) - time.monotonic())
        for slot, status, value in self._wait(running, wait_s):
          idx, _ = running.pop(slot)
          results[idx] = self._accept(status, value)
          if status == "dead":
            self._replace(slot)
        now = time.monotonic()
        for slot, (idx, deadline) in list(running.items()):
          if now >= deadline:
            del running[slot]
            results[idx] = self._fallback("timeouts", f"timed out after {self.timeout_s:g} s")
            self._replace(slot)
        for worker in self._workers:
          if not worker.ready and now - worker.started > self.startup_timeout_s:
            raise RuntimeError(f"a reward worker process did not start within "
                               f"{self.startup_timeout_s:g} s (startup_timeout_s)")
    except BaseException:
      # RewardUnavailable or KeyboardInterrupt: do not leave busy workers behind.
      for slot in running:
        self._replace(slot)
      raise
    return results

  def _replace(self, slot: int) -> None:
    self._workers[slot].retire()
    self._workers[slot] = self._new_worker()
    self._counters["worker_restarts"] += 1

  def _wait(self, running: dict[int, tuple[int, float]], wait_s: float):
    """Answers that arrive within wait_s: list of (slot, status, value)."""
    if self.kind == "thread":
      by_token = {self._workers[s].token: s for s in running}
      answers, block = [], True
      while True:
        try:
          token, idx, status, value = self._outbox.get(block=block,
                                                        timeout=wait_s if block else None)
        except queue.Empty:
          return answers
        block = False
        slot = by_token.get(token)
        if slot is not None and running.get(slot, (None,))[0] == idx:
          answers.append((slot, status, value))
    watched = [s for s, w in enumerate(self._workers) if s in running or not w.ready]
    conns = {self._workers[s].conn: s for s in watched}
    answers = []
    for conn in multiprocessing.connection.wait(list(conns), timeout=wait_s):
      slot = conns[conn]
      worker = self._workers[slot]
      try:
        message = conn.recv()
      except (EOFError, OSError):
        worker.proc.join(timeout=1.0)  # reap it, so that its exit code is known
        if slot not in running:
          raise RuntimeError(f"a reward worker process exited while starting (exit code "
                             f"{worker.proc.exitcode}); can `fn` be unpickled in a new process?")
        answers.append((slot, "dead", f"worker process died (exit code {worker.proc.exitcode})"))
        continue
      if message == _READY:
        worker.ready = True
      elif running[slot][0] == message[0]:
        answers.append((slot, *message[1:]))
    return answers
