"""The host RL loop on the real tiny task: every recipe runs, resume is exact, failures are counted."""

import dataclasses
import json
import math
import os
import time

import jax
import numpy as np
import pytest
from flax import nnx

from botjax import algorithms, data, models
from botjax.rewards import MathReward, RewardResult, RewardSpec
from botjax.testbeds.arith_judge import ExactArithmeticJudge
from botjax.train import config as C
from botjax.train.checkpoint import ConfigMismatchError, saved_config
from botjax.train import rollouts
from botjax.train.loop import RLTrainer
from botjax.train.rollouts import ListPrompts
from botjax.train.rundir import read_jsonl
from _util import tiny_arith

TASK = data.ArithmeticTask(num_ops=(1, 2), operand_range=(1, 5), ops=("+", "-"), seed=3)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  root = tmp_path_factory.mktemp("loop")
  tok, cfg, train = tiny_arith(root, TASK)
  return {"root": root, "tok": tok, "cfg": cfg, "train": train, "samplers": {}}


def base_config(workdir, recipe="grpo", **kw):
  cfg = C.TrainConfig(
      recipe=recipe, steps=2, seed=0, workdir=str(workdir),
      optim=C.OptimConfig(learning_rate=1e-3),
      rollout=C.RolloutConfig(prompts_per_step=2, group_size=4, max_prompt_tokens=128,
                              max_new_tokens=16, temperature=1.0, engine="jax"),
      reward=C.RewardConfig(workers=2, timeout_s=20.0, kind="thread"),
      checkpoint_every=0, tensorboard=False, progress=False)
  return dataclasses.replace(cfg, **kw)


def make_trainer(env, cfg, reward=None, **kw):
  """A trainer on the tiny model; the module's one compiled sampler unless `engine=` is given
  (None: the trainer builds `cfg.rollout.engine`)."""
  model = models.Decoder(env["cfg"], rngs=nnx.Rngs(0))
  reward = reward or MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5)
  shared = "engine" not in kw
  engine = env["samplers"].get("s") if shared else kw.pop("engine")
  trainer = RLTrainer(
      cfg, model=model, tokenizer=env["tok"], prompts=ListPrompts(env["train"], seed=0),
      reward_fn=reward,
      prompt_fn=lambda r: data.chat_messages(r, data.ARITHMETIC_TEMPLATE),
      engine=engine, **kw)
  if shared:
    env["samplers"].setdefault("s", trainer.engine)   # one compiled sampler for the module
  return trainer


def params_of(trainer):
  return jax.tree.leaves(jax.device_get(trainer.state.params))


# Recipes whose trainer path is another's with a different advantage function (each estimator is
# proven against NumPy loops in tests/test_algorithms.py and tests/test_advantages.py) run with
# -m slow; the default suite keeps one recipe of each trainer path.
_SAME_PATH_AS_ANOTHER = {"dr_grpo", "rloo", "bot_gspo", "bot_dapo", "bot_pure", "process_grpo",
                         "grpo_stepmean", "bot_grpo_token", "bot_grpo_row"}


@pytest.mark.parametrize("recipe", [
    pytest.param(r, marks=pytest.mark.slow) if r in _SAME_PATH_AS_ANOTHER else r
    for r in sorted(algorithms.RECIPES)])
def test_every_recipe_runs_two_steps(env, tmp_path, recipe):
  overrides = (("agg_norm", 16.0),) if recipe == "dr_grpo" else ()
  if recipe == "dapo":
    overrides = (("overlong_max_length", 16), ("overlong_cache_length", 4),
                 ("max_resample_rounds", 2))
  extra = {}
  if recipe == "gspo":    # several off-policy mini-batches per rollout batch: clipping acts
    extra = {"mini_batches": 2, "ppo_epochs": 2}
  if recipe == "dapo":    # gradient accumulation inside the loop
    extra = {"micro_batch_size": 4}
  cfg = base_config(tmp_path, recipe, recipe_overrides=overrides, **extra)
  trainer = make_trainer(env, cfg)
  before = params_of(trainer)
  try:
    records = trainer.run()
  finally:
    trainer.close()
  assert [r["step"] for r in records] == [1, 2]
  for r in records:
    for k in ("loss", "grad_norm", "reward_mean", "entropy", "adv_std", "generate_s"):
      assert math.isfinite(r[k]), (k, r[k])
    assert r["reward_failures"] == 0
  if recipe == "dapo":
    assert all(r["sample_rounds"] >= 1 for r in records)
  if recipe == "gspo":
    assert all(0.0 <= r["clip_fraction"] <= 1.0 for r in records)
  after = params_of(trainer)
  moved = any(not np.array_equal(a, b) for a, b in zip(before, after))
  saw_signal = any(r["adv_abs_max"] > 0 for r in records)
  if saw_signal:
    assert moved
  elif trainer.recipe.kl_coef == 0:
    # Constant groups give zero advantages and no KL term: the parameters must not move.
    # (With a KL term, Adam rescales its round-off-sized gradient, so they may.)
    assert not moved
  lines = read_jsonl(os.path.join(tmp_path, "metrics.jsonl"))
  assert len(lines) == 2


