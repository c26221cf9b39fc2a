"""The roles RLTrainer composes, on the real tiny task: the engine by name (and injected),
set_params after each update, the collector injected, old log-probs recomputed for an engine
that is not exact, inspect_batch that moves nothing, hooks with every=, a Recipe object with an
estimator function that trains and resumes, and SamplingConfig.for_model."""

import dataclasses
import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from botjax import algorithms, data, models
from botjax.rewards import MathReward
from botjax.sampling import ENGINES, SamplingConfig, make_engine, register_engine
from botjax.testbeds.arith_judge import ExactArithmeticJudge
from botjax.train import config as C
from botjax.train.loop import RLTrainer
from botjax.train.rollouts import ListPrompts, RolloutCollector
from _util import tiny_arith

TASK = data.ArithmeticTask(num_ops=(1, 2), operand_range=(1, 5), ops=("+", "-"), seed=3)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  root = tmp_path_factory.mktemp("roles")
  tok, cfg, train = tiny_arith(root, TASK)
  return {"tok": tok, "cfg": cfg, "train": train, "engines": {}}


def base_config(workdir, recipe="grpo", **kw):
  cfg = C.TrainConfig(
      recipe=recipe, steps=2, seed=0, workdir=str(workdir), recipe_overrides=(("kl_coef", 0.0),),
      optim=C.OptimConfig(learning_rate=1e-3),
      rollout=C.RolloutConfig(prompts_per_step=2, group_size=4, max_prompt_tokens=128,
                              max_new_tokens=16, temperature=1.0, engine="jax"),
      reward=C.RewardConfig(workers=1, timeout_s=20.0, kind="inline"),
      checkpoint_every=0, tensorboard=False, progress=False)
  return dataclasses.replace(cfg, **kw)


def prompt_fn(record):
  return data.chat_messages(record, data.ARITHMETIC_TEMPLATE)


def make_trainer(env, cfg, **kw):
  kw.setdefault("engine", env["engines"].get("jax"))
  kw.setdefault("reward_fn", MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5))
  trainer = RLTrainer(cfg, model=models.Decoder(env["cfg"], rngs=nnx.Rngs(0)),
                      tokenizer=env["tok"], prompts=ListPrompts(env["train"], seed=0),
                      prompt_fn=prompt_fn, **kw)
  if trainer.cfg.rollout.engine == "jax":
    env["engines"].setdefault("jax", trainer.engine)   # one compiled engine for the module
  return trainer


def jax_engine(env, tmp_path):
  """The module's compiled botjax engine, built by a trainer when no test has built it yet."""
  if "jax" not in env["engines"]:
    make_trainer(env, base_config(tmp_path / "engine")).close()
  return env["engines"]["jax"]


class Recording:
  """A rollout engine that delegates to botjax's own and records what the trainer gives it; with
  `logp_shift` it reports log-probs off by that much on the generated tokens (an engine whose
  log-probs are not the trainer's, `exact_logp = False`)."""

  def __init__(self, inner, logp_shift: float = 0.0):
    self.inner, self.config, self.shift = inner, inner.config, logp_shift
    self.exact_logp = logp_shift == 0.0
    self.pushed: list = []

  def generate(self, prompts, key, *, n=1, max_new_tokens=None, stop_token_ids=None):
    out = self.inner.generate(prompts, key, n=n, max_new_tokens=max_new_tokens,
                              stop_token_ids=stop_token_ids)
    return out.replace(logp=out.logp - self.shift * out.mask)

  def set_params(self, params):
    self.pushed.append(params)
    self.inner.set_params(params)

  def close(self):
    self.inner.close()


def test_the_engine_is_built_by_name_and_gets_the_parameters_after_each_update(env, tmp_path):
  made = []

  def factory(model, sampling_config, *, mesh=None, **options):
    made.append(Recording(make_engine("jax", model, sampling_config, mesh=mesh, **options)))
    return made[-1]

  register_engine("recording", factory)
  try:
    cfg = base_config(tmp_path, rollout=dataclasses.replace(base_config(tmp_path).rollout,
                                                            engine="recording"))
    t = make_trainer(env, cfg, engine=None)
    try:
      assert t.engine is made[0] and len(t.engine.pushed) == 1      # the initial parameters
      t.run()
      assert len(t.engine.pushed) == 3                               # one per update
      for a, b in zip(jax.tree.leaves(t.engine.pushed[-1]), jax.tree.leaves(t.full_state())):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    finally:
      t.close()
  finally:
    ENGINES.pop("recording")
  with pytest.raises(ValueError, match="unknown rollout engine 'nope'"):
    make_trainer(env, base_config(tmp_path, rollout=dataclasses.replace(
        base_config(tmp_path).rollout, engine="nope")), engine=None)
  # the trainer names no engine class: only the registry's names
  for path in glob.glob(os.path.join(ROOT, "botjax", "train", "*.py")):
    assert "Sampler" not in open(path).read(), path


