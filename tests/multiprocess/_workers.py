"""What each process of the multi-process tests runs: `python _workers.py <job> [args]`, started
by `_cluster.Cluster` (which sets CLUSTER_COORDINATOR / CLUSTER_NUM_PROCESSES /
CLUSTER_PROCESS_ID) or as one plain process with 8 devices (no CLUSTER_* variables).

A job prints its findings as one line `RESULT <json>` on stdout; `result(stdout)` reads it back.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

HEARTBEAT_S = int(os.environ.get("BOTJAX_TEST_HEARTBEAT_S", "20"))
WATCHDOG = os.environ.get("BOTJAX_TEST_WATCHDOG", "1") == "1"    # _measure.py turns it off

# The sharded pytree of the checkpoint tests: (shape, partition spec over data/fsdp/tensor).
PARAMS = {
    "embed": ((64, 32), ("fsdp", None)),
    "w": ((32, 48), (None, "fsdp")),
    "norm": ((48,), (None,)),
    "heads": ((8, 16), ("tensor", None)),
}


def join():
  """Joins the cluster described by CLUSTER_* (none: a one-process run). Returns the module."""
  from botjax import distributed
  if "CLUSTER_COORDINATOR" in os.environ:
    distributed.initialize(os.environ["CLUSTER_COORDINATOR"],
                           int(os.environ["CLUSTER_NUM_PROCESSES"]),
                           int(os.environ["CLUSTER_PROCESS_ID"]),
                           settings=distributed.Settings(heartbeat_timeout_s=HEARTBEAT_S,
                                                         init_timeout_s=60,
                                                         watchdog=WATCHDOG))
  return distributed


def emit(**values) -> None:
  print("RESULT " + json.dumps(values, default=str), flush=True)


def result(stdout: str) -> dict:
  """The `RESULT` line a job printed, as a dict."""
  for line in reversed(stdout.splitlines()):
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT "):])
  raise AssertionError(f"no RESULT line in:\n{stdout[-3000:]}")


def mesh(spec: str):
  from botjax.models.sharding import make_mesh
  return make_mesh(spec)


# -- jobs ---------------------------------------------------------------------------------------

def collectives():
  """A sharded matmul + reductions over 16 rows built from process-local rows, the row
  bookkeeping, gathers, and the config and mesh checks."""
  bd = join()
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec as P
  m = mesh("data:2,fsdp:4")
  rows = NamedSharding(m, P(("data", "fsdp"), None))
  x_all = (np.arange(16 * 12, dtype=np.float32).reshape(16, 12) % 7.0) - 3.0
  w = np.linspace(-1, 1, 12 * 5, dtype=np.float32).reshape(12, 5)
  mine = bd.local_rows(rows, x_all.shape)
  x = bd.to_global(x_all[mine], rows)                # each process passes only its rows
  w_g = jax.device_put(w, NamedSharding(m, P()))

  @jax.jit
  def f(x, w):
    y = jnp.tanh(x @ w)
    return y, y.sum(), (y * y).mean(axis=0), jnp.max(x)

  y, total, colmean, xmax = f(x, w_g)
  y_local = bd.to_local(y)
  out = dict(process=jax.process_index(), count=jax.process_count(), writer=bd.is_writer(),
             rows=[mine.start, mine.stop], share=[bd.process_slice(8).start,
                                                  bd.process_slice(8).stop],
             y_local=y_local.tolist(), y=bd.gather(y).tolist(), total=float(total),
             colmean=np.asarray(bd.gather(colmean)).tolist(), xmax=float(xmax),
             x_roundtrip=bool(np.array_equal(bd.gather(x), x_all)))
  me = jax.process_index()
  # objects of different sizes per process (one past a power-of-two padding), twice
  out["objects"] = [bd.allgather_objects({"p": me, "text": "x" * (17 + 300 * me)}),
                    bd.allgather_objects([me, None, (1.5, "é")])]
  bd.check_same_config({"model": "tiny", "train": {"lr": 1e-6, "steps": 2}})
  try:
    bd.check_same_config({"model": "tiny", "train": {"lr": 1e-6, "steps": 2 + me,
                                                     "seed": 0}, "host_only": me == 1})
    out["mismatch_error"] = None
  except bd.ClusterError as e:
    out["mismatch_error"] = str(e)
  try:
    bd.check_mesh("data:4,fsdp:4")
    out["mesh_error"] = None
  except bd.ClusterError as e:
    out["mesh_error"] = str(e)
  emit(**out)


def sleep_forever():
  """Joins, says so, and hangs (the helper must end it, and the child it starts)."""
  import subprocess
  child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
  print(f"ready child={child.pid}", flush=True)
  time.sleep(600)


def lose_a_process():
  """Every process loops over a collective; the test kills one (or one raises, with
  `raise=<id>`), and the others must stop, naming it."""
  bd = join()
  import jax
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec as P
  m = mesh("data:2,fsdp:4")
  x = bd.to_global(np.ones((32, 64), np.float32), NamedSharding(m, P(("data", "fsdp"), None)))
  f = jax.jit(lambda x, i: ((x + i) @ (x + i).T).sum(), out_shardings=NamedSharding(m, P()))
  float(f(x, 0))
  raiser = int(sys.argv[2]) if len(sys.argv) > 2 else -1
  print("looping", flush=True)
  for i in range(10**9):
    if i == 20 and jax.process_index() == raiser:
      raise RuntimeError("a reward function failed on this host")
    float(f(x, i))


def _params(m, specs=PARAMS):
  import jax
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec as P
  rng = np.random.default_rng(0)
  host = {k: rng.standard_normal(shape).astype(np.float32) for k, (shape, _) in specs.items()}
  sh = {k: NamedSharding(m, P(*spec)) for k, (_, spec) in specs.items()}
  return {k: jax.make_array_from_callback(host[k].shape, sh[k], lambda i, a=host[k]: a[i])
          for k in host}, sh


def _state(m):
  """Parameters and an AdamW state after one update, every leaf placed by name on mesh `m`
  (the moments like their parameters, the step count replicated)."""
  import jax
  import optax
  from jax.sharding import NamedSharding, PartitionSpec as P
  params, sh = _params(m)
  tx = optax.adamw(1e-2, weight_decay=0.1)
  opt_sh = optax.tree_map_params(
      tx, lambda _, s: s, jax.eval_shape(tx.init, params), sh,
      transform_non_params=lambda _: NamedSharding(m, P()),
      is_leaf=lambda x: isinstance(x, NamedSharding))
  opt = jax.jit(tx.init, out_shardings=opt_sh)(params)

  def step(p, o):
    g = jax.grad(lambda p: sum(((v ** 2) * 0.5).sum() for v in jax.tree.leaves(p)))(p)
    u, o = tx.update(g, o, p)
    return optax.apply_updates(p, u), o

  params, opt = jax.jit(step, out_shardings=(sh, opt_sh))(params, opt)
  return {"params": params, "opt": opt}


def _fingerprint(state) -> dict:
  """Every leaf's full value (gathered to this process), sharding spec, mesh and the shape of
  the shards this process holds, by path."""
  import jax
  import numpy as np
  from botjax import distributed as bd
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(state):
    name = jax.tree_util.keystr(path)
    spec = getattr(leaf.sharding, "spec", None)
    out[name] = {"value": np.asarray(bd.gather(leaf)).tolist(),
                 "spec": None if spec is None else str(spec),
                 "mesh": dict(leaf.sharding.mesh.shape) if spec is not None else None,
                 "shard_shapes": sorted({tuple(s.data.shape) for s in leaf.addressable_shards})}
  return out


def _manager(directory):
  import orbax.checkpoint as ocp
  return ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
      max_to_keep=3, create=True))


def save():
  """Saves the state built on one mesh as step 1, then (as a job restarted on another layout
  would) restores it onto another mesh's shardings: `save <dir> <mesh_spec> <restore_spec>`."""
  bd = join()
  import orbax.checkpoint as ocp
  directory, spec, restore_spec = sys.argv[2:5]
  state = _state(mesh(spec))
  with _manager(directory) as mngr:
    mngr.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))
    mngr.wait_until_finished()
  bd.barrier("saved")
  emit(saved=_fingerprint(state), **_restore(directory, restore_spec))


