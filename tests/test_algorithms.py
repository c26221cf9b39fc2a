"""botjax.algorithms: every recipe end to end under jit, defaults, and configuration errors."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from botjax import advantages as adv
from botjax import algorithms as alg
from botjax import losses

B, T, S, P = 12, 10, 4, 4
GROUP_IDS = np.array([0, 1, 2, 0, 1, 2, 0, 1, 3, 3, 2, 0], np.int32)


def make(seed):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, T + 1, size=B)
  lengths[7] = 0                                            # an empty completion
  mask = np.arange(T)[None, :] < lengths[:, None]
  rewards = rng.integers(0, 2, size=B).astype(np.float32)
  rewards[GROUP_IDS == 3] = 1.0                             # an all-right group
  rewards[GROUP_IDS == 1] = 0.0                             # an all-wrong group
  step_mask = np.arange(S)[None, :] < rng.integers(1, S + 1, size=B)[:, None]
  token_step = np.minimum(np.arange(T)[None, :] * step_mask.sum(-1)[:, None] // T,
                          step_mask.sum(-1)[:, None] - 1).astype(np.int32)
  old = (-rng.exponential(1.0, size=(B, T))).astype(np.float32)
  return dict(
      rewards=rewards, mask=mask, group_ids=GROUP_IDS,
      local_rewards=rng.uniform(-1, 0, size=(B, T)).astype(np.float32),
      step_rewards=rng.uniform(-1, 1, size=(B, S)).astype(np.float32), step_mask=step_mask,
      token_step=token_step, old_logp=old,
      logp=(old + 0.1 * rng.normal(size=(B, T))).astype(np.float32),
      ref_logp=(old + 0.1 * rng.normal(size=(B, T))).astype(np.float32))


@functools.partial(jax.jit, static_argnames=("recipe",))
def run(recipe, d):
  out = alg.compute_advantages(
      recipe, rewards=d["rewards"], mask=d["mask"], group_ids=d["group_ids"], num_groups=P,
      local_rewards=d["local_rewards"], step_rewards=d["step_rewards"],
      step_mask=d["step_mask"], token_step=d["token_step"], old_logp=d["old_logp"])

  def total(logp):
    per_token, metrics = alg.policy_loss(recipe, logp, d["old_logp"], out.advantages,
                                         out.loss_mask, ref_logp=d["ref_logp"],
                                         seq_weights=out.seq_weights)
    num, den = losses.aggregate(per_token, out.loss_mask, mode=recipe.agg_mode,
                                norm=recipe.agg_norm)
    return num / jnp.maximum(den, 1.0), metrics

  (loss, metrics), grad = jax.value_and_grad(total, has_aux=True)(d["logp"])
  return out, loss, metrics, grad


@functools.partial(jax.jit, static_argnames=("recipe",))
def advantages_of(recipe, d):
  return alg.compute_advantages(
      recipe, rewards=d["rewards"], mask=d["mask"], group_ids=d["group_ids"], num_groups=P,
      local_rewards=d["local_rewards"], step_rewards=d["step_rewards"],
      step_mask=d["step_mask"], token_step=d["token_step"], old_logp=d["old_logp"])


@pytest.mark.parametrize("name", sorted(alg.RECIPES))
def test_every_recipe_end_to_end_under_jit(name):
  recipe = alg.get_recipe(name)
  d = make(0)
  out, loss, metrics, grad = run(recipe, d)
  a, lm, w = (np.asarray(x) for x in out)
  assert a.shape == (B, T) and lm.shape == (B, T) and w.shape == (B,)
  assert lm.dtype == bool and a.dtype == np.float32
  assert np.all(np.isfinite(a)) and np.isfinite(float(loss)) and np.all(np.isfinite(grad))
  assert not np.any(lm & ~d["mask"])                       # loss mask within the mask
  assert np.all(a[~lm] == 0.0) and np.all(np.asarray(grad)[~lm] == 0.0)
  assert np.abs(a).sum() > 0 and np.abs(np.asarray(grad)).sum() > 0
  for k, v in metrics.items():
    assert v.shape == (B, T) and np.all(np.asarray(v)[~lm] == 0.0), k
  assert ("kl" in metrics) == (recipe.kl_coef > 0)


def test_grpo_recipe_is_grpo_broadcast():
  d = make(1)
  out = advantages_of(alg.get_recipe("grpo"), d)
  seq = adv.grpo(d["rewards"], GROUP_IDS, num_groups=P)
  np.testing.assert_allclose(out.advantages, np.where(d["mask"], np.asarray(seq)[:, None], 0.0))
  np.testing.assert_array_equal(out.loss_mask, d["mask"])
  np.testing.assert_array_equal(out.seq_weights, np.ones(B))


def test_bot_grpo_recipe_uses_eq4_token_rewards():
  d = make(2)
  out = advantages_of(alg.get_recipe("bot_grpo"), d)
  tr = adv.bot_token_rewards(d["rewards"], d["local_rewards"], d["mask"], w_global=3.0,
                             w_local=0.5)
  np.testing.assert_allclose(out.advantages,
                             adv.bot_grpo(tr, d["mask"], GROUP_IDS, num_groups=P), rtol=1e-6)
  # w_local = 0 reduces the recipe to population-std GRPO on the rows.
  zero = advantages_of(alg.get_recipe("bot_grpo", w_local=0.0), d)
  seq = adv.grpo(d["rewards"], GROUP_IDS, num_groups=P, ddof=0,
                 row_mask=d["mask"].sum(-1) > 0, eps=1e-6 / 3.0)
  np.testing.assert_allclose(zero.advantages, np.where(d["mask"], np.asarray(seq)[:, None], 0),
                             rtol=1e-5, atol=1e-6)


def test_dapo_overlong_and_dynamic_sampling():
  d = make(3)
  recipe = alg.get_recipe("dapo", overlong_max_length=8, overlong_cache_length=4)
  out = advantages_of(recipe, d)
  lengths = d["mask"].sum(-1)
  shaped = d["rewards"] + np.asarray(adv.dapo_overlong_penalty(lengths, max_length=8,
                                                               cache_length=4))
  keep = np.asarray(adv.dynamic_sampling_keep(d["rewards"], GROUP_IDS, num_groups=P))
  assert not keep[GROUP_IDS == 3].any() and not keep[GROUP_IDS == 1].any()
  seq = np.asarray(adv.grpo(shaped, GROUP_IDS, num_groups=P))
  lm = d["mask"] & keep[:, None]
  np.testing.assert_array_equal(out.loss_mask, lm)
  np.testing.assert_allclose(out.advantages, np.where(lm, seq[:, None], 0.0), rtol=1e-6)


def test_bppo_recipe_narrows_loss_mask_with_full_group_advantages():
  d = make(4)
  out = advantages_of(alg.get_recipe("bppo", bppo_min_prefix=2), d)
  want = adv.bppo_loss_mask(d["rewards"], d["mask"], GROUP_IDS, num_groups=P,
                            prefix_fraction=0.5, min_prefix=2)
  np.testing.assert_array_equal(out.loss_mask, want)
  assert np.asarray(want).sum() > 0
  seq = np.asarray(adv.grpo(d["rewards"], GROUP_IDS, num_groups=P))
  np.testing.assert_allclose(out.advantages, np.where(want, seq[:, None], 0.0))


def test_reco_recipe_weights_and_verigate_default_verifier():
  d = make(5)
  out = advantages_of(alg.get_recipe("reco"), d)
  np.testing.assert_allclose(out.seq_weights, adv.reco_response_weights(
      d["old_logp"], d["mask"], GROUP_IDS, num_groups=P, max_weight=5.0), rtol=1e-6)
  out = advantages_of(alg.get_recipe("verigate"), d)
  want = adv.verigate(d["rewards"], d["step_rewards"], d["step_mask"], d["token_step"],
                      d["mask"], GROUP_IDS, num_groups=P)
  np.testing.assert_allclose(out.advantages, want, rtol=1e-6)
  assert np.all(np.asarray(out.advantages)[GROUP_IDS == 3] == 0.0)     # all right
  assert np.abs(np.asarray(out.advantages)[GROUP_IDS == 1]).sum() > 0  # all wrong: PRM


def test_gspo_recipe_equals_gspo_token_on_sequence_advantages():
  d = make(6)
  r1 = run(alg.get_recipe("gspo"), d)
  r2 = run(alg.get_recipe("gspo", surrogate="gspo_token"), d)
  np.testing.assert_allclose(r1[1], r2[1], rtol=1e-6)
  np.testing.assert_allclose(r1[3], r2[3], rtol=1e-5, atol=1e-8)


def test_policy_loss_adds_kl_only_with_ref():
  d = make(7)
  recipe = alg.get_recipe("grpo")
  a = np.where(d["mask"], 1.0, 0.0).astype(np.float32)
  with_kl, m = alg.policy_loss(recipe, d["logp"], d["old_logp"], a, d["mask"],
                               ref_logp=d["ref_logp"])
  no_kl, _ = alg.policy_loss(recipe, d["logp"], d["old_logp"], a, d["mask"])
  k3 = losses.kl(d["logp"], d["ref_logp"], kind="k3", mask=d["mask"])
  np.testing.assert_allclose(with_kl, np.asarray(no_kl) + 0.04 * np.asarray(k3), rtol=1e-6,
                             atol=1e-7)
  np.testing.assert_allclose(m["kl"], k3)


def test_recipe_defaults_from_the_papers():
  r = alg.RECIPES
  assert (r["dapo"].eps_low, r["dapo"].eps_high, r["dapo"].agg_mode) == (0.2, 0.28, "token_mean")
  assert r["dapo"].dynamic_sampling and r["dapo"].overlong_cache_length == 4096
  assert (r["gspo"].eps_low, r["gspo"].eps_high) == (3e-4, 4e-4)
  assert r["gspo"].agg_mode == "seq_mean_token_mean"
  assert (r["dr_grpo"].grpo_scale, r["dr_grpo"].agg_mode) == ("none", "seq_sum_norm")
  b = r["bot_grpo"]
  assert (b.w_global, b.w_local, b.eps_low, b.eps_high) == (3.0, 0.5, 0.2, 0.2)
  assert b.agg_mode == "seq_mean_token_mean" and b.granularity is alg.Granularity.TOKEN
  assert r["pure"].pure_temperature == 0.1 and r["pure"].granularity is alg.Granularity.STEP
  assert r["grpo"].kl_coef == 0.04 and r["grpo"].kl_kind == "k3"
  for name, recipe in r.items():
    assert recipe.name == name
    hash(recipe)                                            # usable as a static jit argument
  assert set(r) >= {"grpo", "dr_grpo", "dapo", "gspo", "pure", "bot_grpo", "reco", "bppo",
                    "verigate", "rloo"}


def test_get_recipe_errors():
  with pytest.raises(ValueError, match="bot_grpo"):
    alg.get_recipe("ppo")
  with pytest.raises(ValueError, match="eps_hi"):
    alg.get_recipe("grpo", eps_hi=0.3)
  with pytest.raises(ValueError, match="granularity must be 'token'"):
    alg.get_recipe("bot_grpo", granularity="sequence")
  with pytest.raises(ValueError, match="granularity must be 'sequence'"):
    alg.get_recipe("grpo", granularity=alg.Granularity.STEP)
  with pytest.raises(ValueError, match="surrogate"):
    alg.get_recipe("grpo", surrogate="ppo")
  with pytest.raises(ValueError, match="agg_norm"):
    alg.get_recipe("dr_grpo", agg_norm=None)
  with pytest.raises(ValueError, match="token_mean"):
    alg.get_recipe("grpo", agg_mode="mean")
  assert alg.get_recipe("dapo", eps_high=0.3).eps_high == 0.3
  assert alg.get_recipe("grpo", agg_mode=losses.AggMode.TOKEN_MEAN).agg_mode == "token_mean"


def test_check_reward_inputs_and_missing_inputs():
  alg.check_reward_inputs(alg.get_recipe("grpo"), has_step_rewards=False,
                          has_token_rewards=False)
  alg.check_reward_inputs(alg.get_recipe("bot_grpo"), has_step_rewards=False,
                          has_token_rewards=True)
  with pytest.raises(ValueError, match="local_rewards"):
    alg.check_reward_inputs(alg.get_recipe("bot_grpo"), has_step_rewards=True,
                            has_token_rewards=False)
  for name in ("pure", "verigate", "process_grpo"):
    with pytest.raises(ValueError, match="step_rewards"):
      alg.check_reward_inputs(alg.get_recipe(name), has_step_rewards=False,
                              has_token_rewards=True)
  d = make(8)
  with pytest.raises(ValueError, match="local_rewards"):
    alg.compute_advantages(alg.get_recipe("bot_grpo"), rewards=d["rewards"], mask=d["mask"],
                           group_ids=GROUP_IDS, num_groups=P)
  with pytest.raises(ValueError, match="old_logp"):
    alg.compute_advantages(alg.get_recipe("reco"), rewards=d["rewards"], mask=d["mask"],
                           group_ids=GROUP_IDS, num_groups=P)
  with pytest.raises(ValueError, match="step_rewards"):
    alg.compute_advantages(alg.get_recipe("pure"), rewards=d["rewards"], mask=d["mask"],
                           group_ids=GROUP_IDS, num_groups=P)


def test_recipe_is_frozen():
  with pytest.raises(dataclasses.FrozenInstanceError):
    alg.RECIPES["grpo"].eps_low = 0.3


@pytest.mark.parametrize("name", ["bot_grpo", "verigate"])
def test_sharded_batch_equals_unsharded(name):
  # Rows sharded over the 8 fake CPU devices (as a trainer's data axis would): same numbers.
  mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  d = make(9)
  d16 = {k: np.concatenate([v, v[:4]]) for k, v in d.items()}   # B = 16, divisible by 8
  recipe = alg.get_recipe(name)
  want = advantages_of(recipe, d16)
  got = advantages_of(recipe, {k: jax.device_put(v, rows) for k, v in d16.items()})
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
