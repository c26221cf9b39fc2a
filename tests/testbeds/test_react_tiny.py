"""The tiny React testbed's warm-start components through the real toolchain and browser: clean
ones compile, lint clean and render something visible; each flaw is caught on its own line."""
import random

import pytest

from botjax.rewards import react
from botjax.testbeds import react_tiny as R

REQUEST = "A counter app with a big {button} and a 'reset' link."


@pytest.fixture(scope="module")
def reward():
  with react.ReactReward(react.ReactRewardConfig(node_workers=1, render_concurrency=1)) as fn:
    yield fn


def _line_of(code, needle):
  return next(i for i, line in enumerate(code.split("\n")) if needle in line)


def test_clean_components_of_every_layout_compile_and_render(reward):
  codes, layouts = [], set()
  rng = random.Random(0)
  while len(layouts) < 3:              # one component of each of the three layouts
    code = R.component(REQUEST, rng)
    layout = "count" if "setCount" in code else ("items.map" if "items.map" in code else "text")
    if layout not in layouts:
      layouts.add(layout)
      codes.append(code)
  scores = reward.score([REQUEST] * 3, [R.completion(c) for c in codes])
  for code, s in zip(codes, scores):
    assert s.compiles_and_renders, (code, s.result.error)
    assert s.compiled.lint == () and s.result.reward == 0.0 and s.line_penalties == {}
    assert s.extracted.code == code and s.extracted.first_line == 2
  assert R.title_of(REQUEST) in codes[0] and "{" not in R.title_of(REQUEST)


@pytest.mark.parametrize("flaw,needle,compiles", [
    ("unused_variable", "const unused", True),
    ("var", "var [", True),
    ("missing_brace", None, False),
    ("bad_import", 'from "axios"', False),
])
def test_each_flaw_is_penalised_on_its_line(reward, flaw, needle, compiles):
  code = R.component(REQUEST, random.Random(1), flaw)
  [s] = reward.score([REQUEST], [R.completion(code)])
  assert s.compiled.ok is compiles
  assert s.result.reward < 0.0 and s.line_penalties
  if compiles:
    assert s.compiles_and_renders
    assert _line_of(code, needle) in {m.line for m in s.compiled.lint}
  else:
    assert s.result.components["compile"] == -1.0
    if needle is not None:
      assert _line_of(code, needle) in s.line_penalties


def test_missing_key_flaw_is_a_lint_error():
  rng = random.Random(0)
  code = next(c for c in (R.component(REQUEST, rng, "missing_key") for _ in range(20))
              if "items.map" in c)
  with react.NodePool(size=1) as pool:
    [res] = pool.check([code])
  assert res.ok and any(m.rule == "react/jsx-key" and m.line == _line_of(code, "items.map")
                        for m in res.lint)


def test_unknown_flaw_is_refused():
  with pytest.raises(ValueError, match="flaw must be None or one of"):
    R.component(REQUEST, random.Random(0), "typo")
