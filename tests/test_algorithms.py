"""botjax.algorithms: every recipe end to end under jit, defaults, and configuration errors."""

import dataclasses
import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from botjax import advantages as adv
from botjax import algorithms as alg
from botjax import losses
from _util import pure_credit_loop

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


def local_of(recipe, d):
  """The token-level local signal for the recipes that read it (others warn when given one)."""
  return d["local_rewards"] if recipe.granularity is alg.Granularity.TOKEN else None


@functools.partial(jax.jit, static_argnames=("recipe",))
def run(recipe, d):
  out = alg.compute_advantages(
      recipe, rewards=d["rewards"], mask=d["mask"], group_ids=d["group_ids"], num_groups=P,
      local_rewards=local_of(recipe, d), step_rewards=d["step_rewards"],
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


def advantages_eager(recipe, d):
  return alg.compute_advantages(
      recipe, rewards=d["rewards"], mask=d["mask"], group_ids=d["group_ids"], num_groups=P,
      local_rewards=local_of(recipe, d), step_rewards=d["step_rewards"],
      step_mask=d["step_mask"], token_step=d["token_step"], old_logp=d["old_logp"])


advantages_of = jax.jit(advantages_eager, static_argnames=("recipe",))
BOTH = {"eager": advantages_eager, "jit": advantages_of}


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
  assert set(metrics) == set(alg.POLICY_METRICS)            # the same keys for every recipe
  for k, v in metrics.items():
    assert v.shape == (B, T) and np.all(np.asarray(v)[~lm] == 0.0), k
  assert (np.abs(np.asarray(metrics["kl"])).sum() > 0) == (recipe.kl_coef > 0)
  if recipe.dual_clip is None:
    assert np.all(np.asarray(metrics["dual_clipped"]) == 0.0)


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


@pytest.mark.parametrize("name,weighting", [("bot_grpo", "inverse_length"),
                                            ("bot_grpo_token", "token"), ("bot_grpo_row", "row")])
def test_bot_weighting_recipes_pass_their_weights(name, weighting):
  d = make(4)
  recipe = alg.get_recipe(name)
  assert recipe.bot_weighting == weighting and recipe.advantage == "bot_grpo"
  # everything but the weighting is bot_grpo's
  assert dataclasses.replace(recipe, name="bot_grpo", bot_weighting="inverse_length") == \
      alg.RECIPES["bot_grpo"]
  out = advantages_of(recipe, d)
  tr = adv.bot_token_rewards(d["rewards"], d["local_rewards"], d["mask"], w_global=3.0,
                             w_local=0.5)
  want = adv.bot_grpo(tr, d["mask"], GROUP_IDS, num_groups=P, weighting=weighting)
  np.testing.assert_allclose(out.advantages, want, rtol=1e-6)
  if weighting != "inverse_length":   # the weighting changes the advantages on this batch
    paper = adv.bot_grpo(tr, d["mask"], GROUP_IDS, num_groups=P)
    assert np.abs(np.asarray(want) - np.asarray(paper)).max() > 1e-3
  pure = advantages_of(alg.get_recipe("bot_pure", bot_weighting=weighting), d)
  assert np.isfinite(np.asarray(pure.advantages)).all()


def test_bot_weighting_rejects_unknown_names():
  with pytest.raises(ValueError, match="bot_weighting must be one of inverse_length, token, row"):
    alg.get_recipe("bot_grpo", bot_weighting="uniform")


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


def test_policy_loss_kl_term_and_missing_ref_is_an_error():
  d = make(7)
  recipe = alg.get_recipe("grpo")
  a = np.where(d["mask"], 1.0, 0.0).astype(np.float32)
  with_kl, m = alg.policy_loss(recipe, d["logp"], d["old_logp"], a, d["mask"],
                               ref_logp=d["ref_logp"])
  off = alg.get_recipe("grpo", kl_coef=0.0)
  no_kl, m0 = alg.policy_loss(off, d["logp"], d["old_logp"], a, d["mask"])
  k3 = losses.kl(d["logp"], d["ref_logp"], kind="k3", mask=d["mask"])
  np.testing.assert_allclose(with_kl, np.asarray(no_kl) + 0.04 * np.asarray(k3), rtol=1e-6,
                             atol=1e-7)
  np.testing.assert_allclose(m["kl"], k3)
  assert set(m0) == set(m) and np.all(np.asarray(m0["kl"]) == 0.0)
  # kl_coef > 0 without the reference log-probs used to drop the KL term silently.
  with pytest.raises(ValueError, match="ref_logp.*kl_coef=0.0"):
    alg.policy_loss(recipe, d["logp"], d["old_logp"], a, d["mask"])


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
  with pytest.raises(ValueError, match="surrogate 'ppo'; valid: clip, gspo, gspo_token, reco"):
    alg.get_recipe("grpo", surrogate="ppo")
  with pytest.raises(ValueError, match="advantage 'grpo_std'; valid: grpo, rloo, .*verigate"):
    alg.get_recipe("grpo", advantage="grpo_std")
  with pytest.raises(ValueError, match="kl_kind 'k4'; valid: k1, k2, k3"):
    alg.get_recipe("grpo", kl_kind="k4")
  with pytest.raises(ValueError, match="grpo_scale 'std'; valid: group, batch, none"):
    alg.get_recipe("grpo", grpo_scale="std")
  with pytest.raises(ValueError, match="grpo_ddof"):
    alg.get_recipe("grpo", grpo_ddof=2)
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
  # bot_pure reads the token rewards and takes PURE's min-form over the steps: it needs both.
  alg.check_reward_inputs(alg.get_recipe("bot_pure"), has_step_rewards=True,
                          has_token_rewards=True)
  with pytest.raises(ValueError, match="step boundaries"):
    alg.check_reward_inputs(alg.get_recipe("bot_pure"), has_step_rewards=False,
                            has_token_rewards=True)
  with pytest.raises(ValueError, match="local_rewards"):
    alg.check_reward_inputs(alg.get_recipe("bot_pure"), has_step_rewards=True,
                            has_token_rewards=False)
  d = make(8)
  with pytest.raises(ValueError, match="step_mask, token_step"):
    alg.compute_advantages(alg.get_recipe("bot_pure"), rewards=d["rewards"], mask=d["mask"],
                           group_ids=GROUP_IDS, num_groups=P, local_rewards=d["local_rewards"])
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


# ------------------------------------------------------------------------------------------
# Plain loops from the papers' equations
# ------------------------------------------------------------------------------------------


def grpo_loop(r, ids, ddof=1, eps=1e-6, rows=None):
  """(R_i − μ_g) / (σ_g + ε) over the rows of each group (DeepSeekMath; eq. 1 with ddof 0)."""
  rows = range(len(r)) if rows is None else rows
  out = np.zeros(len(r))
  for i in rows:
    m = [j for j in rows if ids[j] == ids[i]]
    if len(m) < 2 or len({float(r[j]) for j in m}) == 1:
      continue
    mu = sum(r[j] for j in m) / len(m)
    std = math.sqrt(sum((r[j] - mu) ** 2 for j in m) / (len(m) - ddof))
    out[i] = (r[i] - mu) / (std + eps)
  return out


def bot_loop(tr, mask, ids, eps=1e-6):
  """BoT-GRPO eq. 1–3: 1/L-weighted pooled mean and population std over the group's tokens."""
  out = np.zeros(tr.shape)
  n = len(ids)
  for i in range(n):
    if not mask[i].any():
      continue
    rows = [k for k in range(n) if ids[k] == ids[i] and mask[k].any()]
    toks = {k: [float(tr[k, t]) for t in range(tr.shape[1]) if mask[k, t]] for k in rows}
    mu = sum(sum(v) / len(v) for v in toks.values()) / len(rows)
    var = sum(sum((x - mu) ** 2 for x in v) / len(v) for v in toks.values()) / len(rows)
    for t in range(tr.shape[1]):
      if mask[i, t]:
        out[i, t] = (tr[i, t] - mu) / (math.sqrt(var) + eps)
  return out


def overlong_loop(n, l_max, cache):
  """DAPO eq. 13."""
  if n <= l_max - cache:
    return 0.0
  return ((l_max - cache) - n) / cache if n <= l_max else -1.0


def think_block(d, width=3):
  """d with a reasoning model's `<think>` block: its first `width` tokens belong to no step."""
  e = dict(d)
  e["token_step"] = d["token_step"].copy()
  e["token_step"][:, :width] = -1
  return e


# ------------------------------------------------------------------------------------------
# Enums and dispatch
# ------------------------------------------------------------------------------------------


def test_enum_fields_accept_strings_and_members():
  a = alg.Recipe(name="x", advantage="bot_grpo", granularity="token", surrogate="gspo_token",
                 kl_kind="k1", grpo_scale="none", agg_mode="token_mean")
  b = alg.Recipe(name="x", advantage=alg.AdvantageKind.BOT_GRPO,
                 granularity=alg.Granularity.TOKEN, surrogate=alg.Surrogate.GSPO_TOKEN,
                 kl_kind=losses.KlKind.K1, grpo_scale=adv.GrpoScale.NONE,
                 agg_mode=losses.AggMode.TOKEN_MEAN)
  assert a == b and hash(a) == hash(b)
  assert a.advantage is alg.AdvantageKind.BOT_GRPO and a.surrogate is alg.Surrogate.GSPO_TOKEN
  assert a.kl_kind is losses.KlKind.K1 and a.grpo_scale is adv.GrpoScale.NONE
  assert a.advantage == "bot_grpo" and f"{a.surrogate}" == "gspo_token"   # still strings
  with pytest.raises(ValueError, match="granularity 'tokens'; valid: sequence, step, token"):
    alg.Recipe(name="x", granularity="tokens")


def test_dispatch_table_has_one_function_per_advantage_kind():
  assert set(alg.ADVANTAGE_FNS) == set(alg.AdvantageKind) == set(alg.ADVANTAGE_GRANULARITY)
  assert len(set(alg.ADVANTAGE_FNS.values())) == len(alg.AdvantageKind)
  assert alg.SURROGATES == tuple(s.value for s in alg.Surrogate)


def test_local_rewards_ignored_by_the_recipe_warn_and_name_the_fix():
  d = make(10)
  for name in ("grpo", "pure", "grpo_stepmean"):
    with pytest.warns(UserWarning, match=r"ignores local_rewards; pass local_rewards=None.*"
                                         r"bot_grpo"):
      alg.compute_advantages(alg.get_recipe(name), rewards=d["rewards"], mask=d["mask"],
                             group_ids=GROUP_IDS, num_groups=P, local_rewards=d["local_rewards"],
                             step_rewards=d["step_rewards"], step_mask=d["step_mask"],
                             token_step=d["token_step"])
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for name in ("bot_grpo", "bot_pure", "grpo"):
      recipe = alg.get_recipe(name)
      steps = ({k: d[k] for k in ("step_mask", "token_step")} if name == "bot_pure" else {})
      alg.compute_advantages(recipe, rewards=d["rewards"], mask=d["mask"], group_ids=GROUP_IDS,
                             num_groups=P, local_rewards=local_of(recipe, d), **steps)


# ------------------------------------------------------------------------------------------
# Generation budget (DAPO eq. 13, Dr. GRPO's L_norm)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget,cache", [(1024, 205), (2048, 410), (64, 13), (20480, 4096),
                                          (3, 1)])
