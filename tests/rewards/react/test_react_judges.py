"""Judge parsing rules, and the judges against loopback servers speaking each API's protocol
(OpenAI chat completions, Anthropic Messages): the same replies give the same verdicts."""
import dataclasses
import io

import pytest
from PIL import Image

from botjax import metrics
from botjax.rewards.react import evaluate as ev
from botjax.rewards.react import judges as J
import _llm_servers as S

CODE = "import React from 'react';\nexport default function App() {\n  return <div>hi</div>;\n}"


def _png(color):
  buf = io.BytesIO()
  Image.new("RGB", (8, 8), color).save(buf, format="PNG")
  return buf.getvalue()


PNG_A, PNG_B = _png((255, 0, 0)), _png((0, 0, 255))


@pytest.fixture(params=S.APIS)
def server(request):
  srv = S.start(request.param, lambda body: "SCORE: 5", api_key="k")
  yield srv
  srv.close()


def _cfg(srv, **kw):
  kw.setdefault("max_retries", 0)
  return J.JudgeConfig(model="judge-test", api=srv.api, base_url=srv.url, api_key="k",
                       timeout_s=10, **kw)


def _texts(srv, body):
  return S.all_text(srv, body)


def _images(srv, body):
  return S.image_bytes(srv, body)


def test_code_verdict_parsing_rules():
  reply = ("SCORE: 7\nLINE_ANALYSIS:\n1: export default function App() { | DESC: x | IMPACT: -2\n"
           "oops not an entry\n9: beyond | DESC: out of range | IMPACT: -1\n"
           "2: return | DESC: y | IMPACT: -7\n3: } | DESC: z | IMPACT: -1\n"
           "0: import | DESC: w | IMPACT: -3\n1: again | DESC: v | IMPACT: -1\n")
  v = J.parse_code_verdict(reply, num_lines=4)
  # valid entries in order: line 1 (-2), line 3 (-1), line 0 (-3); the 4th valid one is dropped
  assert v.score == 0.7 and v.lines == ((1, -0.2), (3, -0.1), (0, -0.3)) and not v.non_react
  assert J.parse_code_verdict("SCORE: -3\nLINE_ANALYSIS: NON_REACT_CODE", 4).score == -0.3
  assert J.parse_code_verdict("LINE_ANALYSIS: NON_REACT_CODE", 4).non_react
  assert J.parse_code_verdict("SCORE: 15", 4).score == 1.0
  assert J.parse_code_verdict("SCORE: -1", 4).score == 0.0
  bad = J.parse_code_verdict("I think it is fine.\nLINE_ANALYSIS:\n1: a | DESC: b | IMPACT: -2", 4)
  assert bad.score == 0.0 and bad.lines == () and bad.error
  assert J.parse_code_verdict("**SCORE:** 8\nLINE_ANALYSIS: NONE", 4).score == 0.8


def test_vlm_and_letter_parsing():
  v = J.parse_vlm_verdict("SCORE: 6\nJUSTIFICATION: The form is there but cramped.")
  assert v.score == 0.6 and v.justification == "The form is there but cramped." and v.lines == ()
  assert J.parse_vlm_verdict("looks nice").score == 0.0
  assert [J.parse_letter(x) for x in ["A", " b.", "**A**", "'B'", "AB", "A is better", ""]] == \
      ["A", "B", "A", "B", None, None, None]


def test_code_judge_over_http(server):
  server.responder = lambda body: ("SCORE: 8\nLINE_ANALYSIS:\n"
                                   "2:   return <div>hi</div>; | DESC: bare | IMPACT: -1")
  judge = J.CodeJudge(_cfg(server))
  [v] = judge.judge(["a greeting"], [CODE])
  assert v.score == 0.8 and v.lines == ((2, -0.1),)
  body = server.requests[-1]["body"]
  assert body["model"] == "judge-test"
  assert server.requests[-1]["headers"]["authorization"] == "Bearer k"
  sent = _texts(server, body)
  assert "a greeting" in sent and "0: import React from 'react';" in sent
  assert "2:   return <div>hi</div>;" in sent and "```" not in sent
  assert _images(server, body) == [] and S.system_text(server, body) == ""
  assert judge.metrics() == {"judge_calls": 1, "judge_failures": 0}