def test_engine_options_reach_the_engine_factory(env, tmp_path):
  seen = []

  class Borrowed(Recording):
    def close(self):                     # the module's engine stays open for the other tests
      pass

  def factory(model, sampling_config, *, mesh=None, **options):
    seen.append(options)
    return Borrowed(jax_engine(env, tmp_path))

  register_engine("with_options", factory)
  try:
    # as the experiments' --set flags give them: values parsed as JSON, else kept as text
    cfg = C.apply_overrides(base_config(tmp_path), [
        "rollout.engine=with_options", "rollout.engine_options.url=http://10.0.0.2:8000",
        "rollout.engine_options.gpu_memory_utilization=0.5",
        "rollout.engine_options.sleep_level=1", "rollout.engine_options.sleep_level=2"])
    assert cfg.rollout.engine_options == (("url", "http://10.0.0.2:8000"),
                                          ("gpu_memory_utilization", 0.5), ("sleep_level", 2))
    make_trainer(env, cfg, engine=None).close()
    assert seen == [{"url": "http://10.0.0.2:8000", "gpu_memory_utilization": 0.5,
                     "sleep_level": 2}]
  finally:
    ENGINES.pop("with_options")
  # an option the engine does not take: named, with the engine
  bad = C.apply_overrides(base_config(tmp_path), ["rollout.engine_options.no_such_option=3"])
  with pytest.raises(ValueError, match=r"rollout.engine_options \{'no_such_option': 3\} for the "
                                       r"'jax' engine: .*no_such_option"):
    make_trainer(env, bad, engine=None)


def test_an_engine_that_is_not_exact_gets_its_old_logp_recomputed(env, tmp_path):
  t = make_trainer(env, base_config(tmp_path))
  shifted = Recording(jax_engine(env, tmp_path), logp_shift=0.5)
  try:
    exact = t.inspect_batch()
    t.engine = t.collector.engine = shifted
    off = t.inspect_batch()
  finally:
    t.close()
  roll = off.rollouts
  np.testing.assert_array_equal(roll.tokens, exact.rollouts.tokens)       # same samples
  np.testing.assert_allclose(roll.logp, exact.rollouts.logp - 0.5 * roll.mask, atol=1e-6)
  T = np.asarray(off.batch.old_logp).shape[1]
  # the batch's old log-probs are the trainer's own forward pass, not the engine's
  np.testing.assert_allclose(np.asarray(off.batch.old_logp), exact.rollouts.logp[:, :T],
                             atol=2e-4)
  np.testing.assert_array_equal(np.asarray(exact.batch.old_logp), exact.rollouts.logp[:, :T])


def test_inspect_batch_moves_nothing_and_shows_the_next_step(env, tmp_path):
  t = make_trainer(env, base_config(tmp_path, steps=1))
  try:
    before = [np.asarray(x) for x in jax.tree.leaves(t.state.params)]
    preview = t.inspect_batch()
    again = t.inspect_batch()
    assert t.position == 0 and t.host_step == 0
    for a, b in zip(before, jax.tree.leaves(t.state.params)):
      np.testing.assert_array_equal(a, np.asarray(b))
    np.testing.assert_array_equal(preview.rollouts.tokens, again.rollouts.tokens)
    m = t.step()
  finally:
    t.close()
  roll = preview.rollouts
  assert t.position == 2 and t.host_step == 1
  assert m["reward_mean"] == pytest.approx(float(roll.rewards[roll.mask.any(1)].mean()))
  assert m["adv_std"] == pytest.approx(preview.info["adv_std"])
  assert m["local/min"] == pytest.approx(float(roll.local[roll.mask].min()))


def test_the_collector_can_be_injected(env, tmp_path):
  cfg = base_config(tmp_path, steps=1)
  recipe = C.recipe_for_run(cfg, MathReward(None).spec)
  engine = jax_engine(env, tmp_path)
  collector = RolloutCollector.for_run(cfg, recipe, engine=engine, tokenizer=env["tok"],
                                       prompts=ListPrompts(env["train"][::-1]),
                                       reward_fn=MathReward(None), prompt_fn=prompt_fn)
  t = RLTrainer(cfg, model=models.Decoder(env["cfg"], rngs=nnx.Rngs(0)), tokenizer=env["tok"],
                collector=collector)
  try:
    assert t.collector is collector and t.engine is engine and t.pool is collector.pool
    t.run()
    assert collector.position == 2
  finally:
    t.close()
    collector.pool.close()    # the caller's: the trainer closes only what it built


