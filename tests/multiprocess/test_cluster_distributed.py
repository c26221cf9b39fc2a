"""`botjax.distributed` on real JAX clusters of 2 processes x 4 CPU devices joined over loopback
(gloo collectives), against the same program in 1 process x 8 devices.

What a lost process does is measured here too: the survivors' exit codes, messages and times.
"""
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from _cluster import Cluster, ROOT, cluster_env, describe, free_port, run_cluster
from _workers import HEARTBEAT_S, result

pytestmark = pytest.mark.xdist_group("multiprocess")

WORKERS = "tests/multiprocess/_workers.py"
# A lost peer is named after a quarter of the heartbeat timeout of silence; JAX's own detection
# comes after 0.5-1 x the timeout (+ ~1 s between its checks). Either way a survivor is gone
# well within this; the rest is slack for a loaded 2-core machine.
LOST_BOUND_S = HEARTBEAT_S + 15


@pytest.fixture(scope="module")
def two_processes():
  return [result(r.stdout) for r in run_cluster(script=WORKERS, args=["collectives"],
                                                 timeout=180)]


@pytest.fixture(scope="module")
def one_process():
  (r,) = run_cluster(script=WORKERS, args=["collectives"], num_processes=1,
                     devices_per_process=8, timeout=180)
  return result(r.stdout)


def test_a_sharded_program_gives_the_same_result_on_two_processes_as_on_one(
    two_processes, one_process):
  for key in ("y", "total", "colmean", "xmax"):
    for p in two_processes:   # exactly equal: the same XLA program over the same 8 devices
      np.testing.assert_array_equal(np.asarray(p[key]), np.asarray(one_process[key]), key)
  x = (np.arange(16 * 12, dtype=np.float32).reshape(16, 12) % 7.0) - 3.0
  w = np.linspace(-1, 1, 12 * 5, dtype=np.float32).reshape(12, 5)
  np.testing.assert_allclose(np.asarray(one_process["y"]), np.tanh(x @ w), rtol=1e-5,
                             atol=1e-6)


def test_each_process_holds_its_block_of_rows(two_processes, one_process):
  assert [p["process"] for p in two_processes] == [0, 1]
  assert [p["rows"] for p in two_processes] == [[0, 8], [8, 16]]
  assert one_process["rows"] == [0, 16]
  assert [p["share"] for p in two_processes] == [[0, 4], [4, 8]]
  y = np.asarray(one_process["y"])
  for p in two_processes:
    lo, hi = p["rows"]
    np.testing.assert_array_equal(np.asarray(p["y_local"]), y[lo:hi])
    assert p["x_roundtrip"]      # the rows each process gave come back, gathered, in order


def test_every_process_gets_every_process_object_in_order(two_processes, one_process):
  want = [[{"p": p, "text": "x" * (17 + 300 * p)} for p in (0, 1)],
          [[p, None, [1.5, "é"]] for p in (0, 1)]]       # (tuples come back as JSON lists)
  for p in two_processes:
    assert p["objects"] == want
  assert one_process["objects"] == [[w[0]] for w in want]


def test_only_process_zero_writes(two_processes, one_process):
  assert [p["writer"] for p in two_processes] == [True, False]
  assert one_process["writer"] is True


def test_processes_that_disagree_on_the_config_are_named(two_processes, one_process):
  errors = [p["mismatch_error"] for p in two_processes]
  assert errors[0] == errors[1]            # the same message on every process
  e = errors[0]
  assert "processes [0] have run config" in e and "processes [1] have run config" in e
  assert "train.steps: process 0: 2, process 1: 3" in e
  assert "host_only: process 0: False, process 1: True" in e
  assert "train.lr" not in e and "model" not in e.split("\n", 1)[1]
  assert one_process["mismatch_error"] is None


def test_a_mesh_larger_than_the_cluster_is_refused(two_processes):
  e = two_processes[0]["mesh_error"]
  assert "'data:4,fsdp:4' uses 16 devices, but 8 are available" in e
  assert "2 process(es) x 4 local devices" in e


