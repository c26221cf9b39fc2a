"""experiments/react.py (training, compile rate) and experiments/react_compare.py (win rates) as a
user runs them: subprocesses, the real toolchain, a loopback judge.

The judges are a real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions protocol: it
answers the code judge (text only) with a score and a line attribution, the VLM judge (one image)
with a score, and the pairwise judge (two images) with the letter of the screenshot whose bytes
hash higher ("A" for identical screenshots), a fixed preference the tests can recompute.
"""
import glob
import hashlib
import json
import os
import re
import shutil
import time

import pytest

from botjax.rewards.llm import PING_TEXT
from _openai_server import OpenAIServer, images, texts
from _util import run_script, run_script_cases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "react.py")
COMPARE = os.path.join(ROOT, "experiments", "react_compare.py")
NODE_DIR = os.path.join(ROOT, "botjax", "rewards", "react", "node")

# 80 warm-start steps: about half of the samples hold a component, so every reward part runs
TINY = ["--model=tiny", "--warm=warm_steps=80", "--warm=examples_per_prompt=2",
        "--set=progress=false", "--eval_n=2", "--eval_limit=2"]


def _run(*args, timeout=600, env=None):
  return run_script(SCRIPT, *args, timeout=timeout, env=env)


def _compare(*args, timeout=600, env=None):
  return run_script(COMPARE, *args, timeout=timeout, env=env)


def _preferred(first, second):
  """The pairwise judge's rule: the image whose data URL hashes higher; "A" on a tie."""
  h = lambda url: hashlib.sha256(url.encode()).hexdigest()  # noqa: E731
  return "B" if h(second) > h(first) else "A"


def _reply(body):
  shots = images(body)
  if len(shots) == 2:
    return _preferred(*shots)
  if len(shots) == 1:
    return "SCORE: 7\nJUSTIFICATION: a plain page."
  return "SCORE: 6\nLINE_ANALYSIS:\n1: line | DESC: needless blank line | IMPACT: -2"


@pytest.fixture(scope="module")
def server():
  srv = OpenAIServer(_reply)
  yield srv
  srv.close()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, server):
  """One tiny BoT-GRPO run with both training judges, a checkpoint every step (kept)."""
  work = str(tmp_path_factory.mktemp("react") / "run")
  r = _run(*TINY, "--steps=2", "--eval_every=2", "--set=checkpoint_every=1",
           "--set=keep_checkpoints=5", f"--workdir={work}",
           f"--judge={server.url}", "--judge_model=code-judge",
           f"--vlm_judge={server.url}", "--vlm_judge_model=vlm-judge")
  assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
  return work


def test_help_and_dry_run_plan(tmp_path):
  h = _run("--help", timeout=120)
  assert h.returncode == 0, h.stderr
  for flag in ("algo", "mesh", "checkpoint", "engine", "judges", "judge", "vlm_judge", "steps",
               "workdir", "resume", "dry_run", "set", "eval_only", "blank_is_failure"):
    assert f"{flag}:" in h.stdout
  assert "--compare" not in h.stdout and "pairwise_judge" not in h.stdout   # react_compare.py's
  r = _run("--model=qwen2.5-3b", "--mesh=fsdp:8", "--dry_run", f"--workdir={tmp_path}",
           timeout=180)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "3,085.9 M" in r.stdout and "8 devices" in r.stdout
  # the paper's recipe: 8 prompts x 8 rollouts, BoT-GRPO with the React reward's own weights
  assert '"prompts_per_step": 8' in r.stdout and '"group_size": 8' in r.stdout
  # "auto": the engine the command would run, named in the plan: on 8 devices the lockstep
  # sampler (its cache split over the batch), whatever the host
  assert '"engine": "auto"' in r.stdout and re.search(r"rollout engine +jax \(auto\)\n", r.stdout)
  assert "KV cache / device (64 slots)" not in r.stdout
  assert "recipe bot_grpo: w_global=1, w_local=1" in r.stdout and not os.listdir(tmp_path)
  # the paper's reward needs both judges: the dry run says that this command would not train
  assert "reward (--judges=all): not runnable as given" in r.stdout
  assert "--vlm_judge=URL" in r.stdout