def test_hooks_run_every_n_steps_before_logging_and_at_the_end(env, tmp_path):
  evals = []

  def eval_fn(trainer, step):
    evals.append(step)
    return {"score": float(step)}

  cfg = base_config(tmp_path, steps=3, eval_every=2, log_every=2, checkpoint_every=2)
  t = make_trainer(env, cfg, eval_fn=eval_fn)
  seen = []
  t.add_hook(lambda info: seen.append(info.step), every=1)
  t.add_hook(lambda info: info.metrics.update(hooked=info.step), every=2)
  try:
    records = t.run()
  finally:
    t.close()
  assert evals == [0, 2, 3] and seen == [1, 2, 3]
  # step 0: the initial evaluation only; 2: logged and evaluated; 3: the last step
  assert [r["step"] for r in records] == [0, 2, 3]
  assert set(records[0]) == {"step", "eval/score"}
  assert records[1]["hooked"] == 2 and records[2]["hooked"] == 3 and "reward_mean" in records[1]
  assert t.checkpointer.steps() == [2, 3]
  with open(os.path.join(tmp_path, "config.json")) as f:
    assert '"checkpoint": null' in f.read()


def _centred(recipe, b):
  """[B] sequence reward minus its group mean (numpy-checked below)."""
  total = jax.ops.segment_sum(b.shaped, b.group_ids, num_segments=b.num_groups)
  count = jax.ops.segment_sum(jnp.ones_like(b.shaped), b.group_ids, num_segments=b.num_groups)
  return b.shaped - (total / jnp.maximum(count, 1.0))[b.group_ids]


def test_a_recipe_object_with_an_estimator_function_trains_and_resumes(env, tmp_path):
  recipe = algorithms.Recipe(name="centred_test", advantage=_centred, granularity="sequence",
                             kl_coef=0.0)
  assert recipe.advantage == f"{__name__}._centred"
  cfg = base_config(tmp_path, recipe=recipe, recipe_overrides=(), steps=1, checkpoint_every=1)
  t = make_trainer(env, cfg)
  try:
    assert t.recipe == recipe
    preview = t.inspect_batch()
    t.run()
  finally:
    t.close()
  roll, batch = preview.rollouts, preview.batch
  r = roll.rewards.astype(np.float64)
  want = np.zeros_like(roll.local, dtype=np.float64)
  for g in np.unique(roll.group_ids):
    rows = roll.group_ids == g
    want[rows] = (r[rows] - r[rows].mean())[:, None]
  T = np.asarray(batch.advantages).shape[1]
  np.testing.assert_allclose(np.asarray(batch.advantages),
                             np.where(roll.mask, want, 0.0)[:, :T], atol=1e-6)
  # the saved config names the estimator: a longer run in the same directory resumes
  resumed = make_trainer(env, dataclasses.replace(cfg, steps=2))
  try:
    assert resumed.resumed_from == 1 and resumed.recipe.advantage == recipe.advantage
    assert [r["step"] for r in resumed.run()] == [2]
  finally:
    resumed.close()
  with pytest.raises(ValueError, match="unknown recipe field"):
    C.apply_overrides(cfg, ["recipe.nope=1"])
  with pytest.raises(ValueError, match=r"unknown Recipe field\(s\) nope in recipe_overrides"):
    C.recipe_for_run(dataclasses.replace(cfg, recipe_overrides=(("nope", 1),)),
                     MathReward(None).spec)


def test_sampling_config_for_model(env):
  model_cfg, tok = env["cfg"], env["tok"]
  sc = SamplingConfig.for_model(model_cfg, tok, max_new_tokens=7, stop_token_ids=[5])
  eos = model_cfg.eos_token_id[0]
  assert sc.eos_token_ids[0] == eos and set(sc.eos_token_ids) == {eos, tok.eos_token_id}
  assert sc.pad_token_id == tok.pad_token_id and sc.stop_token_ids == (5,)
  assert sc.max_new_tokens == 7
  bare = SamplingConfig.for_model(dataclasses.replace(model_cfg, eos_token_id=3, pad_token_id=None))
  assert bare.eos_token_ids == (3,) and bare.pad_token_id == 0
