"""Sampler: stops and finish reasons, log-probs vs the trainer, buckets, determinism, sharding."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import botjax.models as bm
from botjax.models.sharding import make_mesh, shard_model
from botjax.sampling import FINISH_LENGTH, FINISH_STOP, Sampler, SamplingConfig

CFG = bm.DecoderConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=8, intermediate_size=64, qkv_bias=True, rope_theta=1e4)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18], [3]]


def _model(seed=0):
  return bm.Decoder(CFG, rngs=nnx.Rngs(seed))


@pytest.fixture(scope="module")
def model():
  return _model()


@pytest.fixture(scope="module")
def greedy(model):
  return Sampler(model, CFG, SamplingConfig(temperature=0.0, max_new_tokens=16))


@pytest.fixture(scope="module")
def sampling(model):
  return Sampler(model, CFG, SamplingConfig(temperature=0.8, top_k=20, top_p=0.95,
                                            max_new_tokens=16, eos_token_ids=(1,)))


@jax.jit(static_argnames="graphdef")
def _full_forward_logits(graphdef, params, ids):
  model = nnx.merge(graphdef, params)
  positions = jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32)[None], ids.shape)
  return model(ids, positions)[0]


def _reference_greedy(model, prompts, steps):
  """Oracle: greedy decoding by re-running the whole (right-padded) sequence without a cache."""
  seqs = [list(p) for p in prompts]
  graphdef, params = nnx.split(model)
  for _ in range(steps):
    ids = np.zeros((len(seqs), 32), np.int32)
    for b, s in enumerate(seqs):
      ids[b, :len(s)] = s
    logits = np.asarray(_full_forward_logits(graphdef, params, jnp.asarray(ids)))
    for b, s in enumerate(seqs):
      s.append(int(logits[b, len(s) - 1].argmax()))
  return [s[len(p):] for s, p in zip(seqs, prompts)]


def test_greedy_cached_decode_equals_full_recompute(model, greedy):
  out = greedy.generate(PROMPTS, jax.random.key(0), max_new_tokens=10)
  np.testing.assert_array_equal(np.asarray(out.tokens)[:, :10],
                                _reference_greedy(model, PROMPTS, 10))
  assert np.all(np.asarray(out.lengths) == 10)
  assert np.all(np.asarray(out.finish_reason) == FINISH_LENGTH)


def test_stop_tokens_finish_reasons_and_masks(greedy):
  free = np.asarray(greedy.generate(PROMPTS, jax.random.key(0), max_new_tokens=12).tokens)
  # Row 0 stops at the first occurrence of its 4th token, row 2 at that of its 2nd; rows 1 and
  # 3 get a stop id they never produce within 12 tokens (or none at all).
  unused = next(t for t in range(2, 64) if t not in free[:, :12])
  extra = [[int(free[0, 3])], [unused], [int(free[2, 1]), unused], []]
  out = greedy.generate(PROMPTS, jax.random.key(0), max_new_tokens=12, stop_token_ids=extra)
  tokens, mask, logp = map(np.asarray, (out.tokens, out.mask, out.logp))
  lengths, finish = np.asarray(out.lengths), np.asarray(out.finish_reason)
  expected_len, expected_finish = [], []
  for b in range(4):
    hit = next((i for i, t in enumerate(free[b, :12]) if t in extra[b]), None)
    expected_len.append(12 if hit is None else hit + 1)
    expected_finish.append(FINISH_LENGTH if hit is None else FINISH_STOP)
  assert expected_len[0] <= 4 and expected_len[2] <= 2 and expected_len[1] == 12
  np.testing.assert_array_equal(lengths, expected_len)
  np.testing.assert_array_equal(finish, expected_finish)
  np.testing.assert_array_equal(mask, np.arange(tokens.shape[1])[None] < lengths[:, None])
  for b in range(4):
    n = lengths[b]
    np.testing.assert_array_equal(tokens[b, :n], free[b, :n])      # the stop token is kept
    assert np.all(tokens[b, n:] == 0) and np.all(logp[b, n:] == 0)
    assert np.all(logp[b, :n] < 0)


def test_loop_ends_once_every_row_has_stopped(greedy):
  free = np.asarray(greedy.generate(PROMPTS, jax.random.key(0), max_new_tokens=16).tokens)
  assert int(greedy.last_num_steps) == 16
  # Every row stops at its own 3rd token or earlier: the loop must run ≤ 3 steps, not 16.
  extra = [[int(free[b, 2])] for b in range(4)]
  out = greedy.generate(PROMPTS, jax.random.key(0), max_new_tokens=16, stop_token_ids=extra)
  lengths = np.asarray(out.lengths)
  assert lengths.max() <= 3 and np.all(np.asarray(out.finish_reason) == FINISH_STOP)
  assert int(greedy.last_num_steps) == lengths.max()
  # Rows that stop at their first token never enter the decode loop.
  first = [[int(free[b, 0])] for b in range(4)]
  out = greedy.generate(PROMPTS, jax.random.key(0), max_new_tokens=16, stop_token_ids=first)
  np.testing.assert_array_equal(out.lengths, [1, 1, 1, 1])
  assert int(greedy.last_num_steps) == 1
  assert greedy.num_compiled() == 1


@jax.jit(static_argnames=("graphdef", "temperature"))
def _trainer_logp(graphdef, params, ids, positions, mask, targets, temperature, support=None):
  model = nnx.merge(graphdef, params)
  return bm.token_logprobs(model, ids, positions, mask, targets, temperature=temperature,
                           support=support)[0]


def test_logp_matches_teacher_forced_token_logprobs(model, sampling, greedy):
  untruncated = Sampler(model, CFG, dataclasses.replace(sampling.config, truncated_logp=False))
  for sampler, n in ((sampling, 2), (untruncated, 2), (greedy, 1)):
    out = sampler.generate(PROMPTS, jax.random.key(3), n=n)
    assert (out.support_logp is not None) == (sampler is sampling)
    tf = out.teacher_forcing()
    logp_full = _trainer_logp(*nnx.split(model), tf.input_ids, tf.positions, tf.attention_mask,
                              tf.targets, temperature=sampler.config.logp_temperature,
                              support=tf.support)
    t = out.tokens.shape[1]
    ref = np.asarray(logp_full[:, tf.start:tf.start + t])
    mask = np.asarray(out.mask)
    assert mask.sum() > 20
    np.testing.assert_allclose(np.asarray(out.logp)[mask], ref[mask], atol=1e-5, rtol=0)


def test_groups_determinism_and_batch_padding_invariance(sampling):
  key = jax.random.key(7)
  out = sampling.generate(PROMPTS[:3], key, n=2)
  assert out.tokens.shape[0] == 6 and out.num_groups == 3
  np.testing.assert_array_equal(out.group_ids, np.repeat(np.arange(3), 2))
  np.testing.assert_array_equal(out.prompt_ids[2:4], np.repeat(out.prompt_ids[2:3], 2, axis=0))
  again = sampling.generate(PROMPTS[:3], key, n=2)
  for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(again)):
    np.testing.assert_array_equal(a, b)
  # The n samples of a prompt differ, and another key gives other samples.
  tokens = np.asarray(out.tokens)
  assert all(not np.array_equal(tokens[2 * p], tokens[2 * p + 1]) for p in range(3))
  other = np.asarray(sampling.generate(PROMPTS[:3], jax.random.key(8), n=2).tokens)
  assert not np.array_equal(tokens, other)
  # Rows draw with their own keys: one more prompt (same buckets) leaves the first rows as is.
  more = sampling.generate(PROMPTS, key, n=2)
  np.testing.assert_array_equal(np.asarray(more.tokens)[:6], tokens)
  np.testing.assert_allclose(np.asarray(more.logp)[:6], np.asarray(out.logp), atol=1e-6)


def test_no_recompilation_within_a_bucket(model):
  sampler = Sampler(model, CFG, SamplingConfig(temperature=1.0, max_new_tokens=16,
                                               eos_token_ids=(1,), batch_buckets=(4, 8)))
  key = jax.random.key(0)
  first = sampler.generate(PROMPTS, key, n=2, max_new_tokens=16)
  assert sampler.num_compiled() == 1
  # Other prompt lengths (≤ 16), numbers of prompts (≤ 4), budgets (≤ 16) and parameters.
  new_params = jax.tree.map(lambda x: x * 1.5, nnx.state(model))
  calls = [
      dict(prompts=PROMPTS[:3], max_new_tokens=9),
      dict(prompts=[[2] * 16, [4, 4]], max_new_tokens=16),
      dict(prompts=[[7]], max_new_tokens=1),
      dict(prompts=PROMPTS, max_new_tokens=16, params=new_params),
  ]
  outs = [sampler.generate(c.pop("prompts"), key, n=2, **c) for c in calls]
  assert sampler.num_compiled() == 1
  assert int(np.asarray(outs[0].lengths).max()) <= 9 and outs[2].tokens.shape == (2, 16)
  np.testing.assert_array_equal(outs[2].lengths, [1, 1])
  assert not np.array_equal(outs[3].tokens, first.tokens)   # the new parameters were used
  sampler.generate(PROMPTS, key, n=2, max_new_tokens=17)       # next generation bucket
  assert sampler.num_compiled() == 2


def test_sharded_generation_equals_single_device(sampling):
  single = sampling.generate(PROMPTS, jax.random.key(4), n=2)
  mesh = make_mesh("data:2,fsdp:2,tensor:2")
  model = shard_model(_model(), mesh)
  sampler = Sampler(model, CFG, sampling.config, mesh=mesh)
  sharded = sampler.generate(PROMPTS, jax.random.key(4), n=2)
  np.testing.assert_array_equal(sharded.tokens, single.tokens)
  np.testing.assert_array_equal(sharded.lengths, single.lengths)
  np.testing.assert_allclose(sharded.logp, single.logp, atol=1e-5)
  assert len(sharded.tokens.sharding.device_set) == 8


def test_bad_inputs_raise(greedy):
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="empty"):
    greedy.generate([[1], []], key)
  with pytest.raises(ValueError, match="outside"):
    greedy.generate([[1, 64]], key)
  with pytest.raises(ValueError, match="n"):
    greedy.generate([[1]], key, n=0)
  with pytest.raises(ValueError, match="max_new_tokens"):
    greedy.generate([[1]], key, max_new_tokens=0)
  with pytest.raises(ValueError, match="outside the vocabulary"):
    Sampler(_model(), CFG, SamplingConfig(eos_token_ids=(64,)))
  with pytest.raises(ValueError, match="largest bucket"):
    Sampler(_model(), CFG, SamplingConfig(prompt_len_buckets=(4,))).generate([[1] * 5], key)
  assert dataclasses.is_dataclass(greedy.config)


def test_decode_loop_updates_the_kv_cache_in_place(sampling):
  # Each step writes one slot per layer; XLA must do that in place. Reading the cache passed
  # into the step while writing the new slots once made XLA copy the whole cache twice per
  # step (the copy costs the cache's size each step, fatal for a 3B model's cache).
  from botjax.sampling.buckets import left_pad
  cfg = sampling.config
  prompts = [[5, 6, 7], [8, 9]]
  pb, lp, tb = sampling.buckets(len(prompts), 3, cfg.max_new_tokens, 2)
  ids, mask = left_pad(prompts, lp, pad_token_id=cfg.pad_token_id)
  ids = np.pad(ids, ((0, pb - len(prompts)), (0, 0)))
  mask = np.pad(mask, ((0, pb - len(prompts)), (0, 0)))
  mask[len(prompts):, -1] = True
  stops = np.full((pb, 4), -1, np.int32)
  active = np.arange(pb) < len(prompts)
  hlo = sampling._generate_jit.lower(
      sampling.params, ids, mask, active, stops, jax.random.key(0), np.int32(tb), np.int32(0),
      n=2, gen_len=tb).compile().as_text()
  cache_shape = f"[{CFG.num_layers},{pb * 2},{CFG.num_kv_heads},{CFG.head_dim},{lp + tb}]"
  computation, copies = None, []
  for line in hlo.splitlines():
    if line and not line.startswith(" ") and "{" in line:
      computation = "ENTRY" if line.startswith("ENTRY") else line.split(" ")[0]
    if " copy(" in line and cache_shape in line.split("=", 1)[1][:60]:
      copies.append(computation)
  assert " while(" in hlo and cache_shape in hlo             # the check below is not vacuous
  assert [c for c in copies if c != "ENTRY"] == [], copies


@pytest.mark.parametrize("threads", [2, 3])
def test_host_threads_give_the_same_completions(model, sampling, threads):
  """Prompts split over host threads (uneven parts, padded batches) draw the same tokens."""
  one = Sampler(model, CFG, sampling.config, host_threads=1)
  many = Sampler(model, CFG, sampling.config, host_threads=threads)
  prompts = PROMPTS + [[9, 8, 7, 6, 5]]
  a = one.generate(prompts, jax.random.key(5), n=3)
  b = many.generate(prompts, jax.random.key(5), n=3)
  assert b.num_groups == a.num_groups == len(prompts)
  for name in ("prompt_ids", "prompt_mask", "tokens", "mask", "lengths", "finish_reason",
               "group_ids"):
    np.testing.assert_array_equal(getattr(b, name), getattr(a, name), err_msg=name)
  # other batch shapes, other float order: a few ulp of log-probs of magnitude ~2
  np.testing.assert_allclose(b.logp, a.logp, atol=5e-6)
  assert int(many.last_num_steps) == int(one.last_num_steps)
  one_prompt = many.generate(prompts[:1], jax.random.key(5), n=3)    # fewer prompts than threads
  np.testing.assert_array_equal(one_prompt.tokens, np.asarray(a.tokens)[:3])
  many.close()                                     # a later call starts the threads again
  np.testing.assert_array_equal(many.generate(prompts, jax.random.key(5), n=3).tokens, a.tokens)
  with pytest.raises(ValueError, match="host_threads must be an int >= 1"):
    Sampler(model, CFG, sampling.config, host_threads=0)


def test_host_threads_do_not_split_into_more_padded_rows(model, sampling):
  """With one batch bucket of 8, two halves of 4 prompts would each be padded to 8 rows: the
  call runs as one program, its rows not doubled."""
  cfg = dataclasses.replace(sampling.config, batch_buckets=(8,))
  many = Sampler(model, CFG, cfg, host_threads=2)
  out = many.generate([[1, 2], [3], [4, 5, 6], [7, 8]] * 2, jax.random.key(1), n=1)
  assert many.num_compiled() == 1 and not many._threads.started and out.tokens.shape[0] == 8
  one = Sampler(model, CFG, cfg, host_threads=1).generate([[1, 2], [3], [4, 5, 6], [7, 8]] * 2,
                                                        jax.random.key(1), n=1)
  np.testing.assert_array_equal(out.tokens, one.tokens)


@pytest.mark.parametrize("name", ["greedy", "sampling"])
def test_both_cache_layouts_sample_the_same(model, greedy, sampling, name):
  """The XLA:CPU path (slots-last cache) and the accelerators' (cache [L, B, S, K, H],
  `jax.nn.dot_product_attention`) draw the same tokens with the same log-probs."""
  config = {"greedy": greedy, "sampling": sampling}[name].config
  params = nnx.state(model)
  out = {}
  for impl in ("cpu", "xla"):
    cfg = dataclasses.replace(CFG, attention=impl)
    sampler = Sampler(nnx.graphdef(bm.Decoder(cfg, rngs=nnx.Rngs(0))), cfg, config,
                      host_threads=1)
    out[impl] = sampler.generate(PROMPTS, jax.random.key(3), n=2, params=params)
  a, b = out["cpu"], out["xla"]
  for field in ("tokens", "mask", "lengths", "finish_reason"):
    np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
  np.testing.assert_allclose(a.logp, b.logp, atol=2e-5)
  assert int(np.asarray(a.mask).sum()) > len(PROMPTS)            # something was generated
