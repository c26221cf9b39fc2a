"""OpenAIStepJudge against a real HTTP server on 127.0.0.1 speaking the chat-completions protocol.

The server grades like a (very small) LLM judge: it reads the "Steps to grade" lines of the user
message, checks `a op b = c`, and replies in prose ending with a VERDICT line. Problems whose text
names a behaviour make it misbehave: SLOW (sleeps past the client timeout), PROSE (no verdict),
BADJSON (a 200 with a broken body), FLAKY (prose first, then a proper reply), HTTP500 (a server
error first, then a proper reply).
"""
import collections
import re
import socket
import threading
import time

import pytest

from botjax.rewards import (ExactArithmeticJudge, JudgeRequest, JudgeUnavailable, MathReward,
                            OpenAIStepJudge, RewardPool, judge_steps)
from botjax.rewards.judges import JUDGE_SYSTEM_PROMPT, JudgeStats, parse_verdict
from _openai_server import OpenAIServer

_STEP_LINE = re.compile(r"Step \d+: (-?\d+) ([-+*/]) (-?\d+) = (-?\d+)")


class _Grader:
  """The server's responder: grades `a op b = c` lines like a small LLM judge (see the module
  docstring); `seen` counts each user message, `delay_s` delays every reply."""

  def __init__(self):
    self.seen = collections.Counter()
    self.delay_s = 0.0
    self._lock = threading.Lock()

  def __call__(self, body):
    user = body["messages"][-1]["content"]
    with self._lock:
      self.seen[user] += 1
      seen = self.seen[user]
    if "SLOW" in user:
      time.sleep(3.0)
    if "HTTP500" in user and seen == 1:
      return 500, {"error": {"message": "overloaded"}}
    if "BADJSON" in user:
      return 200, b'{"choices": ['
    time.sleep(self.delay_s)
    if "PROSE" in user or ("FLAKY" in user and seen == 1):
      return "The step looks plausible to me."
    graded = user.split("Steps to grade:")[-1]
    ok = all(_apply(int(a), op, int(b)) == int(c) for a, op, b, c in _STEP_LINE.findall(graded))
    return f"Checked the arithmetic.\nVERDICT: {'+1' if ok else '-1'}"


