"""The side jobs of a run, as hooks with an `every=`: evaluation, logging, console, checkpoints.

`RLTrainer.run` calls the hooks after every step with a `StepInfo`, in the order they were added;
the trainer adds its own first (`default_hooks`: evaluate, then log, then the console, then
checkpoint) and yours after evaluation and before logging, so that a hook can add keys to
`info.metrics` and have them logged:

  trainer.add_hook(lambda info: info.metrics.update(lr=schedule(info.step)), every=1)

A hook is any callable `fn(info)`; a `Hook` subclass may also override `due` (when it runs),
`start(trainer)` (before the first step) and `end(trainer)` (after the last, also on an error).
The run's final step is always due (`StepInfo.last`), as in Levanter's `run_hooks(force=True)`.
Before the first step of a run that starts at step 0, the hooks run once with `step = 0` and
`trained = False`: evaluation and logging act (the initial policy's evaluation, metrics.jsonl's
step-0 row), the others skip it.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import sys
import time
from typing import Any, Callable


@dataclasses.dataclass
class StepInfo:
  """What hooks see after a step.

  Attributes:
    step: RL steps completed (0 before the first).
    metrics: the step's metrics (hooks may add keys; the log hook writes them).
    trainer: the `RLTrainer`.
    last: True on the run's final step (`TrainConfig.steps`).
    trained: False for the step-0 call before training.
    evaluated: True once an evaluation hook has added its `eval/...` keys to `metrics`.
  """
  step: int
  metrics: dict
  trainer: Any
  last: bool = False
  trained: bool = True
  evaluated: bool = False


class Hook(abc.ABC):
  """A side job run every `every` steps (and on the run's last step); `every` <= 0 never.
  Subclasses define `__call__(info)`; `due`, `start` and `end` have defaults."""

  def __init__(self, every: int = 1):
    self.every = int(every)

  def due(self, info: StepInfo) -> bool:
    return self.every > 0 and (info.last or info.step % self.every == 0)

  def start(self, trainer) -> None:
    """Called once before the first step of `run`."""

  @abc.abstractmethod
  def __call__(self, info: StepInfo) -> None:
    """The side job of a due step."""

  def end(self, trainer) -> None:
    """Called once after `run`'s last step (also when it stops on an error)."""


class FnHook(Hook):
  """A plain function `fn(info)` as a hook (`RLTrainer.add_hook(fn, every=N)`); not called on
  the step-0 call before training."""

  def __init__(self, fn: Callable[[StepInfo], Any], every: int = 1):
    super().__init__(every)
    self.fn = fn

  def due(self, info: StepInfo) -> bool:
    return info.trained and super().due(info)

  def __call__(self, info: StepInfo) -> None:
    self.fn(info)


class EvalHook(Hook):
  """Runs `eval_fn(trainer, step) -> dict` every `every` steps (`TrainConfig.eval_every`; 0 =
  never) and adds its values to the step's metrics as `eval/<key>`."""

  def __init__(self, eval_fn: Callable[[Any, int], dict], every: int):
    super().__init__(every)
    self.eval_fn = eval_fn

  def __call__(self, info: StepInfo) -> None:
    out = self.eval_fn(info.trainer, info.step)
    info.metrics.update({k if k.startswith("eval/") else f"eval/{k}": v for k, v in out.items()})
    info.evaluated = True


class LogHook(Hook):
  """Writes the step's metrics to the run directory every `every` steps (`TrainConfig.log_every`)
  and on every evaluated step (`RunDir.metrics_writer`: metrics.jsonl, TensorBoard, W&B). At the
  start it writes config.json and trims metrics.jsonl to the step the run continues from.

  Attributes:
    records: the records written by this run, in order.
  """

  def __init__(self, rundir, *, every: int = 1, config: dict, tensorboard: bool = False,
               wandb_project: str = "", extra_config: dict | None = None):
    super().__init__(every)
    self.rundir, self.config, self.extra_config = rundir, config, dict(extra_config or {})
    self.tensorboard, self.wandb_project = tensorboard, wandb_project
    self.writer = None
    self.records: list[dict] = []

  def due(self, info: StepInfo) -> bool:
    if not info.trained:
      return info.evaluated
    return info.evaluated or super().due(info)

  def start(self, trainer) -> None:
    self.rundir.write_config({**self.extra_config, **self.config})
    self.rundir.begin_metrics(trainer.host_step)
    self.writer = self.rundir.metrics_writer(tensorboard=self.tensorboard,
                                             wandb_project=self.wandb_project, config=self.config)
    self.records = []

  def __call__(self, info: StepInfo) -> None:
    self.records.append(self.writer.write(info.step, info.metrics))

  def end(self, trainer) -> None:
    if self.writer is not None:
      self.writer.close()
      self.writer = None


class CheckpointHook(Hook):
  """`trainer.save()` every `every` steps (`TrainConfig.checkpoint_every`; 0 = never)."""

  def due(self, info: StepInfo) -> bool:
    return info.trained and super().due(info)

  def __call__(self, info: StepInfo) -> None:
    info.trainer.save()


class ConsoleHook(Hook):
  """The quiet console: one start line, a progress bar (tqdm on a terminal, or with
  BOTJAX_PROGRESS set) with reward, accuracy and seconds per step, one summary line; with
  `verbose` also the recipe and the full config at the start."""

  def __init__(self, *, enabled: bool = True, verbose: bool = False):
    super().__init__(1)
    self.enabled, self.verbose = enabled or verbose, verbose
    self.bar = None

  def due(self, info: StepInfo) -> bool:
    return info.trained

  def start(self, trainer) -> None:
    self._start, self._t0 = trainer.host_step, time.perf_counter()
    self._first, self._last = None, {}
    if not self.enabled:
      return
    cfg = trainer.cfg
    where = f"resuming at step {trainer.host_step}" if trainer.resumed_from else "starting"
    print(f"[botjax] {trainer.recipe.name} on {model_name(trainer)}, rollouts on "
          f"{cfg.rollout.engine}, {where} in {cfg.workdir}", flush=True)
    if self.verbose:
      print(f"[botjax] recipe: {trainer.recipe}\n[botjax] config: "
            + json.dumps(trainer.run_config, sort_keys=True), flush=True)
    if cfg.progress:
      from tqdm.auto import tqdm
      self.bar = tqdm(total=cfg.steps, initial=trainer.host_step, desc=trainer.recipe.name,
                      dynamic_ncols=True, file=sys.stderr,
                      disable=not sys.stderr.isatty() and not os.environ.get("BOTJAX_PROGRESS"))

  def __call__(self, info: StepInfo) -> None:
    m = info.metrics
    self._first = self._first or m
    self._last = m
    if self.bar is None:
      return
    out = {"reward": f"{m['reward_mean']:.3f}"}
    acc = m.get("eval/accuracy", m.get("accuracy"))
    if acc is not None:
      out["acc"] = f"{acc:.3f}"
    out["s/step"] = f"{m['step_s']:.1f}"
    self.bar.update(1)
    self.bar.set_postfix(out)

  def end(self, trainer) -> None:
    if self.bar is not None:
      self.bar.close()
      self.bar = None
    steps = trainer.host_step - self._start
    if not self.enabled or not steps or self._first is None:
      return
    parts = [f"{steps} steps in {time.perf_counter() - self._t0:.0f} s",
             f"reward {self._first['reward_mean']:.3f} -> {self._last['reward_mean']:.3f}"]
    acc = self._last.get("eval/accuracy", self._last.get("accuracy"))
    if acc is not None:
      parts.append(f"accuracy {acc:.3f}")
    print(f"[botjax] done: {'; '.join(parts)}; {trainer.cfg.workdir}", flush=True)


def model_name(trainer) -> str:
  """The run config's "model" name, else the model type and its size."""
  name = trainer.run_config.get("model")
  if isinstance(name, str) and name:
    return name
  return f"{trainer.model_config.model_type} ({trainer.num_params / 1e6:,.1f} M parameters)"


class Hooks:
  """An ordered list of hooks (`add`), run with `run(info)`; user hooks go before the log hook."""

  def __init__(self, hooks=()):
    self.hooks: list[Hook] = []
    for h in hooks:
      self.add(h)

  def add(self, hook: Hook | Callable[[StepInfo], Any], *, every: int = 1) -> Hook:
    """Adds a `Hook`, or a function `fn(info)` run every `every` steps; returns the hook."""
    if not isinstance(hook, Hook):
      if not callable(hook):
        raise ValueError(f"a hook must be a Hook or a callable fn(info), got {hook!r}")
      hook = FnHook(hook, every)
    logs = [i for i, h in enumerate(self.hooks) if isinstance(h, LogHook)]
    if logs and not isinstance(hook, (LogHook, ConsoleHook, CheckpointHook)):
      self.hooks.insert(logs[0], hook)
    else:
      self.hooks.append(hook)
    return hook

  @property
  def log(self) -> LogHook:
    """The log hook (its `records` are the rows this run wrote)."""
    return next(h for h in self.hooks if isinstance(h, LogHook))

  def start(self, trainer) -> None:
    for h in self.hooks:
      h.start(trainer)

  def run(self, info: StepInfo) -> None:
    for h in self.hooks:
      if h.due(info):
        h(info)

  def end(self, trainer) -> None:
    for h in self.hooks:
      h.end(trainer)


def default_hooks(cfg, *, rundir, eval_fn=None, run_config: dict,
                  extra_config: dict | None = None) -> Hooks:
  """The trainer's hooks for a TrainConfig: evaluation (`eval_every`, when `eval_fn` is given),
  logging (`log_every`), the console (`progress`, `verbose`), checkpoints (`checkpoint_every`).
  Every process runs them all; the files and the console are `rundir.is_writer`'s only, the
  checkpoints every process's (Orbax)."""
  hooks = Hooks()
  if eval_fn is not None:
    hooks.add(EvalHook(eval_fn, cfg.eval_every))
  hooks.add(LogHook(rundir, every=cfg.log_every, config=run_config, tensorboard=cfg.tensorboard,
                    wandb_project=cfg.wandb_project, extra_config=extra_config))
  writer = rundir.is_writer     # multi-process: only process 0 prints and shows a progress bar
  hooks.add(ConsoleHook(enabled=cfg.progress and writer, verbose=cfg.verbose and writer))
  hooks.add(CheckpointHook(cfg.checkpoint_every))
  return hooks
