"""Host-side rewards: the RewardFn protocol, a worker pool with timeouts, the jax callback bridge,
MATH/AIME answer checking, step judges and the LLM clients of the judges (`botjax.rewards.llm`:
OpenAI-compatible servers and the Anthropic Messages API).

Everything here is plain Python + numpy; only `botjax.rewards.bridge` imports jax (and
`LocalModelJudge.from_model`, when called). The exact judge of the arithmetic testbed is
`botjax.testbeds.arith_judge.ExactArithmeticJudge`.
"""
from botjax.rewards.base import (
    CombinedReward,
    ItemRewardFn,
    RewardFn,
    RewardResult,
    RewardSpec,
    RewardUnavailable,
    Signal,
    Span,
    as_result,
    batched,
    call_reward_fn,
    check_batch,
    combine,
    combine_results,
    combined_spec,
    reward_spec,
    rewards_array,
    spans_to_token_values,
    steps_to_arrays,
)
from botjax.rewards.judges import (
    JudgeError,
    JudgeRequest,
    JudgeStats,
    JudgeUnavailable,
    LLMStepJudge,
    StepJudge,
)
from botjax.rewards.llm import APIS, AnthropicChat, LLMClient, OpenAIChat, make_client
from botjax.rewards.local_judge import LocalModelJudge
from botjax.rewards.math import (
    AnswerLimits,
    MathReward,
    StepSpan,
    answers_match,
    extract_answer,
    extract_boxed,
    format_score,
    is_correct,
    screen_answer,
    segment_steps,
)
from botjax.rewards.pool import RewardPool
from botjax.rewards.steps import STRATEGIES, judge_steps, step_scores, step_token_spans, windows

__all__ = [
    # base
    "CombinedReward", "ItemRewardFn", "RewardFn", "RewardResult", "RewardSpec", "RewardUnavailable",
    "Signal", "Span", "as_result", "batched", "call_reward_fn", "check_batch", "combine",
    "combine_results", "combined_spec", "reward_spec", "rewards_array", "spans_to_token_values", "steps_to_arrays",
    # pool
    "RewardPool",
    # math
    "AnswerLimits", "MathReward", "StepSpan", "answers_match", "extract_answer", "extract_boxed",
    "format_score", "is_correct", "screen_answer", "segment_steps",
    # steps and judges
    "STRATEGIES", "judge_steps", "step_scores", "step_token_spans", "windows",
    "JudgeError", "JudgeRequest", "JudgeStats", "JudgeUnavailable", "LLMStepJudge",
    "LocalModelJudge", "StepJudge",
    # LLM clients
    "APIS", "AnthropicChat", "LLMClient", "OpenAIChat", "make_client",
]