_JOIN = textwrap.dedent("""
  import json, socket, sys, time
  from botjax import distributed as bd
  port = int(sys.argv[1])
  out = {}
  def attempt(name, address, n, i, timeout_s=3):
    t = time.monotonic()
    try:
      bd.initialize(address, n, i, settings=bd.Settings(init_timeout_s=timeout_s))
      out[name] = ["joined", time.monotonic() - t]
    except bd.ClusterError as e:
      out[name] = [str(e), time.monotonic() - t]
  attempt("unreachable", f"127.0.0.1:{port}", 2, 1)
  attempt("bad_host", f"no-such-host.invalid:{port}", 2, 1)
  attempt("no_port", "127.0.0.1", 2, 1)
  attempt("bad_id", f"127.0.0.1:{port}", 2, 2)
  attempt("partial", f"127.0.0.1:{port}", None, 0)
  held = socket.socket(socket.AF_INET6)
  held.bind(("::", port))
  held.listen()
  attempt("port_in_use", f"127.0.0.1:{port}", 2, 0)
  print(json.dumps(out))
""")


def test_bad_cluster_set_ups_fail_fast_with_what_to_fix():
  port = free_port()
  env = cluster_env(2, 1, f"127.0.0.1:{port}", 4)
  r = subprocess.run([sys.executable, "-c", _JOIN, str(port)], capture_output=True, text=True,
                     timeout=120, cwd=ROOT, env={**os.environ, **env})
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  msg, seconds = out["unreachable"]
  assert f"coordinator 127.0.0.1:{port} not reachable after 3 s" in msg
  assert "Connection refused" in msg and "process 0" in msg
  assert 2.5 < seconds < 20, seconds       # bounded by init_timeout_s, not JAX's 5-minute wait
  assert "cannot resolve host 'no-such-host.invalid'" in out["bad_host"][0]
  assert "'127.0.0.1' is not host:port" in out["no_port"][0]
  assert "process id 2 is not in 0..1" in out["bad_id"][0]
  assert "give all of coordinator address" in out["partial"][0]
  assert f"cannot serve the coordinator on port {port}" in out["port_in_use"][0]


def test_a_cluster_that_does_not_form_ends_with_a_message():
  """Process 0 of 2 starts; process 1 never does."""
  code = ("import os; from botjax import distributed as bd; "
          "bd.initialize(os.environ['CLUSTER_COORDINATOR'], 2, 0, "
          "settings=bd.Settings(init_timeout_s=4))")
  (r,) = run_cluster(code, num_processes=1, timeout=120, check_ok=False)
  assert r.returncode == 75, describe([r])
  assert "did not form within 4 s" in r.stderr and "not all 2 processes joined" in r.stderr
  assert not r.ended_by_helper


def _lose(kill: int | None = None, raiser: int | None = None):
  """Runs `lose_a_process` on 2 processes; kills process `kill` once both loop (or lets
  process `raiser` raise). Returns (results, seconds from the kill to each exit)."""
  args = ["lose_a_process"] + ([] if raiser is None else [str(raiser)])
  with Cluster(script=WORKERS, args=args, timeout=180) as c:
    c.wait_for(0, "looping")
    t = c.wait_for(1, "looping")
    if kill is not None:
      time.sleep(1.0)
      c.kill(kill)
      t = time.monotonic() - c._t0
    results = c.wait()
  return results, [r.seconds - t for r in results]


@pytest.mark.e2e
def test_losing_a_process_mid_collective_stops_the_others_naming_it():
  results, after = _lose(kill=1)
  survivor = results[0]
  assert survivor.returncode == 75 and not survivor.ended_by_helper, describe(results)
  assert "[botjax] process 0 of 2: lost process 1 of 2 (host " in survivor.stderr
  assert "restart the job" in survivor.stderr
  assert after[0] < LOST_BOUND_S, (after, describe(results))


@pytest.mark.e2e
def test_losing_process_zero_stops_the_others_at_once():
  """Process 0 holds the coordination service: with it gone, JAX ends the others itself
  (SIGABRT) with a message that names the leader task; botjax has no chance to print first."""
  results, after = _lose(kill=0)
  survivor = results[1]
  assert survivor.returncode == -6 and not survivor.ended_by_helper, describe(results)
  assert "Either the leader task was preempted/died/restarted unexpectedly" in survivor.stderr
  assert after[1] < LOST_BOUND_S, (after, describe(results))


@pytest.mark.e2e
def test_a_process_that_fails_stops_the_others_naming_it():
  results, _ = _lose(raiser=1)
  assert "RuntimeError: a reward function failed on this host" in results[1].stderr
  other = results[0]
  assert other.returncode == 1 and not other.ended_by_helper, describe(results)
  assert ("[botjax] process 0 of 2: process 1 of 2 (host " in other.stderr
          and "failed (error: RuntimeError: a reward function failed on this host)"
          in other.stderr), describe(results)