def test_budget_sets_overlong_lengths_in_dapos_proportion(budget, cache):
  for name in ("dapo", "bot_dapo"):
    r = alg.get_recipe(name, max_new_tokens=budget)
    assert (r.overlong_max_length, r.overlong_cache_length) == (budget, cache)
    assert r == alg.get_recipe(name).for_budget(budget)
    assert cache == max(1, round(budget * 4096 / 20480))
  assert alg.get_recipe("dr_grpo", max_new_tokens=budget).agg_norm == float(budget)
  for name in ("grpo", "bot_grpo", "pure", "gspo"):           # nothing budget-dependent
    assert alg.get_recipe(name, max_new_tokens=budget) == alg.RECIPES[name]


def test_budget_yields_to_given_values_and_rejects_bad_budgets():
  r = alg.get_recipe("dapo", max_new_tokens=1024, overlong_max_length=900,
                     overlong_cache_length=100)
  assert (r.overlong_max_length, r.overlong_cache_length) == (900, 100)
  r = alg.get_recipe("dapo", max_new_tokens=1024, overlong_max_length=None,
                     overlong_cache_length=None)
  assert r.overlong_max_length is None                      # explicitly off stays off
  assert alg.get_recipe("dr_grpo", max_new_tokens=1024, agg_norm=77.0).agg_norm == 77.0
  for bad in (0, -5, 1.5):
    with pytest.raises(ValueError, match="max_new_tokens"):
      alg.get_recipe("dapo", max_new_tokens=bad)
  assert alg.RECIPES["dapo"].overlong_max_length == 20480   # the paper's values stay the default


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_overlong_penalty_fires_at_the_runs_budget(mode):
  # With a budget of T tokens, completions in the last T/5 tokens are penalised (DAPO eq. 13);
  # the default L_max = 20480 would never fire at this length.
  d = make(11)
  recipe = alg.get_recipe("dapo", max_new_tokens=T)
  assert (recipe.overlong_max_length, recipe.overlong_cache_length) == (T, 2)
  out = BOTH[mode](recipe, d)
  lengths = d["mask"].sum(-1)
  shaped = d["rewards"] + np.array([overlong_loop(n, T, 2) for n in lengths])
  assert np.any(shaped != d["rewards"])
  keep = np.array([len({float(d["rewards"][j]) for j in range(B) if GROUP_IDS[j] == GROUP_IDS[i]})
                   > 1 for i in range(B)])
  want = np.where(d["mask"] & keep[:, None], grpo_loop(shaped, GROUP_IDS)[:, None], 0.0)
  np.testing.assert_allclose(out.advantages, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(out.loss_mask, d["mask"] & keep[:, None])


# ------------------------------------------------------------------------------------------
# The paper's GRPO (eq. 1, population std): BoT-GRPO with w_s = 0 is exactly GRPO
# ------------------------------------------------------------------------------------------


def random_groups(seed):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, P, size=B).astype(np.int32)
  lengths = rng.integers(1, T + 1, size=B)                  # BoT drops empty rows; none here
  mask = np.arange(T)[None, :] < lengths[:, None]
  rewards = rng.normal(size=B).astype(np.float32)
  rewards[ids == ids[0]] = np.round(rewards[ids == ids[0]])  # ties, maybe a constant group
  return dict(rewards=rewards, mask=mask, group_ids=ids,
              local_rewards=rng.normal(size=(B, T)).astype(np.float32))


