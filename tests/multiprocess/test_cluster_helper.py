"""The loopback-cluster helper (`tests/_cluster.py`) itself: what each process is told, and that
every process (and every child it starts) is ended however the test ends."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from _cluster import Cluster, ROOT, TESTS, check, run_cluster

pytestmark = pytest.mark.xdist_group("multiprocess")

_HANG = r"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"ready pid={os.getpid()} child={child.pid}", flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
  """True while `pid` exists and is not a zombie."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def _pids(out: str) -> list[int]:
  """The pids a `_HANG` process printed: its own and its child's."""
  return [int(out.split(f"{k}=")[1].split()[0]) for k in ("pid", "child")]


def _gone(pids, within: float = 10.0) -> bool:
  deadline = time.monotonic() + within
  while time.monotonic() < deadline:
    if not any(_alive(p) for p in pids):
      return True
    time.sleep(0.05)
  return False


def test_each_process_is_told_its_place_in_the_cluster():
  code = ("import json, os, sys; print(json.dumps({k: os.environ[k] for k in ("
          "'CLUSTER_COORDINATOR', 'CLUSTER_NUM_PROCESSES', 'CLUSTER_PROCESS_ID', "
          "'JAX_PLATFORMS', 'JAX_CPU_COLLECTIVES_IMPLEMENTATION', 'XLA_FLAGS')} | "
          "{'argv': sys.argv[1:]}))")
  with Cluster(code, args=["--id={process_id}", "{num_processes}@{coordinator}"],
               num_processes=3, devices_per_process=4, timeout=60) as c:
    results = check(c.wait())
  seen = [json.loads(r.stdout) for r in results]
  assert [s["CLUSTER_PROCESS_ID"] for s in seen] == ["0", "1", "2"]
  assert {s["CLUSTER_COORDINATOR"] for s in seen} == {c.coordinator}
  assert c.coordinator.startswith("127.0.0.1:")
  for i, s in enumerate(seen):
    assert s["argv"] == [f"--id={i}", f"3@{c.coordinator}"]
    assert s["CLUSTER_NUM_PROCESSES"] == "3" and s["JAX_PLATFORMS"] == "cpu"
    assert s["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"
    flags = s["XLA_FLAGS"].split()
    assert flags.count("--xla_force_host_platform_device_count=4") == 1
    assert not any(f.endswith("=8") and "device_count" in f for f in flags)
    # the suite's other XLA flags (conftest's code generation settings) are kept
    suite = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    assert set(suite) <= set(flags)


def test_wait_ends_hung_processes_and_their_children_at_the_deadline():
  with Cluster(_HANG, num_processes=2, timeout=60) as c:
    c.wait_for(0, "ready")
    c.wait_for(1, "ready")
    pids = _pids(c.output(0)[0]) + _pids(c.output(1)[0])
    t0 = time.monotonic()
    results = c.wait(timeout=1.0)
    waited = time.monotonic() - t0
  assert waited < 15, waited
  assert [r.returncode for r in results] == [-signal.SIGKILL] * 2
  assert all(r.ended_by_helper for r in results)
  assert _gone([c._procs[0].pid, c._procs[1].pid, *pids])


def test_a_failing_test_ends_the_cluster():
  with pytest.raises(AssertionError, match="the test failed here"):
    with Cluster(_HANG, num_processes=2, timeout=60) as c:
      c.wait_for(0, "ready")
      c.wait_for(1, "ready")
      pids = _pids(c.output(0)[0]) + _pids(c.output(1)[0])
      raise AssertionError("the test failed here")
  assert _gone([p.pid for p in c._procs] + pids)


def test_an_interrupted_test_ends_the_cluster():
  with pytest.raises(KeyboardInterrupt):
    with Cluster(_HANG, num_processes=2, timeout=60) as c:
      c.wait_for(0, "ready")
      c.wait_for(1, "ready")
      pids = _pids(c.output(0)[0]) + _pids(c.output(1)[0])
      raise KeyboardInterrupt
  assert _gone([p.pid for p in c._procs] + pids)


def test_processes_die_with_the_test_process_even_when_it_is_killed():
  """A pytest worker killed with SIGKILL runs no clean-up: the kernel's parent-death signal
  ends the cluster's processes and the processes they started."""
  driver = (
      "import sys; sys.path[:0] = [%r, %r]\n"
      "from _cluster import Cluster\n"
      "c = Cluster(%r, num_processes=2, timeout=600).start()\n"
      "c.wait_for(0, 'ready'); c.wait_for(1, 'ready')\n"
      "print(' '.join(str(p.pid) for p in c._procs), c.output(0)[0].strip(), "
      "c.output(1)[0].strip(), 'dir=' + c._dir, flush=True)\n"
      "import time; time.sleep(600)\n") % (TESTS, ROOT, _HANG)
  p = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True,
                       cwd=ROOT)
  try:
    line = p.stdout.readline()
    pids = [int(x) for x in line.split()[:2]] + _pids(line.split("ready", 1)[1]) + \
        _pids(line.split("ready")[2])
    assert len(pids) == 6 and all(_alive(x) for x in pids), line
    p.kill()
    p.wait(timeout=10)
    assert _gone(pids)
    shutil.rmtree(line.split("dir=")[1].strip())      # the killed driver's log files
  finally:
    p.kill()
    p.wait(timeout=10)


def test_wait_for_reports_a_process_that_exited_first():
  code = "import sys; print('starting'); sys.exit(3)"
  with Cluster(code, num_processes=2, timeout=60) as c:
    with pytest.raises(AssertionError, match=r"(?s)waiting for 'never printed'.*exit 3"):
      c.wait_for(1, "never printed")


def test_run_cluster_shows_every_process_when_one_fails():
  code = ("import os, sys; i = int(os.environ['CLUSTER_PROCESS_ID']); "
          "print(f'process {i} here'); sys.exit(i)")
  with pytest.raises(AssertionError) as e:
    run_cluster(code, num_processes=2, timeout=60)
  assert "process 0: exit 0" in str(e.value) and "process 1: exit 1" in str(e.value)
  assert "process 1 here" in str(e.value)
