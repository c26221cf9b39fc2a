"""The reward contract: a reward's declared spec decides what the trainer reads, and the same
reward gives the same advantages through RLTrainer, through experiments/react.py's wiring and
through a user's own loop (BoT-GRPO, arXiv 2610.09804, eq. 1-3 with the React reward of eq. 6).

The React reward runs for real (the pinned Node toolchain compiles and lints every component);
completions are fixed texts, so no sampler is involved.
"""
import dataclasses
import time

import numpy as np
import pytest
from flax import nnx

from botjax import algorithms, data, models
from botjax.rewards import RewardResult, RewardSpec, spans_to_token_values
from botjax.rewards.react import ReactReward, ReactRewardConfig, chat_messages
from botjax.sampling.text import decode_with_offsets
from botjax.train import config as C
from botjax.train import rollouts as R
from botjax.train.loop import RLTrainer
from botjax.train.rollouts import ListPrompts
from _util import load_experiment

TASK = data.ArithmeticTask(num_ops=(1, 2), operand_range=(1, 5), ops=("+", "-"), seed=3)

CLEAN = """import { useState } from 'react';

export default function App() {
  const [n, setN] = useState(0);
  return <button onClick={() => setN(n + 1)}>{n}</button>;
}"""
BROKEN = CLEAN.replace("setN(n + 1)", "setN(n + )")                       # compile error
LINTED = CLEAN.replace("  const [n, setN] = useState(0);",                 # ESLint messages
                       "  const [n, setN] = useState(0);\n  var unused = 1;\n"
                       "  if (n == '1') { debugger; }")
FENCE = "Here is the app:\n```tsx\n{}\n```\nDone."
TEXTS = {"clean": FENCE.format(CLEAN), "broken": FENCE.format(BROKEN),
         "linted": FENCE.format(LINTED), "prose": "I cannot write that app."}
GROUPS = [["clean", "broken", "linted", "prose"], ["linted", "clean", "broken", "clean"]]
P, G = len(GROUPS), len(GROUPS[0])
RECORDS = [{"id": "a", "prompt": "Make a counter."}, {"id": "b", "prompt": "Make a clicker."}]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  root = tmp_path_factory.mktemp("contract")
  tok = data.build_tokenizer(str(root / "tok"), TASK, vocab_size=300, num_problems=300)
  eos = tok.convert_tokens_to_ids("<|im_end|>")
  cfg = dataclasses.replace(models.get_config("tiny"), vocab_size=len(tok), hidden_size=32,
                            num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                            intermediate_size=64, eos_token_id=(eos,),
                            pad_token_id=tok.pad_token_id, bos_token_id=0)
  reward = ReactReward(ReactRewardConfig(render=False))
  yield {"root": root, "tok": tok, "cfg": cfg, "reward": reward}
  reward.close()


def fixed_rollouts(tok, results, spec, pad_id, texts=None):
  """The rows of GROUPS (or `texts`, P groups of G) as `Rollouts` (byte-level tokens, offsets
  from the tokenizer)."""
  texts = texts or [TEXTS[k] for group in GROUPS for k in group]
  ids, offsets = [], []
  for text in texts:
    row = tok(text, add_special_tokens=False)["input_ids"]
    decoded, offs = decode_with_offsets(tok, row)
    assert decoded == text
    ids.append(row)
    offsets.append(offs)
  B, T = len(texts), max(map(len, ids))
  tokens = np.full((B, T), pad_id, np.int32)
  mask = np.zeros((B, T), bool)
  for b, row in enumerate(ids):
    tokens[b, :len(row)], mask[b, :len(row)] = row, True
  roll = R.assemble(prompt_ids=np.ones((B, 1), np.int32), prompt_mask=np.ones((B, 1), bool),
                    tokens=tokens, mask=mask, logp=np.zeros((B, T), np.float32),
                    lengths=mask.sum(1), finish=np.zeros(B, np.int32),
                    group_ids=np.repeat(np.arange(P), G), completions=texts, offsets=offsets,
                    results=results, spec=spec)
  return R.regroup(roll, P, G), offsets


