"""Judge parsing rules and the judges against a loopback server speaking the OpenAI protocol."""
import base64
import io

import pytest
from PIL import Image

from botjax import metrics
from botjax.rewards.react import evaluate as ev
from botjax.rewards.react import judges as J
from _openai_server import OpenAIServer, images, texts

CODE = "import React from 'react';\nexport default function App() {\n  return <div>hi</div>;\n}"


def _png(color):
  buf = io.BytesIO()
  Image.new("RGB", (8, 8), color).save(buf, format="PNG")
  return buf.getvalue()


PNG_A, PNG_B = _png((255, 0, 0)), _png((0, 0, 255))


@pytest.fixture
def server():
  srv = OpenAIServer(lambda body: "SCORE: 5")
  yield srv
  srv.close()


def _cfg(srv, **kw):
  return J.JudgeConfig(model="judge-test", base_url=srv.url, api_key="k", max_retries=0,
                       timeout_s=10, **kw)


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
  assert body["model"] == "judge-test" and server.requests[-1]["auth"] == "Bearer k"
  sent = texts(body)
  assert "a greeting" in sent and "0: import React from 'react';" in sent
  assert "2:   return <div>hi</div>;" in sent and "```" not in sent and images(body) == []


def test_judge_http_error_scores_zero(server):
  server.responder = lambda body: (500, {"error": {"message": "overloaded"}})
  [v] = J.CodeJudge(_cfg(server)).judge(["p"], [CODE])
  assert v.score == 0.0 and "failed" in v.error
  [w] = J.VLMJudge(_cfg(server)).judge(["p"], [PNG_A])
  assert w.score == 0.0 and w.error


def test_vlm_judge_sees_screenshot_never_code(server):
  server.responder = lambda body: "SCORE: 9\nJUSTIFICATION: clean layout"
  [v] = J.VLMJudge(_cfg(server)).judge(["a red square"], [PNG_A], [CODE])
  assert v.score == 0.9 and v.justification == "clean layout"
  body = server.requests[-1]["body"]
  [url] = images(body)
  assert url.startswith("data:image/png;base64,")
  assert base64.b64decode(url.split(",", 1)[1]) == PNG_A
  assert "a red square" in texts(body) and "export default" not in texts(body)


def test_vlm_two_turn_keeps_first_score(server):
  def responder(body):
    if "export default" in texts(body):  # turn 2 sees the code and turn 1's verdict
      assert "7/10" in texts(body) and "button missing" in texts(body)
      return "SCORE: 2\nLINE_ANALYSIS:\n2:   return <div>hi</div>; | DESC: no button | IMPACT: -3"
    return "SCORE: 7\nJUSTIFICATION: button missing"
  server.responder = responder
  [v] = J.VLMJudge(_cfg(server), mode="two_turn").judge(["a button"], [PNG_A], [CODE])
  assert v.score == 0.7 and v.lines == ((2, -0.3),) and len(server.requests) == 2
  assert len(images(server.requests[1]["body"])) == 1

  server.responder = lambda body: ("garbage" if "export default" in texts(body)
                                   else "SCORE: 4\nJUSTIFICATION: meh")
  [w] = J.VLMJudge(_cfg(server), mode="two_turn").judge(["a button"], [PNG_A], [CODE])
  assert w.score == 0.4 and w.lines == ()
  server.responder = lambda body: ("SCORE: 3\nJUSTIFICATION: x\nLINE_ANALYSIS:\n"
                                   "1: export | DESC: d | IMPACT: -2")
  [u] = J.VLMJudge(_cfg(server), mode="one_turn").judge(["a button"], [PNG_A], [CODE])
  assert u.score == 0.3 and u.lines == ((1, -0.2),)
  with pytest.raises(ValueError, match="mode"):
    J.VLMJudge(_cfg(server), mode="three_turn")


def _prefers(png, body):
  """Answers the letter of the image equal to `png` (a judge without position bias)."""
  urls = images(body)
  return "A" if base64.b64decode(urls[0].split(",", 1)[1]) == png else "B"


def test_pairwise_abba_order_and_mapping(server):
  server.responder = lambda body: _prefers(PNG_A, body)
  judge = J.PairwiseJudge(_cfg(server))
  assert judge.compare("p", PNG_A, PNG_B) == [1.0, 1.0, 1.0, 1.0]
  firsts = [base64.b64decode(images(r["body"])[0].split(",", 1)[1]) for r in server.requests]
  assert firsts == [PNG_A, PNG_B, PNG_B, PNG_A]  # AB, BA, BA, AB
  server.responder = lambda body: "A"  # pure position bias: 2-2, a tie
  assert judge.compare("p", PNG_A, PNG_B) == [1.0, 0.0, 0.0, 1.0]
  assert judge.compare("p", None, PNG_B) == [0.0] * 4
  assert judge.compare("p", None, None) == [None] * 4


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
    t = texts(body)
    if "prompt-0" in t:
      return _prefers(PNG_A, body)
    if "prompt-1" in t:
      return "B"
    return _prefers(PNG_B, body)
  server.responder = responder
  res = ev.pairwise_win_rate(J.PairwiseJudge(_cfg(server)), ["prompt-0", "prompt-1", "prompt-2"],
                             [PNG_A] * 3, [PNG_B] * 3)
  assert res["outcomes"] == [1.0, 0.5, 0.0]
  assert res["win_rate"] == pytest.approx(0.5) and res["tie_rate"] == pytest.approx(1 / 3)
  assert len(server.requests) == 12
  with pytest.raises(ValueError, match="one screenshot per prompt"):
    ev.pairwise_win_rate(J.PairwiseJudge(_cfg(server)), ["p"], [], [])
