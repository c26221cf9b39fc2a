"""`RLTrainer`, a loop over roles: collect (`rollouts.RolloutCollector` on a rollout engine,
`RolloutConfig.engine` or injected) -> batch (`batch.build_batch`) -> update
(`programs.UpdatePrograms`, then `engine.set_params`) -> hooks (`hooks`: evaluation, logging to
the `rundir.RunDir`, console, checkpoints). Step `s` samples with `fold_in(PRNGKey(seed), s)` at
the collector's saved prompt position: a run restarted in its work directory resumes from its
newest checkpoint bit for bit.

With an engine whose log-probs are not the trainer's (`exact_logp` False: vLLM) the PPO ratio's
old log-probs are the trainer's recomputation, each step logs the engine's gap from them
(`mismatch/*`), the recipe carries the truncated importance-sampling correction unless it says
otherwise (`config.recipe_for_run`, `Recipe.tis_cap`), and each weight sync is timed and
checked (`engine/sync_s`; vLLM's `set_params` raises `StaleEngineError` when its weights are not
the trainer's after the push).
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from botjax.rewards.base import reward_spec
from botjax.sampling import AUTO, RolloutEngine, SamplingConfig, make_engine
from botjax.train import step as step_lib
from botjax.train.batch import BatchPreview, build_batch
from botjax.train.checkpoint import saved_config
from botjax.train.config import (TrainConfig, json_ready, recipe_for_run, resolve_engine,
                                 to_dict, with_engine)
from botjax.train.hooks import StepInfo, default_hooks
from botjax.train.programs import UpdatePrograms, check_layout, commit
from botjax.train.rollouts import (PromptSource, RolloutCollector, Rollouts, default_prompt,
                                   rollout_metrics)
from botjax.train.rundir import RunDir


class RLTrainer:
  """Post-trains a `botjax.models.Decoder` with a recipe of `botjax.algorithms`.

  Args:
    cfg: the TrainConfig.
    model: the policy (split here; its parameters live in `self.state`).
    tokenizer: its tokenizer (chat template for prompts unless `prompt_fn` gives token ids).
    prompts: a PromptSource; reward_fn: a RewardFn (its `spec` says what it gives), run in a
      `RewardPool`; prompt_fn: record -> chat messages, a string or token ids. Not needed
      with `collector`.
    eval_fn: optional `(trainer, step) -> dict`, every `cfg.eval_every` steps and at the end.
    mesh: optional device mesh (parameters should already carry their shardings).
    run_config: the experiment config dict saved in config.json and checkpoints, compared on
      resume (default `to_dict(cfg)`; kept as it reads back from JSON).
    stop_token_ids: extra ids that end a completion besides the tokenizer's EOS.
    engine: a `RolloutEngine` to reuse (config equal to the run's); default
      `make_engine(cfg.rollout.engine, ...)`, "auto" resolved first (`config.resolve_engine`:
      a resumed run keeps its saved engine; `self.cfg` and the saved config name the engine).
    collector: a `RolloutCollector` to use instead of building one (its engine is the run's);
      injected parts are the caller's to close.
    checkpoint: the Hugging Face checkpoint the model was loaded from, recorded in config.json
      (`RunDir.load_model`).
  """

  def __init__(self, cfg: TrainConfig, *, model: nnx.Module, tokenizer,
               prompts: PromptSource | None = None, reward_fn=None,
               prompt_fn: Callable = default_prompt, eval_fn: Callable | None = None, mesh=None,
               run_config: Mapping | None = None, stop_token_ids: Sequence[int] = (),
               engine: RolloutEngine | None = None, collector: RolloutCollector | None = None,
               checkpoint: str | None = None):
    if cfg.host_threads < 0:
      raise ValueError(f"host_threads must be >= 0 (0 = automatic), got {cfg.host_threads}")
    self.rundir = RunDir(cfg.workdir)
    # "auto": the saved run's engine when resuming, else the faster one here (resolve_engine)
    saved = saved_config(self.rundir.checkpoints_dir) if cfg.rollout.engine == AUTO else None
    resolved = resolve_engine(cfg, saved=saved,
                              where=mesh if mesh is not None else nnx.state(model))
    self.run_config = with_engine(json_ready(run_config) if run_config is not None
                                  else to_dict(cfg), resolved.rollout.engine)
    cfg = resolved
    self.cfg, self.tokenizer, self.eval_fn, self.mesh = cfg, tokenizer, eval_fn, mesh
    self.model_config = model.config
    r = cfg.rollout
    self.sampling = SamplingConfig.for_model(
        model, tokenizer, stop_token_ids=stop_token_ids, max_new_tokens=r.max_new_tokens,
        temperature=r.temperature, top_k=r.top_k, top_p=r.top_p)
    self.pad_id, self.temperature = self.sampling.pad_token_id, self.sampling.logp_temperature
    engine = engine or (collector.engine if collector is not None else None)
    if engine is not None and engine.config != self.sampling:
      raise ValueError(f"the given engine's config {engine.config} differs from the run's "
                       f"{self.sampling}")
    self._owns = (engine is None, collector is None)   # what close() stops
    if engine is None:
      options = {**({"host_threads": cfg.host_threads} if cfg.host_threads else {}),
                 **dict(r.engine_options)}
      try:
        engine = make_engine(r.engine, model, self.sampling, mesh=mesh, **options)
      except TypeError as e:
        if not r.engine_options:
          raise
        raise ValueError(f"rollout.engine_options {dict(r.engine_options)} for the "
                         f"{r.engine!r} engine: {e}") from e
    self.engine = engine
    self.recipe = recipe_for_run(cfg, collector.spec if collector else reward_spec(reward_fn),
                                 exact_logp=self.engine.exact_logp)

    scanned = check_layout(cfg, model)
    self.graphdef, params, self.rest = step_lib.split_model(model, remat=cfg.remat)
    self.num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    updates = cfg.steps * cfg.ppo_epochs * cfg.mini_batches
    self.optimizer = step_lib.make_optimizer(cfg.optim, updates)
    self.state = commit(step_lib.init_state(params, self.optimizer, cfg.seed), mesh)
    self.host_step, self.skipped_in_a_row, self.resumed_from = 0, 0, None

    collector = collector or RolloutCollector.for_run(
        cfg, self.recipe, engine=self.engine, tokenizer=tokenizer, prompts=prompts,
        reward_fn=reward_fn, prompt_fn=prompt_fn)
    self.collector, self.pool, self.reward_spec = collector, collector.pool, collector.spec
    self.ref_params = jax.tree.map(jnp.copy, params) if self.recipe.needs_ref_logp else None
    cut = ((self.sampling.top_k, self.sampling.top_p) if self.sampling.logp_truncated
           else None)
    self.programs = UpdatePrograms(cfg, self.recipe, self.graphdef, self.rest, self.optimizer,
                                   temperature=self.temperature, cut=cut, mesh=mesh,
                                   where=self.state.params)

    self.checkpointer = self.rundir.checkpointer(keep=cfg.keep_checkpoints)
    self.hooks = default_hooks(cfg, rundir=self.rundir, eval_fn=eval_fn,
                               run_config=self.run_config,
                               extra_config={
                                   "checkpoint": checkpoint, "scan_layers": scanned,
                                   "rollout_engine": {"class": type(self.engine).__name__,
                                                      "exact_logp": self.engine.exact_logp},
                                   "tis_cap": self.recipe.tis_cap})
    self._maybe_resume()
    self.sync()

  def sync(self) -> dict[str, float]:
    """Pushes the current parameters to the engine (`engine.set_params`); its metrics.

    Returns:
      engine/sync_s (the wall time of the push, the engine's own check included), and what the
      engine's report gives (vLLM's `SyncReport`): engine/sync_transfer_s,
      engine/probe_mean_abs_diff and engine/probe_max_abs_diff (vLLM's log-probs of the probe
      sequence against the trainer's, after the push).

    Raises:
      botjax.sampling.vllm.StaleEngineError: the engine's weights are not the trainer's after
        the push (its weight version or probe check failed).
    """
    t0 = time.perf_counter()
    report = self.engine.set_params(self.full_state())
    out = {"engine/sync_s": time.perf_counter() - t0}
    for name, key in (("transfer_seconds", "engine/sync_transfer_s"),
                      ("probe_mean_abs_diff", "engine/probe_mean_abs_diff"),
                      ("probe_max_abs_diff", "engine/probe_max_abs_diff")):
      value = getattr(report, name, None)
      if value is not None:
        out[key] = float(value)
    return out

  def add_hook(self, hook, *, every: int = 1):
    """Adds a hook (`botjax.train.hooks`): a `Hook`, or `fn(StepInfo)` run every `every` steps."""
    return self.hooks.add(hook, every=every)

  @property
  def position(self) -> int:
    """Prompt-source position: records consumed so far (saved with checkpoints)."""
    return self.collector.position

  def full_state(self, params=None):
    """The model's full nnx.State (params + non-trainable variables), as engines take it."""
    params = self.state.params if params is None else params
    return params if len(jax.tree.leaves(self.rest)) == 0 else nnx.merge_state(params, self.rest)

  def model(self) -> nnx.Module:
    """A module view of the current parameters (for evaluation or saving)."""
    return nnx.merge(self.graphdef, self.state.params, self.rest)

  def _maybe_resume(self):
    restored = self.checkpointer.restore_latest(self.state, self.run_config)
    if restored is not None:
      self.state, meta = restored
      self.collector.position = int(meta["position"])
      self.host_step = self.resumed_from = int(meta["host_step"])
      self.skipped_in_a_row = int(meta.get("skipped_in_a_row", 0))

  def save(self):
    meta = {"config": self.run_config, "position": self.position, "host_step": self.host_step,
            "skipped_in_a_row": self.skipped_in_a_row}
    self.checkpointer.save(self.host_step, self.state, meta)

  def build_batch(self, roll: Rollouts) -> tuple[step_lib.RLBatch, dict]:
    """`batch.build_batch` with this run's recipe, groups (P + 1) and log-prob programs."""
    logp = lambda params: (lambda *a: self.programs.logprobs(params, *a))  # noqa: E731
    old = None
    if not self.engine.exact_logp:   # the trainer's own; under its own cut when truncated
      old = ((lambda *a: self.programs.logprobs_own_cut(self.state.params, *a))
             if self.programs.sampling_cut is not None else logp(self.state.params))
    return build_batch(
        self.recipe, roll, num_groups=self.cfg.rollout.prompts_per_step + 1,
        ref_logp=logp(self.ref_params) if self.ref_params is not None else None,
        old_logp=old)

  def inspect_batch(self) -> BatchPreview:
    """The next step's rollouts, token rewards and advantages, without moving the run: the
    prompt position, parameters and counters stay as they are, so `step()` then trains on the
    same rollouts (for a deterministic reward). (`collector.collect` advances the position.)"""
    key = jax.random.fold_in(jax.random.PRNGKey(self.cfg.seed), self.host_step)
    roll, info = self.collector.collect(key, self.host_step, advance=False)
    batch, adv = self.build_batch(roll)
    return BatchPreview(roll, batch, {**info, **adv})

  def step(self) -> dict:
    """One RL iteration (collect, batch, update, `sync`); its metrics (step_s: all four)."""
    step, t0 = self.host_step, time.perf_counter()
    key = jax.random.fold_in(jax.random.PRNGKey(self.cfg.seed), step)
    roll, info = self.collector.collect(key, step)
    t1 = time.perf_counter()
    batch, adv_info = self.build_batch(roll)
    self.state, metrics, self.skipped_in_a_row = self.programs.train(
        self.state, batch, step=step, skipped_in_a_row=self.skipped_in_a_row)
    jax.block_until_ready(self.state.params)
    t2 = time.perf_counter()
    sync = self.sync()
    self.host_step += 1
    tokens = float(np.asarray(batch.attention_mask).sum()) * self.cfg.ppo_epochs
    return {**metrics, **info, **adv_info, **rollout_metrics(roll, self.reward_spec), **sync,
            "update_s": t2 - t1, "step_s": time.perf_counter() - t0,
            "update_tokens_per_s": tokens / max(t2 - t1, 1e-9)}

  def steps(self):
    """Steps to `cfg.steps`, running the hooks after each; yields their `StepInfo`s."""
    while self.host_step < self.cfg.steps:
      metrics = self.step()
      info = StepInfo(self.host_step, metrics, self, last=self.host_step == self.cfg.steps)
      self.hooks.run(info)
      yield info

  def run(self) -> list[dict]:
    """`steps()` within the hooks' start and end; returns the rows written to metrics.jsonl."""
    self.hooks.start(self)
    try:
      if self.host_step == 0:
        self.hooks.run(StepInfo(0, {}, self, trained=False))
      for _ in self.steps():
        pass
    finally:
      self.hooks.end(self)
    return self.hooks.log.records

  def close(self):
    """Stops the reward workers, update threads and engine it built; flushes checkpoints."""
    own_engine, own_collector = self._owns
    if own_collector:
      self.pool.close()
    self.programs.close()
    if own_engine:
      self.engine.close()
    self.checkpointer.close()
