"""The experiments' judge flags as a user runs them: --judge_api (and --vlm_judge_api,
--pairwise_judge_api) choose the API whose client makes the start-up check, and --judge_prompt
reads prompt files.

The judges are real HTTP servers on 127.0.0.1 speaking each API's protocol
(tests/_anthropic_server.py, tests/_openai_server.py). Each run stops with a user error right
after the check it is about (a missing data file, a missing compared run, a refused key), so no
weights or warm start are built.
"""
import pytest

from botjax.rewards.llm import PING_TEXT
from _anthropic_server import AnthropicServer
from _openai_server import OpenAIServer
from _util import run_script_cases

KEY = "anthropic-test-key"
ENV = {"ANTHROPIC_API_KEY": KEY}


@pytest.fixture(scope="module")
def servers():
  good = AnthropicServer(lambda body: "OK", api_key=KEY)
  refusing = AnthropicServer(lambda body: "OK", api_key="another-key")
  openai = OpenAIServer(lambda body: "OK")
  yield good, refusing, openai
  for srv in (good, refusing, openai):
    srv.close()


def _checks(srv, model):
  """The start-up checks `srv` received for `model`."""
  return [r for r in srv.requests if r["body"] and r["body"]["model"] == model]


def _is_ping(srv, request, api):
  body = request["body"]
  assert body["max_tokens"] == 8 and body["messages"] == [{"role": "user", "content": PING_TEXT}]
  if api == "anthropic":
    assert request["path"] == "/v1/messages" and request["status"] == 200
    assert request["headers"]["anthropic-version"]
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert "temperature" not in body
  else:
    assert request["path"] == "/v1/chat/completions"
  return True


@pytest.fixture(scope="module")
def aime_runs(tmp_path_factory, servers):
  good, refusing, openai = servers
  work = tmp_path_factory.mktemp("aime-judges")
  (work / "ckpt").mkdir()
  (work / "ckpt" / "config.json").write_text("{}")
  (work / "user.txt").write_text("Problem: {problem}\nGrade: {steps}\n")
  (work / "bad.txt").write_text("Problem: {problem}\n")
  common = ["--model=qwen2.5-3b", f"--checkpoint={work / 'ckpt'}",
            f"--train_data={work / 'missing.jsonl'}"]
  cases = {
      "anthropic": [f"--judge={good.url}", "--judge_api=anthropic", "--judge_model=claude-step",
                    f"--judge_prompt=user={work / 'user.txt'}"],
      "openai": [f"--judge={openai.url}", "--judge_model=oai-step"],
      "refused key": [f"--judge={refusing.url}", "--judge_api=anthropic",
                      "--judge_model=claude-refused"],
      "bad template": [f"--judge={good.url}", "--judge_api=anthropic",
                       "--judge_model=claude-never", f"--judge_prompt=user={work / 'bad.txt'}"],
      "unknown prompt key": [f"--judge={good.url}", "--judge_api=anthropic",
                             "--judge_model=claude-never", f"--judge_prompt=code={work / 'x'}"],
  }
  runs = run_script_cases("experiments/aime.py",
                          [common + args + [f"--workdir={work / str(i)}"]
                           for i, args in enumerate(cases.values())], timeout=300, env=ENV)
  return dict(zip(cases, runs))


@pytest.mark.xdist_group("judge_api_cli")
def test_aime_judge_check_goes_through_the_chosen_api(aime_runs, servers):
  good, refusing, openai = servers
  for name, srv, model, api in (("anthropic", good, "claude-step", "anthropic"),
                                ("openai", openai, "oai-step", "openai")):
    r = aime_runs[name]
    # the check passed, then the run stopped at the (missing) problems file
    assert r.returncode == 2 and "missing.jsonl" in r.stderr, (name, r.stderr[-2000:])
    [check] = _checks(srv, model)
    assert _is_ping(srv, check, api)
  r = aime_runs["refused key"]
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert "unreachable" in r.stderr and "HTTP 401" in r.stderr and "ANTHROPIC_API_KEY" in r.stderr
  assert [q["status"] for q in _checks(refusing, "claude-refused")] == [401]


