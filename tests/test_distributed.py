"""`botjax.distributed` in this one process (8 CPU devices, no cluster): addresses, hashes, rows
and the local <-> global conversions. The multi-process behaviour is in tests/multiprocess/."""
import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from botjax import distributed as bd
from botjax.models.sharding import batch_sharding, make_mesh


def test_addresses_are_host_and_port():
  assert bd.parse_address("10.0.0.1:1234") == ("10.0.0.1", 1234)
  assert bd.parse_address("[::1]:8476") == ("::1", 8476)
  assert bd.parse_address("host-0.pod:80") == ("host-0.pod", 80)
  for bad in ("10.0.0.1", ":1234", "h:0", "h:65536", "h:port", ""):
    with pytest.raises(bd.ClusterError, match="is not host:port"):
      bd.parse_address(bad)


def test_config_hash_ignores_key_order_but_not_values():
  a = {"model": "tiny", "train": {"lr": 1e-6, "steps": 2}}
  assert bd.config_hash(a) == bd.config_hash({"train": {"steps": 2, "lr": 1e-6}, "model": "tiny"})
  assert bd.config_hash(a) != bd.config_hash({"model": "tiny", "train": {"lr": 1e-6, "steps": 3}})
  assert bd.check_same_config(a) == bd.config_hash(a)       # one process: nothing to compare


def test_the_watchdog_names_a_lost_process_before_jax_ends_the_others():
  s = bd.Settings(heartbeat_timeout_s=60)
  # JAX's detection comes 0.5-1 x the timeout after the last heartbeat; the watchdog's after
  # lost_after_s +- one beat interval
  assert s.lost_after_s + 2 * s.beat_interval_s < s.heartbeat_timeout_s / 2
  for bad in (0, 1, 2.5, True, None):
    with pytest.raises(bd.ClusterError, match="whole number of seconds"):
      bd.Settings(init_timeout_s=bad)


@pytest.mark.parametrize("spec", ["fsdp:8", "data:2,fsdp:4", "data:2,fsdp:2,tensor:2"])
def test_rows_round_trip_through_a_global_array(spec):
  mesh = make_mesh(spec)
  x = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
  rows = batch_sharding(mesh)
  assert bd.local_rows(rows, x.shape) == slice(0, 16)       # one process holds every row
  g = bd.to_global({"x": x, "n": x[:, 0].astype(np.int32)}, mesh)   # rows of any rank
  assert g["x"].sharding == rows and g["x"].shape == (16, 3)
  assert g["n"].sharding == batch_sharding(mesh, 1)
  np.testing.assert_array_equal(bd.to_local(bd.to_global(x, rows)), x)
  np.testing.assert_array_equal(bd.to_local(g["x"]), x)
  np.testing.assert_array_equal(bd.to_local(g["n"]), x[:, 0].astype(np.int32))
  np.testing.assert_array_equal(bd.gather(g)["x"], x)
  assert bd.process_slice(8) == slice(0, 8)


def test_to_local_refuses_arrays_split_beyond_their_rows():
  mesh = make_mesh("fsdp:8")
  w = jax.device_put(np.ones((4, 16), np.float32), NamedSharding(mesh, P(None, "fsdp")))
  with pytest.raises(ValueError, match="sharded beyond its rows"):
    bd.to_local(w)


def test_a_mesh_larger_than_the_devices_is_refused():
  assert bd.check_mesh("data:2,fsdp:-1") == {"data": 2, "fsdp": 4, "tensor": 1}
  with pytest.raises(bd.ClusterError, match=r"uses 16 devices, but 8 are available.*1 process"):
    bd.check_mesh("data:2,fsdp:8")
  assert bd.is_writer()