def _apply(a, op, b):
  return {"+": a + b, "-": a - b, "*": a * b}.get(op, a // b if b and a % b == 0 else None)


@pytest.fixture(scope="module")
def server():
  srv = OpenAIServer(_Grader())
  yield srv
  srv.close()


def _sent(server, start=0):
  """The request bodies the server received from the `start`-th on."""
  return [r["body"] for r in server.requests[start:]]


def _judge(server, **kwargs):
  kwargs.setdefault("timeout_s", 5.0)
  kwargs.setdefault("max_retries", 0)
  return OpenAIStepJudge("judge-model", base_url=server.url, api_key="test-key", **kwargs)


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
  assert sent[0]["messages"][0] == {"role": "system", "content": JUDGE_SYSTEM_PROMPT}
  last = sent[2]["messages"][1]["content"]
  assert "Compute (3 + 4) * 2 - 5." in last
  assert "Step 1: 3 + 4 = 7   [your earlier verdict: +1]" in last
  assert "Step 2: 7 * 2 = 15   [your earlier verdict: -1]" in last
  assert last.split("Steps to grade:")[1].strip().startswith("Step 3: 15 - 5 = 10")
  start = len(server.requests)
  assert judge_steps(judge, "p", STEPS, {}, strategy="independent") == [1, -1, 1]
  assert all("Earlier steps" not in r["messages"][1]["content"] for r in _sent(server, start))
  assert judge_steps(judge, "p", STEPS, {}) == [1, -1, 0]  # error propagation
  assert judge.metrics()["judge_failures"] == 0


def test_context_aware_windows_list_unit_verdicts(server):
  judge = _judge(server)
  start = len(server.requests)
  steps = STEPS + ["10 * 1 = 10"]
  assert judge_steps(judge, "p", steps, {}, strategy="context_aware", window=2) == [-1, -1, 1]
  last = _sent(server, start)[2]["messages"][1]["content"]
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
  verdicts = judge.judge(reqs)
  assert time.perf_counter() - start < 2.5  # the slow reply is cut at 0.5 s, not waited for (3 s)
  assert verdicts == [0, 0, 0, 1, 1]  # FLAKY: prose first, a proper verdict on the retry
  assert judge.metrics()["judge_failures"] == 3
  flaky = [r for r in _sent(server) if "FLAKY" in r["messages"][1]["content"]]
  assert len(flaky) == 2


def test_client_retries_server_errors(server):
  judge = _judge(server, max_retries=2)
  req = JudgeRequest(problem="HTTP500", steps=("2 * 3 = 7",), first=0, last=1)
  assert judge.judge([req]) == [-1]
  seen = server.responder.seen
  assert seen[next(k for k in seen if "HTTP500" in k)] == 2


def test_refused_connection_then_unavailable():
  judge = OpenAIStepJudge("m", base_url=f"http://127.0.0.1:{_closed_port()}/v1", max_retries=0,
                          timeout_s=2.0, max_consecutive_failures=4)
  with pytest.raises(JudgeUnavailable, match="not reachable"):
    judge.check_reachable()
  reqs = [JudgeRequest(problem="p", steps=("1 + 1 = 2",) * 3, first=i, last=i + 1)
          for i in range(3)]
  assert judge.judge(reqs) == [0, 0, 0]  # a failed unit scores 0, training goes on
  assert judge.metrics()["judge_failures"] == 3
  with pytest.raises(JudgeUnavailable, match=r"4 times in a row.*Connection"):
    judge.judge(reqs[:1])


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


@pytest.mark.parametrize("steps,expected", [
    # an arithmetic slip in step 1, later steps continue correctly from the wrong value
    (("3 + 4 = 7", "7 * 2 = 15", "15 - 5 = 10"),
     {"error_propagation": [1, -1, 0], "context_aware": [1, -1, 1], "independent": [1, -1, 1]}),
    # a copy error in step 1: a true equation on the wrong operand
    (("3 + 4 = 7", "8 * 2 = 16", "16 - 5 = 11"),
     {"error_propagation": [1, -1, 0], "context_aware": [1, -1, 1], "independent": [1, 1, 1]}),
    # the wrong operator / operand in step 2, and an unparseable step 0
    (("three plus four", "7 * 2 = 14", "14 + 5 = 19"),
     {"error_propagation": [-1, 0, 0], "context_aware": [-1, 1, -1], "independent": [-1, 1, 1]}),
    # a correct solution is +1 everywhere under every rule
    (("3 + 4 = 7", "7 * 2 = 14", "14 - 5 = 9"),
     {"error_propagation": [1, 1, 1], "context_aware": [1, 1, 1], "independent": [1, 1, 1]}),
])
def test_exact_judge_strategy_rules(steps, expected):
  from botjax.rewards.steps import judge_steps
  meta = {"step_exprs": ["3 + 4", "7 * 2", "14 - 5"], "step_values": [7, 14, 9]}
  judge = ExactArithmeticJudge()
  for strategy, want in expected.items():
    got = judge_steps(judge, "What is ((3 + 4) * 2) - 5?", steps, meta, strategy=strategy)
    assert got == want, (strategy, got)
  # a window of 2 steps: a unit is +1 only when both of its steps pass the rule
  got = judge_steps(judge, "p", steps, meta, strategy="independent", window=2)
  assert got == [1 if a == b == 1 else -1 for a, b in zip(expected["independent"],
                                                         expected["independent"][1:])]


def test_exact_judge_context_rule_needs_step_exprs():
  from botjax.rewards.steps import judge_steps
  stats = JudgeStats()
  got = judge_steps(ExactArithmeticJudge(), "p", ("3 + 4 = 7",), {"step_values": [7]},
                    strategy="context_aware", stats=stats)
  assert got == [0] and stats.failures == 1


def test_step_and_react_judges_share_one_api_key_rule(server, monkeypatch):
  from botjax.rewards.react import judges as react_judges

  def step(**kw):
    OpenAIStepJudge("m", base_url=server.url, max_retries=0, **kw).complete("1 + 1 = 2")

  def react(**kw):
    client = react_judges.ChatClient(react_judges.JudgeConfig(
        model="m", base_url=server.url, max_retries=0, **kw))
    try:
      client.chat([{"role": "user", "content": "1 + 1 = 2"}])
    finally:
      client.close()

  def auth(send, **kw):
    start = len(server.requests)
    send(**kw)
    return server.requests[start]["auth"]

  monkeypatch.setenv("OPENAI_API_KEY", "env-key")        # sent when set ...
  assert auth(step) == auth(react) == "Bearer env-key"
  assert auth(step, api_key="given") == auth(react, api_key="given") == "Bearer given"
  monkeypatch.delenv("OPENAI_API_KEY")                   # ... else a placeholder
  assert auth(step) == auth(react) == "Bearer EMPTY"
