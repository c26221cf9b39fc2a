"""ReactReward.compose: the reward arithmetic and its weights, on hand-made measurements."""
import numpy as np
import pytest

from botjax.rewards.base import spans_to_token_values
from botjax.rewards.react import judges as J
from botjax.rewards.react.extract import extract_component
from botjax.rewards.react.penalties import LintWeights
from botjax.rewards.react.render import RenderResult
from botjax.rewards.react.reward import ReactReward, ReactRewardConfig
from botjax.rewards.react.toolchain import CompileResult, Diagnostic, LintMessage

CODE = "\n".join(f"const line{i} = {i};" for i in range(12))
TEXT = f"Intro line.\n```tsx\n{CODE}\n```\nOutro."
EXT = extract_component(TEXT)
# an unreachable endpoint: compose never calls the judges, it only reads their verdicts
_CFG = J.JudgeConfig(model="unused", base_url="http://127.0.0.1:9/v1", max_retries=0)
RENDERED = RenderResult(ok=True, screenshot=b"png", blank=False)


def _fn(config=ReactRewardConfig(), judges=True):
  if not judges:
    return ReactReward(config)
  return ReactReward(config, code_judge=J.CodeJudge(_CFG), vlm_judge=J.VLMJudge(_CFG))


def _token_values(result):
  # one "token" per character, so token t's value is the value of character t's line
  return spans_to_token_values(result.token_spans, [(i, i + 1) for i in range(len(TEXT))],
                               len(TEXT))


def _line_value(values, code_line):
  return values[EXT.code_line_span(code_line)[0]]


def test_clean_component_with_judges():
  s = _fn().compose(EXT, CompileResult(ok=True), RENDERED, J.CodeVerdict(score=0.7),
                    J.VLMVerdict(score=0.8))
  assert s.result.components == pytest.approx(
      {"compile": 0.0, "render": 0.0, "lint": 0.0, "judge": 0.7, "vlm": 0.8})
  assert s.result.reward == pytest.approx(1.5) and s.result.token_spans == []
  assert s.compiles_and_renders and s.screenshot == b"png"


def test_line_penalties_merge_and_spread_with_phi():
  comp = CompileResult(ok=True, diagnostics=(Diagnostic(5, 1, "TS2322", "tsc"),),
                       lint=(LintMessage(5, 1, "warning", "r", "m"),
                             LintMessage(9, 1, "error", "r", "m")))
  code_v = J.CodeVerdict(score=0.5, lines=((9, -0.2),), raw_score=5)
  s = _fn().compose(EXT, comp, RENDERED, code_v, J.VLMVerdict(score=0.5, lines=((0, -0.3),)))
  assert s.line_penalties == pytest.approx({5: -1.02, 9: -0.3})  # vlm lines off by default
  assert s.result.components["lint"] == pytest.approx(-0.12)
  v = _token_values(s.result)
  # v_j = Σ_ℓ p_ℓ φ(|j−ℓ|), φ = 1, .75, .5, .25, 0
  for j in range(12):
    want = sum(p * max(0.0, 1 - abs(j - l) / 4) for l, p in {5: -1.02, 9: -0.3}.items())
    assert _line_value(v, j) == pytest.approx(want)
  assert np.all(v[:EXT.line_spans[EXT.first_line][0]] == 0)  # intro and fence line
  assert np.all(v[TEXT.index("```\nOutro"):] == 0)


def test_weights_are_configurable():
  comp = CompileResult(ok=False, diagnostics=(Diagnostic(2, 1, "x", "esbuild"),
                                              Diagnostic(4, 1, "y", "esbuild"),
                                              Diagnostic(40, 1, "EOF", "esbuild")),
                       lint=tuple(LintMessage(2, 1, "fatal", None, "parse") for _ in range(3)))
  cfg = ReactRewardConfig(failure_penalty=-2.0, renormalise_compile=True, lint_floor=-1.0,
                          line_weight=0.5, window=1, lint_weights=LintWeights(fatal=-0.4),
                          code_judge_weight=2.0, vlm_weight=3.0)
  s = _fn(cfg).compose(EXT, comp, None, J.CodeVerdict(score=0.1), None)
  # three distinct flagged lines (the EOF one clamps to the last line, 11): -1/3 each
  assert s.line_penalties == pytest.approx({2: -1 / 3 - 1.2, 4: -1 / 3, 11: -1 / 3})
  assert s.result.components == pytest.approx(
      {"compile": -2.0, "render": 0.0, "lint": -1.0, "judge": 0.2, "vlm": 3.0 * -0.3})
  v = _token_values(s.result)
  assert _line_value(v, 3) == pytest.approx(0.5 * 0.5 * (-1 / 3 - 1.2 - 1 / 3))  # φ(1) = 1/2
  assert _line_value(v, 7) == 0.0  # window 1: lines 2 away get nothing


