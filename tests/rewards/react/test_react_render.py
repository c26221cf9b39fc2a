"""Rendering in headless Chromium, the hostile suite, and ReactReward end to end with judges."""
import base64
import io

import numpy as np
import pytest
from PIL import Image

from botjax.rewards.base import spans_to_token_values
from botjax.rewards.react import evaluate as ev
from botjax.rewards.react import judges as J
from botjax.rewards.react import render as R
from botjax.rewards.react import toolchain as tc
from botjax.rewards.react.reward import ReactReward, ReactRewardConfig
from _openai_server import OpenAIServer, images, texts

GOOD = """import { Star } from 'lucide-react';

export default function App() {
  return (
    <div className="min-h-screen bg-blue-500 p-8 text-white">
      <Star /> Hello botjax
    </div>
  );
}"""
BLANK = "export default function App() {\n  return <div></div>;\n}"
THROWS = "export default function App() {\n  throw new Error('boom in render');\n}"

HOSTILE = {
    "fetch": """import { useEffect, useState } from 'react';
export default function App() {
  const [t, setT] = useState('loading');
  useEffect(() => { fetch('https://example.com/data.json').then((r) => r.text()).then(setT); }, []);
  return <div className="p-4">{t}</div>;
}""",
    "websocket": """import { useEffect } from 'react';
export default function App() {
  useEffect(() => { const ws = new WebSocket('wss://example.com/socket'); ws.onerror = () => {}; }, []);
  return <div className="p-4">live</div>;
}""",
    "file": """import { useEffect, useState } from 'react';
export default function App() {
  const [t, setT] = useState('none');
  useEffect(() => {
    fetch('file:///etc/passwd').then((r) => r.text()).then(setT).catch(() => {
      const x = new XMLHttpRequest();
      x.open('GET', 'file:///etc/hostname', false);
      try { x.send(); setT(x.responseText || 'empty'); } catch (e) { setT('blocked'); }
    });
  }, []);
  return <pre className="p-4">{t}</pre>;
}""",
    "loop": """export default function App() {
  let i = 0;
  while (true) { i++; }
  return <div>{i}</div>;
}""",
    "heap_bomb": """export default function App() {
  const hoard: number[][] = [];
  while (true) hoard.push(new Array(1_000_000).fill(7));
  return <div>{hoard.length}</div>;
}""",
    "buffer_bomb": """export default function App() {
  const hoard: Uint8Array[] = [];
  while (true) { const b = new Uint8Array(64_000_000); b.fill(1); hoard.push(b); }
  return <div>{hoard.length}</div>;
}""",
    "console_flood": """export default function App() {
  for (let i = 0; i < 100000; i++) console.log('spam', i);
  return <div className="p-4">quiet now</div>;
}""",
    "navigate": """import { useEffect } from 'react';
export default function App() {
  useEffect(() => { window.location.href = 'https://example.com/phish'; }, []);
  return <div className="p-4">bye</div>;
}""",
}


@pytest.fixture(scope="module")
def pool():
  with tc.NodePool(size=1, timeout_s=60) as p:
    yield p


@pytest.fixture(scope="module")
def renderer():
  # A generous time limit: on a loaded 2-core CI machine good pages must not time out.
  with R.Renderer(concurrency=2, timeout_s=10.0, memory_mb=600, js_heap_mb=128) as r:
    yield r


def _render(pool, renderer, sources):
  compiled = pool.check(sources, bundle=True, css=True, lint=False)
  assert all(c.ok for c in compiled), [c.diagnostics for c in compiled]
  return renderer.render([renderer.page(c.bundle, c.css, [pool.vendor(v) for v in c.vendors])
                          for c in compiled])


