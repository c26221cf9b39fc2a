"""experiments/react.py as a user runs it: subprocesses, the real toolchain, a loopback judge.

The judges are a real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions protocol: it
answers the code judge (text only) with a score and a line attribution, the VLM judge (one image)
with a score, and the pairwise judge (two images) with "A".
"""
import json
import os

import pytest

from _openai_server import OpenAIServer, images, texts
from _util import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "react.py")

# 80 warm-start steps: about half of the samples hold a component, so every reward part runs
TINY = ["--model=tiny", "--warm=warm_steps=80", "--warm=examples_per_prompt=2",
        "--set=progress=false", "--eval_n=2", "--eval_limit=2"]


def _run(*args, timeout=600):
  return run_script(SCRIPT, *args, timeout=timeout)


def _reply(body):
  shots = images(body)
  if len(shots) == 2:
    return "A"
  if len(shots) == 1:
    return "SCORE: 7\nJUSTIFICATION: a plain page."
  return "SCORE: 6\nLINE_ANALYSIS:\n1: line | DESC: needless blank line | IMPACT: -2"


@pytest.fixture(scope="module")
def server():
  srv = OpenAIServer(_reply)
  yield srv
  srv.close()


def test_help_and_dry_run_plan(tmp_path):
  h = _run("--help", timeout=120)
  assert h.returncode == 0, h.stderr
  for flag in ("algo", "mesh", "checkpoint", "judge", "vlm_judge", "steps", "workdir", "resume",
               "dry_run", "set", "eval_only", "compare"):
    assert f"{flag}:" in h.stdout
  r = _run("--model=qwen2.5-3b", "--mesh=fsdp:8", "--dry_run", f"--workdir={tmp_path}",
           timeout=180)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "3,085.9 M" in r.stdout and "8 devices" in r.stdout
  # the paper's recipe: 8 prompts x 8 rollouts, BoT-GRPO with the React reward's own weights
  assert '"prompts_per_step": 8' in r.stdout and '"group_size": 8' in r.stdout
  assert '["w_global", 1.0]' in r.stdout and not os.listdir(tmp_path)


@pytest.mark.parametrize("args,needle", [
    (["--algo=pure"], "step rewards"),
    (["--compare=only_one"], "two comma-separated"),
    (["--compare=/nonexistent/a,/nonexistent/b", "--vlm_judge=http://127.0.0.1:9/v1"],
     "unreachable"),
    (["--judge=not-a-url"], "not an http(s) URL"),
    (["--warm=nonsense=1"], "nonsense"),
])
def test_user_errors_exit_2_with_a_message(tmp_path, args, needle):
  r = _run(*TINY, "--steps=1", f"--workdir={tmp_path}", *args, timeout=300)
  assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-2000:])
  assert needle in r.stderr and "Traceback" not in r.stderr


def test_tiny_end_to_end_train_eval_only_and_compare(tmp_path, server):
  work = str(tmp_path / "run")
  r = _run(*TINY, "--steps=2", "--eval_every=2", f"--workdir={work}",
           f"--judge={server.url}", "--judge_model=code-judge",
           f"--vlm_judge={server.url}", "--vlm_judge_model=vlm-judge")
  assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
  with open(os.path.join(work, "metrics.jsonl")) as f:
    recs = [json.loads(line) for line in f if line.strip()]
  assert [x["step"] for x in recs] == [0, 1, 2]
  for rec in recs[1:]:
    for part in ("compile", "render", "lint", "judge", "vlm"):
      assert f"reward/{part}" in rec
    assert rec["reward_failures"] == 0.0
  # the code judge saw the user's request (not the chat template) and the numbered code
  code_calls = [q["body"] for q in server.requests if q["body"]["model"] == "code-judge"]
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
  assert 0.0 <= ev["latest"]["compile_rate"] <= 1.0 and ev["latest"]["n"] == 4
  assert os.path.exists(os.path.join(work, "compile_rate.png"))
  assert os.path.exists(os.path.join(work, "hf_final", "config.json"))
  assert os.path.exists(os.path.join(work, "hf_final", "tokenizer.json"))

  refused = _run(*TINY, "--steps=4", "--resume=false", f"--workdir={work}")
  assert refused.returncode == 2 and "already holds a run" in refused.stderr

  again = _run(*TINY, "--eval_only", f"--workdir={work}")
  assert again.returncode == 0, again.stderr[-3000:]
  with open(os.path.join(work, "eval.json")) as f:
    assert [h["step"] for h in json.load(f)["history"]] == [0, 2, 2]

  # the same policy on both sides, greedy: identical screenshots, and a judge that always
  # answers "A" votes A, B, B, A over the ABBA rounds -> every prompt a 2-2 tie (0.5)
  before = len(server.requests)
  out = str(tmp_path / "cmp")
  c = _run(*TINY, f"--compare={work},{work}", f"--pairwise_judge={server.url}",
           "--pairwise_judge_model=pair-judge", f"--workdir={out}")
  assert c.returncode == 0, c.stderr[-3000:]
  with open(os.path.join(out, "compare.json")) as f:
    res = json.load(f)
  assert res["n"] == 2 and res["win_rate"] == 0.5 and res["tie_rate"] == 1.0
  assert os.path.exists(os.path.join(out, "compare.png"))
  pair_calls = [q["body"] for q in server.requests[before:] if q["body"]["model"] == "pair-judge"]
  rendered = sum(1 for v in res["verdicts"] if v[0] is not None)
  assert len(pair_calls) == 4 * rendered and all(len(images(b)) == 2 for b in pair_calls)
