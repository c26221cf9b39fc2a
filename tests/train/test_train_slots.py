"""The trainer on the slot engine (`RolloutConfig.engine = "slots"`): the same rollouts and the
same update as on the lockstep sampler ("jax"), for one seed; with top-k / top-p, the update's
log-probs are taken under the sampler's truncated support."""

import jax
import numpy as np
import pytest
from flax import nnx

from botjax import data, models
from botjax.rewards import MathReward
from botjax.sampling import Sampler, SlotEngine
from botjax.testbeds.arith_judge import ExactArithmeticJudge
from botjax.train import config as C
from botjax.train.loop import RLTrainer
from botjax.train.rollouts import ListPrompts
from _util import tiny_arith

TASK = data.ArithmeticTask(num_ops=(1, 2), operand_range=(1, 5), ops=("+", "-"), seed=3)


def _trainer(tmp_path, engine, **rollout):
  tok, cfg, train = tiny_arith(tmp_path, TASK)
  tc = C.TrainConfig(
      recipe="grpo", steps=1, seed=0, workdir=str(tmp_path / engine),
      optim=C.OptimConfig(learning_rate=1e-3),
      rollout=C.RolloutConfig(prompts_per_step=2, group_size=4, max_prompt_tokens=128,
                              max_new_tokens=16, temperature=1.0, engine=engine, **rollout),
      reward=C.RewardConfig(workers=2, timeout_s=20.0, kind="thread"),
      checkpoint_every=0, tensorboard=False, progress=False, host_threads=1)
  return RLTrainer(
      tc, model=models.Decoder(cfg, rngs=nnx.Rngs(0)), tokenizer=tok,
      prompts=ListPrompts(train, seed=0),
      reward_fn=MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5),
      prompt_fn=lambda r: data.chat_messages(r, data.ARITHMETIC_TEMPLATE))


@pytest.mark.slow   # ~15 s: two trainers' programs compiled
def test_slot_engine_gives_the_trainer_the_samplers_step(tmp_path):
  out = {}
  for engine in ("jax", "slots"):
    trainer = _trainer(tmp_path, engine)
    try:
      assert isinstance(trainer.engine, {"jax": Sampler, "slots": SlotEngine}[engine])
      roll, _ = trainer.collector.collect(jax.random.key(7), 0, advance=False)
      records = trainer.run()
    finally:
      trainer.close()
    out[engine] = (roll, records[0], jax.tree.leaves(jax.device_get(trainer.state.params)))
  (ra, ma, pa), (rb, mb, pb) = out["jax"], out["slots"]
  np.testing.assert_array_equal(ra.tokens, rb.tokens)
  np.testing.assert_allclose(ra.logp, rb.logp, rtol=1e-6, atol=1e-6)
  assert ma["adv_abs_max"] > 0 and ma["reward_mean"] == mb["reward_mean"]
  for a, b in zip(pa, pb):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow   # ~8 s
@pytest.mark.parametrize("engine", ["jax", "slots"])
def test_top_k_top_p_update_scores_the_sampled_distribution(tmp_path, engine):
  """The first update is on-policy: its log-probs equal the rollouts' under the truncated
  support the sampler recorded (untruncated, they differed by ~2.5 nats per token here)."""
  trainer = _trainer(tmp_path, engine, top_k=20, top_p=0.9)
  try:
    assert trainer.engine.config.logp_truncated
    roll, _ = trainer.collector.collect(jax.random.key(7), 0, advance=False)
    records = trainer.run()
  finally:
    trainer.close()
  assert roll.support is not None and np.isfinite(roll.support[roll.mask]).mean() > 0.5
  assert records[0]["abs_logp_diff"] < 1e-5, records[0]["abs_logp_diff"]