def _requests():
  return [RECORDS[b // G]["prompt"] for b in range(P * G)]


def _meta():
  return [dict(RECORDS[b // G]) for b in range(P * G)]


def bot_grpo_oracle(G_k, S, mask, groups, w_g=1.0, w_s=1.0, eps=1e-6):
  """BoT-GRPO eq. 1-3 as loops: r_t = w_g·G + w_s·S_t; 1/L-weighted population statistics."""
  adv = np.zeros(mask.shape)
  for g in np.unique(groups):
    rows = [b for b in np.flatnonzero(groups == g) if mask[b].any()]
    r = {b: w_g * G_k[b] + w_s * S[b][mask[b]] for b in rows}
    mu = np.mean([r[b].mean() for b in rows])
    sd = np.sqrt(np.mean([((r[b] - mu) ** 2).mean() for b in rows]))
    for b in rows:
      adv[b, mask[b]] = (r[b] - mu) / (sd + eps)
  return adv


def _train_config(workdir):
  return C.TrainConfig(
      recipe="bot_grpo", steps=1, workdir=str(workdir), recipe_overrides=(("kl_coef", 0.0),),
      rollout=C.RolloutConfig(prompts_per_step=P, group_size=G, max_prompt_tokens=192,
                              max_new_tokens=192),
      reward=C.RewardConfig(workers=2, timeout_s=120.0, kind="thread"),
      checkpoint_every=0, tensorboard=False, progress=False)


def _react_script():
  """experiments/react.py as a module."""
  return load_experiment("react")


def _advantages(trainer, roll):
  batch, _ = trainer.build_batch(roll)
  return np.asarray(batch.advantages)[:, :roll.tokens.shape[1]]


def test_same_advantages_through_the_trainer_the_react_script_and_a_users_loop(env, tmp_path):
  tok, fn = env["tok"], env["reward"]
  assert fn.spec.weighted and fn.spec.token_spans

  # 1. RLTrainer with the React reward, outside experiments/react.py
  model = models.Decoder(env["cfg"], rngs=nnx.Rngs(0))
  trainer = RLTrainer(_train_config(tmp_path / "trainer"), model=model, tokenizer=tok,
                      prompts=ListPrompts(RECORDS), reward_fn=fn)
  try:
    assert (trainer.recipe.w_global, trainer.recipe.w_local) == (1.0, 1.0)   # eq. 6, not 3 / 0.5
    results = trainer.pool(_requests(), [TEXTS[k] for g in GROUPS for k in g], _meta())
    roll, offsets = fixed_rollouts(tok, results, trainer.reward_spec, trainer.pad_id)
    adv_trainer = _advantages(trainer, roll)
  finally:
    trainer.close()

  # 2. experiments/react.py's own builders (train_config, make_trainer with RequestPrompts)
  react = _react_script()
  react.FLAGS(["react.py", "--model=tiny", f"--workdir={tmp_path / 'script'}"])
  cfg = react.train_config(tiny=True)
  assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size) == (P, G)
  script = react.make_trainer(cfg, model=models.Decoder(env["cfg"], rngs=nnx.Rngs(0)),
                              tokenizer=tok, train=RECORDS, reward=fn)
  try:
    assert script.recipe.name == "bot_grpo"
    assert (script.recipe.w_global, script.recipe.w_local) == (1.0, 1.0)
    templated = [str(chat_messages(m["prompt"])) for m in _meta()]   # RequestPrompts undoes this
    results_script = script.pool(templated, [TEXTS[k] for g in GROUPS for k in g], _meta())
    roll_script, _ = fixed_rollouts(tok, results_script, script.reward_spec, script.pad_id)
    adv_script = _advantages(script, roll_script)
  finally:
    script.close()

  # 3. a user's own loop: reward -> spans to tokens -> recipe_for_reward -> compute_advantages
  texts = [TEXTS[k] for g in GROUPS for k in g]
  own = fn(_requests(), texts, _meta())
  T = roll.tokens.shape[1]
  local = np.stack([spans_to_token_values(r.token_spans, o, T) for r, o in zip(own, offsets)])
  rewards = np.asarray([r.reward for r in own], np.float32)
  groups = np.repeat(np.arange(P), G)
  recipe = algorithms.recipe_for_reward(algorithms.get_recipe("bot_grpo"), fn.spec)
  adv_user = np.asarray(algorithms.compute_advantages(
      recipe, rewards=rewards, mask=roll.mask, group_ids=groups, num_groups=P,
      local_rewards=local).advantages)

  # the reward has a signal: global rewards and line penalties differ between rows
  assert len(set(rewards.tolist())) >= 3 and local.min() < 0
  np.testing.assert_array_equal(rewards, roll.rewards)
  np.testing.assert_array_equal(local, roll.local)
  want = bot_grpo_oracle(rewards, local, roll.mask, groups)
  for got in (adv_trainer, adv_script, adv_user):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(adv_trainer, adv_user, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(adv_script, adv_user, rtol=1e-6, atol=1e-6)

  # the defaults of eq. 8 (w_g 3, w_s 0.5) weigh the React reward differently: the test can tell
  twice = bot_grpo_oracle(rewards, local, roll.mask, groups, w_g=3.0, w_s=0.5)
  assert np.abs(twice - want).max() > 0.05
  with pytest.raises(ValueError, match="recipe_for_reward"):
    algorithms.check_reward_inputs(algorithms.get_recipe("bot_grpo"), fn.spec)


def test_a_weighted_reward_refuses_recipe_weights_that_would_apply_twice(env, tmp_path):
  cfg = dataclasses.replace(_train_config(tmp_path),
                            recipe_overrides=(("kl_coef", 0.0), ("w_global", 3.0)))
  with pytest.raises(ValueError, match="would weigh them again"):
    RLTrainer(cfg, model=models.Decoder(env["cfg"], rngs=nnx.Rngs(0)), tokenizer=env["tok"],
              prompts=ListPrompts(RECORDS), reward_fn=env["reward"])


def test_spec_declares_what_the_trainer_reads():
  from botjax.rewards import (CombinedReward, MathReward, Signal, batched, combine,
                              reward_spec)
  from botjax.testbeds.arith_judge import ExactArithmeticJudge
  plain = lambda prompts, completions, metadata: [RewardResult(1.0) for _ in completions]  # noqa
  assert reward_spec(plain) == RewardSpec() and RewardSpec().signals == {Signal.SEQUENCE}
  assert MathReward(None).spec == RewardSpec({"sequence"}, verifier="answer", weighted=True)
  assert MathReward(ExactArithmeticJudge()).spec.signals == set(Signal)
  assert ReactReward.spec.token_spans and ReactReward.spec.verifier is None
  combined = combine({"math": MathReward(ExactArithmeticJudge()), "len": batched(lambda p, c, m: 0.0)})
  assert isinstance(combined, CombinedReward)
  assert combined.spec == RewardSpec(set(Signal), verifier="math/answer", weighted=True)
  with pytest.raises(ValueError, match="several combined functions declare a verifier"):
    combine({"a": MathReward(None), "b": MathReward(None)})
  with pytest.raises(ValueError, match="unknown reward signal 'tokens'"):
    RewardSpec({"tokens"})
  with pytest.raises(TypeError, match="must be a botjax.rewards.RewardSpec"):
    reward_spec(type("F", (), {"spec": {"token"}})())
  # a plain sequence reward for token-level recipes: the error names the missing signal
  with pytest.raises(ValueError, match="token-level"):
    algorithms.recipe_for_reward(algorithms.get_recipe("bot_grpo"), plain)
  # the keyword form still works
  algorithms.check_reward_inputs(algorithms.get_recipe("bot_grpo"), has_step_rewards=False,
                                 has_token_rewards=True)


def test_undeclared_signals_and_a_missing_verifier_are_errors():
  spec = RewardSpec()
  with pytest.raises(ValueError, match="returned token_spans"):
    spec.check_results([RewardResult(1.0, token_spans=[(0, 1, 1.0)])])
  with pytest.raises(ValueError, match="returned steps"):
    spec.check_results([RewardResult(1.0, steps=[(0, 1, 1.0)])])
  with pytest.raises(ValueError, match="no such component"):
    RewardSpec(verifier="answer").check_results([RewardResult(1.0, components={"x": 1.0})])
  # a failed row (fallback, no components) is not a missing verifier
  RewardSpec(verifier="answer").check_results([RewardResult(0.0, failed=True)])
  v = RewardSpec(verifier="answer").verifier_values(
      [RewardResult(3.2, components={"answer": 1.0}), RewardResult(0.2, components={"answer": 0.0}),
       RewardResult(0.0, failed=True)])
  np.testing.assert_array_equal(v, [1.0, 0.0, 0.0])


class SlowOnSome:
  """Scores len(completion) mod 5 (accuracy: > 2); hangs on rows whose metadata says so."""

  spec = RewardSpec(verifier="answer")

  def __call__(self, prompts, completions, metadata):
    out = []
    for c, m in zip(completions, metadata):
      if m.get("hang"):
        time.sleep(5.0)
      score = float(len(c) % 5)
      out.append(RewardResult(score, components={"answer": float(score > 2)}))
    return out


def grpo_oracle(rewards, groups, valid, eps=1e-6):
  """GRPO (DeepSeekMath, arXiv 2402.03300, §4.1.2) over the valid rows of each group, Bessel std."""
  adv = np.zeros(len(rewards))
  for g in np.unique(groups):
    rows = [b for b in np.flatnonzero(groups == g) if valid[b]]
    r = np.asarray([rewards[b] for b in rows], np.float64)
    if len(rows) < 2 or np.all(r == r[0]):
      continue
    for b, x in zip(rows, r):
      adv[b] = (x - r.mean()) / (r.std(ddof=1) + eps)
  return adv


def test_worker_timeouts_are_kept_out_of_the_loss_and_of_the_group_statistics(env, tmp_path):
  """Rows whose reward worker times out (a real pool timeout) carry no loss, enter no group's
  mean or std, and are counted; the other rows get GRPO over the rows that were scored."""
  tok = env["tok"]
  texts = ["7 + 1 = 8", "3 + 4 = 7 then 7 - 2 = 5", "1 + 1", "9", "2 + 2 = 4", "22 - 11 = 11",
           "5 + 5 = 10", "8 - 3"]
  meta = [{"hang": b in (1, 6)} for b in range(P * G)]
  cfg = dataclasses.replace(_train_config(tmp_path), recipe="grpo",
                            reward=C.RewardConfig(workers=4, timeout_s=0.5, kind="thread"))
  trainer = RLTrainer(cfg, model=models.Decoder(env["cfg"], rngs=nnx.Rngs(0)), tokenizer=tok,
                      prompts=ListPrompts(RECORDS), reward_fn=SlowOnSome())
  try:
    results = trainer.pool([""] * len(texts), texts, meta)
    assert [r.infra_failure for r in results] == [m["hang"] for m in meta]
    assert "timed out" in results[1].error
    roll, _ = fixed_rollouts(tok, results, trainer.reward_spec, trainer.pad_id, texts=texts)
    adv = np.asarray(trainer.build_batch(roll)[0].advantages)[:, :roll.tokens.shape[1]]
    loss_mask = np.asarray(trainer.build_batch(roll)[0].loss_mask)
  finally:
    trainer.close()
  hung = np.asarray([m["hang"] for m in meta])
  np.testing.assert_array_equal(roll.infra, hung)
  assert not roll.mask[hung].any() and not loss_mask[hung].any()
  np.testing.assert_array_equal(roll.group_ids, np.where(hung, P, np.repeat(np.arange(P), G)))
  scores = np.asarray([len(t) % 5 for t in texts], np.float64)
  want = grpo_oracle(scores, np.repeat(np.arange(P), G), ~hung)
  for b in range(P * G):
    np.testing.assert_allclose(adv[b][roll.mask[b]], want[b], rtol=1e-5, atol=1e-6)
  assert np.abs(want).max() > 0
  # scoring the lost rows with the fallback (0) instead would have moved the others' advantages
  fallback = np.where(hung, 0.0, scores)
  assert np.abs(grpo_oracle(fallback, np.repeat(np.arange(P), G), np.ones(P * G, bool))
                - want)[~hung].max() > 0.1