def test_render_failure_scores_vlm_zero_and_compile_failure_minus_point_three():
  # BoT-GRPO App. D: the VLM term is -0.3 only when extraction or transpilation failed; a
  # component that compiles but does not render has no screenshot and scores 0
  comp = CompileResult(ok=True)
  threw = RenderResult(ok=False, error="uncaught error: boom")
  s = _fn().compose(EXT, comp, threw, J.CodeVerdict(score=0.3), None)
  assert s.result.components == pytest.approx(
      {"compile": 0.0, "render": -1.0, "lint": 0.0, "judge": 0.3, "vlm": 0.0})
  assert "boom" in s.result.error and not s.result.failed and not s.compiles_and_renders
  not_compiled = _fn().compose(EXT, CompileResult(ok=False), None, J.CodeVerdict(score=0.3), None)
  assert not_compiled.result.components["vlm"] == -0.3
  assert not_compiled.result.components["compile"] == -1.0
  no_code = _fn().compose(None, None, None, None, None)
  assert no_code.result.components["vlm"] == -0.3
  # the weight scales both cases, and 0 stays 0
  cfg = ReactRewardConfig(vlm_weight=2.0)
  assert _fn(cfg).compose(EXT, comp, threw, None, None).result.components["vlm"] == 0.0
  assert _fn(cfg).compose(EXT, CompileResult(ok=False), None, None,
                          None).result.components["vlm"] == -0.6


def test_blank_page_renders_by_default_and_fails_with_blank_is_failure():
  blank = RenderResult(ok=True, screenshot=b"white", blank=True)
  comp = CompileResult(ok=True)
  s = _fn().compose(EXT, comp, blank, J.CodeVerdict(score=0.3), J.VLMVerdict(score=0.1))
  # the paper's rule: a blank page compiles and renders; only the judges can see it is empty
  assert s.result.components == pytest.approx(
      {"compile": 0.0, "render": 0.0, "lint": 0.0, "judge": 0.3, "vlm": 0.1})
  assert s.compiles_and_renders and not s.renders_visible and s.screenshot == b"white"
  assert s.result.error is None
  strict = _fn(ReactRewardConfig(blank_is_failure=True)).compose(
      EXT, comp, blank, J.CodeVerdict(score=0.3), None)
  assert strict.result.components == pytest.approx(
      {"compile": 0.0, "render": -1.0, "lint": 0.0, "judge": 0.3, "vlm": 0.0})
  assert "blank page" in strict.result.error and not strict.result.failed
  # the compile rate is the paper's event either way; the reward rule does not change it
  assert strict.compiles_and_renders and not strict.renders_visible
  visible = _fn(ReactRewardConfig(blank_is_failure=True)).compose(
      EXT, comp, RENDERED, None, J.VLMVerdict(score=0.5))
  assert visible.result.components["render"] == 0.0 and visible.renders_visible


def test_vlm_lines_and_toolchain_failure():
  cfg = ReactRewardConfig(vlm_line_weight=0.2)
  s = _fn(cfg).compose(EXT, CompileResult(ok=True), RENDERED, J.CodeVerdict(score=0.3),
                       J.VLMVerdict(score=0.4, lines=((0, -0.3),)))
  assert s.line_penalties == pytest.approx({0: -0.06})

  crashed = CompileResult(ok=False, error="toolchain worker died",
                          diagnostics=(Diagnostic(-1, 0, "toolchain worker died", "toolchain"),))
  s = _fn(judges=False).compose(EXT, crashed, None, None, None)
  assert s.result.failed and "died" in s.result.error and s.result.reward == -1.0
  assert s.line_penalties == {}  # an infrastructure failure blames no line

  none = _fn().compose(None, None, None, None, None)
  assert none.result.reward == pytest.approx(-1.6) and none.result.token_spans == []


def test_steps_for_step_level_recipes():
  comp = CompileResult(ok=True, lint=(LintMessage(2, 1, "error", "r", "m"),
                                      LintMessage(9, 1, "warning", "r", "m")))
  text = f"Intro.\n\n```tsx\n{CODE[:CODE.index('const line5')]}\n{CODE[CODE.index('const line5'):]}\n```"
  ext = extract_component(text)
  cfg = ReactRewardConfig(line_weight=0.5)
  s = _fn(cfg).compose(ext, comp, RENDERED, J.CodeVerdict(score=0.5, lines=((4, -0.2),)), None,
                       completion=text)
  # blocks: the intro, code lines 0-4 (after the fence), code lines 5-11; p summed per block
  assert [text[a:b].split("\n")[0] for a, b, _ in s.result.steps] == [
      "Intro.", "```tsx", "const line5 = 5;"]
  assert [v for _, _, v in s.result.steps] == pytest.approx([0.0, 0.5 * (-0.1 - 0.2),
                                                              0.5 * -0.02])
  assert _fn().compose(ext, comp, RENDERED, None, None).result.steps is None
  none = _fn().compose(None, None, None, None, None, completion="Sorry, no.")
  assert none.result.steps == [(0, 10, 0.0)] and none.result.reward == pytest.approx(-1.6)


def test_config_validation():
  with pytest.raises(ValueError, match="window"):
    ReactRewardConfig(window=-1)
  with pytest.raises(ValueError, match="failure_penalty"):
    ReactRewardConfig(failure_penalty=0.5)
  with pytest.raises(ValueError, match="node_workers"):
    ReactRewardConfig(node_workers=0)