def test_render_working_blank_and_throwing(pool, renderer):
  good, blank, throws = _render(pool, renderer, [GOOD, BLANK, THROWS])
  assert good.ok and not good.blank and good.visible and good.error is None
  assert "Hello botjax" in good.text
  img = Image.open(io.BytesIO(good.screenshot)).convert("RGB")
  assert img.size == (1280, 800)
  r, g, b = img.getpixel((640, 700))  # Tailwind's bg-blue-500 fills the page
  assert b > 200 and r < 120, (r, g, b)
  # a blank page renders (the paper's compile-rate event, App. C); it is just not visible
  assert blank.ok and blank.blank and not blank.visible and blank.error is None
  assert blank.screenshot is not None and R.is_blank(blank.screenshot)
  assert not throws.ok and not throws.visible and "boom in render" in throws.error


def test_hostile_components_are_contained(pool, renderer):
  names = list(HOSTILE)
  results = dict(zip(names + ["good"],
                     _render(pool, renderer, [HOSTILE[n] for n in names] + [GOOD])))
  after = _render(pool, renderer, [GOOD])[0]
  for name in names:
    assert not results[name].ok, (name, results[name])
  errors = {name: results[name].error for name in names}
  assert results["good"].ok, results["good"].error
  assert "network access blocked" in results["fetch"].error, errors
  assert "websocket" in results["websocket"].error, errors
  assert "network access blocked" in results["file"].error, errors
  assert "root:" not in results["file"].text and "blocked" in results["file"].text
  assert "time limit" in results["loop"].error, errors
  assert "crashed" in results["heap_bomb"].error or "time limit" in results["heap_bomb"].error
  # ArrayBuffers live outside the V8 heap: the resident-memory watchdog kills that renderer
  assert "crashed" in results["buffer_bomb"].error and renderer.renderer_kills >= 1, errors
  assert "console flood" in results["console_flood"].error, errors
  assert results["console_flood"].console_count == 100000
  assert "network access blocked" in results["navigate"].error, errors
  assert after.ok and "Hello botjax" in after.text, after.error  # the run is still alive


def test_page_html_escapes_closing_tags():
  html = R.page_html("var s = '</script><img src=x>';", "a::after{content:'</style>'}", [])
  assert "</script><img" not in html and "</style>'" not in html
  assert html.count("<script>") == html.count("</script>") == 2