def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(env, tmp_path):
  full = make_trainer(env, base_config(tmp_path / "full", steps=4, checkpoint_every=2))
  try:
    full_records = full.run()
  finally:
    full.close()
  part = make_trainer(env, base_config(tmp_path / "part", steps=2, checkpoint_every=2))
  try:
    part.run()
  finally:
    part.close()
  # a crash after step 3 was logged but before its checkpoint: the record is written again
  with open(tmp_path / "part" / "metrics.jsonl", "a") as f:
    f.write(json.dumps({"step": 3, "reward_mean": 123.0}) + "\n")
  resumed = make_trainer(env, base_config(tmp_path / "part", steps=4, checkpoint_every=2))
  assert resumed.resumed_from == 2 and resumed.position == 4
  try:
    resumed_records = resumed.run()
  finally:
    resumed.close()
  for a, b in zip(params_of(full), params_of(resumed)):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(full_records[2:], resumed_records):
    assert a["reward_mean"] == b["reward_mean"] and a["loss"] == b["loss"]
  logged = read_jsonl(os.path.join(tmp_path / "part", "metrics.jsonl"))
  assert [r["step"] for r in logged] == [1, 2, 3, 4] and logged[2]["reward_mean"] != 123.0
  # a run that starts over (no checkpoint) moves the old metrics aside instead of mixing them in
  fresh = tmp_path / "fresh"
  fresh.mkdir()
  (fresh / "metrics.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(4)))
  again = make_trainer(env, base_config(fresh, steps=1))
  try:
    again.run()
  finally:
    again.close()
  assert [r["step"] for r in read_jsonl(os.path.join(fresh, "metrics.jsonl"))] == [1]
  old = [n for n in os.listdir(fresh) if n.endswith(".old")]
  assert len(old) == 1 and len(read_jsonl(os.path.join(fresh, old[0]))) == 4


def test_resume_on_the_slot_engine_reproduces_the_uninterrupted_run_bit_for_bit(env, tmp_path):
  """The same on the slot engine with two lanes (2 slots each, so every call refills): a call
  deals its prompts to the lanes, so a resumed run samples what the uninterrupted one did."""
  def cfg(workdir, steps):
    c = base_config(workdir, steps=steps, checkpoint_every=2)
    return dataclasses.replace(c, rollout=dataclasses.replace(
        c.rollout, engine="slots", engine_options=(("num_slots", 4), ("lanes", 2))))

  runs = {}
  for name, workdir, steps in (("full", "full", 4), ("part", "part", 2), ("resumed", "part", 4)):
    trainer = make_trainer(env, cfg(tmp_path / workdir, steps), engine=None)
    try:
      assert type(trainer.engine).__name__ == "SlotEngine" and len(trainer.engine.lanes) == 2
      runs[name] = (trainer.run(), trainer.resumed_from, params_of(trainer))
    finally:
      trainer.close()
  (full, _, full_params), (resumed, start, resumed_params) = runs["full"], runs["resumed"]
  assert start == 2 and len(resumed) == 2
  for a, b in zip(full_params, resumed_params):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(full[2:], resumed):
    assert (a["reward_mean"], a["loss"], a["response_length"]) == (
        b["reward_mean"], b["loss"], b["response_length"])


def test_resume_refuses_a_changed_config(env, tmp_path):
  t = make_trainer(env, base_config(tmp_path, steps=1, checkpoint_every=1))
  try:
    t.run()
  finally:
    t.close()
  changed = base_config(tmp_path, steps=3, checkpoint_every=1,
                        optim=C.OptimConfig(learning_rate=5e-3))
  with pytest.raises(ConfigMismatchError, match=r"optim\.learning_rate"):
    make_trainer(env, changed)


def _engine_run(env, workdir, engine, run_config=None):
  """A trainer of a 256-token budget (where "auto" is the slot engine on this host), its engine
  built, not run; `save()` leaves a checkpoint with the run config."""
  cfg = base_config(workdir, steps=1, checkpoint_every=1,
                    rollout=C.RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=256,
                                            max_prompt_tokens=128, engine=engine))
  return make_trainer(env, cfg, engine=None, run_config=run_config)