@functools.partial(jax.jit, static_argnames=("recipe",))
def _adv_groups(recipe, d):
  return alg.compute_advantages(recipe, rewards=d["rewards"], mask=d["mask"],
                                group_ids=d["group_ids"], num_groups=P,
                                local_rewards=local_of(recipe, d)).advantages


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_bot_grpo_without_local_signal_is_the_paper_grpo_recipe(seed):
  d = random_groups(seed)
  paper = alg.get_recipe("grpo", **dict(alg.PAPER_PROTOCOL))
  assert paper.grpo_ddof == 0
  got_grpo = np.asarray(_adv_groups(paper, d))
  want = np.where(d["mask"], grpo_loop(d["rewards"], d["group_ids"], ddof=0)[:, None], 0.0)
  np.testing.assert_allclose(got_grpo, want, rtol=1e-5, atol=1e-6)
  # w_g = 1: the same formula exactly; w_g = 3 (eq. 8): ε is divided by 3, nothing else moves.
  bot1 = np.asarray(_adv_groups(alg.get_recipe("bot_grpo", w_local=0.0, w_global=1.0), d))
  np.testing.assert_allclose(bot1, got_grpo, rtol=1e-5, atol=1e-6)
  bot3 = np.asarray(_adv_groups(alg.get_recipe("bot_grpo", w_local=0.0), d))
  want3 = np.where(d["mask"], grpo_loop(d["rewards"], d["group_ids"], ddof=0,
                                        eps=1e-6 / 3)[:, None], 0.0)
  np.testing.assert_allclose(bot3, want3, rtol=1e-5, atol=1e-6)


