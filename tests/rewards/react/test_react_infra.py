"""Infrastructure failures of the React reward are flagged, not scored: a judge that cannot be
reached (a closed loopback port) leaves the row `infra_failure`; the model's own failures (no
component, a compile error) are scored as before."""
import socket

from botjax.rewards.react import ReactReward, ReactRewardConfig
from botjax.rewards.react import judges as J

CLEAN = """import { useState } from 'react';

export default function App() {
  const [n, setN] = useState(0);
  return <button onClick={() => setN(n + 1)}>{n}</button>;
}"""
BROKEN = CLEAN.replace("setN(n + 1)", "setN(n + )")


def closed_port() -> int:
  """A loopback port nothing listens on (bound, then closed)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_unreachable_judge_is_an_infrastructure_failure():
  cfg = J.JudgeConfig(model="judge", base_url=f"http://127.0.0.1:{closed_port()}/v1",
                      max_retries=0, timeout_s=10.0)
  texts = [f"```tsx\n{CLEAN}\n```", f"```tsx\n{BROKEN}\n```", "No code today."]
  with ReactReward(ReactRewardConfig(render=False), code_judge=J.CodeJudge(cfg)) as fn:
    results = fn(["Make a counter."] * 3, texts, [{}] * 3)
  clean, broken, prose = results
  # the judge was asked about both components and could not answer: not the model's fault
  for r in (clean, broken):
    assert r.infra_failure and r.failed and r.error.startswith("code judge: ")
  # no component: the judge is never asked, the model's failure is scored
  assert not prose.infra_failure and prose.components["compile"] == -1.0


def test_model_failures_are_scored_with_a_working_pipeline():
  texts = [f"```tsx\n{CLEAN}\n```", f"```tsx\n{BROKEN}\n```", ""]
  with ReactReward(ReactRewardConfig(render=False)) as fn:
    results = fn(["Make a counter."] * 3, texts, [{}] * 3)
  assert not any(r.infra_failure for r in results)
  assert results[0].reward == 0.0
  assert results[1].components["compile"] == -1.0 and results[1].token_spans   # compile error
  assert results[2].components["compile"] == -1.0                               # blank output
