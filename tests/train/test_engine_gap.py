"""The trainer with a rollout engine whose log-probs are not its own (`exact_logp` False, as
vLLM's): the recipe gets the truncated importance-sampling correction unless it says otherwise,
each step logs the engine's gap from the trainer (`mismatch/*`) and the time of each weight sync
(`engine/sync_s`), the batch carries the engine's log-probs as `behaviour_logp`, and config.json
records the cap. botjax's own engine changes none of this.

The inexact engine is botjax's own sampler whose reported log-probs are moved by a known shift
on the generated tokens, so every logged number has a closed form (vLLM itself: the `vllm`
tests in tests/sampling/test_vllm_trainer.py).
"""

import dataclasses
import json
import math

import numpy as np
import pytest
from flax import nnx

from botjax import data, models
from botjax.rewards import MathReward
from botjax.testbeds.arith_judge import ExactArithmeticJudge
from botjax.sampling import make_engine
from botjax.train import config as C
from botjax.train.loop import RLTrainer
from botjax.train.rollouts import ListPrompts

from _util import tiny_arith

TASK = data.ArithmeticTask(num_ops=(1, 2), operand_range=(1, 5), ops=("+", "-"), seed=3)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  tok, cfg, train = tiny_arith(tmp_path_factory.mktemp("gap"), TASK)
  return {"tok": tok, "cfg": cfg, "train": train, "engine": None}


def config(workdir, **overrides):
  cfg = C.TrainConfig(
      recipe="grpo", steps=2, seed=0, workdir=str(workdir),
      recipe_overrides=(("kl_coef", 0.0),) + overrides.pop("recipe_overrides", ()),
      optim=C.OptimConfig(learning_rate=1e-3),
      rollout=C.RolloutConfig(prompts_per_step=2, group_size=4, max_prompt_tokens=128,
                              max_new_tokens=16, temperature=1.0),
      reward=C.RewardConfig(workers=1, timeout_s=20.0, kind="inline"),
      checkpoint_every=0, tensorboard=False, progress=False)
  return dataclasses.replace(cfg, **overrides)


class Shifted:
  """botjax's sampler reporting log-probs `shift` below its own on the generated tokens: an
  engine whose log-probs are not the trainer's, with a known gap (π_train / π_engine = e^shift
  on every token)."""

  def __init__(self, inner, shift: float):
    self.inner, self.config, self.shift = inner, inner.config, shift
    self.exact_logp = False

  def generate(self, prompts, key, *, n=1, max_new_tokens=None, stop_token_ids=None):
    out = self.inner.generate(prompts, key, n=n, max_new_tokens=max_new_tokens,
                              stop_token_ids=stop_token_ids)
    return out.replace(logp=out.logp - self.shift * out.mask)

  def set_params(self, params):
    self.inner.set_params(params)

  def close(self):
    pass


def trainer(env, cfg, shift=None):
  model = models.Decoder(env["cfg"], rngs=nnx.Rngs(0))
  if env["engine"] is None:
    from botjax.sampling import SamplingConfig
    r = cfg.rollout
    env["engine"] = make_engine("jax", model, SamplingConfig.for_model(
        model, env["tok"], max_new_tokens=r.max_new_tokens, temperature=r.temperature))
  engine = env["engine"] if shift is None else Shifted(env["engine"], shift)
  return RLTrainer(cfg, model=model, tokenizer=env["tok"], prompts=ListPrompts(env["train"]),
                   reward_fn=MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5),
                   prompt_fn=lambda rec: data.chat_messages(rec, data.ARITHMETIC_TEMPLATE),
                   engine=engine)


def run(t):
  try:
    rows = [r for r in t.run() if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2]
    return rows
  finally:
    t.close()


def test_an_inexact_engine_gets_tis_by_default_and_its_gap_is_logged(env, tmp_path):
  t = trainer(env, config(tmp_path), shift=1.0)
  assert t.recipe.tis_cap == C.ENGINE_TIS_CAP == 2.0
  preview = t.inspect_batch()
  b, roll = preview.batch, preview.rollouts
  T = np.asarray(b.old_logp).shape[1]
  m = roll.mask[:, :T]
  # behaviour_logp: the engine's own (shifted) log-probs; old_logp: the trainer's recomputation
  np.testing.assert_allclose(np.asarray(b.behaviour_logp), np.where(m, roll.logp[:, :T], 0.0))
  np.testing.assert_allclose(np.asarray(b.old_logp)[m], roll.logp[:, :T][m] + 1.0, atol=2e-4)
  rows = run(t)
  for r in rows:
    # |Δ log p| = 1 on every token (to the recomputation's float tolerance); e^1 > 2: all outside
    assert r["mismatch/mean_abs_diff"] == pytest.approx(1.0, abs=2e-4)
    assert r["mismatch/max_abs_diff"] == pytest.approx(1.0, abs=2e-4)
    assert r["mismatch/outside_frac"] == 1.0
    # min(e^1, C = 2) on every loss token
    assert r["tis_weight"] == pytest.approx(2.0, rel=1e-6) and r["tis_capped_fraction"] == 1.0
    assert r["engine/sync_s"] > 0.0 and r["step_s"] >= r["engine/sync_s"] + r["update_s"]
  saved = json.load(open(tmp_path / "config.json"))
  assert saved["tis_cap"] == 2.0 and saved["rollout_engine"] == {"class": "Shifted",
                                                                 "exact_logp": False}