def test_judge_http_error_scores_zero(server):
  server.responder = lambda body: S.error(server, 500, "overloaded")
  code, vlm = J.CodeJudge(_cfg(server)), J.VLMJudge(_cfg(server))
  [v] = code.judge(["p"], [CODE])
  assert v.score == 0.0 and "failed" in v.error
  [w] = vlm.judge(["p"], [PNG_A])
  assert w.score == 0.0 and w.error
  server.responder = lambda body: "no score here"
  [u] = code.judge(["p"], [CODE])
  assert u.score == 0.0 and u.error == "no SCORE in the reply"
  assert code.metrics() == {"judge_calls": 2, "judge_failures": 2}
  assert vlm.metrics() == {"judge_calls": 1, "judge_failures": 1}


@pytest.mark.parametrize("status", [429, 500, 529])
def test_judges_retry_overload_and_rate_limits(server, status):
  if status == 529 and server.api == "openai":
    pytest.skip("529 (overloaded) is Anthropic's status")
  calls = []

  def responder(body):
    calls.append(1)
    return S.error(server, status, "busy") if len(calls) % 2 else "SCORE: 6\nJUSTIFICATION: ok"
  server.responder = responder
  vlm = J.VLMJudge(_cfg(server, max_retries=1))
  [v] = vlm.judge(["p"], [PNG_A])
  assert v.score == 0.6 and len(calls) == 2 and vlm.metrics()["judge_failures"] == 0


def test_refused_key_scores_zero_with_the_status(server):
  judge = J.CodeJudge(J.JudgeConfig(model="m", api=server.api, base_url=server.url,
                                    api_key="wrong", max_retries=0))
  [v] = judge.judge(["p"], [CODE])
  assert v.score == 0.0 and "401" in v.error and judge.metrics()["judge_failures"] == 1
  with pytest.raises(Exception, match="HTTP 401: the key was refused"):
    judge.client.check_reachable()


def test_vlm_judge_sees_screenshot_never_code(server):
  server.responder = lambda body: "SCORE: 9\nJUSTIFICATION: clean layout"
  [v] = J.VLMJudge(_cfg(server)).judge(["a red square"], [PNG_A], [CODE])
  assert v.score == 0.9 and v.justification == "clean layout"
  body = server.requests[-1]["body"]
  assert _images(server, body) == [PNG_A]   # a data URL or a base64 image block
  if server.api == "anthropic":
    [block] = [b for b in body["messages"][0]["content"] if b["type"] == "image"]
    assert block["source"]["type"] == "base64" and block["source"]["media_type"] == "image/png"
  assert "a red square" in _texts(server, body) and "export default" not in _texts(server, body)


def test_vlm_two_turn_keeps_first_score(server):
  def responder(body):
    if "export default" in _texts(server, body):  # turn 2 sees the code and turn 1's verdict
      assert "7/10" in _texts(server, body) and "button missing" in _texts(server, body)
      return "SCORE: 2\nLINE_ANALYSIS:\n2:   return <div>hi</div>; | DESC: no button | IMPACT: -3"
    return "SCORE: 7\nJUSTIFICATION: button missing"
  server.responder = responder
  [v] = J.VLMJudge(_cfg(server), mode="two_turn").judge(["a button"], [PNG_A], [CODE])
  assert v.score == 0.7 and v.lines == ((2, -0.3),) and len(server.requests) == 2
  assert _images(server, server.requests[1]["body"]) == [PNG_A]

  server.responder = lambda body: ("garbage" if "export default" in _texts(server, body)
                                   else "SCORE: 4\nJUSTIFICATION: meh")
  [w] = J.VLMJudge(_cfg(server), mode="two_turn").judge(["a button"], [PNG_A], [CODE])
  assert w.score == 0.4 and w.lines == ()
  server.responder = lambda body: ("SCORE: 3\nJUSTIFICATION: x\nLINE_ANALYSIS:\n"
                                   "1: export | DESC: d | IMPACT: -2")
  [u] = J.VLMJudge(_cfg(server), mode="one_turn").judge(["a button"], [PNG_A], [CODE])
  assert u.score == 0.3 and u.lines == ((1, -0.2),)
  with pytest.raises(ValueError, match="mode"):
    J.VLMJudge(_cfg(server), mode="three_turn")


def _prefers(srv, png, body):
  """Answers the letter of the image equal to `png` (a judge without position bias)."""
  return "A" if _images(srv, body)[0] == png else "B"


