"""The jitted update: loss goes down, micro-batching is exact, non-finite updates are skipped."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings, strategies as st

from botjax import algorithms, losses
from botjax import models
from botjax.models import logprobs as logprobs_lib
from botjax.train import step as step_lib
from botjax.train.config import OptimConfig

B, LP, T = 8, 6, 10


@pytest.fixture(scope="module")
def model():
  cfg = dataclasses.replace(models.get_config("tiny"), vocab_size=64, num_layers=2,
                            hidden_size=32, head_dim=8, intermediate_size=64)
  return models.Decoder(cfg, rngs=nnx.Rngs(0))


def make_batch(model, seed=0, adv_scale=1.0):
  rng = np.random.default_rng(seed)
  v = model.config.vocab_size
  plen = rng.integers(2, LP + 1, size=B)
  clen = rng.integers(0, T + 1, size=B)
  clen[0] = 0                                  # an empty completion
  ids = np.zeros((B, LP + T), np.int32)
  attn = np.zeros((B, LP + T), bool)
  for b in range(B):
    ids[b, LP - plen[b]:LP] = rng.integers(3, v, plen[b])
    ids[b, LP:LP + clen[b]] = rng.integers(3, v, clen[b])
    attn[b, LP - plen[b]:LP + clen[b]] = True
  adv = np.where(attn[:, LP:], rng.normal(size=(B, T)) * adv_scale, 0.0).astype(np.float32)
  return _rl_batch(model, ids, attn, adv)


def _rl_batch(model, ids, attn, adv):
  """An on-policy RLBatch for prompt + completion rows (old_logp from the model itself)."""
  pos = np.maximum(np.cumsum(attn, 1) - 1, 0).astype(np.int32)
  mask = attn[:, LP:]
  graphdef, params, rest = step_lib.split_model(model)
  logp, _ = step_lib.split_logprobs(graphdef, params, rest, ids, pos, attn, completion_len=T)
  return step_lib.RLBatch(
      input_ids=jnp.asarray(ids), positions=jnp.asarray(pos), attention_mask=jnp.asarray(attn),
      old_logp=jnp.where(mask, logp, 0.0), ref_logp=jnp.where(mask, logp - 0.1, 0.0),
      advantages=jnp.asarray(adv), loss_mask=jnp.asarray(mask),
      seq_weights=jnp.ones((ids.shape[0],), jnp.float32))


def loss_of(graphdef, rest, params, batch, recipe):
  logp, _ = step_lib.split_logprobs(graphdef, params, rest, batch.input_ids, batch.positions,
                                         batch.attention_mask, completion_len=T)
  per_tok, _ = algorithms.policy_loss(recipe, logp, batch.old_logp, batch.advantages,
                                      batch.loss_mask, ref_logp=batch.ref_logp,
                                      seq_weights=batch.seq_weights)
  num, den = losses.aggregate(per_tok, batch.loss_mask, mode=recipe.agg_mode, norm=recipe.agg_norm)
  return float(num / den)


def test_split_logprobs_match_model_logits(model):
  batch = make_batch(model)
  graphdef, params, rest = step_lib.split_model(model)
  logits, _ = model(batch.input_ids, batch.positions, attention_mask=batch.attention_mask)
  full = jax.nn.log_softmax(logits / 0.7, axis=-1)
  want = jnp.take_along_axis(full[:, LP - 1:-1], batch.input_ids[:, LP:, None], axis=-1)[..., 0]
  for chunk in (3, 4, 128):
    got, ent = step_lib.split_logprobs(graphdef, params, rest, batch.input_ids,
                                            batch.positions, batch.attention_mask,
                                            completion_len=T, temperature=0.7, chunk=chunk)
    np.testing.assert_allclose(got, want, atol=1e-5)
    p = jnp.exp(full[:, LP - 1:-1])
    np.testing.assert_allclose(ent, -jnp.sum(p * full[:, LP - 1:-1], -1), atol=1e-4)


def test_one_update_lowers_the_batch_loss_and_changes_params(model):
  batch = make_batch(model)
  recipe = algorithms.get_recipe("grpo")
  graphdef, params, rest = step_lib.split_model(model)
  opt = step_lib.make_optimizer(OptimConfig(learning_rate=1e-2), 10)
  state = step_lib.init_state(params, opt, 0)
  before = loss_of(graphdef, rest, params, batch, recipe)
  fn = step_lib.make_update_fn(graphdef, rest, recipe, opt, donate=False)
  out = fn(state, batch)
  after = loss_of(graphdef, rest, out.state.params, batch, recipe)
  assert after < before - 1e-4, (before, after)
  assert float(out.metrics["skipped"]) == 0.0
  assert int(out.state.step) == 1
  diffs = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), params, out.state.params)
  assert max(jax.tree.leaves(diffs)) > 0
  np.testing.assert_allclose(float(out.metrics["loss"]), before, rtol=1e-5)


@pytest.mark.parametrize("name,overrides", [
    ("grpo", {}),                                                   # seq_mean_token_mean + KL
    ("dapo", {}),                                                   # token_mean
    ("dr_grpo", {"agg_norm": 10.0}),                                # seq_sum_norm
    ("grpo", {"agg_mode": "seq_mean_token_sum"}),
    ("gspo", {}),
    ("reco", {}),
])
def test_micro_batched_update_equals_whole_batch(model, name, overrides):
  batch = make_batch(model, seed=1)
  recipe = algorithms.get_recipe(name, **overrides)
  graphdef, params, rest = step_lib.split_model(model)
  opt = optax.sgd(1.0)  # params move by exactly -grad: compares the accumulated gradients
  state = step_lib.init_state(params, opt, 0)
  whole = step_lib.make_update_fn(graphdef, rest, recipe, opt, num_micro=1, donate=False)(state, batch)
  micro = step_lib.make_update_fn(graphdef, rest, recipe, opt, num_micro=4, donate=False)(state, batch)
  np.testing.assert_allclose(float(micro.metrics["loss"]), float(whole.metrics["loss"]), rtol=1e-5,
                             atol=1e-7)
  np.testing.assert_allclose(float(micro.metrics["grad_norm"]),
                             float(whole.metrics["grad_norm"]), rtol=1e-4)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               micro.state.params, whole.state.params)


def test_non_finite_loss_skips_the_update(model):
  batch = make_batch(model)
  batch = dataclasses.replace(batch, advantages=batch.advantages.at[1, 0].set(jnp.nan))
  recipe = algorithms.get_recipe("grpo")
  graphdef, params, rest = step_lib.split_model(model)
  opt = step_lib.make_optimizer(OptimConfig(learning_rate=1e-2), 10)
  state = step_lib.init_state(params, opt, 0)
  out = step_lib.make_update_fn(graphdef, rest, recipe, opt, donate=False)(state, batch)
  assert float(out.metrics["skipped"]) == 1.0
  assert int(out.state.step) == 0
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), out.state.params, params)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), out.state.opt_state,
               state.opt_state)


def test_optimizer_schedule_rejects_unknown_name():
  with pytest.raises(ValueError, match="cosine"):
    step_lib.make_optimizer(OptimConfig(schedule="linear"), 10)
  sched_opt = step_lib.make_optimizer(OptimConfig(learning_rate=1.0, warmup_steps=4), 10)
  params = {"w": jnp.zeros(())}
  st = sched_opt.init(params)
  upd, _ = sched_opt.update({"w": jnp.ones(())}, st, params)
  # first warm-up step: lr = 0 -> no movement
  assert float(upd["w"]) == 0.0
  assert isinstance(sched_opt, optax.GradientTransformation)


def test_evaluate_reports_pass_at_k_and_majority(tmp_path):
  from botjax import data
  from botjax.sampling import Sampler, SamplingConfig
  from botjax.train.evaluate import evaluate
  task = data.ArithmeticTask(num_ops=(1, 1), operand_range=(1, 3), ops=("+",), seed=1)
  tok = data.build_tokenizer(str(tmp_path / "tok"), task, vocab_size=280, num_problems=50)
  cfg = dataclasses.replace(models.get_config("tiny"), vocab_size=len(tok), num_layers=1,
                            hidden_size=32, head_dim=8, intermediate_size=64,
                            eos_token_id=(tok.eos_token_id,), pad_token_id=tok.pad_token_id)
  model = models.Decoder(cfg, rngs=nnx.Rngs(0))
  sampler = Sampler(model, cfg, SamplingConfig(max_new_tokens=8, eos_token_ids=(tok.eos_token_id,),
                                               pad_token_id=tok.pad_token_id))
  records = task.problems(3)
  seen = []

  def correct_fn(text, rec):  # every other completion counts as correct
    seen.append(text)
    return len(seen) % 2 == 0

  out = evaluate(sampler, tok, records, correct_fn=correct_fn, n=4, ks=(1, 2, 4),
                 answer_fn=lambda text: "x", answer_equal=lambda a, b: b == records[0]["answer"])
  assert len(seen) == 12 and out["num_problems"] == 3
  assert out["accuracy"] == 0.5 and out["pass@1"] == 0.5
  assert out["pass@4"] == 1.0 and 0.5 < out["pass@2"] < 1.0
  assert out["maj@4"] == 1 / 3      # the constant answer matches only the first problem


def test_trimming_padding_columns_keeps_every_completion_logprob(model):
  # The loop drops all-padding columns (leading prompt, trailing completion) before the update;
  # the completions' log-probs must not change.
  from botjax.train.rollouts import Rollouts, trim_columns
  rng = np.random.default_rng(3)
  v = model.config.vocab_size
  lp, t = 16, 24
  plen = np.array([5, 3, 1, 4])
  clen = np.array([7, 10, 0, 2])
  n = len(plen)
  prompt_ids = np.zeros((n, lp), np.int32)
  prompt_mask = np.zeros((n, lp), bool)
  tokens = np.zeros((n, t), np.int32)
  mask = np.zeros((n, t), bool)
  for b in range(n):
    prompt_ids[b, lp - plen[b]:] = rng.integers(3, v, plen[b])
    prompt_mask[b, lp - plen[b]:] = True
    tokens[b, :clen[b]] = rng.integers(3, v, clen[b])
    mask[b, :clen[b]] = True
  z = np.zeros((n, t), np.float32)
  roll = Rollouts(prompt_ids=prompt_ids, prompt_mask=prompt_mask, tokens=tokens, mask=mask,
                  logp=z, lengths=clen, finish=np.zeros(n, np.int32), rewards=np.zeros(n),
                  local=z, verifier=None, step_rewards=None, step_mask=None, token_step=None,
                  group_ids=np.zeros(n, np.int32), results=[], completions=[])
  cut = trim_columns(roll, 8, 4)
  assert cut.prompt_ids.shape == (n, 8) and cut.tokens.shape == (n, 16)   # 5 -> 8, 10 -> 16
  assert trim_columns(roll, 8, 16).prompt_ids.shape == (n, 16)          # never widened
  graphdef, params, rest = step_lib.split_model(model)

  def logp_of(r):
    ids = np.concatenate([r.prompt_ids, r.tokens], 1)
    attn = np.concatenate([r.prompt_mask, r.mask], 1)
    pos = np.maximum(np.cumsum(attn, 1) - 1, 0).astype(np.int32)
    out, _ = step_lib.split_logprobs(graphdef, params, rest, ids, pos, attn,
                                          completion_len=r.tokens.shape[1])
    return np.asarray(out)

  full, trimmed = logp_of(roll), logp_of(cut)
  np.testing.assert_allclose(trimmed[cut.mask], full[:, :16][cut.mask], atol=2e-6)
  assert cut.mask.sum() == mask.sum()


# -- prompts shared by the rows of a group --------------------------------------------------

def make_grouped_batch(model, groups, seed=0):
  """An RLBatch whose rows continue len(set(groups)) prompts: row b holds prompt groups[b]."""
  rng = np.random.default_rng(seed)
  v = model.config.vocab_size
  groups = np.asarray(groups)
  n = groups.max() + 1
  plen = rng.integers(1, LP + 1, size=n)
  prompts = [rng.integers(3, v, plen[g]) for g in range(n)]
  clen = rng.integers(0, T + 1, size=len(groups))
  ids = np.zeros((len(groups), LP + T), np.int32)
  attn = np.zeros((len(groups), LP + T), bool)
  for b, g in enumerate(groups):
    ids[b, LP - plen[g]:LP] = prompts[g]
    ids[b, LP:LP + clen[b]] = rng.integers(3, v, clen[b])
    attn[b, LP - plen[g]:LP + clen[b]] = True
  adv = np.where(attn[:, LP:], rng.normal(size=(len(groups), T)), 0.0).astype(np.float32)
  return _rl_batch(model, ids, attn, adv)


def test_group_prompts_numbers_distinct_prompts_in_order_of_first_row():
  ids = np.array([[0, 5, 6], [0, 7, 8], [0, 5, 6], [9, 5, 6], [0, 7, 8]], np.int32)
  mask = ids > 0
  pos = np.maximum(np.cumsum(mask, 1) - 1, 0).astype(np.int32)
  ids[1, 0] = 4                  # a different id under padding does not make a new prompt
  rows, first = jax.jit(logprobs_lib.group_prompts, static_argnums=3)(ids, pos, mask, 4)
  np.testing.assert_array_equal(rows, [0, 1, 0, 2, 1])
  np.testing.assert_array_equal(first[:3], [0, 1, 3])
  assert first.shape == (4,)     # a spare slot (filled with row 0)
  # same ids and mask but other positions: another prompt
  pos2 = pos.copy()
  pos2[2] += 1
  rows, _ = logprobs_lib.group_prompts(ids, pos2, mask, 4)
  np.testing.assert_array_equal(rows, [0, 1, 2, 3, 1])


def test_prompt_slots_bounds_every_slice_and_stays_off_when_sharing_does_not_pay():
  ids = np.repeat(np.arange(1, 5, dtype=np.int32)[:, None], 8, axis=0) * np.ones((1, 3), np.int32)
  mask = np.ones_like(ids, bool)
  pos = np.tile(np.arange(3, dtype=np.int32), (32, 1))
  assert step_lib.prompt_slots(ids, pos, mask, 32) == 4              # 4 prompts x 8 rows
  assert step_lib.prompt_slots(ids, pos, mask, 8) == 4               # any 8 rows: <= 4 prompts
  assert step_lib.prompt_slots(ids, pos, mask, 6) == 0               # 4 prompt rows for 6: off
  assert step_lib.prompt_slots(ids, pos, mask, 32, at_least=6) == 6  # a stable U across steps
  assert step_lib.prompt_slots(ids[:, :0], pos[:, :0], mask[:, :0], 32) == 0


@pytest.mark.parametrize("num_prompts", [3, 5])
def test_shared_prompt_logprobs_equal_unshared(model, num_prompts):
  batch = make_grouped_batch(model, [2, 0, 1, 0, 2, 2, 1, 0])
  graphdef, params, rest = step_lib.split_model(model)
  args = (graphdef, params, rest, batch.input_ids, batch.positions, batch.attention_mask)
  want, want_ent = step_lib.split_logprobs(*args, completion_len=T, chunk=4)
  got, ent = jax.jit(lambda p: step_lib.split_logprobs(
      graphdef, p, rest, *args[3:], completion_len=T, chunk=4, num_prompts=num_prompts))(params)
  m = np.asarray(batch.loss_mask)
  assert m.sum() > 20
  np.testing.assert_allclose(np.asarray(got)[m], np.asarray(want)[m], atol=1e-5)
  np.testing.assert_allclose(np.asarray(ent)[m], np.asarray(want_ent)[m], atol=1e-5)


@pytest.mark.parametrize("num_micro", [1, 2])
def test_update_with_shared_prompts_equals_unshared(model, num_micro):
  batch = make_grouped_batch(model, [2, 0, 1, 0, 2, 2, 1, 0], seed=4)
  recipe = algorithms.get_recipe("grpo")
  graphdef, params, rest = step_lib.split_model(model)
  opt = optax.sgd(1.0)  # params move by exactly -grad: compares the gradients
  state = step_lib.init_state(params, opt, 0)
  plain = step_lib.make_update_fn(graphdef, rest, recipe, opt, donate=False)(state, batch)
  shared = step_lib.make_update_fn(graphdef, rest, recipe, opt, num_micro=num_micro,
                                   num_prompts=3, donate=False)(state, batch)
  np.testing.assert_allclose(float(shared.metrics["loss"]), float(plain.metrics["loss"]),
                             rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(float(shared.metrics["grad_norm"]),
                             float(plain.metrics["grad_norm"]), rtol=1e-4)
  assert float(plain.metrics["grad_norm"]) > 1e-3
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               shared.state.params, plain.state.params)


_SHARED_LOGP = {}


@settings(max_examples=12, deadline=None)
@given(groups=st.lists(st.integers(0, 3), min_size=8, max_size=8), seed=st.integers(0, 2**16))
def test_shared_prompts_property_any_grouping_and_row_order(model, groups, seed):
  """Any assignment of 8 rows to up to 4 prompts, in any order: sharing changes no log-prob."""
  groups = np.unique(groups, return_inverse=True)[1]       # prompts numbered 0..n-1
  batch = make_grouped_batch(model, groups, seed=seed)
  graphdef, params, rest = step_lib.split_model(model)
  if not _SHARED_LOGP:
    for u in (0, 4):
      _SHARED_LOGP[u] = jax.jit(functools.partial(
          step_lib.split_logprobs, graphdef, completion_len=T, num_prompts=u))
  args = (params, rest, batch.input_ids, batch.positions, batch.attention_mask)
  want, got = _SHARED_LOGP[0](*args)[0], _SHARED_LOGP[4](*args)[0]
  m = np.asarray(batch.loss_mask)
  np.testing.assert_allclose(np.asarray(got)[m], np.asarray(want)[m], atol=1e-5)


@pytest.mark.parametrize("parts,num_prompts", [(2, 0), (2, 3), (4, 0)])
def test_parallel_update_equals_micro_batched_update(model, parts, num_prompts):
  """Slices' gradients from host threads, summed: the update of num_micro = parts slices."""
  batch = make_grouped_batch(model, [0, 0, 1, 1, 2, 2, 0, 1], seed=6)
  recipe = algorithms.get_recipe("dapo")          # token_mean: the denominator spans slices
  graphdef, params, rest = step_lib.split_model(model)
  opt = optax.sgd(1.0)  # params move by exactly -grad: compares the summed gradients
  state = step_lib.init_state(params, opt, 0)
  want = step_lib.make_update_fn(graphdef, rest, recipe, opt, num_micro=parts,
                                 donate=False)(state, batch)
  fn = step_lib.ParallelUpdate(graphdef, rest, recipe, opt, parts=parts,
                               num_prompts=num_prompts, donate=False)
  got = fn(state, batch)
  again = fn(state, batch)                        # compiled: all slices in the pool
  for k in want.metrics:
    np.testing.assert_allclose(float(got.metrics[k]), float(want.metrics[k]), rtol=1e-4,
                               atol=1e-7, err_msg=k)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               got.state.params, want.state.params)
  jax.tree.map(np.testing.assert_array_equal, again.state.params, got.state.params)
  assert int(got.state.step) == 1 and float(got.metrics["grad_norm"]) > 1e-3
  with pytest.raises(ValueError, match="not divisible into 3 parts"):
    step_lib.ParallelUpdate(graphdef, rest, recipe, opt, parts=3)(state, batch)


def test_parallel_update_skips_a_non_finite_update(model):
  batch = make_grouped_batch(model, [0, 0, 1, 1], seed=2)
  batch = dataclasses.replace(batch, advantages=batch.advantages.at[3, 0].set(jnp.nan))
  recipe = algorithms.get_recipe("grpo")
  graphdef, params, rest = step_lib.split_model(model)
  opt = step_lib.make_optimizer(OptimConfig(learning_rate=1e-2), 10)
  state = step_lib.init_state(params, opt, 0)
  out = step_lib.ParallelUpdate(graphdef, rest, recipe, opt, parts=2, donate=False)(state, batch)
  assert float(out.metrics["skipped"]) == 1.0 and int(out.state.step) == 0
  jax.tree.map(np.testing.assert_array_equal, out.state.params, params)


def test_split_model_sets_remat_without_changing_the_model(model):
  assert model.remat is False
  graphdef, params, rest = step_lib.split_model(model, remat=True)
  assert nnx.merge(graphdef, params, rest).remat is True and model.remat is False
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), params,
               step_lib.split_model(model)[1])
  same = step_lib.split_model(model, remat=None)[0]
  assert nnx.merge(same, params, rest).remat is False