@pytest.mark.xdist_group("judge_api_cli")
def test_aime_judge_prompt_files_are_checked_before_any_request(aime_runs, servers):
  r = aime_runs["bad template"]
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert "lacks the required placeholder {steps}" in r.stderr and "bad.txt" in r.stderr
  r = aime_runs["unknown prompt key"]
  assert r.returncode == 2 and "--judge_prompt='code=" in r.stderr and "['system', 'user']" in r.stderr
  assert _checks(servers[0], "claude-never") == []


@pytest.fixture(scope="module")
def react_runs(tmp_path_factory, servers):
  good, refusing, _ = servers
  work = tmp_path_factory.mktemp("react-judges")
  (work / "code.txt").write_text("Request: {prompt}\n")
  cases = {
      "training judges": [f"--judge={good.url}", "--judge_api=anthropic",
                          "--judge_model=claude-code", f"--vlm_judge={refusing.url}",
                          "--vlm_judge_api=anthropic", "--vlm_judge_model=claude-vlm"],
      "bad code prompt": ["--judges=code", f"--judge={good.url}", "--judge_api=anthropic",
                          "--judge_model=claude-never", f"--judge_prompt=code={work / 'code.txt'}"],
      "help": ["--help"],     # last: in one interpreter a case after --help meets absl's
                              # DuplicateFlagError
  }
  runs = run_script_cases("experiments/react.py",
                          [["--model=tiny", "--steps=1", f"--workdir={work / str(i)}", *args]
                           for i, args in enumerate(cases.values())], timeout=300, env=ENV)
  compare_cases = {
      "pairwise judge": ["--runs=/nonexistent/a,/nonexistent/b", f"--pairwise_judge={good.url}",
                         "--pairwise_judge_api=anthropic", "--pairwise_judge_model=claude-pair"],
      "help": ["--help"],
  }
  compare = run_script_cases("experiments/react_compare.py",
                             [[f"--workdir={work / ('c' + str(i))}", *args]
                              for i, args in enumerate(compare_cases.values())],
                             timeout=300, env=ENV)
  runs = dict(zip(cases, runs))
  runs.update({f"compare {k}": r for k, r in zip(compare_cases, compare)})
  return work, runs


@pytest.mark.xdist_group("judge_api_cli")
def test_react_judge_checks_go_through_the_chosen_api(react_runs, servers):
  good, refusing, _ = servers
  work, runs = react_runs
  h = runs["help"]
  assert h.returncode == 0
  for flag in ("judge_api", "vlm_judge_api", "judge_prompt"):
    assert f"--{flag}:" in h.stdout, flag
  h = runs["compare help"]
  assert h.returncode == 0
  for flag in ("pairwise_judge_api", "judge_prompt"):
    assert f"--{flag}:" in h.stdout, flag
  # the code judge's check passed through the Messages API; the VLM judge's key was refused
  r = runs["training judges"]
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert f"--vlm_judge={refusing.url} is unreachable" in r.stderr and "HTTP 401" in r.stderr
  [check] = _checks(good, "claude-code")
  assert _is_ping(good, check, "anthropic")
  assert [q["status"] for q in _checks(refusing, "claude-vlm")] == [401]
  assert not (work / "1").exists()      # refused before the warm start
  # react_compare.py checks its pairwise judge the same way, then stops at the missing runs
  r = runs["compare pairwise judge"]
  assert r.returncode == 2 and "/nonexistent/" in r.stderr, r.stderr[-2000:]
  [check] = _checks(good, "claude-pair")
  assert _is_ping(good, check, "anthropic")


@pytest.mark.xdist_group("judge_api_cli")
def test_react_judge_prompt_files_are_checked(react_runs, servers):
  _, runs = react_runs
  r = runs["bad code prompt"]
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert "the code judge's prompt" in r.stderr and "placeholder {code}" in r.stderr
  assert _checks(servers[0], "claude-never") == []