def test_pairwise_abba_order_and_mapping(server):
  server.responder = lambda body: _prefers(server, PNG_A, body)
  judge = J.PairwiseJudge(_cfg(server))
  assert judge.compare("p", PNG_A, PNG_B) == [1.0, 1.0, 1.0, 1.0]
  firsts = [_images(server, r["body"])[0] for r in server.requests]
  assert firsts == [PNG_A, PNG_B, PNG_B, PNG_A]  # AB, BA, BA, AB
  assert all(len(_images(server, r["body"])) == 2 for r in server.requests)
  server.responder = lambda body: "A"  # pure position bias: 2-2, a tie
  assert judge.compare("p", PNG_A, PNG_B) == [1.0, 0.0, 0.0, 1.0]
  assert judge.compare("p", None, PNG_B) == [0.0] * 4
  assert judge.compare("p", None, None) == [None] * 4
  server.responder = lambda body: "Both are fine."   # unanswered rounds are counted
  assert judge.compare("p", PNG_A, PNG_B) == [None] * 4
  assert judge.metrics() == {"judge_calls": 12, "judge_failures": 4}


def test_abba_outcomes_on_hand_made_verdicts():
  # the judge's per-round floats (1.0: A won) as the letters botjax.metrics reads
  def outcome(rounds):
    letters = [None if v is None else "A" if v >= 0.5 else "B" for v in rounds]
    return float(metrics.abba_outcomes([letters])[0])
  assert outcome([1, 1, 0, 1]) == 1.0  # 3-1
  assert outcome([0, 1, 0, 0]) == 0.0  # 1-3
  assert outcome([1, 1, 1, 1]) == 1.0  # 4-0
  assert outcome([0, 0, 0, 0]) == 0.0  # 0-4
  assert outcome([1, 0, 0, 1]) == 0.5  # 2-2
  assert outcome([None, None, None, None]) == 0.5
  assert outcome([1, None, 0, 1]) == 1.0
  seqs = [[1, 1, 0, 1], [1, 1, 1, 1], [1, 0, 0, 1], [0, 0, 1, 0], [0, 1, 1, 0]]
  local = ev.win_rate([outcome(s) for s in seqs])
  assert local["win_rate"] == pytest.approx(3 / 5) and local["tie_rate"] == pytest.approx(2 / 5)
  r = ev.win_rate([1.0, 1.0, 0.5, 0.0])
  assert r == {"win_rate": 0.625, "tie_rate": 0.25, "wins": 2, "losses": 1, "ties": 1, "n": 4}
  with pytest.raises(ValueError, match="0.0, 0.5 or 1.0"):
    ev.win_rate([0.7])


def test_pairwise_win_rate_end_to_end(server):
  # prompt 0: unbiased judge prefers A (4-0); prompt 1: position bias (2-2); prompt 2: prefers B
  def responder(body):
    t = _texts(server, body)
    if "prompt-0" in t:
      return _prefers(server, PNG_A, body)
    if "prompt-1" in t:
      return "B"
    return _prefers(server, PNG_B, body)
  server.responder = responder
  res = ev.pairwise_win_rate(J.PairwiseJudge(_cfg(server)), ["prompt-0", "prompt-1", "prompt-2"],
                             [PNG_A] * 3, [PNG_B] * 3)
  assert res["outcomes"] == [1.0, 0.5, 0.0]
  assert res["win_rate"] == pytest.approx(0.5) and res["tie_rate"] == pytest.approx(1 / 3)
  assert len(server.requests) == 12
  with pytest.raises(ValueError, match="one screenshot per prompt"):
    ev.pairwise_win_rate(J.PairwiseJudge(_cfg(server)), ["p"], [], [])


# ---- prompt overrides (e.g. the paper's App. D prompts) ------------------------------------------

def test_code_judge_prompt_and_system_prompt_from_files(server, tmp_path):
  (tmp_path / "code.txt").write_text("Judge {{strictly}}.\n<request>{prompt}</request>\n"
                                     "<code>\n{code}\n</code>\n")
  (tmp_path / "system.txt").write_text("You are the paper's code judge.")
  server.responder = lambda body: "SCORE: 4\nLINE_ANALYSIS: NONE"
  judge = J.CodeJudge(_cfg(server), prompt=tmp_path / "code.txt",
                      system_prompt=tmp_path / "system.txt")
  [v] = judge.judge(["a greeting"], [CODE])
  assert v.score == 0.4
  body = server.requests[-1]["body"]
  assert S.user_text(server, body) == ("Judge {strictly}.\n<request>a greeting</request>\n<code>\n"
                                       + J.number_lines(CODE) + "\n</code>\n")
  assert S.system_text(server, body) == "You are the paper's code judge."
  if server.api == "anthropic":
    assert body["system"] == "You are the paper's code judge."
  # the built-in prompt is what is sent by default
  J.CodeJudge(_cfg(server)).judge(["a greeting"], [CODE])
  assert S.user_text(server, server.requests[-1]["body"]) == J.CODE_JUDGE_PROMPT.format(
      prompt="a greeting", code=J.number_lines(CODE))


