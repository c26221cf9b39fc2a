"""`ReactReward`: the BoT-GRPO React code-generation reward as a botjax RewardFn.

  r_t = r_global + w_ℓ · Σ_{ℓ ∈ E} p_ℓ · φ(|line(t) − ℓ|),   φ(d) = max(0, 1 − d/(w+1))

r_global = compile + render + lint + judge + vlm (components of the same names):
  compile: `failure_penalty` when no component is found or it does not transpile/bundle (or
           imports a module outside the allowed set), else 0;
  render:  `failure_penalty` when it compiles but throws, times out, crashes, touches the network
           or floods the console, else 0; a blank page (nothing visible) is not a render failure
           unless `blank_is_failure` (off by default, as in the paper: that is what lets a reward
           without the code judge be hacked by blank pages, BoT-GRPO arXiv 2610.09804 §4.4);
  lint:    `lint_weight` · Σ over ESLint messages of fatal −0.5 / error −0.1 / warning −0.02;
  judge:   `code_judge_weight` · (code judge score / 10; −0.3 non-React; 0 unparseable);
  vlm:     `vlm_weight` · (screenshot judge score / 10; `vlm_failure_score` = −0.3 when code
           extraction or transpilation failed; 0 when it compiled but did not render, App. D).
p_ℓ adds, per code line: −1 per line flagged by the compiler (−1/|E| renormalised), the ESLint
severities, the code judge's impacts/10 (· `judge_line_weight`) and optionally the VLM's
(· `vlm_line_weight`). Per-line values are mapped to the completion's characters; tokens outside
the code block get no local term. For step-level recipes (PURE, VeriGate, process GRPO) `steps`
holds the completion's blank-line-separated blocks, each scored w_ℓ · Σ p_ℓ over its code lines
(`penalties.step_spans_of`).

References:
  BoT-GRPO (Yang et al.), arXiv 2610.09804, eq. 6–7 and App. D.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from botjax.rewards.base import RewardResult, RewardSpec, Signal, check_batch
from botjax.rewards.react import penalties as P
from botjax.rewards.react.extract import ExtractedCode, extract_component
from botjax.rewards.react.judges import NON_REACT_SCORE, CodeJudge, CodeVerdict, VLMJudge, VLMVerdict
from botjax.rewards.react.render import Renderer, RenderResult
from botjax.rewards.react.toolchain import ALLOWED_MODULES, CompileResult, NodePool, ToolchainError

COMPONENTS = ("compile", "render", "lint", "judge", "vlm")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReactRewardConfig:
  """Weights (the paper's values as defaults) and sandbox settings of `ReactReward`.

  Attributes:
    failure_penalty: global penalty of a compile or render failure.
    lint_weight: weight of the aggregated ESLint score in the global reward.
    lint_floor: lower bound of the aggregated ESLint score (None: unbounded).
    code_judge_weight: weight of the code judge score.
    vlm_weight: weight of the screenshot judge score.
    vlm_failure_score: VLM score when code extraction or transpilation failed (a render failure
      scores 0: there is no screenshot to judge).
    line_weight: w_ℓ, weight of the local (line) term.
    window: w of φ, in lines.
    compile_line_penalty: p of a line flagged by the compiler.
    renormalise_compile: divide compiler line penalties by the number of flagged lines.
    lint_weights: ESLint penalty per severity.
    judge_line_weight: multiplier of the code judge's impacts/10.
    vlm_line_weight: multiplier of the VLM's line impacts/10 (0: off; paper ablation 1.0, 0.2).
    lint: run ESLint.
    typecheck: add `tsc --strict` diagnostics as compiler line penalties (slower).
    render: render in Chromium (off: compile failures only, no screenshots, no VLM).
    blank_is_failure: count a blank page (mounted, nothing visible) as a render failure: the
      `render` penalty, no VLM call, VLM term 0 (default False, the paper's rule).
    allowed_modules: modules a component may import.
    node_workers, compile_timeout_s, node_memory_mb: Node toolchain pool.
    render_concurrency, render_timeout_s, js_heap_mb, render_memory_mb, settle_ms,
      max_console_messages, fail_on_network, chromium: the renderer (see `Renderer`).
  """
  # −1 and the weights of 1: botjax's choices, the paper gives no values (docs/defaults.md)
  failure_penalty: float = -1.0
  lint_weight: float = 1.0
  lint_floor: float | None = None
  code_judge_weight: float = 1.0
  vlm_weight: float = 1.0
  vlm_failure_score: float = NON_REACT_SCORE
  line_weight: float = 1.0
  window: int = 3
  compile_line_penalty: float = -1.0
  renormalise_compile: bool = False
  lint_weights: P.LintWeights = P.LintWeights()
  judge_line_weight: float = 1.0
  vlm_line_weight: float = 0.0
  lint: bool = True
  typecheck: bool = False
  render: bool = True
  blank_is_failure: bool = False
  allowed_modules: tuple[str, ...] = ALLOWED_MODULES
  node_workers: int = 2
  compile_timeout_s: float = 20.0
  node_memory_mb: int = 768
  render_concurrency: int = 2
  render_timeout_s: float = 10.0
  js_heap_mb: int = 256
  render_memory_mb: int = 1024
  settle_ms: int = 150
  max_console_messages: int = 200
  fail_on_network: bool = True
  chromium: str | None = None

  def __post_init__(self):
    if self.window < 0:
      raise ValueError(f"window must be >= 0 lines, got {self.window}")
    if self.failure_penalty > 0:
      raise ValueError(f"failure_penalty must be <= 0, got {self.failure_penalty}")
    if self.node_workers < 1 or self.render_concurrency < 1:
      raise ValueError(f"node_workers and render_concurrency must be >= 1, got "
                       f"{self.node_workers} and {self.render_concurrency}")


@dataclasses.dataclass(frozen=True)
class ReactScore:
  """Everything measured for one completion; `result` is what the trainer consumes."""
  result: RewardResult
  extracted: ExtractedCode | None
  compiled: CompileResult | None
  rendered: RenderResult | None
  code_verdict: CodeVerdict | None
  vlm_verdict: VLMVerdict | None
  line_penalties: dict[int, float]

  @property
  def compiles_and_renders(self) -> bool:
    """The paper's compile-rate event: transpiles and renders; a blank page counts (BoT-GRPO,
    arXiv 2610.09804, App. C)."""
    return bool(self.compiled and self.compiled.ok and self.rendered and self.rendered.ok)

  @property
  def renders_visible(self) -> bool:
    """The stricter event: transpiles and renders something visible (not a blank page)."""
    return self.compiles_and_renders and self.rendered.visible

  @property
  def screenshot(self) -> bytes | None:
    """PNG of a successful render (a blank page included), else None."""
    return self.rendered.screenshot if self.rendered and self.rendered.ok else None


class ReactReward:
  """RewardFn for React code generation: compile, lint, render, code and screenshot judges.

  Example:
    with ReactReward(ReactRewardConfig(), code_judge=CodeJudge(JudgeConfig(model="..."))) as fn:
      results = fn(prompts, completions, [{}] * len(prompts))
      token_values = spans_to_token_values(results[0].token_spans, offsets, T)

  Spec (`spec`): the sequence reward, token spans (the line term) and steps; no verifier; weighted
  (eq. 6 sums r_global and w_ℓ·Σ p_ℓ φ itself, so a BoT-GRPO recipe reads it with w_global =
  w_local = 1, see `botjax.algorithms.recipe_for_reward`).

  Infrastructure failures (a crashed browser, a Node worker that timed out or died, a judge that
  could not be reached) are not the model's fault: such a row has `infra_failure=True` (and
  `failed=True`), and the trainer keeps it out of the loss. Compile errors, render errors of the
  component itself, blank output and bad judge scores are scored.
  """

  spec = RewardSpec(frozenset(Signal), verifier=None, weighted=True)

  def __init__(self, config: ReactRewardConfig = ReactRewardConfig(), *,
               code_judge: CodeJudge | None = None, vlm_judge: VLMJudge | None = None,
               pool: NodePool | None = None, renderer: Renderer | None = None):
    """Args:
      config: weights and sandbox settings.
      code_judge: the LLM code judge (None: no judge component, no judge line penalties).
      vlm_judge: the VLM screenshot judge (None: no vlm component).
      pool: a Node pool to share (then its own settings apply and `close` leaves it running);
        None starts one from `config` on first use.
      renderer: a Renderer to share, likewise.
    """
    if vlm_judge is not None and not config.render:
      raise ValueError("a vlm_judge needs screenshots: set ReactRewardConfig(render=True) or drop "
                       "the vlm_judge")
    self.config = config
    self.code_judge = code_judge
    self.vlm_judge = vlm_judge
    self._pool: NodePool | None = pool
    self._renderer: Renderer | None = renderer
    self._owns_pool = pool is None
    self._owns_renderer = renderer is None
    self._lock = threading.Lock()
    self._judge_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="botjax-rj")
    self.__name__ = "react"

  @property
  def pool(self) -> NodePool:
    """The Node toolchain pool (started on first use)."""
    with self._lock:
      if self._pool is None:
        c = self.config
        self._pool = NodePool(c.node_workers, timeout_s=c.compile_timeout_s,
                              memory_mb=c.node_memory_mb, allowed_modules=c.allowed_modules)
      return self._pool

  @property
  def renderer(self) -> Renderer:
    """The browser pool (started on first use)."""
    with self._lock:
      return self._get_renderer()

  def _get_renderer(self) -> Renderer:
    if self._renderer is None:
      c = self.config
      self._renderer = Renderer(chromium=c.chromium, concurrency=c.render_concurrency,
                                timeout_s=c.render_timeout_s, settle_ms=c.settle_ms,
                                js_heap_mb=c.js_heap_mb, memory_mb=c.render_memory_mb,
                                max_console_messages=c.max_console_messages,
                                fail_on_network=c.fail_on_network)
    return self._renderer

  # ---------------------------------------------------------------- stages
  def compile(self, codes: Sequence[str]) -> list[CompileResult]:
    """Compile (+ lint, + bundle and CSS when rendering) every component."""
    c = self.config
    return self.pool.check(codes, lint=c.lint, bundle=c.render, css=c.render,
                           typecheck=c.typecheck)

  def render(self, compiled: Sequence[CompileResult]) -> list[RenderResult]:
    """Render compiled components (all must be ok and bundled)."""
    htmls = [self.renderer.page(r.bundle, r.css or "", [self.pool.vendor(v) for v in r.vendors])
             for r in compiled]
    return self.renderer.render(htmls)

  def score(self, prompts: Sequence[str], completions: Sequence[str],
            metadata: Sequence[Mapping[str, Any]] | None = None) -> list[ReactScore]:
    """Scores a batch and keeps every intermediate (diagnostics, screenshots, verdicts)."""
    metadata = list(metadata) if metadata is not None else [{}] * len(completions)
    check_batch(prompts, completions, metadata)
    c = self.config
    extracted = [extract_component(text) for text in completions]
    idx = [i for i, e in enumerate(extracted) if e is not None]
    codes = [extracted[i].code for i in idx]
    code_future = None
    if self.code_judge is not None and idx:
      code_future = self._judge_pool.submit(self.code_judge.judge, [prompts[i] for i in idx], codes)
    compiled: list[CompileResult | None] = [None] * len(completions)
    for i, r in zip(idx, self.compile(codes) if codes else []):
      compiled[i] = r
    rendered: list[RenderResult | None] = [None] * len(completions)
    broken: dict[int, str] = {}
    if c.render:
      ok = [i for i in idx if compiled[i].ok and compiled[i].bundle]
      try:
        out = self.render([compiled[i] for i in ok]) if ok else []
      except ToolchainError:
        raise
      except Exception as e:  # noqa: BLE001 - a broken browser fails its items, not the run
        out = [RenderResult(ok=False, error=f"renderer failed: {e}"[:500]) for _ in ok]
        broken.update((i, out[0].error) for i in ok)
      for i, r in zip(ok, out):
        rendered[i] = r
    code_verdicts: list[CodeVerdict | None] = [None] * len(completions)
    if code_future is not None:
      for i, v in zip(idx, code_future.result()):
        code_verdicts[i] = v
    vlm_verdicts: list[VLMVerdict | None] = [None] * len(completions)
    if self.vlm_judge is not None:
      shown = [i for i in range(len(completions)) if self._renders(rendered[i])]
      if shown:
        verdicts = self.vlm_judge.judge([prompts[i] for i in shown],
                                        [rendered[i].screenshot for i in shown],
                                        [extracted[i].code for i in shown])
        for i, v in zip(shown, verdicts):
          vlm_verdicts[i] = v
    scores = [self.compose(extracted[i], compiled[i], rendered[i], code_verdicts[i],
                            vlm_verdicts[i], completion=completions[i])
              for i in range(len(completions))]
    for i in range(len(completions)):   # not the model's fault: flagged, kept out of the loss
      why = broken.get(i) or self._infra_failure(extracted[i], compiled[i], code_verdicts[i],
                                                 vlm_verdicts[i])
      if why:
        scores[i] = dataclasses.replace(scores[i], result=dataclasses.replace(
            scores[i].result, failed=True, infra_failure=True, error=why))
    return scores

  def _infra_failure(self, ext: ExtractedCode | None, comp: CompileResult | None,
                     code_v: CodeVerdict | None, vlm_v: VLMVerdict | None) -> str | None:
    """Why a row could not be scored for a reason outside the model's control, or None.

    A toolchain error (worker time limit, crashed worker) other than the source-size limit, and a
    judge request that failed (an error with no reply text: unreachable, refused, timed out).
    """
    if comp is not None and comp.error is not None and ext is not None and (
        self._pool is None or len(ext.code) <= self._pool.max_source_chars):
      return f"toolchain: {comp.error}"
    for name, v in (("code judge", code_v), ("VLM judge", vlm_v)):
      if v is not None and v.error and v.raw_score is None and not v.text and not getattr(
          v, "non_react", False):
        return f"{name}: {v.error}"
    return None

  def _renders(self, rend: RenderResult | None) -> bool:
    """Whether a render counts as one: ok, and visible when `blank_is_failure`."""
    return rend is not None and rend.ok and not (self.config.blank_is_failure and rend.blank)

  def compose(self, ext: ExtractedCode | None, comp: CompileResult | None,
              rend: RenderResult | None, code_v: CodeVerdict | None,
              vlm_v: VLMVerdict | None, *, completion: str | None = None) -> ReactScore:
    """Combines one completion's measurements into its reward (no processes involved).

    Args:
      ext: the extracted component, or None when there is none.
      comp: its compile/lint result (required when `ext` is given).
      rend: its render result, or None when it was not rendered.
      code_v: the code judge's verdict, or None without a code judge.
      vlm_v: the screenshot judge's verdict, or None when it was not judged.
      completion: the completion text; when given, `result.steps` holds its blank-line-separated
        blocks scored w_ℓ · Σ p_ℓ (`penalties.step_spans_of`), for step-level recipes such as
        PURE.

    Returns:
      ReactScore whose `result` holds reward = Σ components, the per-line token spans and (with
      `completion`) the steps.
    """
    c = self.config
    parts = dict.fromkeys(COMPONENTS, 0.0)
    errors = []
    if ext is None:
      parts["compile"] = c.failure_penalty
      if self.code_judge is not None:
        parts["judge"] = c.code_judge_weight * NON_REACT_SCORE
      if self.vlm_judge is not None:
        parts["vlm"] = c.vlm_weight * c.vlm_failure_score
      result = RewardResult(reward=float(sum(parts.values())), components=parts,
                            error="no React component found in the completion",
                            steps=None if completion is None else P.step_spans_of(
                                {}, completion, None, weight=c.line_weight))
      return ReactScore(result, None, None, None, None, None, {})
    last = max(ext.num_lines - 1, 0)
    clamp = lambda line: min(line, last)  # noqa: E731 - an EOF diagnostic points past the end
    failed = comp.error is not None
    if failed:
      errors.append(comp.error)
    if not comp.ok:
      parts["compile"] = c.failure_penalty
    elif c.render and not self._renders(rend):
      parts["render"] = c.failure_penalty
      why = "not rendered" if rend is None else rend.error or "blank page: nothing visible rendered"
      errors.append(f"render: {why}")
    compile_lines = P.compile_line_penalties(
        [clamp(d.line) for d in comp.diagnostics if d.line >= 0 and d.source != "toolchain"],
        per_line=c.compile_line_penalty, renormalise=c.renormalise_compile)
    lint_lines = P.lint_line_penalties([(clamp(m.line), m.severity) for m in comp.lint],
                                       c.lint_weights)
    parts["lint"] = c.lint_weight * P.lint_score([m.severity for m in comp.lint], c.lint_weights,
                                                 floor=c.lint_floor) if comp.lint else 0.0
    judge_lines: dict[int, float] = {}
    if code_v is not None:
      parts["judge"] = c.code_judge_weight * code_v.score
      judge_lines = {line: c.judge_line_weight * impact for line, impact in code_v.lines}
      if code_v.error and code_v.raw_score is None and not code_v.non_react:
        errors.append(f"judge: {code_v.error}")
    vlm_lines: dict[int, float] = {}
    if self.vlm_judge is not None:
      if not comp.ok:        # transpilation failed: the paper's −0.3
        parts["vlm"] = c.vlm_weight * c.vlm_failure_score
      elif vlm_v is None:    # compiled but no screenshot to judge: 0 (App. D)
        parts["vlm"] = 0.0
      else:
        parts["vlm"] = c.vlm_weight * vlm_v.score
        vlm_lines = {line: c.vlm_line_weight * impact for line, impact in vlm_v.lines}
    lines = {line: p for line, p in P.merge(compile_lines, lint_lines, judge_lines,
                                             vlm_lines).items() if p != 0.0}
    values = P.spread(lines, ext.num_lines, window=c.window)
    spans = P.line_spans_of(values, ext, weight=c.line_weight)
    steps = None if completion is None else P.step_spans_of(lines, completion, ext,
                                                             weight=c.line_weight)
    result = RewardResult(reward=float(sum(parts.values())), components=parts, token_spans=spans,
                          steps=steps, failed=failed,
                          error="; ".join(e for e in errors if e) or None)
    return ReactScore(result, ext, comp, rend, code_v, vlm_v, lines)

  # ---------------------------------------------------------------- RewardFn
  def __call__(self, prompts: Sequence[str], completions: Sequence[str],
               metadata: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
    """RewardFn protocol: one RewardResult per completion."""
    return [s.result for s in self.score(prompts, completions, metadata)]

  def close(self) -> None:
    """Stops the Node workers and the browser."""
    self._judge_pool.shutdown(wait=True)
    if self._renderer is not None and self._owns_renderer:
      self._renderer.close()
    if self._pool is not None and self._owns_pool:
      self._pool.close()
    self._renderer = self._pool = None

  def __enter__(self) -> ReactReward:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