def test_react_reward_end_to_end_with_judges(pool, renderer):
  def responder(body):
    if images(body):
      png = base64.b64decode(images(body)[0].split(",", 1)[1])
      assert Image.open(io.BytesIO(png)).size == (1280, 800)
      assert "export default" not in texts(body)  # the VLM never sees code
      return "SCORE: 9\nJUSTIFICATION: clear"
    return "SCORE: 6\nLINE_ANALYSIS:\n5:       <Star /> Hello botjax | DESC: plain | IMPACT: -2"
  server = OpenAIServer(responder)
  cfg = J.JudgeConfig(model="judge", base_url=server.url, api_key="k", max_retries=0)
  broken = "export default function App() {\n  return <div>\n}"
  completions = [f"Here it is.\n```tsx\n{GOOD}\n```\nEnjoy!", f"```tsx\n{broken}\n```",
                 "Sorry, I can only describe it in words.", f"```tsx\n{BLANK}\n```",
                 f"```tsx\n{THROWS}\n```"]
  fn = ReactReward(ReactRewardConfig(), code_judge=J.CodeJudge(cfg), vlm_judge=J.VLMJudge(cfg),
                   pool=pool, renderer=renderer)
  strict = ReactReward(ReactRewardConfig(blank_is_failure=True), code_judge=J.CodeJudge(cfg),
                       vlm_judge=J.VLMJudge(cfg), pool=pool, renderer=renderer)
  try:
    scores = fn.score(["a blue hello page"] * 5, completions)
    results = fn(["a blue hello page"] * 5, completions, [{}] * 5)
    vlm_calls = sum(1 for q in server.requests if images(q["body"]))
    [strict_blank] = strict.score(["a blue hello page"], [completions[3]])
    strict_vlm_calls = sum(1 for q in server.requests if images(q["body"])) - vlm_calls
  finally:
    fn.close()
    strict.close()
    server.close()
  good, bad, prose, blank, throws = scores
  assert good.compiles_and_renders and good.screenshot is not None
  assert good.result.components == pytest.approx(
      {"compile": 0.0, "render": 0.0, "lint": 0.0, "judge": 0.6, "vlm": 0.9})
  assert good.result.reward == pytest.approx(1.5) and good.line_penalties == {5: -0.2}
  # the judge's line penalty spreads over code lines 2..8 only; prose lines get nothing
  text = completions[0]
  values = spans_to_token_values(good.result.token_spans, [(i, i + 1) for i in range(len(text))],
                                 len(text))
  code_start = text.index("import")
  assert np.all(values[:code_start] == 0) and np.all(values[text.index("```\nEnjoy"):] == 0)
  star = text.index("<Star />")
  assert values[star] == pytest.approx(-0.2)

  assert bad.result.components["compile"] == -1.0 and bad.result.components["vlm"] == -0.3
  assert bad.result.components["lint"] == -0.5 and bad.line_penalties[2] == pytest.approx(-1.5)
  assert bad.result.reward == pytest.approx(-1.0 - 0.5 + 0.6 - 0.3)
  assert prose.result.reward == pytest.approx(-1.0 - 0.3 - 0.3) and prose.result.token_spans == []
  # by default a blank page renders: no render penalty, the VLM judges its screenshot
  assert blank.compiles_and_renders and not blank.renders_visible
  assert blank.result.components["render"] == 0.0 and blank.result.components["vlm"] == 0.9
  # a component that throws fails to render: the render penalty and a VLM term of 0 (App. D)
  assert throws.result.components["render"] == -1.0 and throws.result.components["vlm"] == 0.0
  assert not throws.compiles_and_renders and throws.screenshot is None
  # good and blank went to the VLM (twice: score and __call__); the thrower never did
  assert vlm_calls == 4
  # blank_is_failure: the render penalty, no VLM call, VLM term 0
  assert strict_blank.result.components["render"] == -1.0 and strict_vlm_calls == 0
  assert strict_blank.result.components["vlm"] == 0.0 and strict_blank.compiles_and_renders
  assert [r.reward for r in results] == pytest.approx([s.result.reward for s in scores])


def test_compile_rate_on_held_out_rollouts(pool, renderer):
  broken = "export default function App() {\n  return <div>\n}"
  rollouts = [f"```tsx\n{GOOD}\n```", f"```tsx\n{broken}\n```", f"```tsx\n{BLANK}\n```",
              "no code"]
  with ReactReward(ReactRewardConfig(lint=False), pool=pool, renderer=renderer) as fn:
    res = ev.evaluate_compile_rate(fn, ["p"] * 4, rollouts)
  # the paper's compile rate counts the blank page; the visible rate does not
  assert res["compile_rate"] == 0.5 and res["visible_rate"] == 0.25 and res["n"] == 4
  reasons = [item["reason"] for item in res["items"]]
  assert reasons[0] is None and reasons[1].startswith("compile:")
  assert reasons[2] == "blank page" and reasons[3] == "no component"
  assert [item["ok"] for item in res["items"]] == [True, False, True, False]
  assert [item["visible"] for item in res["items"]] == [True, False, False, False]


def test_browser_killed_between_batches_is_relaunched(pool, renderer):
  import os
  import signal
  _render(pool, renderer, [GOOD])
  pids = renderer._browser_pids()
  old_dir = renderer._tmpdir
  assert pids and os.path.isdir(old_dir)
  for pid in pids:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # a child already went down with its parent
      pass
  before = renderer.browser_restarts
  [res] = _render(pool, renderer, [GOOD])
  assert res.ok and "Hello botjax" in res.text
  assert renderer.browser_restarts == before + 1
  assert not os.path.exists(old_dir)  # the dead browser's profile and TMPDIR were removed
  with pytest.raises(ValueError, match="vlm_judge needs screenshots"):
    ReactReward(ReactRewardConfig(render=False), vlm_judge=J.VLMJudge(
        J.JudgeConfig(model="m", base_url="http://127.0.0.1:9/v1")))
