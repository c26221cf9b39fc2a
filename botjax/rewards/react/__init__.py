"""React code-generation rewards (BoT-GRPO §4): compile, lint, render, LLM and VLM judges.

Entry points:
  ReactReward(ReactRewardConfig(...), code_judge=CodeJudge(JudgeConfig(...)), vlm_judge=...)
      the RewardFn; `.score(...)` also returns diagnostics, screenshots and verdicts.
  load_prompts() / load_prompts_jsonl(path) / load_hf_prompts(...) / split_prompts(...)
      React prompt sets (a built-in set of 270 requests in 16 categories, split 216 / 54).
  compile_rate(...), visible_rate(...), pairwise_win_rate(...)
      held-out evaluation (ABBA pairwise VLM protocol).
Model-written code never runs in the calling process: Node workers only parse and bundle it, and
Chromium renders it with the network blocked and time and memory limits.
"""
from botjax.rewards.react.evaluate import (
    compile_rate,
    evaluate_compile_rate,
    pairwise_win_rate,
    save_json,
    visible_rate,
    win_rate,
)
from botjax.rewards.react.extract import ExtractedCode, extract_component, line_spans
from botjax.rewards.react.judges import (
    CodeJudge,
    CodeVerdict,
    JudgeConfig,
    PairwiseJudge,
    VLMJudge,
    VLMVerdict,
    parse_code_verdict,
    parse_letter,
    parse_line_analysis,
    parse_vlm_verdict,
)
from botjax.rewards.react.penalties import (
    LintWeights,
    compile_line_penalties,
    line_spans_of,
    lint_line_penalties,
    lint_score,
    merge,
    phi,
    spread,
)
from botjax.rewards.react.prompts import (
    SYSTEM_PROMPT,
    ReactPrompt,
    builtin_prompts,
    chat_messages,
    load_hf_prompts,
    load_prompts,
    load_prompts_jsonl,
    split_prompts,
    validate_prompts,
)
from botjax.rewards.react.render import Renderer, RenderResult, is_blank, page_html
from botjax.rewards.react.reward import ReactReward, ReactRewardConfig, ReactScore
from botjax.rewards.react.toolchain import (
    ALLOWED_MODULES,
    CompileResult,
    Diagnostic,
    LintMessage,
    NodePool,
    ToolchainError,
    check_toolchain,
    find_chromium,
    find_node,
)

__all__ = [
    "SYSTEM_PROMPT", "ReactPrompt", "check_toolchain", "builtin_prompts", "chat_messages",
    "compile_rate", "evaluate_compile_rate", "load_hf_prompts", "load_prompts",
    "load_prompts_jsonl", "pairwise_win_rate", "save_json",
    "split_prompts", "validate_prompts", "visible_rate", "win_rate",
    "ALLOWED_MODULES", "CodeJudge", "CodeVerdict", "CompileResult", "Diagnostic",
    "ExtractedCode", "JudgeConfig", "LintMessage", "LintWeights", "NodePool", "PairwiseJudge",
    "ReactReward", "ReactRewardConfig", "ReactScore", "RenderResult", "Renderer",
    "ToolchainError", "VLMJudge", "VLMVerdict", "compile_line_penalties", "extract_component",
    "find_chromium", "find_node", "is_blank", "line_spans", "line_spans_of", "lint_line_penalties",
    "lint_score", "merge", "page_html", "parse_code_verdict", "parse_letter",
    "parse_line_analysis", "parse_vlm_verdict", "phi", "spread",
]
