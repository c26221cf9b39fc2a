"""Training: config, rollouts, batches, the jitted update, the loop and its hooks, the run
directory, checkpoints, SFT and evaluation.

  from botjax.train import RLTrainer, TrainConfig, apply_overrides
  trainer = RLTrainer(cfg, model=model, tokenizer=tok, prompts=ListPrompts(records),
                      reward_fn=MathReward(judge))
  trainer.run()
  params = load_params(cfg.workdir, step=50, like=model)     # a saved step's parameters
  records = load_metrics(cfg.workdir)                        # metrics.jsonl

The parts `RLTrainer` composes, each usable in your own loop (docs/custom_loop.md):
`RolloutCollector` (rollouts), `build_batch` (advantages and the update's batch),
`UpdatePrograms` (the compiled update), `Hooks` (evaluation, logging, checkpoints),
`RunDir` (every file of a run). Names are imported on first use, so that `botjax.train.rundir`
and `botjax.train.config` stay light.
"""

import importlib as _importlib

_NAMES = {
    "batch": ("BatchPreview", "build_batch"),
    "checkpoint": ("Checkpointer", "ConfigMismatchError"),
    "config": ("OptimConfig", "RewardConfig", "RolloutConfig", "TrainConfig", "apply_overrides",
               "config_diff", "recipe_for_run", "to_dict"),
    "evaluate": ("evaluate",),
    "hooks": ("Hook", "Hooks", "StepInfo"),
    "loop": ("RLTrainer",),
    "programs": ("UpdatePrograms",),
    "rollouts": ("ListPrompts", "PromptSource", "RolloutCollector", "Rollouts", "assemble",
                 "default_prompt", "rollout_metrics"),
    "rundir": ("MetricsWriter", "RunDir", "load_metrics", "load_params", "read_jsonl"),
    "sft": ("SFTConfig", "sft"),
    "step": ("RLBatch", "TrainState", "make_optimizer", "make_update_fn", "update"),
}
_MODULE_OF = {name: module for module, names in _NAMES.items() for name in names}


def __getattr__(name):
  if name in _MODULE_OF:
    return getattr(_importlib.import_module(f"botjax.train.{_MODULE_OF[name]}"), name)
  raise AttributeError(f"module 'botjax.train' has no attribute {name!r}")


__all__ = sorted(_MODULE_OF)
