"""experiments/aime.py as a user runs it: subprocesses, exit codes, files written."""
import importlib.util
import json
import os

import pytest

from _aime_data import aime_rows, fill_hf_datasets_cache, write_aime_csv
from _util import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "aime.py")
FAST = ["--set=rollout.prompts_per_step=2", "--set=rollout.group_size=4",
        "--set=rollout.max_new_tokens=32", "--set=tensorboard=false", "--set=progress=false",
        "--eval_every=0", "--eval_n=4", "--eval_limit=4"]
TINY_WARM = ["--warm=warm_steps=20", "--warm=num_train=64", "--warm=num_eval=8"]


def _run(*args, timeout=240, env=None):
  return run_script(SCRIPT, *args, timeout=timeout, env=env)


def test_help_and_dry_run_plan_without_weights(tmp_path):
  h = _run("--help")
  assert h.returncode == 0, h.stderr
  for flag in ("algo", "mesh", "checkpoint", "judge", "dry_run", "eval_only", "resume", "set"):
    assert f"{flag}:" in h.stdout
  r = _run("--model=qwen2.5-3b", "--mesh=fsdp:8", "--dry_run", f"--workdir={tmp_path}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "3,085.9 M" in r.stdout and "8 devices" in r.stdout
  assert '"learning_rate": 5e-07' in r.stdout and not os.listdir(tmp_path)
  # the paper's data by default: AIME 1983–2024 from the Hub, a seeded random 80/20 split
  data_line = next(line for line in r.stdout.splitlines() if line.startswith("[aime] data: "))
  spec = json.loads(data_line[len("[aime] data: "):])
  assert spec["train_data"] == "hf:di-zhang-fdu/AIME_1983_2024"
  assert "AIME 1983–2024" in spec["source"] and "933 problems" in spec["source"]
  assert spec["split"] == "random 80/20 train/eval, seed 0" and spec["eval_fraction"] == 0.2


def test_missing_checkpoint_names_the_path(tmp_path):
  r = _run("--model=qwen2.5-3b", "--checkpoint=/nonexistent", f"--workdir={tmp_path}")
  assert r.returncode == 2
  assert "/nonexistent" in r.stderr and "--checkpoint" in r.stderr
  assert "Traceback" not in r.stderr


def test_unreachable_judge_stops_at_start(tmp_path):
  ckpt = tmp_path / "ckpt"
  ckpt.mkdir()
  (ckpt / "config.json").write_text("{}")   # resolve_checkpoint only needs the file to exist
  r = _run("--model=qwen2.5-3b", f"--checkpoint={ckpt}", "--judge=http://127.0.0.1:9/v1",
           f"--workdir={tmp_path / 'run'}", timeout=120)
  assert r.returncode == 2
  assert "http://127.0.0.1:9/v1" in r.stderr and "unreachable" in r.stderr
  assert "Traceback" not in r.stderr


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="needs datasets")
def test_default_data_offline_from_the_hf_cache_then_offline_weights(tmp_path):
  """The user's path: AIME 1983–2024 read from the datasets cache, split 80/20, then the weights
  from the HF hub cache only (--offline): an empty cache stops with the fix, before any work."""
  empty = _run("--model=qwen2.5-3b", "--algo=grpo", f"--workdir={tmp_path / 'a'}",
               env={"HF_DATASETS_CACHE": str(tmp_path / "none")}, timeout=120)
  assert empty.returncode == 2, empty.stderr[-2000:]
  assert "'di-zhang-fdu/AIME_1983_2024'" in empty.stderr and "Offline mode is on" in empty.stderr
  assert "Traceback" not in empty.stderr
  fill_hf_datasets_cache(tmp_path / "datasets", write_aime_csv(tmp_path / "a.csv", aime_rows(40)))
  # --offline keeps both in the caches (any stray request would go to a closed loopback port)
  env = {"HF_DATASETS_CACHE": str(tmp_path / "datasets"), "HF_HUB_CACHE": str(tmp_path / "hub"),
         "HF_ENDPOINT": "http://127.0.0.1:9"}
  r = _run("--model=qwen2.5-3b", "--algo=grpo", "--offline", f"--workdir={tmp_path / 'b'}",
           env=env, timeout=120)
  assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
  assert ("[aime] data: AIME 1983–2024 problem set (933 problems, Hugging Face Hub dataset "
          "di-zhang-fdu/AIME_1983_2024): 32 train / 8 eval problems (random 80/20 train/eval, "
          "seed 0)") in r.stdout
  assert "'Qwen/Qwen2.5-3B'" in r.stderr and "hf download Qwen/Qwen2.5-3B" in r.stderr
  assert str(tmp_path / "hub") in r.stderr and "Traceback" not in r.stderr
  year = _run("--model=qwen2.5-3b", "--algo=grpo", "--offline", "--split=year",
              "--eval_years=1985", f"--workdir={tmp_path / 'c'}", env=env, timeout=120)
  assert ": 30 train / 10 eval problems (by year: eval years [1985])" in year.stdout