def test_the_recipe_chooses_another_cap_or_none(env, tmp_path):
  t = trainer(env, config(tmp_path / "c3", recipe_overrides=(("tis_cap", 3.0),)), shift=1.0)
  rows = run(t)
  assert t.recipe.tis_cap == 3.0
  assert all(r["tis_weight"] == pytest.approx(math.e, rel=1e-4) for r in rows)   # e < 3
  cfg = C.apply_overrides(config(tmp_path / "off"), ["recipe.tis_cap=none"])
  t = trainer(env, cfg, shift=1.0)
  rows = run(t)
  assert t.recipe.tis_cap is None and all("tis_weight" not in r for r in rows)
  assert all(r["mismatch/outside_frac"] == 1.0 for r in rows)     # the gap is still logged
  assert json.load(open(tmp_path / "off" / "config.json"))["tis_cap"] is None


def test_botjax_engine_has_no_correction_and_no_gap(env, tmp_path):
  t = trainer(env, config(tmp_path))
  assert t.recipe.tis_cap is None
  b = t.inspect_batch().batch
  assert b.behaviour_logp is None
  rows = run(t)
  assert all("tis_weight" not in r and not any(k.startswith("mismatch/") for k in r)
             for r in rows)
  assert all(r["engine/sync_s"] >= 0.0 for r in rows)


def test_recipe_for_run_reads_the_engine_name_when_not_told():
  from botjax.rewards import MathReward as MR
  spec = MR(None).spec
  jax_cfg = config("w")
  vllm_cfg = dataclasses.replace(jax_cfg, rollout=dataclasses.replace(jax_cfg.rollout,
                                                                     engine="vllm"))
  assert C.recipe_for_run(jax_cfg, spec).tis_cap is None
  assert C.recipe_for_run(vllm_cfg, spec).tis_cap == 2.0
  assert C.recipe_for_run(jax_cfg, spec, exact_logp=False).tis_cap == 2.0
  assert C.recipe_for_run(vllm_cfg, spec, exact_logp=True).tis_cap is None
  explicit = dataclasses.replace(vllm_cfg, recipe_overrides=(("tis_cap", None),))
  assert C.recipe_for_run(explicit, spec).tis_cap is None


class NoCut:
  """botjax's sampler under top-k / top-p as vLLM reports it (`logprobs_mode=
  "processed_logprobs"`): the log-probs under the truncated, renormalised distribution, but not
  the cut (`support_logp` None), and `exact_logp` False. `last_support` keeps the cut it drew
  under, for the test to compare."""

  def __init__(self, inner):
    self.inner, self.config, self.exact_logp = inner, inner.config, False
    self.last_support = None

  def generate(self, prompts, key, *, n=1, max_new_tokens=None, stop_token_ids=None):
    out = self.inner.generate(prompts, key, n=n, max_new_tokens=max_new_tokens,
                              stop_token_ids=stop_token_ids)
    self.last_support = np.asarray(out.support_logp)
    return out.replace(support_logp=None)

  def set_params(self, params):
    self.inner.set_params(params)

  def close(self):
    pass


def test_an_engine_without_its_cut_is_scored_under_the_trainers_own_cut(env, tmp_path):
  """top-k / top-p with an engine that reports truncated log-probs but not its cut (vLLM): the
  trainer recomputes the old log-probs under the cut it takes from its own logits
  (`logprobs_own_cut`), which is the sampler's cut, so the gap is float rounding, and the
  update scores under the same cut (the batch's `support`). Untruncated, the gap would be
  the mass the cut removed."""
  from botjax.sampling import SamplingConfig
  cfg = config(tmp_path)
  cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, top_k=6, top_p=0.9))
  model = models.Decoder(env["cfg"], rngs=nnx.Rngs(0))
  r = cfg.rollout
  sampling = SamplingConfig.for_model(model, env["tok"], max_new_tokens=r.max_new_tokens,
                                      temperature=r.temperature, top_k=6, top_p=0.9)
  assert sampling.logp_truncated
  engine = NoCut(make_engine("jax", model, sampling))
  t = RLTrainer(cfg, model=model, tokenizer=env["tok"], prompts=ListPrompts(env["train"]),
                reward_fn=MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5),
                prompt_fn=lambda rec: data.chat_messages(rec, data.ARITHMETIC_TEMPLATE),
                engine=engine)
  preview = t.inspect_batch()
  b, roll = preview.batch, preview.rollouts
  assert roll.support is None and b.support is not None
  T = np.asarray(b.old_logp).shape[1]
  m = roll.mask[:, :T]
  drawn = engine.last_support[:, :T]
  sup = np.asarray(b.support)
  assert np.isfinite(drawn[m]).mean() > 0.5                    # the cut did remove tokens
  np.testing.assert_array_equal(np.isfinite(sup[m]), np.isfinite(drawn[m]))
  fin = m & np.isfinite(drawn)
  np.testing.assert_allclose(sup[fin], drawn[fin], atol=1e-5)
  np.testing.assert_allclose(np.asarray(b.old_logp)[m], roll.logp[:, :T][m], atol=2e-5)
  untruncated = np.asarray(t.programs.logprobs(t.state.params, b.input_ids, b.positions,
                                               b.attention_mask, T))
  assert np.abs(untruncated[m] - roll.logp[:, :T][m]).mean() > 0.05
  rows = run(t)
  for row in rows:
    assert row["mismatch/max_abs_diff"] < 1e-4 and row["mismatch/outside_frac"] == 0.0
    assert row["tis_weight"] == pytest.approx(1.0, abs=1e-4)