def _restore(directory, spec) -> dict:
  """The latest step restored onto mesh `spec`'s shardings (as `_state` places each leaf)."""
  import orbax.checkpoint as ocp
  target = _abstract(mesh(spec))
  with _manager(directory) as mngr:
    step = mngr.latest_step()
    restored = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target)))["state"]
    steps = list(mngr.all_steps())
  return dict(step=step, steps=steps, restored=_fingerprint(restored))


def restore():
  """`restore <dir> <mesh_spec>`: `_restore` in a job of its own."""
  join()
  emit(**_restore(sys.argv[2], sys.argv[3]))


def _abstract(m):
  """`_state(m)`'s structure, shapes, dtypes and shardings (what a restore fills in)."""
  import jax
  state = _state(m)
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                      state)


def save_killed_midway():
  """Saves step 1, then starts saving step 2 (the state scaled by 2) and, in process 1, stops
  just before the barrier that lets process 0 commit the step, so the test can kill it there:
  `save_killed_midway <dir>`."""
  join()
  import jax
  import orbax.checkpoint as ocp
  from orbax.checkpoint._src.multihost import multihost
  directory = sys.argv[2]
  original = multihost.get_barrier_sync_fn

  def get_barrier_sync_fn(**kwargs):
    sync = original(**kwargs)

    def sync_or_hang(*, key, timeout_ms):
      if "async_write_complete" in key and key.endswith("2") and jax.process_index() == 1:
        print(f"in barrier {key}: step 2 written, not committed", flush=True)
        time.sleep(600)
      return sync(key=key, timeout_ms=timeout_ms)
    return sync_or_hang

  multihost.get_barrier_sync_fn = get_barrier_sync_fn
  state = _state(mesh("data:2,fsdp:4"))
  with _manager(directory) as mngr:
    mngr.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))
    mngr.wait_until_finished()
    print("step 1 saved", flush=True)
    doubled = jax.tree.map(lambda x: x * 2, state)
    mngr.save(2, args=ocp.args.Composite(state=ocp.args.StandardSave(doubled)))
    mngr.wait_until_finished()
  print("step 2 saved (unexpected)", flush=True)


