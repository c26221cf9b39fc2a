"""Training: config, the jitted RL update, rollout assembly, the host loop, checkpoints, SFT and
evaluation.

  from botjax.train import RLTrainer, TrainConfig, apply_overrides
  trainer = RLTrainer(cfg, model=model, tokenizer=tok, prompts=ListPrompts(records),
                      reward_fn=MathReward(judge))
  trainer.run()
"""

from botjax.train.checkpoint import Checkpointer, ConfigMismatchError
from botjax.train.config import (OptimConfig, RewardConfig, RolloutConfig, TrainConfig,
                                 apply_overrides, config_diff, to_dict)
from botjax.train.evaluate import evaluate
from botjax.train.loop import RLTrainer
from botjax.train.rollouts import (ListPrompts, PromptSource, RolloutCollector, Rollouts, assemble,
                                   default_prompt)
from botjax.train.sft import SFTConfig, sft
from botjax.train.step import RLBatch, TrainState, make_optimizer, make_update_fn, update
from botjax.train.writer import MetricsWriter, read_jsonl

__all__ = [
    "Checkpointer", "ConfigMismatchError", "OptimConfig", "RewardConfig", "RolloutConfig",
    "TrainConfig", "apply_overrides", "config_diff", "to_dict", "evaluate", "ListPrompts",
    "RLTrainer", "PromptSource", "RolloutCollector", "Rollouts", "assemble", "default_prompt",
    "SFTConfig", "sft", "RLBatch", "TrainState", "make_optimizer", "make_update_fn", "update", "MetricsWriter", "read_jsonl",
]
