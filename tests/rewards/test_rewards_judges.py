"""LLMStepJudge against real HTTP servers on 127.0.0.1, one per API: the OpenAI chat-completions
protocol and the Anthropic Messages protocol (tests/_openai_server.py, tests/_anthropic_server.py).

The servers grade like a (very small) LLM judge: they read the "Steps to grade" lines of the user
message, check `a op b = c`, and reply in prose ending with a VERDICT line. Problems whose text
names a behaviour make them misbehave: SLOW (sleeps past the client timeout), PROSE (no verdict),
BADJSON (a 200 with a broken body), FLAKY (prose first, then a proper reply), HTTP500 / HTTP429 /
HTTP529 (that error first, then a proper reply). Every test runs over both APIs and expects the
same verdicts and counters.
"""
import collections
import pathlib
import pickle
import re
import socket
import threading
import time

import pytest

from botjax.rewards import JudgeRequest, JudgeUnavailable, LLMStepJudge, MathReward, RewardPool
from botjax.rewards import judge_steps
from botjax.rewards.judges import JUDGE_SYSTEM_PROMPT, JudgeStats, parse_verdict, template_fields
from botjax.testbeds.arith_judge import ExactArithmeticJudge
import _llm_servers as S
from _util import imported

_STEP_LINE = re.compile(r"Step \d+: (-?\d+) ([-+*/]) (-?\d+) = (-?\d+)")
KEY = "test-key"


class _Grader:
  """The servers' responder: grades `a op b = c` lines like a small LLM judge (see the module
  docstring); `seen` counts each user message, `delay_s` delays every reply."""

  def __init__(self):
    self.seen = collections.Counter()
    self.delay_s = 0.0
    self.srv = None
    self._lock = threading.Lock()

  def __call__(self, body):
    user = S.user_text(self.srv, body)
    with self._lock:
      self.seen[user] += 1
      seen = self.seen[user]
    if "SLOW" in user:
      time.sleep(3.0)
    for status in (500, 429, 529):
      if f"HTTP{status}" in user and seen == 1:
        return S.error(self.srv, status, "overloaded, try again")
    if "BADJSON" in user:
      return S.broken_body(self.srv)
    time.sleep(self.delay_s)
    if "PROSE" in user or ("FLAKY" in user and seen == 1):
      return "The step looks plausible to me."
    graded = user.split("Steps to grade:")[-1]
    ok = all(_apply(int(a), op, int(b)) == int(c) for a, op, b, c in _STEP_LINE.findall(graded))
    return f"Checked the arithmetic.\nVERDICT: {'+1' if ok else '-1'}"


