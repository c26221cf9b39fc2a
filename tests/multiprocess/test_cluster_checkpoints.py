"""Orbax checkpoints of a sharded state (parameters + an AdamW state) saved from a 2-process
cluster and restored on other layouts, and a save killed half-way.

Orbax's protocol, as these tests rely on it (orbax-checkpoint 0.12.8): every process writes its
shards under `<step>.orbax-checkpoint-tmp/`; all meet at the `async_write_complete` barrier;
process 0 then merges the per-process files and renames the directory to `<step>` (the commit);
all meet again at `async_commit_complete`. `CheckpointManager.all_steps()` / `latest_step()` list
only committed steps, so a step whose save did not finish is never the one resumed.
"""
import os
import re

import numpy as np
import pytest

from _cluster import Cluster, check, describe, run_cluster
from _workers import result

pytestmark = pytest.mark.xdist_group("multiprocess")

WORKERS = "tests/multiprocess/_workers.py"
SPECS = {"['params']['embed']": "P('fsdp', None)", "['params']['w']": "P(None, 'fsdp')",
         "['params']['norm']": "P(None,)", "['params']['heads']": "P('tensor', None)",
         "['opt'][0].count": "P()"}


def _check_restored(saved: dict, restored: dict, mesh: dict) -> None:
  """Exactly the saved values, placed on `mesh` as asked (moments like their parameters)."""
  assert restored.keys() == saved.keys()
  for name, leaf in restored.items():
    np.testing.assert_array_equal(np.asarray(leaf["value"]), np.asarray(saved[name]["value"]),
                                  err_msg=name)
    assert leaf["mesh"] == mesh, name
    param = re.sub(r"\['opt'\]\[0\]\.(mu|nu)", "['params']", name)    # a moment: its param's
    assert leaf["spec"] == SPECS.get(name, SPECS.get(param)), (name, leaf["spec"])


def test_a_two_process_save_restores_resharded_on_other_layouts(tmp_path):
  ckpt = str(tmp_path / "ckpt")
  two = [result(r.stdout) for r in run_cluster(
      script=WORKERS, args=["save", ckpt, "data:2,fsdp:4", "fsdp:4,tensor:2"], timeout=180)]
  saved = two[0]["saved"]
  assert saved["['params']['embed']"]["mesh"] == {"data": 2, "fsdp": 4, "tensor": 1}
  assert saved["['params']['embed']"]["shard_shapes"] == [[16, 32]]
  assert float(np.asarray(saved["['opt'][0].count"]["value"])) == 1.0
  assert np.abs(np.asarray(saved["['opt'][0].mu['w']"]["value"])).sum() > 0
  for p in two:           # 2 processes, mesh fsdp:4,tensor:2 (`heads` now split over tensor)
    assert p["step"] == 1 and p["steps"] == [1]
    _check_restored(saved, p["restored"], {"data": 1, "fsdp": 4, "tensor": 2})
    assert p["restored"]["['params']['heads']"]["shard_shapes"] == [[4, 16]]
  (one,) = run_cluster(script=WORKERS, args=["restore", ckpt, "fsdp:8"], num_processes=1,
                       devices_per_process=8, timeout=180)
  one = result(one.stdout)      # 1 process x 8 devices, mesh fsdp:8
  _check_restored(saved, one["restored"], {"data": 1, "fsdp": 8, "tensor": 1})
  assert one["restored"]["['params']['embed']"]["shard_shapes"] == [[8, 32]]
  assert one["restored"]["['opt'][0].nu['w']"]["shard_shapes"] == [[32, 6]]


@pytest.mark.e2e
def test_a_save_killed_half_way_is_not_the_step_resumed(tmp_path):
  ckpt = str(tmp_path / "ckpt")
  with Cluster(script=WORKERS, args=["save_killed_midway", ckpt], timeout=180) as c:
    c.wait_for(1, "step 2 written, not committed")
    during = sorted(os.listdir(ckpt))
    c.kill(1)
    results = c.wait()
  assert during == ["1", "2.orbax-checkpoint-tmp"]
  step2 = os.path.join(ckpt, "2.orbax-checkpoint-tmp", "state.orbax-checkpoint-tmp")
  assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(step2))   # data, no commit
  assert results[0].returncode == 75, describe(results)   # process 0 was waiting at the barrier
  assert "lost process 1 of 2" in results[0].stderr
  assert sorted(os.listdir(ckpt)) == ["1", "2.orbax-checkpoint-tmp"]

  resumed = [result(r.stdout) for r in check(
      run_cluster(script=WORKERS, args=["resume_after_kill", ckpt], timeout=180,
                  check_ok=False))]
  for p in resumed:
    assert p["before"] == ["1", "2.orbax-checkpoint-tmp"]
    assert p["step"] == 1                                   # the finished step, not step 2
    for name, leaf in p["fresh"].items():                   # step 1's values, exactly
      np.testing.assert_array_equal(np.asarray(p["restored"][name]["value"]),
                                    np.asarray(leaf["value"]), err_msg=name)
    assert p["steps"] == [1, 2] and p["after"] == ["1", "2"]  # step 2 saved again, committed
    for name, leaf in p["doubled"].items():
      np.testing.assert_array_equal(np.asarray(p["again"][name]["value"]),
                                    np.asarray(leaf["value"]), err_msg=name)