def resume_after_kill():
  """Restores the latest finished step, then saves step 2 again and restores it:
  `resume_after_kill <dir>`."""
  bd = join()
  import jax
  import orbax.checkpoint as ocp
  directory = sys.argv[2]
  m = mesh("data:2,fsdp:4")
  target = _abstract(m)
  before = sorted(os.listdir(directory))
  with _manager(directory) as mngr:
    step = mngr.latest_step()
    restored = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target)))["state"]
    doubled = jax.tree.map(lambda x: x * 2, restored)
    mngr.save(2, args=ocp.args.Composite(state=ocp.args.StandardSave(doubled)))
    mngr.wait_until_finished()
    again = mngr.restore(2, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target)))["state"]
    steps = list(mngr.all_steps())
  bd.barrier("resumed")
  emit(before=before, step=step, restored=_fingerprint(restored),
       fresh=_fingerprint(_state(m)), steps=steps, again=_fingerprint(again),
       doubled=_fingerprint(doubled), after=sorted(os.listdir(directory)))


def collect_share():
  """`RolloutCollector.collect` of 2 steps (4 prompts x 4 samples) with the warm start at
  argv[2] on mesh data:2,fsdp:4: which prompt indices this process read, which rows it scored,
  and a digest of the rollouts every process returns."""
  bd = join()
  import hashlib

  import jax
  import numpy as np

  from botjax import models
  from botjax.rewards.base import RewardResult
  from botjax.rewards.pool import RewardPool
  from botjax.sampling import SamplingConfig, make_engine
  from botjax.testbeds import arith
  from botjax.train.rollouts import RolloutCollector

  read, scored = [], []

  class Prompts:
    def get(self, index):
      read.append(int(index))
      return {"problem": f"{index % 7 + 1} + {index % 5 + 2}", "answer": str(index % 7 + index % 5 + 3)}

  def reward(prompts, completions, metadata):
    scored.extend(int(m["_row"]) for m in metadata)
    return [RewardResult(float(len(c) % 3), components={"length": float(len(c))})
            for c in completions]

  ckpt = sys.argv[2]
  m = mesh("data:2,fsdp:4")
  model = models.load_pretrained(ckpt, mesh=m)
  tok = models.load_tokenizer(ckpt)
  engine = make_engine("jax", model, SamplingConfig.for_model(model, tok, max_new_tokens=16),
                       mesh=m)
  collector = RolloutCollector(
      engine=engine, tokenizer=tok, prompts=Prompts(), prompt_fn=arith.prompt_messages,
      pool=RewardPool(reward, num_workers=1, kind="inline"), prompts_per_step=4, group_size=4,
      max_prompt_tokens=128, dynamic_sampling=False, max_resample_rounds=0,
      pad_id=engine.config.pad_token_id)
  steps = []
  for step in range(2):
    before = (list(read), list(scored))
    roll, info = collector.collect(jax.random.fold_in(jax.random.PRNGKey(0), step), step)
    digest = hashlib.sha256()
    for x in (roll.tokens, roll.mask, roll.logp, roll.rewards, roll.group_ids, roll.local):
      digest.update(np.ascontiguousarray(x).tobytes())
    steps.append({"read": read[len(before[0]):], "scored": sorted(scored[len(before[1]):]),
                  "rewards": roll.rewards.tolist(), "digest": digest.hexdigest(),
                  "completions": roll.completions, "position": collector.position,
                  "lengths": [r.components["length"] for r in roll.results],
                  "reward_failures": info["reward_failures"]})
  engine.close()
  emit(process=jax.process_index(), steps=steps)


if __name__ == "__main__":
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  {f.__name__: f for f in (collectives, sleep_forever, lose_a_process, save, restore,
                           save_killed_midway, resume_after_kill, collect_share)}[sys.argv[1]]()