USER_ERRORS = [
    # the paper's reward (the default --judges=all) needs both judges; the deviations say so
    ([], "needs --judge=URL --judge_model=NAME and --vlm_judge=URL"),
    (["--judge=http://127.0.0.1:9/v1"], "needs --vlm_judge=URL"),
    (["--judges=off", "--judge=http://127.0.0.1:9/v1"], "--judges=off leaves out --judge"),
    (["--judges=code", "--judge=not-a-url"], "not an http(s) URL"),
    (["--judges=off", "--warm=nonsense=1"], "nonsense"),
    (["--judges=off", "--engine=nope"], "--engine='nope': not a rollout engine; valid: auto, jax"),
]


@pytest.fixture(scope="module")
def user_error_runs(tmp_path_factory):
  """Every USER_ERRORS case, each through the script's entry point, in one interpreter."""
  work = tmp_path_factory.mktemp("user-errors")
  cases = [[*TINY, "--steps=1", f"--workdir={work / str(i)}", *args]
           for i, (args, _) in enumerate(USER_ERRORS)]
  return work, run_script_cases(SCRIPT, cases, timeout=300)


@pytest.mark.xdist_group("react_user_errors")    # one worker, one run of the fixture
@pytest.mark.parametrize("case", range(len(USER_ERRORS)), ids=[n for _, n in USER_ERRORS])
def test_user_errors_exit_2_with_a_message(user_error_runs, case):
  work, runs = user_error_runs
  r, needle = runs[case], USER_ERRORS[case][1]
  assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-2000:])
  assert needle in r.stderr and "Traceback" not in r.stderr
  assert not (work / str(case)).exists()     # refused before anything was written


def test_missing_node_packages_fail_before_the_warm_start(tmp_path):
  # a checkout without `npm ci`: the worker script is there, node_modules is not
  toolchain = tmp_path / "toolchain"
  toolchain.mkdir()
  for name in ("worker.mjs", "package.json"):
    shutil.copy(os.path.join(NODE_DIR, name), toolchain / name)
  work = tmp_path / "run"
  t0 = time.monotonic()
  r = _run(*TINY, "--steps=1", "--judges=off", f"--workdir={work}", timeout=300,
           env={"BOTJAX_REACT_TOOLCHAIN": str(toolchain)})
  seconds = time.monotonic() - t0
  assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-2000:])
  assert "npm package 'esbuild'" in r.stderr and "npm ci" in r.stderr
  assert "Traceback" not in r.stderr
  # nothing expensive ran first: no warm start was built or announced (it takes about a minute)
  assert "warm start" not in r.stdout and not glob.glob(str(work / "react-warmstart-*"))
  assert seconds < 60, seconds


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
@pytest.mark.xdist_group("react_trained")    # one worker, one `trained` run
def test_tiny_end_to_end_train_and_eval_only(trained, server):
  work = trained
  with open(os.path.join(work, "metrics.jsonl")) as f:
    recs = [json.loads(line) for line in f if line.strip()]
  assert [x["step"] for x in recs] == [0, 1, 2]
  for rec in recs[1:]:
    for part in ("compile", "render", "lint", "judge", "vlm"):
      assert f"reward/{part}" in rec
    assert rec["reward_failures"] == 0.0
  # the code judge saw the user's request (not the chat template) and the numbered code
  code_calls = [q["body"] for q in server.requests if q["body"]["model"] == "code-judge"
                and PING_TEXT not in texts(q["body"])]     # after the start-up check
  assert code_calls, "the code judge was never called"
  sent = texts(code_calls[0])
  assert "<|im_start|>" not in sent and "0: " in sent
  # a judged component gets the judge's 0.6, a rollout without one the non-React -0.3: the
  # judged step's mean lies strictly between
  judged = [rec["reward/judge"] for rec in recs[1:] if rec["reward/judge"] > -0.3 + 1e-6]
  assert judged and all(j <= 0.6 + 1e-6 for j in judged)
  with open(os.path.join(work, "eval.json")) as f:
    ev = json.load(f)
  assert [h["step"] for h in ev["history"]] == [0, 2]
  latest = ev["latest"]
  # the paper's compile rate counts blank pages; the visible rate cannot exceed it
  assert 0.0 <= latest["visible_rate"] <= latest["compile_rate"] <= 1.0 and latest["n"] == 4
  assert latest["compile_rate"] - latest["visible_rate"] == pytest.approx(latest["blank"] / 4)
  assert os.path.exists(os.path.join(work, "compile_rate.png"))
  assert os.path.exists(os.path.join(work, "hf_final", "config.json"))
  assert os.path.exists(os.path.join(work, "hf_final", "tokenizer.json"))
  with open(os.path.join(work, "judges.json")) as f:
    assert json.load(f) == {"judge": {"url": server.url, "model": "code-judge"},
                            "vlm_judge": {"url": server.url, "model": "vlm-judge"}}
  with open(os.path.join(work, "config.json")) as f:
    saved = json.load(f)
  assert saved["reward"]["blank_is_failure"] is False and saved["reward"]["judges"] == "all"

  refused = _run(*TINY, "--steps=4", "--resume=false", "--judges=off", f"--workdir={work}")
  assert refused.returncode == 2 and "already holds a run" in refused.stderr

  again = _run(*TINY, "--eval_only", f"--workdir={work}")
  assert again.returncode == 0, again.stderr[-3000:]
  with open(os.path.join(work, "eval.json")) as f:
    assert [h["step"] for h in json.load(f)["history"]] == [0, 2, 2]


