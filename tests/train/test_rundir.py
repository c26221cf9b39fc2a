"""RunDir owns every file of a run: config.json, metrics.jsonl (resume trim, .old move),
eval.json, checkpoints (steps, keep policy, a step's parameters read alone, through the base
checkpoint recorded in config.json), and a process that does not write writes nothing."""

import dataclasses
import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

from botjax import models
from botjax.train import step as step_lib
from botjax.train.checkpoint import Checkpointer
from botjax.train.config import OptimConfig
from botjax.train.rundir import (RunDir, RunDirError, load_metrics, load_params, read_jsonl)


def _tiny(seed=0, scan=False):
  cfg = dataclasses.replace(models.get_config("tiny"), vocab_size=64, hidden_size=16,
                            num_layers=2, num_heads=2, num_kv_heads=1, head_dim=8,
                            intermediate_size=32)
  return models.Decoder(cfg, rngs=nnx.Rngs(seed), scan_layers=scan)


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def test_config_metrics_and_eval_files(tmp_path):
  run = RunDir(str(tmp_path / "r"), is_writer=True)
  assert not run.has_run()
  with pytest.raises(RunDirError, match="has no config.json: not a run directory"):
    run.read_config()
  run.write_config({"b": (1, 2), "a": {"x": 1}})
  assert run.read_config() == {"a": {"x": 1}, "b": [1, 2]}
  w = run.metrics_writer()
  rows = [w.write(s, {"loss": np.float32(0.5) * s, "nan": float("nan")}) for s in range(1, 4)]
  w.close()
  assert run.has_run() and load_metrics(run.path) == rows == read_jsonl(run.metrics_path)
  assert rows[1] == {"step": 2, "loss": 1.0, "nan": "nan"}       # JSON-ready values
  # a resumed run drops the rows after its checkpoint; a fresh one moves the file aside
  run.begin_metrics(2)
  assert [r["step"] for r in run.read_metrics()] == [1, 2]
  run.begin_metrics(0)
  assert not os.path.exists(run.metrics_path)
  [old] = [f for f in os.listdir(run.path) if f.endswith(".old")]
  assert [r["step"] for r in read_jsonl(run.file(old))] == [1, 2]
  # eval.json: latest + history, appended across calls (and across RunDir objects)
  assert run.read_eval() == []
  run.append_eval(0, {"pass@1": np.float64(0.25)})
  RunDir(run.path, is_writer=True).append_eval(5, {"pass@1": 0.5})
  with open(run.eval_path) as f:
    blob = json.load(f)
  assert blob["latest"] == {"step": 5, "pass@1": 0.5} and len(blob["history"]) == 2
  (tmp_path / "bad.jsonl").write_text('{"step": 1}\nnot json\n')
  with pytest.raises(RunDirError, match="bad.jsonl is not JSONL"):
    read_jsonl(str(tmp_path / "bad.jsonl"))


def test_a_process_that_does_not_write_writes_nothing(tmp_path):
  run = RunDir(str(tmp_path / "r"), is_writer=False)
  run.write_config({"a": 1})
  w = run.metrics_writer(tensorboard=True)
  assert w.write(1, {"loss": 1.0}) == {"step": 1, "loss": 1.0}
  w.close()
  run.append_eval(1, {"x": 1.0})
  run.begin_metrics(0)
  assert not os.path.exists(run.path)
  assert RunDir(str(tmp_path)).is_writer is (jax.process_index() == 0)


def test_checkpoints_keep_the_newest_and_give_any_steps_parameters(tmp_path):
  model = _tiny()
  graphdef, params, rest = step_lib.split_model(model)
  opt = step_lib.make_optimizer(OptimConfig(), 10)
  run = RunDir(str(tmp_path / "r"), is_writer=True)
  ckpt = run.checkpointer(keep=2)
  saved = {}
  for s in (1, 2, 3):
    params = jax.tree.map(lambda x, s=s: x + s, params)      # a different tree per step
    ckpt.save(s, step_lib.init_state(params, opt, 0), {"config": {}, "position": s})
    saved[s] = _leaves(params)
  assert ckpt.steps() == run.checkpoint_steps() == [2, 3]     # keep=2
  for like in (model, nnx.state(model, nnx.Param), nnx.eval_shape(lambda: _tiny(1))):
    got = ckpt.restore_params(2, like)
    assert jax.tree.structure(got) == jax.tree.structure(nnx.state(model, nnx.Param))
    for a, b in zip(_leaves(got), saved[2]):
      np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match=r"no checkpoint of step 1 .*saved: \[2, 3\]"):
    ckpt.restore_params(1, model)
  ckpt.close()
  # through the run directory: the base checkpoint recorded in config.json gives the structure
  with pytest.raises(RunDirError, match="not a run directory"):
    load_params(run.path)
  run.write_config({"train": {}, "checkpoint": None})
  with pytest.raises(RunDirError, match="records no base checkpoint"):
    load_params(run.path)
  base = str(tmp_path / "base")
  models.save_pretrained(_tiny(7), base)
  run.write_config({"train": {}, "checkpoint": base, "scan_layers": False})
  for a, b in zip(_leaves(load_params(run.path)), saved[3]):        # newest by default
    np.testing.assert_array_equal(a, b)
  for a, b in zip(_leaves(load_params(run.path, 2, like=model)), saved[2]):
    np.testing.assert_array_equal(a, b)
  loaded = run.load_model(2)
  for a, b in zip(_leaves(nnx.state(loaded, nnx.Param)), saved[2]):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(RunDirError, match=r"no checkpoint of step 7; saved: \[2, 3\]"):
    load_params(run.path, 7)
  with pytest.raises(RunDirError, match="holds no checkpoint"):
    load_params(str(tmp_path))
