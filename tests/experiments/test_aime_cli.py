"""experiments/aime.py as a user runs it: subprocesses, exit codes, files written."""
import importlib.util
import json
import os

import pytest

from _aime_data import aime_rows, fill_hf_datasets_cache, write_aime_csv
from _util import run_script, run_script_cases

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
  r = _run("--model=qwen2.5-3b", "--mesh=fsdp:8", "--dry_run", "--device_memory=16",
           f"--workdir={tmp_path}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "3,085.9 M" in r.stdout and "8 devices" in r.stdout
  assert '"learning_rate": 5e-07' in r.stdout and not os.listdir(tmp_path)
  # the 3B defaults fit a v5e-8 (16 GiB per chip): remat, micro-batches, scanned layers
  assert "micro-batch 8, remat on" in r.stdout and '"remat": true' in r.stdout
  assert '"scan_layers": true' in r.stdout
  assert "fits 16.00 GiB per device" in r.stdout and "NOT" not in r.stdout
  # the paper's data by default: AIME 1983–2024 from the Hub, a seeded random 80/20 split
  data_line = next(line for line in r.stdout.splitlines() if line.startswith("[aime] data: "))
  spec = json.loads(data_line[len("[aime] data: "):])
  assert spec["train_data"] == "hf:di-zhang-fdu/AIME_1983_2024"
  assert "AIME 1983–2024" in spec["source"] and "933 problems" in spec["source"]
  assert spec["split"] == "random 80/20 train/eval, seed 0" and spec["eval_fraction"] == 0.2


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
  r, year = run_script_cases(SCRIPT, [
      ["--model=qwen2.5-3b", "--algo=grpo", "--offline", f"--workdir={tmp_path / 'b'}"],
      ["--model=qwen2.5-3b", "--algo=grpo", "--offline", "--split=year", "--eval_years=1985",
       f"--workdir={tmp_path / 'c'}"]], env=env, timeout=180)
  assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
  assert ("[aime] data: AIME 1983–2024 problem set (933 problems, Hugging Face Hub dataset "
          "di-zhang-fdu/AIME_1983_2024): 32 train / 8 eval problems (random 80/20 train/eval, "
          "seed 0)") in r.stdout
  assert "'Qwen/Qwen2.5-3B'" in r.stderr and "hf download Qwen/Qwen2.5-3B" in r.stderr
  assert str(tmp_path / "hub") in r.stderr and "Traceback" not in r.stderr
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


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
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


# user errors: each exits 2 naming the bad value, without a traceback and before any work
USER_ERRORS = {
    "missing checkpoint": (["--model=qwen2.5-3b", "--checkpoint=/nonexistent"],
                           ["/nonexistent", "--checkpoint"]),
    # resolve_checkpoint only needs config.json to exist; the judge is checked before loading
    "unreachable judge": (["--model=qwen2.5-3b", "--checkpoint={ckpt}",
                           "--judge=http://127.0.0.1:9/v1"],
                          ["http://127.0.0.1:9/v1", "unreachable"]),
    "thinking on a model without it": (["--model=qwen2.5-3b", "--thinking=on", "--dry_run"],
                                       ["no thinking mode"]),
    "thinking off on a reasoning model": (["--model=phi-4-mini-reasoning", "--thinking=off",
                                           "--dry_run"], ["always reasons"]),
    "thinking value": (["--model=smollm3-3b", "--thinking=maybe", "--dry_run"],
                       ["'maybe' is not valid"]),
}


@pytest.fixture(scope="module")
def user_error_runs(tmp_path_factory):
  """Every USER_ERRORS case, each through the script's entry point, in one interpreter."""
  work = tmp_path_factory.mktemp("user-errors")
  (work / "ckpt").mkdir()
  (work / "ckpt" / "config.json").write_text("{}")
  cases = [[a.format(ckpt=work / "ckpt") for a in args] + [f"--workdir={work / str(i)}"]
           for i, (args, _) in enumerate(USER_ERRORS.values())]
  # and one that is accepted: --thinking=off on a model whose template has the switch
  cases.append(["--model=tiny", "--thinking=off", "--dry_run", f"--workdir={work / 'ok'}"])
  *runs, accepted = run_script_cases(SCRIPT, cases, timeout=240)
  return work, dict(zip(USER_ERRORS, runs)), accepted


@pytest.mark.xdist_group("aime_cases")    # one worker, one run of the fixture
@pytest.mark.parametrize("name", USER_ERRORS)
def test_user_errors_exit_2_with_a_message(user_error_runs, name):
  work, runs, _ = user_error_runs
  r = runs[name]
  assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-2000:])
  assert all(n in r.stderr for n in USER_ERRORS[name][1]), r.stderr[-2000:]
  assert "Traceback" not in r.stderr
  assert not (work / str(list(USER_ERRORS).index(name))).exists()


@pytest.mark.xdist_group("aime_cases")
def test_thinking_flag_accepted_and_printed(user_error_runs):
  r = user_error_runs[2]
  assert r.returncode == 0, r.stderr[-2000:]
  assert '"thinking": "off"' in r.stdout


def test_distributed_flags_start_a_one_process_cluster(tmp_path):
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  r = _run("--model=tiny", "--mesh=fsdp:1", "--dry_run", "--distributed",
           f"--coordinator=127.0.0.1:{port}", "--num_processes=1", "--process_id=0",
           f"--workdir={tmp_path}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "jax.distributed: process 0 of 1" in r.stdout and "Dry-run plan" in r.stdout