def test_auto_engine_is_chosen_once_saved_and_kept_on_resume(env, tmp_path, monkeypatch):
  """"auto" resolves to the slot engine for a new long-budget run on this host and the saved
  config names it; a resumed run keeps the engine it was saved with ("jax", or no field at all
  for a run saved before it existed), while naming another engine still refuses to resume."""
  from botjax import xla_cpu
  from botjax.sampling import Sampler, SlotEngine
  monkeypatch.setenv(xla_cpu.ENV_VAR, "auto")
  monkeypatch.setattr(xla_cpu.os, "cpu_count", lambda: 2)
  assert C.RolloutConfig().engine == "auto"

  def saved_then_resumed(workdir, engine, run_config=None):
    t = _engine_run(env, workdir, engine, run_config)
    chosen = t.cfg.rollout.engine
    try:
      t.save()
    finally:
      t.close()
    again = _engine_run(env, workdir, "auto")
    try:
      return chosen, again.cfg.rollout.engine, type(again.engine), again.run_config
    finally:
      again.close()

  new, resumed, kind, run_config = saved_then_resumed(tmp_path / "new", "auto")
  assert new == resumed == "slots" and kind is SlotEngine
  assert run_config["rollout"]["engine"] == "slots"
  saved = saved_config(str(tmp_path / "new" / "checkpoints"))
  assert saved["rollout"]["engine"] == "slots"
  _, resumed, kind, _ = saved_then_resumed(tmp_path / "jax", "jax")
  assert resumed == "jax" and kind is Sampler
  old_cfg = base_config(tmp_path / "old", steps=1, checkpoint_every=1,
                        rollout=C.RolloutConfig(prompts_per_step=2, group_size=4,
                                                max_new_tokens=256, max_prompt_tokens=128,
                                                engine="jax"))
  old = C.to_dict(old_cfg)
  del old["rollout"]["engine"], old["rollout"]["resample_in_queue"]   # saved before they existed
  _, resumed, kind, _ = saved_then_resumed(tmp_path / "old", "jax", run_config=old)
  assert resumed == "jax" and kind is Sampler
  with pytest.raises(ConfigMismatchError, match=r"rollout\.engine: saved='slots' now='jax'"):
    _engine_run(env, tmp_path / "new", "jax")


class Flaky:
  """Scores like the math reward, but raises, returns NaN or hangs on chosen rows."""

  def __init__(self):
    self.inner = MathReward(None)

  def __call__(self, prompts, completions, metadata):
    out = []
    for p, c, m in zip(prompts, completions, metadata):
      kind = m["_row"] % 4
      if kind == 1:
        raise RuntimeError("reward server exploded")
      if kind == 2:
        out.append(RewardResult(reward=float("nan")))
        continue
      if kind == 3 and m["_step"] == 0:
        time.sleep(3.0)
      out.append(self.inner([p], [c], [m])[0])
    return out


def test_failing_rewards_are_counted_and_the_run_goes_on(env, tmp_path):
  cfg = base_config(tmp_path, steps=2, reward=C.RewardConfig(workers=4, timeout_s=1.0,
                                                             kind="thread"))
  t = make_trainer(env, cfg, reward=Flaky())
  try:
    records = t.run()
  finally:
    t.close()
  # 8 rows per step: rows 1, 5 raise, 2, 6 are NaN, 3, 7 hang past the timeout on step 0.
  assert records[0]["reward_failures"] == 6 and records[0]["reward_timeouts"] == 2
  assert records[1]["reward_failures"] == 4 and records[1]["reward_timeouts"] == 0
  # none of them is the model's fault: kept out of the loss and counted
  assert records[0]["rollouts/infra_failures"] == 6 and records[1]["rollouts/infra_failures"] == 4
  assert all(math.isfinite(r["loss"]) for r in records)