COMPARE_ERRORS = [
    (["--runs=only_one"], "two comma-separated"),
    (["--runs=/nonexistent/a,/nonexistent/b"], "needs its own pairwise VLM judge"),
    (["--runs=/nonexistent/a,/nonexistent/b", "--pairwise_judge=http://127.0.0.1:9/v1"],
     "--pairwise_judge_model=NAME"),
    # a compared run's training VLM judge (its judges.json), spelt differently, is still that judge
    (["--runs={judged},/nonexistent/b", "--pairwise_judge=HTTP://localhost:9/v1/",
      "--pairwise_judge_model=v"], "is the training judge vlm_judge of"),
    (["--runs={judged},/nonexistent/b", "--pairwise_judge=http://127.0.0.1:9/v1",
      "--pairwise_judge_model=j"], "--allow_same_judge"),
    (["--runs=/nonexistent/a,/nonexistent/b", "--pairwise_judge=http://127.0.0.1:9/v1",
      "--pairwise_judge_model=p"], "unreachable"),
    (["--runs=a,b", "--curve=sideways"], "--curve"),
]


@pytest.fixture(scope="module")
def compare_error_runs(tmp_path_factory):
  """Every COMPARE_ERRORS case through react_compare.py's entry point, in one interpreter."""
  work = tmp_path_factory.mktemp("compare-errors")
  judged = work / "judged"
  judged.mkdir()
  (judged / "judges.json").write_text(json.dumps({
      "judge": {"url": "http://127.0.0.1:9/v1", "model": "j"},
      "vlm_judge": {"url": "http://127.0.0.1:9/v1", "model": "v"}}))
  cases = [[a.format(judged=judged) for a in args] + [f"--workdir={work / str(i)}"]
           for i, (args, _) in enumerate(COMPARE_ERRORS)]
  return work, run_script_cases(COMPARE, cases, timeout=300)


@pytest.mark.xdist_group("react_compare_errors")
@pytest.mark.parametrize("case", range(len(COMPARE_ERRORS)), ids=[n for _, n in COMPARE_ERRORS])
def test_compare_user_errors_exit_2_with_a_message(compare_error_runs, case):
  work, runs = compare_error_runs
  r, needle = runs[case], COMPARE_ERRORS[case][1]
  assert r.returncode in (1, 2), (r.stdout[-1000:], r.stderr[-2000:])   # absl: 1 for a bad enum
  assert needle in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
  assert not (work / str(case)).exists()     # refused before anything was written