def test_vlm_judge_prompts_per_turn(server):
  def responder(body):
    t = S.user_text(server, body)
    return "SCORE: 5\nJUSTIFICATION: fine" if t.startswith("SHOT") else \
        "LINE_ANALYSIS:\n1: export | DESC: d | IMPACT: -1"
  server.responder = responder
  judge = J.VLMJudge(_cfg(server), mode="two_turn", prompt="SHOT {prompt}",
                     second_turn_prompt="TURN2 {score} because {justification}:\n{code}",
                     system_prompt="Look closely.")
  [v] = judge.judge(["a form"], [PNG_A], [CODE])
  assert v.score == 0.5 and v.lines == ((1, -0.1),)
  first, second = (r["body"] for r in server.requests[-2:])
  assert S.user_text(server, first) == "SHOT a form"
  assert S.user_text(server, second) == "TURN2 5 because fine:\n" + J.number_lines(CODE)
  assert S.system_text(server, first) == S.system_text(server, second) == "Look closely."
  assert _images(server, first) == _images(server, second) == [PNG_A]
  server.responder = lambda body: "SCORE: 3\nJUSTIFICATION: x\nLINE_ANALYSIS: NONE"
  one = J.VLMJudge(_cfg(server), mode="one_turn", one_turn_prompt="ONE {prompt}\n{code}")
  [u] = one.judge(["a form"], [PNG_A], [CODE])
  assert u.score == 0.3
  assert S.user_text(server, server.requests[-1]["body"]) == "ONE a form\n" + J.number_lines(CODE)


def test_pairwise_prompt_override(server):
  server.responder = lambda body: "A"
  judge = J.PairwiseJudge(_cfg(server), prompt="Which app does {prompt} better?",
                          system_prompt="Compare fairly.")
  assert judge.compare("a clock", PNG_A, PNG_B) == [1.0, 0.0, 0.0, 1.0]
  body = server.requests[-1]["body"]
  assert S.user_text(server, body) == "Which app does a clock better?\nApp A:\nApp B:"
  assert S.system_text(server, body) == "Compare fairly."


@pytest.mark.parametrize("make,message", [
    (lambda c: J.CodeJudge(c, prompt="{prompt} only"),
     r"the code judge's prompt \(text\) lacks the required placeholder \{code\}"),
    (lambda c: J.CodeJudge(c, prompt="{prompt} {code} {lines}"),
     r"unknown placeholder \{lines\}"),
    (lambda c: J.VLMJudge(c, prompt="no placeholder"),
     r"the VLM judge's prompt \(text\) lacks the required placeholder \{prompt\}"),
    (lambda c: J.VLMJudge(c, one_turn_prompt="{prompt}"),
     r"one_turn prompt \(text\) lacks the required placeholder \{code\}"),
    (lambda c: J.VLMJudge(c, second_turn_prompt="{score}"),
     r"second-turn prompt \(text\) lacks the required placeholder \{code\}"),
    (lambda c: J.PairwiseJudge(c, prompt="{request}"),
     r"the pairwise judge's prompt \(text\) lacks the required placeholder \{prompt\}"),
])
def test_templates_missing_a_placeholder_are_refused(make, message):
  cfg = J.JudgeConfig(model="m", base_url="http://127.0.0.1:9/v1")
  with pytest.raises(ValueError, match=message):
    make(cfg)


def test_both_apis_give_the_same_verdicts():
  replies = {"code": "SCORE: 7\nLINE_ANALYSIS:\n1: export | DESC: x | IMPACT: -2",
             "shot": "SCORE: 8\nJUSTIFICATION: neat"}

  def responder(body):
    return replies["shot"] if S.image_bytes(srv, body) else replies["code"]
  out = {}
  for api in S.APIS:
    srv = S.start(api, responder, api_key="k")
    try:
      cfg = _cfg(srv)
      code, vlm = J.CodeJudge(cfg), J.VLMJudge(cfg)
      out[api] = (code.judge(["p", "q"], [CODE, CODE]), vlm.judge(["p"], [PNG_A]),
                  code.metrics(), vlm.metrics())
    finally:
      srv.close()
  strip = lambda verdicts: [dataclasses.replace(v, text="") for v in verdicts]  # noqa: E731
  assert strip(out["openai"][0]) == strip(out["anthropic"][0])
  assert out["openai"][1:] == out["anthropic"][1:]
  assert out["openai"][0][0].score == 0.7 and out["openai"][1][0].score == 0.8