def test_config_diff_of_a_run_saved_before_a_field_existed():
  """A field added since a run was saved is no difference at its unset value (None), and one
  when it is set: the run's parameters were laid out without it."""
  now = C.to_dict(C.TrainConfig(workdir="w"))
  saved = json.loads(json.dumps(now))
  del saved["scan_layers"], saved["remat"]
  assert now["scan_layers"] is None and C.config_diff(saved, now) == []
  on = C.to_dict(C.TrainConfig(workdir="w", scan_layers=True))
  assert C.config_diff(saved, on) == ["scan_layers: saved='<absent>' now=True"]
  saved["optim"]["learning_rate"] = 1.0
  assert C.config_diff(saved, now, ignore=frozenset()) == [
      f"optim.learning_rate: saved=1.0 now={now['optim']['learning_rate']!r}"]


def test_wrong_reward_granularity_is_a_configuration_error(env, tmp_path):
  with pytest.raises(ValueError, match="token-level"):
    make_trainer(env, base_config(tmp_path, "bot_grpo"), reward=MathReward(None))


class LengthReward:
  """Accuracy (component "answer") and reward from the completion's length, chosen per test."""

  spec = RewardSpec(verifier="answer")

  def __init__(self, accuracy, reward):
    self.accuracy, self.reward = accuracy, reward

  def __call__(self, prompts, completions, metadata):
    return [RewardResult(self.reward(c), components={"answer": self.accuracy(c)})
            for c in completions]


def _dapo(tmp_path):
  return base_config(tmp_path, "dapo", recipe_overrides=(
      ("overlong_max_length", 16), ("overlong_cache_length", 4), ("max_resample_rounds", 2)))


def test_dapo_dynamic_sampling_filters_on_accuracy_not_on_the_reward(env, tmp_path):
  """DAPO (arXiv 2503.14476) eq. 11 keeps groups with 0 < #correct < G: the verifier signal,
  not the full reward (which adds a format term)."""
  P, G = 2, 4
  key = jax.random.fold_in(jax.random.PRNGKey(0), 0)
  # constant accuracy (all wrong), a reward that varies with the length: every group is dropped
  t = make_trainer(env, _dapo(tmp_path / "a"), reward=LengthReward(
      accuracy=lambda c: 0.0, reward=lambda c: 0.1 * len(c)))
  try:
    c = t.collector
    first = c.sample_and_score([c.prompts.get(i) for i in range(P)], jax.random.fold_in(key, 0),
                               step=0)
    roll, info = c.collect(key, 0)
  finally:
    t.close()
  assert rollouts.varying_groups(first.rewards, ~first.infra, P, G).any()   # the reward varies
  assert info["sample_rounds"] == 3 and info["dynamic_sampling_short"] == P
  assert info["constant_groups"] == 1.0 and not roll.mask.any()
  # varying accuracy (parity of the length), a constant reward: groups are kept on accuracy
  t = make_trainer(env, _dapo(tmp_path / "b"), reward=LengthReward(
      accuracy=lambda c: float(len(c) % 2), reward=lambda c: 1.0))
  try:
    roll, info = t.collector.collect(key, 0)
  finally:
    t.close()
  kept = roll.mask.any(axis=1).reshape(P, G).any(axis=1)
  assert kept.any() and np.all(roll.rewards[roll.mask.any(axis=1)] == 1.0)
  acc = roll.verifier.reshape(P, G)
  for g in np.flatnonzero(kept):
    assert acc[g].min() < acc[g].max()


