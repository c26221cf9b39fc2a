"""Host-side rewards: the RewardFn protocol, a worker pool with timeouts, the jax callback bridge,
MATH/AIME answer checking and step judges.

Everything here is plain Python + numpy; only `botjax.rewards.bridge` imports jax.
"""
from botjax.rewards.base import (
    CombinedReward,
    ItemRewardFn,
    RewardFn,
    RewardResult,
    RewardUnavailable,
    Span,
    as_result,
    batched,
    call_reward_fn,
    check_batch,
    combine,
    combine_results,
    rewards_array,
    spans_to_token_values,
    steps_to_arrays,
)
from botjax.rewards.pool import RewardPool

__all__ = [
    "CombinedReward", "ItemRewardFn", "RewardFn", "RewardPool", "RewardResult",
    "RewardUnavailable", "Span", "as_result", "batched", "call_reward_fn", "check_batch",
    "combine", "combine_results", "rewards_array", "spans_to_token_values", "steps_to_arrays",
]