def test_curve_plans_pair_the_right_checkpoints():
  # from experiments/_react.py, which defines no flags: importing react_compare.py here would
  # define its absl flags in this worker, and experiments/react.py's (loaded by other tests in
  # the same worker) would then collide with them
  import sys
  sys.path.insert(0, os.path.join(ROOT, "experiments"))
  import _react as mod
  # head to head: step 0 (both starting policies) and the steps both runs saved, k against k
  assert mod.curve_plan("head_to_head", [10, 20, 30], [20, 30, 40]) == [(0, 0), (20, 20),
                                                                        (30, 30)]
  # against the final policy: step 0 and every step A saved, each against B's final policy
  assert mod.curve_plan("against_final", [10, 20], []) == [(0, None), (10, None), (20, None)]
  with pytest.raises(mod.UserError, match="no common step"):
    mod.curve_plan("head_to_head", [10], [20])


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
@pytest.mark.xdist_group("react_trained")    # one worker, one `trained` run
def test_compare_with_its_own_pairwise_judge(trained, server, tmp_path):
  work = trained
  # the run's own VLM judge is refused as the pairwise judge (read from its judges.json)
  same = _compare(f"--runs={work},{work}", f"--pairwise_judge={server.url}",
                  "--pairwise_judge_model=vlm-judge", f"--workdir={tmp_path / 'same'}")
  assert same.returncode == 2 and f"vlm_judge of {work}" in same.stderr, same.stderr[-2000:]

  # the same policy on both sides, greedy: identical screenshots, and the judge answers "A" for
  # identical images, which votes A, B, B, A over the ABBA rounds -> every prompt a 2-2 tie
  before = len(server.requests)
  out = str(tmp_path / "cmp")
  c = _compare(f"--runs={work},{work}", f"--pairwise_judge={server.url}",
               "--pairwise_judge_model=pair-judge", "--eval_limit=2", f"--workdir={out}")
  assert c.returncode == 0, c.stderr[-3000:]
  with open(os.path.join(out, "compare.json")) as f:
    res = json.load(f)
  assert res["n"] == 2 and res["win_rate"] == 0.5 and res["tie_rate"] == 1.0
  assert res["pairwise_judge_model"] == "pair-judge"
  assert os.path.exists(os.path.join(out, "compare.png"))
  calls = server.requests[before:]
  pair_calls = [q["body"] for q in calls if q["body"]["model"] == "pair-judge"
                and PING_TEXT not in texts(q["body"])]     # after the start-up check
  rendered = sum(1 for v in res["verdicts"] if v[0] is not None)
  assert len(pair_calls) == 4 * rendered and all(len(images(b)) == 2 for b in pair_calls)
  # the training judges took no part in the comparison
  assert {q["body"]["model"] for q in calls} <= {"pair-judge"}