def _apply(a, op, b):
  return {"+": a + b, "-": a - b, "*": a * b}.get(op, a // b if b and a % b == 0 else None)


@pytest.fixture(scope="module", params=S.APIS)
def server(request):
  grader = _Grader()
  srv = S.start(request.param, grader, api_key=KEY)
  grader.srv = srv
  yield srv
  srv.close()


def _sent(server, start=0):
  """The request bodies the server received from the `start`-th on."""
  return [r["body"] for r in server.requests[start:]]


def _judge(server, **kwargs):
  kwargs.setdefault("timeout_s", 5.0)
  kwargs.setdefault("max_retries", 0)
  kwargs.setdefault("api_key", KEY)
  return LLMStepJudge("judge-model", api=server.api, base_url=server.url, **kwargs)


def _closed_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


STEPS = ["3 + 4 = 7", "7 * 2 = 15", "15 - 5 = 10"]


def test_verdicts_and_prompts(server):
  judge = _judge(server)
  judge.check_reachable()
  start = len(server.requests)
  verdicts = judge_steps(judge, "Compute (3 + 4) * 2 - 5.", STEPS, {}, strategy="context_aware")
  assert verdicts == [1, -1, 1]
  sent = _sent(server, start)
  assert [r["model"] for r in sent] == ["judge-model"] * 3
  # the system prompt goes where each API takes it: a system message, or Anthropic's `system`
  assert all(S.system_text(server, r) == JUDGE_SYSTEM_PROMPT for r in sent)
  if server.api == "openai":
    assert sent[0]["messages"][0] == {"role": "system", "content": JUDGE_SYSTEM_PROMPT}
  else:
    assert sent[0]["system"] == JUDGE_SYSTEM_PROMPT
    assert [m["role"] for m in sent[0]["messages"]] == ["user"]
    assert "temperature" not in sent[0]   # API version 2026-10-21 has no sampling parameters
  last = S.user_text(server, sent[2])
  assert "Compute (3 + 4) * 2 - 5." in last
  assert "Step 1: 3 + 4 = 7   [your earlier verdict: +1]" in last
  assert "Step 2: 7 * 2 = 15   [your earlier verdict: -1]" in last
  assert last.split("Steps to grade:")[1].strip().startswith("Step 3: 15 - 5 = 10")
  start = len(server.requests)
  assert judge_steps(judge, "p", STEPS, {}, strategy="independent") == [1, -1, 1]
  assert all("Earlier steps" not in S.user_text(server, r) for r in _sent(server, start))
  assert judge_steps(judge, "p", STEPS, {}) == [1, -1, 0]  # error propagation
  assert judge.metrics() == {"judge_calls": 9, "judge_failures": 0,
                             "judge_consecutive_failures": 0}


def test_context_aware_windows_list_unit_verdicts(server):
  judge = _judge(server)
  start = len(server.requests)
  steps = STEPS + ["10 * 1 = 10"]
  assert judge_steps(judge, "p", steps, {}, strategy="context_aware", window=2) == [-1, -1, 1]
  last = S.user_text(server, _sent(server, start)[2])
  assert "Your earlier verdicts:\nSteps 1-2: -1\nSteps 2-3: -1" in last
  assert "Steps to grade:\nStep 3: 15 - 5 = 10\nStep 4: 10 * 1 = 10" in last


def test_bounded_concurrency(server):
  server.responder.delay_s = 0.2
  try:
    server.max_in_flight = 0
    judge = _judge(server, max_concurrency=2)
    reqs = [JudgeRequest(problem=f"c{i}", steps=("1 + 1 = 2",), first=0, last=1) for i in range(6)]
    assert judge.judge(reqs) == [1] * 6
    assert server.max_in_flight == 2
  finally:
    server.responder.delay_s = 0.0


def test_slow_malformed_and_retried_replies(server):
  judge = _judge(server, timeout_s=0.5, parse_retries=1)
  reqs = [JudgeRequest(problem=name, steps=("2 * 3 = 6",), first=0, last=1)
          for name in ("SLOW", "PROSE", "BADJSON", "FLAKY", "fine")]
  start = time.perf_counter()
  stats = JudgeStats()
  verdicts = judge.judge(reqs, stats=stats)
  assert time.perf_counter() - start < 2.5  # the slow reply is cut at 0.5 s, not waited for (3 s)
  assert verdicts == [0, 0, 0, 1, 1]  # FLAKY: prose first, a proper verdict on the retry
  assert judge.metrics()["judge_failures"] == 3 and (stats.calls, stats.failures) == (5, 3)
  flaky = [r for r in _sent(server) if "FLAKY" in S.user_text(server, r)]
  assert len(flaky) == 2


@pytest.mark.parametrize("status", [500, 429, 529])
def test_client_retries_server_errors(server, status):
  if status == 529 and server.api == "openai":
    pytest.skip("529 (overloaded) is Anthropic's status")
  judge = _judge(server, max_retries=2)
  req = JudgeRequest(problem=f"HTTP{status}", steps=("2 * 3 = 7",), first=0, last=1)
  assert judge.judge([req]) == [-1]
  seen = server.responder.seen
  assert seen[next(k for k in seen if f"HTTP{status}" in k)] == 2   # the error, then the retry
  assert judge.metrics()["judge_failures"] == 0
  # without client retries the error scores 0 and is counted
  req = JudgeRequest(problem=f"HTTP{status} again", steps=("2 * 3 = 6",), first=0, last=1)
  assert _judge(server, max_retries=0).judge([req]) == [0]


@pytest.mark.parametrize("api", S.APIS)
def test_refused_connection_then_unavailable(api):
  url = f"http://127.0.0.1:{_closed_port()}" + ("/v1" if api == "openai" else "")
  judge = LLMStepJudge("m", api=api, base_url=url, api_key=KEY, max_retries=0, timeout_s=2.0,
                       max_consecutive_failures=4)
  with pytest.raises(JudgeUnavailable, match=f"{api} model 'm' at .*not reachable.*Connection"):
    judge.check_reachable()
  reqs = [JudgeRequest(problem="p", steps=("1 + 1 = 2",) * 3, first=i, last=i + 1)
          for i in range(3)]
  assert judge.judge(reqs) == [0, 0, 0]  # a failed unit scores 0, training goes on
  assert judge.metrics()["judge_failures"] == 3
  with pytest.raises(JudgeUnavailable, match=r"4 times in a row.*Connection"):
    judge.judge(reqs[:1])


def test_refused_key_is_named(server):
  env = "ANTHROPIC_API_KEY" if server.api == "anthropic" else "OPENAI_API_KEY"
  judge = _judge(server, api_key="wrong-key")
  with pytest.raises(JudgeUnavailable, match=rf"HTTP 401: the key was refused; set \${env}"):
    judge.check_reachable()
  assert server.requests[-1]["headers"].get("authorization") == "Bearer wrong-key"


def test_math_reward_with_llm_judge_in_a_pool(server):
  reward = MathReward(_judge(server), window=1)
  text = "".join(f"<step {i}>{s}</step>\n" for i, s in enumerate(STEPS, 1)) + "<final>10</final>"
  exact = MathReward(ExactArithmeticJudge(division="floor"))
  with RewardPool(reward, num_workers=2, timeout_s=10.0, kind="thread") as pool:
    meta = [{"answer": "9", "step_values": [7, 14, 9]}] * 2
    results = pool(["p"] * 2, [text, "\\boxed{9}"], meta)
  assert [s for _, _, s in results[0].steps] == [1.0, -1.0, 0.0]
  assert results[0].reward == pytest.approx(0.2)  # wrong answer, perfect format
  assert results[1].reward == 3.0 and results[1].steps == [(0, 9, 1.0)]  # one free-form step
  ref = exact.score("p", text, {"answer": "9", "step_values": [7, 14, 9]})
  assert results[0].token_spans == ref.token_spans


def test_judge_pickles_for_process_pools(server):
  judge = _judge(server)
  judge.judge([JudgeRequest(problem="p", steps=("1 + 1 = 2",), first=0, last=1)])  # connected
  copy = pickle.loads(pickle.dumps(judge))
  assert copy.judge([JudgeRequest(problem="q", steps=("1 + 1 = 3",), first=0, last=1)]) == [-1]
  assert copy.metrics()["judge_calls"] == 2 and copy.client.api == server.api


def test_both_apis_give_the_same_verdicts_and_counts():
  # one scenario through each API: the same replies give the same verdicts and counters
  reqs = [JudgeRequest(problem=name, steps=("2 * 3 = 6", "6 + 1 = 8"), first=i, last=i + 1)
          for name in ("fine", "PROSE", "HTTP500") for i in range(2)]
  out = {}
  for api in S.APIS:
    grader = _Grader()
    srv = S.start(api, grader, api_key=KEY)
    grader.srv = srv
    try:
      judge = _judge(srv, parse_retries=0, max_retries=0)
      stats = JudgeStats()
      out[api] = (judge.judge(reqs, stats=stats), judge.metrics(), (stats.calls, stats.failures))
    finally:
      srv.close()
  assert out["openai"] == out["anthropic"]
  assert out["openai"][0] == [1, -1, 0, 0, 0, 0]   # PROSE unparsed, HTTP500 not retried
  assert out["openai"][2] == (6, 4)


# ---- prompt overrides ----------------------------------------------------------------------------

def test_system_prompt_from_text_or_file_is_what_is_sent(server, tmp_path):
  path = tmp_path / "system.txt"
  path.write_text("Grade like the paper's App. D judge {not a placeholder}.\n")
  for value, expected in (("You grade steps.", "You grade steps."),
                          (path, path.read_text())):
    judge = _judge(server, system_prompt=value)
    start = len(server.requests)
    assert judge.judge([JudgeRequest(problem="p", steps=("1 + 1 = 2",), first=0, last=1)]) == [1]
    assert S.system_text(server, server.requests[start]["body"]) == expected


def test_user_template_fills_its_placeholders(server, tmp_path):
  path = tmp_path / "user.txt"
  path.write_text("Task: {problem}\nBefore:\n{context}\nJudged so far:\n{verdicts}\n"
                  "Steps to grade:\n{steps}\n(steps {first}-{last}) {{literal}}\n")
  judge = _judge(server, user_template=path)
  start = len(server.requests)
  assert judge_steps(judge, "Compute.", STEPS, {}, strategy="context_aware") == [1, -1, 1]
  last = S.user_text(server, server.requests[start + 2]["body"])
  assert last == ("Task: Compute.\nBefore:\nStep 1: 3 + 4 = 7\nStep 2: 7 * 2 = 15\n"
                  "Judged so far:\nStep 1: +1\nStep 2: -1\nSteps to grade:\nStep 3: 15 - 5 = 10\n"
                  "(steps 3-3) {literal}\n")
  assert S.system_text(server, server.requests[start]["body"]) == JUDGE_SYSTEM_PROMPT


def test_template_fields_of_a_window():
  req = JudgeRequest(problem=" p ", steps=("a", "b", "c", "d"), first=2, last=4,
                     context=("a", "b"), prior_verdicts=(1, -1))
  assert template_fields(req) == {"problem": "p", "steps": "Step 3: c\nStep 4: d",
                                  "context": "Step 1: a\nStep 2: b",
                                  "verdicts": "Steps 1-2: +1\nSteps 2-3: -1", "first": 3,
                                  "last": 4}


@pytest.mark.parametrize("template,message", [
    ("Problem {problem} only", r"lacks the required placeholder \{steps\}"),
    ("{problem} {steps} {answer}", r"unknown placeholder \{answer\}"),
    ("{problem} {steps} {", r"not a valid template.*literal brace"),
    ("{problem} {steps} {0}", r"positional"),
    ("   ", r"is empty"),
])
def test_bad_user_templates_are_refused(template, message):
  with pytest.raises(ValueError, match=message) as e:
    LLMStepJudge("m", base_url="http://127.0.0.1:9/v1", user_template=template)
  assert str(e.value).startswith("the step judge's user template (text)")


def test_prompt_files_are_read_and_checked(tmp_path):
  bad = tmp_path / "bad.txt"
  bad.write_text("{problem}\n")
  with pytest.raises(ValueError, match=r"file '.*bad.txt'\) lacks the required placeholder "
                                       r"\{steps\}"):
    LLMStepJudge("m", base_url="http://127.0.0.1:9/v1", user_template=bad)
  with pytest.raises(FileNotFoundError, match="no such file"):
    LLMStepJudge("m", base_url="http://127.0.0.1:9/v1", system_prompt=tmp_path / "missing.txt")
  # a str is the prompt's text; one that names a file is refused rather than sent as text
  with pytest.raises(ValueError, match=r"pass pathlib.Path\("):
    LLMStepJudge("m", base_url="http://127.0.0.1:9/v1", system_prompt=str(bad))


@pytest.mark.parametrize("reply,verdict", [
    ("Looks fine.\nVERDICT: +1", 1), ("VERDICT: -1", -1), ("verdict = 0", 0),
    ("**Verdict:** -1", -1), ("+1", 1), ("INCORRECT", -1), ("VERDICT: +1\n...\nVERDICT: -1", -1),
    ("VERDICT: − 1", -1),
])
def test_parse_verdict(reply, verdict):
  assert parse_verdict(reply) == verdict


@pytest.mark.parametrize("reply", ["", "   ", "I am not sure", "VERDICT: 2", "VERDICT: maybe"])
def test_parse_verdict_rejects(reply):
  with pytest.raises(Exception, match="verdict|empty"):
    parse_verdict(reply)


def test_step_and_react_judges_share_one_api_key_rule(monkeypatch):
  from botjax.rewards.react import judges as react_judges

  srv = {api: S.start(api, lambda body: "VERDICT: +1") for api in S.APIS}

  def step(api, **kw):
    LLMStepJudge("m", api=api, base_url=srv[api].url, max_retries=0, **kw).complete("1 + 1 = 2")

  def react(api, **kw):
    judge = react_judges.CodeJudge(react_judges.JudgeConfig(
        model="m", api=api, base_url=srv[api].url, max_retries=0, **kw))
    try:
      judge.judge_one("p", "x")
    finally:
      judge.close()

  def auth(send, api, **kw):
    start = len(srv[api].requests)
    send(api, **kw)
    return srv[api].requests[start]["headers"]["authorization"]

  try:
    for api, env in (("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")):
      monkeypatch.setenv(env, "env-key")        # sent when set ...
      assert auth(step, api) == auth(react, api) == "Bearer env-key"
      assert auth(step, api, api_key="given") == auth(react, api, api_key="given") == \
          "Bearer given"
      monkeypatch.delenv(env)
    # ... else a placeholder for OpenAI-compatible servers
    assert auth(step, "openai") == auth(react, "openai") == "Bearer EMPTY"
    with pytest.raises(ValueError, match=r"needs a key: set \$ANTHROPIC_API_KEY"):
      step("anthropic")                           # ... or, for Anthropic, an error
    with pytest.raises(ValueError, match=r"needs a key: set \$ANTHROPIC_API_KEY"):
      react("anthropic")
  finally:
    for s in srv.values():
      s.close()


def test_rewards_import_no_client_package_and_no_jax():
  modules = ["botjax.rewards", "botjax.rewards.llm", "botjax.testbeds.arith_judge"]
  assert imported(modules, ["jax", "flax", "openai", "anthropic"]) == []