def _check_tiny_run(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    assert len([line for line in f if line.strip()]) == 2
  with open(os.path.join(workdir, "eval.json")) as f:
    latest = json.load(f)["latest"]
  assert latest["step"] == 2
  for key in ("pass@1", "pass@2", "pass@4", "avg@4", "maj@1", "maj@2", "maj@4"):
    assert 0.0 <= latest[key] <= 1.0
  with open(os.path.join(workdir, "config.json")) as f:
    assert "arithmetic testbed" in json.load(f)["data"]["source"]   # the run says what it used


def test_tiny_end_to_end_small_warm_start(tmp_path):
  r = _run("--model=tiny", "--steps=2", f"--workdir={tmp_path}", *TINY_WARM, *FAST)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
  _check_tiny_run(tmp_path)
  again = _run("--model=tiny", "--steps=2", f"--workdir={tmp_path}", "--resume=false",
               *TINY_WARM, *FAST)
  assert again.returncode == 2 and "--resume=false" in again.stderr


@pytest.mark.slow
def test_tiny_end_to_end_default_warm_start(tmp_path):
  r = _run("--model=tiny", "--steps=2", f"--workdir={tmp_path}", *FAST, timeout=600)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
  _check_tiny_run(tmp_path)


# ~40 s each; the plans of these presets are checked against the compiler in
# tests/models/test_models_plan.py, and qwen2.5-3b's dry run above takes the same CLI path
@pytest.mark.slow
@pytest.mark.parametrize("model,params", [("smollm3-3b", "3,075.1 M"),
                                          ("phi-4-mini-reasoning", "3,836.0 M")])
def test_dry_run_plan_for_the_other_target_presets(tmp_path, model, params):
  r = _run(f"--model={model}", "--mesh=fsdp:8", "--dry_run", f"--workdir={tmp_path}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert params in r.stdout and "FLOPs / train step" in r.stdout


@pytest.mark.parametrize("args,message", [
    (("--model=qwen2.5-3b", "--thinking=on"), "no thinking mode"),
    (("--model=phi-4-mini-reasoning", "--thinking=off"), "always reasons"),
    (("--model=smollm3-3b", "--thinking=maybe"), "'maybe' is not valid"),
])
def test_thinking_flag_errors(tmp_path, args, message):
  r = _run(*args, "--dry_run", f"--workdir={tmp_path}", timeout=120)
  assert r.returncode == 2, r.stderr[-2000:]
  assert message in r.stderr and "Traceback" not in r.stderr


def test_thinking_flag_accepted_and_printed(tmp_path):
  r = _run("--model=tiny", "--thinking=off", "--dry_run", f"--workdir={tmp_path}", timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  assert '"thinking": "off"' in r.stdout


def test_distributed_flags_start_a_one_process_cluster(tmp_path):
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  r = _run("--model=qwen2.5-3b", "--mesh=fsdp:1", "--dry_run", "--distributed",
           f"--coordinator=127.0.0.1:{port}", "--num_processes=1", "--process_id=0",
           f"--workdir={tmp_path}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "jax.distributed: process 0 of 1" in r.stdout and "Dry-run plan" in r.stdout