class ThirdCandidatesVary:
  """Accuracy: the completion's length parity (varying) for the groups of candidate index
  c = `_row` // G (the same on both paths) with c % 3 == 1, else 0 (constant, so resampled):
  groups 1 and 4 are kept, 5 prompts are sampled in the queue and 3 rounds of 2 without."""

  spec = RewardSpec(verifier="answer")

  def __init__(self, group_size):
    self.G = group_size

  def __call__(self, prompts, completions, metadata):
    return [RewardResult(1.0, components={"answer": float(len(c) % 2) if (
        m["_row"] // self.G) % 3 == 1 else 0.0}) for c, m in zip(completions, metadata)]


def test_dapo_resamples_in_the_slot_engines_queue_keeping_the_rounds_groups(env, tmp_path):
  """With the slot engine, DAPO's extra groups join the engine's queue one constant group at a
  time: the kept groups (tokens, log-probs, rewards) are those of the rounds path, on the slot
  engine and on the lockstep sampler, with fewer prompts sampled, and the position moves past
  the sampled prompts only."""
  P, G, R = 2, 4, 4
  key = jax.random.fold_in(jax.random.PRNGKey(0), 0)
  dapo = base_config(tmp_path, "dapo", recipe_overrides=(
      ("overlong_max_length", 16), ("overlong_cache_length", 4), ("max_resample_rounds", R)))
  slots = dataclasses.replace(dapo, rollout=dataclasses.replace(
      dapo.rollout, engine="slots", engine_options=(("num_slots", 4),)))
  got = {}
  first = make_trainer(env, dataclasses.replace(slots, workdir=str(tmp_path / "queue")),
                       reward=ThirdCandidatesVary(G), engine=None)
  engine = first.engine
  runs = [("queue", first),
          ("slot_rounds", make_trainer(env, dataclasses.replace(
              slots, workdir=str(tmp_path / "r1"), rollout=dataclasses.replace(
                  slots.rollout, resample_in_queue=False)), reward=ThirdCandidatesVary(G),
              engine=engine)),
          ("lockstep_rounds", make_trainer(env, dataclasses.replace(
              dapo, workdir=str(tmp_path / "r2"), rollout=dataclasses.replace(
                  dapo.rollout, engine="jax")), reward=ThirdCandidatesVary(G)))]
  try:
    for name, t in runs:
      assert t.collector.in_queue == (name == "queue")
      roll, info = t.collector.collect(key, 0)
      got[name] = (roll, info, t.collector.position)
    records = first.run()          # the queue's rollouts through the update
  finally:
    for _, t in runs:
      t.close()
  q_roll, q_info, q_pos = got["queue"]
  assert type(engine).__name__ == "SlotEngine"
  assert [r["step"] for r in records] == [1, 2]
  assert all(math.isfinite(r["loss"]) and r["sampled_groups"] >= P for r in records)
  assert q_info["sampled_groups"] == 5 and q_info["sample_rounds"] == 3
  assert q_info.get("dynamic_sampling_short", 0) == 0 and q_roll.mask.any(axis=1).all()
  for name in ("slot_rounds", "lockstep_rounds"):
    roll, info, pos = got[name]
    assert pos == info["sample_rounds"] * P and q_pos == q_info["sampled_groups"]
    assert info["sample_rounds"] == q_info["sample_rounds"]
    assert q_info["sampled_groups"] < info["sample_rounds"] * P
    assert info["constant_groups"] == q_info["constant_groups"]
    for b in range(P * G):
      n = int(roll.lengths[b])
      assert int(q_roll.lengths[b]) == n, (name, b)
      np.testing.assert_array_equal(q_roll.tokens[b, :n], roll.tokens[b, :n], err_msg=name)
      np.testing.assert_allclose(q_roll.logp[b, :n], roll.logp[b, :n], rtol=1e-5, atol=1e-5)
      assert q_roll.completions[b] == roll.completions[b]
    np.testing.assert_array_equal(q_roll.verifier, roll.verifier)
    np.testing.assert_array_equal(q_roll.group_ids, roll.group_ids)


def test_console_prints_one_line_unless_verbose(env, tmp_path, capsys):
  for verbose in (False, True):
    t = make_trainer(env, base_config(tmp_path / str(verbose), steps=1, progress=True,
                                      verbose=verbose))
    try:
      t.run()
    finally:
      t.close()
    out = capsys.readouterr().out.splitlines()
    start = [line for line in out if line.startswith("[botjax] grpo on ")]
    assert len(start) == 1 and str(tmp_path / str(verbose)) in start[0], out
    assert any(line.startswith("[botjax] done: 1 steps") for line in out), out
    assert any("config:" in line for line in out) == verbose
    assert os.path.exists(tmp_path / str(verbose) / "config.json")


def test_set_overrides_and_errors():
  cfg = C.apply_overrides(C.TrainConfig(), ["optim.learning_rate=3e-4", "rollout.group_size=4",
                                            "recipe.kl_coef=0.001", "tensorboard=false"])
  assert cfg.optim.learning_rate == 3e-4 and cfg.rollout.group_size == 4
  assert dict(cfg.recipe_overrides) == {"kl_coef": 0.001} and cfg.tensorboard is False
  with pytest.raises(ValueError, match="unknown field 'lr'"):
    C.apply_overrides(cfg, ["optim.lr=1"])
  with pytest.raises(ValueError, match="expected int"):
    C.apply_overrides(cfg, ["steps=ten"])
  with pytest.raises(ValueError, match="unknown recipe field"):
    C.apply_overrides(cfg, ["recipe.nope=1"])


def test_host_threads_give_the_same_update(env, tmp_path):
  """A mini-batch's update split over 2 host threads equals the single-program update."""
  params = {}
  for threads in (1, 2):
    trainer = make_trainer(env, base_config(tmp_path / str(threads), steps=1,
                                            host_threads=threads))
    try:
      threads_of = trainer.programs.threads
      assert threads_of(8, 1) == threads
      assert threads_of(8, 2) == 1 and threads_of(7, 1) == 1
      records = trainer.run()
    finally:
      trainer.close()
    assert records[0]["adv_abs_max"] > 0          # a real gradient
    params[threads] = params_of(trainer)
  # AdamW's first step moves each weight by about lr = 1e-3 in the sign of its gradient; the
  # two paths agree far within that (gradients near 0 move by lr * g / eps instead)
  for a, b in zip(params[1], params[2]):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=5e-5)
  with pytest.raises(ValueError, match="host_threads must be >= 0"):
    make_trainer(env, base_config(tmp_path / "bad", host_threads=-1))


def _per_layer(params, num_layers):
  """Parameter arrays by per-layer path; stacked (scan_layers) ones split into their layers."""
  out = {}
  for path, var in nnx.to_flat_state(params):
    name = ".".join(map(str, path))
    value = np.asarray(var.get_value() if isinstance(var, nnx.Variable) else var)
    if name.startswith("layers.") and not name.split(".")[1].isdigit():
      out.update({f"layers.{i}.{name[7:]}": value[i] for i in range(num_layers)})
    else:
      out[name] = value
  return out


# ~20 s; the scanned model equals the unrolled one (forward, gradient, prefill, decode, shared
# prefix) in tests/models/test_models_scan.py; this runs it through the trainer
@pytest.mark.slow
def test_scanned_layers_train_like_unrolled(env, tmp_path):
  """A `Decoder(scan_layers=True)` runs the loop (sampler, update, checkpoint) and takes the
  unrolled decoder's step; `TrainConfig.scan_layers` must agree with the model it is given."""
  reward = MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5)
  kw = dict(tokenizer=env["tok"], reward_fn=reward,
            prompt_fn=lambda r: data.chat_messages(r, data.ARITHMETIC_TEMPLATE))
  runs = []
  for scan in (False, True):
    cfg = base_config(tmp_path / f"scan_{scan}", steps=1, checkpoint_every=1, scan_layers=scan)
    model = models.Decoder(env["cfg"], rngs=nnx.Rngs(0), scan_layers=scan)
    trainer = RLTrainer(cfg, model=model, prompts=ListPrompts(env["train"], seed=0), **kw)
    try:
      records = trainer.run()
    finally:
      trainer.close()
    runs.append((records[0], _per_layer(jax.device_get(trainer.state.params),
                                        env["cfg"].num_layers)))
  (ra, pa), (rb, pb) = runs
  assert math.isfinite(rb["loss"]) and rb["reward_mean"] == ra["reward_mean"]
  np.testing.assert_allclose(rb["loss"], ra["loss"], rtol=1e-4, atol=1e-6)
  assert sorted(pa) == sorted(pb)
  for name in pa:
    np.testing.assert_allclose(pb[name], pa[name], atol=1e-5, err_msg=name)
  with pytest.raises(ValueError, match=r"TrainConfig.scan_layers=True, but the model was built "
                                       r"with scan_layers=False"):
    RLTrainer(base_config(tmp_path / "mismatch", scan_layers=True),
              model=models.Decoder(env["cfg"], rngs=nnx.Rngs(0)),
              prompts=ListPrompts(env["train"], seed=0), **kw)