def _curve(out):
  with open(out / "winrate_curve.json") as f:
    return json.load(f)


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
@pytest.mark.xdist_group("react_trained")    # one worker, one `trained` run
def test_win_rate_curve_against_the_final_policy(trained, server, tmp_path):
  work = trained
  assert sorted(os.listdir(os.path.join(work, "checkpoints"))) == ["1", "2"]
  before = len(server.requests)
  out = tmp_path / "curve"
  # the run's own VLM model as the pairwise judge, allowed explicitly
  r = _compare(f"--runs={work},{work}", "--curve=against_final", "--eval_limit=2",
               f"--pairwise_judge={server.url}", "--pairwise_judge_model=vlm-judge",
               "--allow_same_judge", f"--workdir={out}")
  assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
  curve = _curve(out)
  points = curve["points"]
  # step 0 (the starting policy) and every saved checkpoint, against the run's final policy
  assert [p["step"] for p in points] == [0, 1, 2] and curve["baseline"] == work
  assert curve["mode"] == "against_final" and all(p["baseline_step"] is None for p in points)
  pair_calls = [q["body"] for q in server.requests[before:] if len(images(q["body"])) == 2]
  assert len(pair_calls) % 4 == 0   # whole ABBA rounds only
  for p in points:
    assert p["n"] == 2 and 0.0 <= p["win_rate"] <= 1.0
    assert p["wins"] + p["losses"] + p["ties"] == 2
    assert p["win_rate"] == pytest.approx((p["wins"] + 0.5 * p["ties"]) / 2)
  # the last checkpoint is the baseline (hf_final is its export): identical screenshots, ties
  assert points[-1]["tie_rate"] == 1.0 and points[-1]["win_rate"] == 0.5
  assert (out / "winrate_curve.png").stat().st_size > 10_000


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
@pytest.mark.xdist_group("react_trained")    # one worker, one `trained` run
def test_head_to_head_curve_pairs_checkpoint_k_with_checkpoint_k(trained, server, tmp_path):
  work = trained
  # run B: the same run with its two checkpoints swapped, so that B's step 1 holds A's step 2
  # and B's step 2 A's step 1. Pairing k with k compares A1 with A2 and A2 with A1: mirrored
  # outcomes per prompt; pairing each with one fixed policy could not give that.
  other = tmp_path / "swapped"
  shutil.copytree(work, other, ignore=shutil.ignore_patterns("react-warmstart-*"))
  for name in ("config.json",):
    cfg = json.loads((other / name).read_text())
    assert os.path.isabs(cfg["checkpoint"])     # the base checkpoint stays the warm start
  ck = other / "checkpoints"
  os.rename(ck / "1", ck / "tmp")
  os.rename(ck / "2", ck / "1")
  os.rename(ck / "tmp", ck / "2")
  (other / "judges.json").unlink()
  out = tmp_path / "h2h"
  r = _compare(f"--runs={work},{other}", "--curve=head_to_head", "--eval_limit=2",
               f"--pairwise_judge={server.url}", "--pairwise_judge_model=vlm-judge",
               "--allow_same_judge", f"--workdir={out}")
  assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
  curve = _curve(out)
  points = {p["step"]: p for p in curve["points"]}
  assert curve["mode"] == "head_to_head" and sorted(points) == [0, 1, 2]
  assert all(p["baseline_step"] == k for k, p in points.items())
  # step 0: both starting policies are the same warm start -> identical screenshots, all ties
  assert points[0]["tie_rate"] == 1.0
  # steps 1 and 2 compare the same two policies with the sides exchanged: per prompt, A's
  # outcome at step 1 and at step 2 add up to 1 (a win mirrors a loss, a tie a tie)
  for o1, o2 in zip(points[1]["outcomes"], points[2]["outcomes"]):
    assert o1 + o2 == pytest.approx(1.0)
  assert (out / "winrate_curve.png").stat().st_size > 10_000


@pytest.mark.slow   # ~90 s; the block -> step mapping is tested in tests/rewards/react/test_react_lines.py
@pytest.mark.xdist_group("react_trained")    # one worker, one `trained` run
def test_pure_runs_on_react(trained, tmp_path):
  # PURE reads the line penalties as step scores of blank-line-separated blocks; one step of the
  # tiny pipeline, on a copy of the trained run's warm start (no second warm start)
  work = tmp_path / "pure"
  work.mkdir()
  [warm] = glob.glob(os.path.join(trained, "react-warmstart-*"))
  shutil.copytree(warm, work / os.path.basename(warm))
  r = _run(*TINY, "--algo=pure", "--steps=1", "--eval_every=0", "--judges=off",
           f"--workdir={work}")
  assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
  assert "(cached" in r.stdout
  with open(work / "metrics.jsonl") as f:
    recs = [json.loads(line) for line in f if line.strip()]
  assert recs[-1]["step"] == 1 and recs[-1]["loss_tokens"] > 0
  assert all(isinstance(recs[-1][k], float) for k in ("loss", "adv_std", "reward_mean"))
  with open(work / "config.json") as f:
    assert json.load(f)["train"]["recipe"] == "pure"