def test_general_grpo_keeps_bessels_std():
  d = random_groups(3)
  general = np.asarray(_adv_groups(alg.get_recipe("grpo"), d))
  want = np.where(d["mask"], grpo_loop(d["rewards"], d["group_ids"], ddof=1)[:, None], 0.0)
  np.testing.assert_allclose(general, want, rtol=1e-5, atol=1e-6)
  paper = np.asarray(_adv_groups(alg.get_recipe("grpo", **dict(alg.PAPER_PROTOCOL)), d))
  assert not np.allclose(general, paper)
  # The protocol reaches every group z-score: VeriGate's mixed groups and the outcome term.
  e = make(12)
  v = alg.get_recipe("verigate", **dict(alg.PAPER_PROTOCOL))
  np.testing.assert_allclose(advantages_of(v, e).advantages, adv.verigate(
      e["rewards"], e["step_rewards"], e["step_mask"], e["token_step"], e["mask"], GROUP_IDS,
      num_groups=P, ddof=0), rtol=1e-6)


# ------------------------------------------------------------------------------------------
# Tokens before the first step (a think block) get the sequence-level term
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("name", ["process_grpo", "pure", "verigate"])
def test_think_block_gets_the_sequence_level_term(name, mode):
  d = think_block(make(13))
  recipe = alg.get_recipe(name)
  got = np.asarray(BOTH[mode](recipe, d).advantages)
  think = d["mask"] & (np.arange(T)[None, :] < 3)
  assert think.sum() >= B - 1
  r = d["rewards"]
  if name == "process_grpo":
    seq = grpo_loop(r, GROUP_IDS)
  elif name == "pure":
    seq = grpo_loop(recipe.pure_outcome_coef * r, GROUP_IDS)
  else:                          # mixed groups: GRPO; all-wrong (group 1): the PRM trajectory
    seq = grpo_loop(r, GROUP_IDS)
    c = np.zeros((B, S))         # return of step j: Σ_{k ≥ j} r_k
    for i in range(B):
      for j in range(S):
        c[i, j] = sum(d["step_rewards"][i, k] for k in range(j, S) if d["step_mask"][i, k])
    for i in np.flatnonzero(GROUP_IDS == 1):
      pool = [c[k, j] for k in np.flatnonzero(GROUP_IDS == 1) for j in range(S)
              if d["step_mask"][k, j]]
      mu = sum(pool) / len(pool)
      std = math.sqrt(sum((x - mu) ** 2 for x in pool) / len(pool))
      seq[i] = (c[i, 0] - mu) / (std + 1e-6)                # step 0 is every row's first
  for i in range(B):
    for t in range(T):
      if think[i, t]:
        assert got[i, t] == pytest.approx(seq[i], rel=1e-5, abs=1e-6), (i, t)
  assert np.abs(got[think]).sum() > 0                        # trained, no longer 0
  # Tokens inside steps keep what the step estimator alone gives them.
  inside = d["mask"] & ~think
  steps = (d["step_rewards"], d["step_mask"], d["token_step"], d["mask"], GROUP_IDS)
  if name == "process_grpo":
    ref = adv.process_grpo(*steps, num_groups=P)
  elif name == "pure":
    ref = adv.pure_grpo(*steps, num_groups=P, outcome_rewards=r)
  else:
    ref = adv.verigate(r, *steps, num_groups=P)
  np.testing.assert_allclose(got[inside], np.asarray(ref)[inside], rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------------------
# The common backbone (BoT-GRPO §4.1) and the testbed controls
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_bot_backbone_variants_match_loops(mode):
  d = make(14)
  r, m, s = d["rewards"], d["mask"], d["local_rewards"]
  bot = bot_loop(3.0 * r[:, None] + 0.5 * s, m, GROUP_IDS)
  # bot_gspo: the bag-of-token advantages, GSPO-token's surrogate with GSPO's ε, no KL
  g = alg.get_recipe("bot_gspo")
  assert (g.surrogate, g.eps_low, g.eps_high, g.kl_coef) == ("gspo_token", 3e-4, 4e-4, 0.0)
  out = BOTH[mode](g, d)
  np.testing.assert_allclose(out.advantages, bot, rtol=1e-5, atol=1e-5)
  per_token, _ = alg.policy_loss(g, d["logp"], d["old_logp"], out.advantages, out.loss_mask)
  want, _ = losses.gspo_surrogate(d["logp"], d["old_logp"], out.advantages, out.loss_mask,
                                  eps_low=3e-4, eps_high=4e-4)
  np.testing.assert_allclose(per_token, want, rtol=1e-6)
  # bot_dapo: overlong penalty on the global reward, dynamic sampling, clip-higher, token-mean
  dp = alg.get_recipe("bot_dapo", max_new_tokens=T)
  assert (dp.eps_high, dp.agg_mode, dp.kl_coef, dp.dynamic_sampling) == (0.28, "token_mean",
                                                                        0.0, True)
  out = BOTH[mode](dp, d)
  shaped = r + np.array([overlong_loop(n, T, 2) for n in m.sum(-1)])
  keep = np.array([len({float(r[j]) for j in range(B) if GROUP_IDS[j] == GROUP_IDS[i]}) > 1
                   for i in range(B)])
  want = bot_loop(3.0 * shaped[:, None] + 0.5 * s, m, GROUP_IDS)
  np.testing.assert_array_equal(out.loss_mask, m & keep[:, None])
  np.testing.assert_allclose(out.advantages, np.where(keep[:, None], want, 0.0), rtol=1e-5,
                             atol=1e-5)
  # bot_pure: PURE's min-form credit (softmin T = 0.1, return-to-go over the steps) of the
  # local signal
  pr = alg.get_recipe("bot_pure")
  out = BOTH[mode](pr, d)
  credit = pure_credit_loop(s, d["step_mask"], d["token_step"], m, 0.1)
  np.testing.assert_allclose(out.advantages, bot_loop(3.0 * r[:, None] + 0.5 * credit, m,
                                                      GROUP_IDS), rtol=1e-4, atol=1e-5)


def test_backbone_variants_differ_from_their_sequence_versions():
  d = make(15)
  for seq_name, bot_name in (("gspo", "bot_gspo"), ("dapo", "bot_dapo"), ("pure", "bot_pure")):
    a = np.asarray(advantages_of(alg.get_recipe(seq_name), d).advantages)
    b = np.asarray(advantages_of(alg.get_recipe(bot_name), d).advantages)
    assert a.shape == b.shape and not np.allclose(a, b), (seq_name, bot_name)
  assert alg.RECIPES["gspo"].surrogate == "gspo" and alg.RECIPES["dapo"].advantage == "grpo"


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_grpo_stepmean_pools_the_step_mean_into_the_sequence_reward(mode):
  d = make(16)
  recipe = alg.get_recipe("grpo_stepmean")
  assert recipe.granularity is alg.Granularity.STEP and recipe.w_local == 0.5
  out = BOTH[mode](recipe, d)
  pooled = np.array([d["rewards"][i] + 0.5 * np.mean([d["step_rewards"][i, j] for j in range(S)
                                                       if d["step_mask"][i, j]])
                     for i in range(B)])
  want = np.where(d["mask"], grpo_loop(pooled, GROUP_IDS)[:, None], 0.0)
  np.testing.assert_allclose(out.advantages, want, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="step_rewards"):
    alg.compute_advantages(recipe, rewards=d["rewards"], mask=d["mask"], group_ids=GROUP_IDS,
                           num_groups=P)


def test_the_trainer_builds_its_recipe_for_the_runs_budget():
  # RLTrainer's recipe (train.config.recipe_for_run) follows rollout.max_new_tokens (the penalty
  # of a 1,024-token AIME run starts at 819 tokens, not at 16,384); given overrides still win.
  from botjax.rewards.base import RewardSpec
  from botjax.train import config as config_lib
  from botjax.train.config import recipe_for_run
  plain = RewardSpec(frozenset({"sequence"}))
  for budget in (1024, 2048):
    cfg = config_lib.TrainConfig(recipe="dapo", workdir="unused",
                                 rollout=config_lib.RolloutConfig(max_new_tokens=budget))
    r = recipe_for_run(cfg, plain)
    assert (r.overlong_max_length, r.overlong_cache_length) == (budget, round(budget / 5))
  cfg = config_lib.TrainConfig(recipe="dapo", workdir="unused",
                               recipe_overrides=(("overlong_max_length", 500),
                                                 ("overlong_cache_length", 50)),
                               rollout=config_lib.RolloutConfig(max_new_tokens=1024))
  assert recipe_for_run(cfg, plain).overlong_cache_length == 50
  cfg = config_lib.TrainConfig(recipe="dr_grpo", workdir="unused",
                               rollout=config_lib.RolloutConfig(max_new_tokens=64))
  assert recipe_for_run(cfg, plain).agg_norm == 64.0


def test_dapo_dynamic_sampling_filters_on_the_verifier_not_the_full_reward():
  # group 0: rewards vary only through a format term, every answer wrong -> no accuracy signal;
  # group 1: one right answer -> kept. DAPO (arXiv 2503.14476) eq. 11 filters on accuracy.
  rewards = jnp.array([0.2, -1.0, 0.2, 3.2, 0.2, 0.2])
  verifier = jnp.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
  group_ids = jnp.array([0, 0, 0, 1, 1, 1])
  mask = jnp.ones((6, 4), bool)
  recipe = alg.get_recipe("dapo")
  kept = alg.compute_advantages(recipe, rewards=rewards, mask=mask, group_ids=group_ids,
                                num_groups=2, verifier=verifier).loss_mask
  np.testing.assert_array_equal(np.asarray(kept).any(axis=1), [0, 0, 0, 1, 1, 1])
  # without a verifier the full reward stands in for it, and group 0 varies
  kept = alg.compute_advantages(recipe, rewards=rewards, mask=mask, group_ids=group_ids,
                                num_groups=2).loss_mask
  np.testing.assert_array_equal(np.asarray(kept).any(axis=1), [1, 1, 1, 1, 1, 1])


# ------------------------------------------------------------------------------------------
# Estimators added by name (register_estimator) or as a function
# ------------------------------------------------------------------------------------------


def _token_scaled(recipe, b):
  """[B, T]: the local signal times the sequence reward (a token-level estimator for tests)."""
  return b.local_rewards * b.shaped[:, None]


def _centred_seq(recipe, b):
  """[B]: the sequence reward minus the batch mean (broadcast to tokens by compute_advantages)."""
  return b.shaped - jnp.mean(b.shaped)


def test_a_registered_estimator_is_named_by_recipes_and_dispatched():
  d = make(11)
  alg.register_estimator("t_token_scaled", _token_scaled, granularity="token")
  alg.register_estimator("t_centred", _centred_seq, granularity=alg.Granularity.SEQUENCE)
  try:
    tok = alg.Recipe(name="t1", advantage="t_token_scaled", kl_coef=0.0)
    seq = alg.get_recipe("grpo", advantage="t_centred")
    assert tok.granularity is alg.Granularity.TOKEN        # the estimator's own granularity
    assert seq.granularity is alg.Granularity.SEQUENCE and seq.advantage == "t_centred"
    for jit in (False, True):
      f = (jax.jit(alg.compute_advantages, static_argnames=("recipe", "num_groups")) if jit
           else alg.compute_advantages)
      a = f(tok, rewards=d["rewards"], mask=d["mask"], group_ids=GROUP_IDS, num_groups=P,
            local_rewards=d["local_rewards"]).advantages
      want = np.where(d["mask"], d["local_rewards"] * d["rewards"][:, None], 0.0)
      np.testing.assert_allclose(a, want, rtol=1e-6, atol=1e-7)
      a = f(seq, rewards=d["rewards"], mask=d["mask"], group_ids=GROUP_IDS, num_groups=P).advantages
      want = np.where(d["mask"], (d["rewards"] - d["rewards"].mean())[:, None], 0.0)
      np.testing.assert_allclose(a, want, rtol=1e-6, atol=1e-6)
    # the trainer's config check reads the estimator's granularity
    with pytest.raises(ValueError, match="token-level"):
      alg.check_reward_inputs(tok, has_token_rewards=False)
    with pytest.raises(ValueError, match="granularity must be 'token'"):
      alg.Recipe(name="t2", advantage="t_token_scaled", granularity="sequence")
    alg.register_recipe(tok)
    assert alg.get_recipe("t1") == tok and alg.get_recipe("t1", eps_high=0.3).eps_high == 0.3
  finally:
    for name in ("t_token_scaled", "t_centred"):
      alg.ESTIMATORS.pop(name, None)
    alg.RECIPES.pop("t1", None)


def test_an_estimator_function_in_a_recipe_is_registered_under_its_qualified_name():
  r = alg.Recipe(name="fn", advantage=_centred_seq, granularity="sequence", kl_coef=0.0)
  name = f"{_centred_seq.__module__}._centred_seq"
  try:
    assert r.advantage == name and alg.ESTIMATORS[name].fn is _centred_seq
    assert alg.Recipe(name="fn", advantage=_centred_seq, kl_coef=0.0) == r   # found again
    assert hash(r) == hash(dataclasses.replace(r))
  finally:
    alg.ESTIMATORS.pop(name, None)
  with pytest.raises(ValueError, match="is not registered; give its granularity"):
    alg.Recipe(name="fn", advantage=_token_scaled)


def test_estimator_registration_errors_name_the_fix():
  with pytest.raises(ValueError, match="'grpo' is a built-in estimator"):
    alg.register_estimator("grpo", _centred_seq, granularity="sequence")
  with pytest.raises(ValueError, match="granularity 'tokens'; valid: sequence, step, token"):
    alg.register_estimator("t_bad", _centred_seq, granularity="tokens")
  with pytest.raises(ValueError, match="must be callable"):
    alg.register_estimator("t_bad", 3, granularity="sequence")
  with pytest.raises(ValueError,
                     match=r"unknown advantage 'nope'; valid: grpo, .*register_estimator"):
    alg.Recipe(name="x", advantage="nope")
  alg.register_estimator("t_dup", _centred_seq, granularity="sequence")
  try:
    with pytest.raises(ValueError, match="'t_dup' is already registered"):
      alg.register_estimator("t_dup", _token_scaled, granularity="token")
    alg.register_estimator("t_dup", _token_scaled, granularity="token", replace=True)
    assert alg.ESTIMATORS["t_dup"].granularity is alg.Granularity.TOKEN
  finally:
    alg.ESTIMATORS.pop("t_dup")
  with pytest.raises(ValueError, match="'grpo' is already registered"):
    alg.register_recipe(alg.Recipe(name="grpo", kl_coef=0.0))
