"""The slot engine: the same samples as the lockstep sampler whatever the schedule and KV cache
(paged pool or per-slot regions), log-probs the trainer reproduces, a bounded number of programs,
and the paged attention against NumPy."""

import dataclasses
import gc
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import botjax.models as bm
from botjax.sampling import (RolloutEngine, Sampler, SamplingConfig, SlotEngine,
                             sample_logprobs, make_engine)
from botjax.sampling.paged import BlockAllocator, PagedKVCache, ragged_attention, write_tokens
from botjax.sampling.regions import RegionKVCache
from botjax.sampling import slots as slots_lib
from botjax.sampling.slots import _narrower

CFG = bm.DecoderConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=8, intermediate_size=64, qkv_bias=True, rope_theta=1e4)
SC = SamplingConfig(temperature=1.0, max_new_tokens=20, eos_token_ids=(1,))
PROMPTS = [[5, 6, 7], [9], [3, 4, 5, 6, 7, 8, 9, 10, 11], [12, 13]]
# per-prompt stop ids, so that rows end at many different lengths
STOPS = [[2, 3], [], [4], [5, 6, 8]]
SMALL = dict(chunk_steps=4, block_size=4, tile_blocks=8)
CACHES = ["paged", "regions"]
# |Δ log p| bounds in bf16: the mean is the vLLM engine's bf16 probe tolerance
BF16_MEAN_BOUND, BF16_MAX_BOUND = 0.05, 0.5


@pytest.fixture(scope="module")
def model():
  return bm.Decoder(CFG, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def reference(model):
  return Sampler(model, CFG, SC, host_threads=1).generate(PROMPTS, jax.random.key(3), n=3,
                                                          stop_token_ids=STOPS)


def _same_samples(out, ref):
  """Equal tokens, lengths, finish reasons and groups; log-probs within 1e-6 (+ 1e-6 relative:
  the engine's attention sums in another order than the sampler's, ~1 ulp of |logp| ~ 4)."""
  t = ref.tokens.shape[1]
  assert out.tokens.shape == ref.tokens.shape and out.prompt_ids.shape == ref.prompt_ids.shape
  for name in ("tokens", "mask", "lengths", "finish_reason", "group_ids", "prompt_ids",
               "prompt_mask"):
    np.testing.assert_array_equal(np.asarray(getattr(out, name)), np.asarray(getattr(ref, name)),
                                  err_msg=name)
  np.testing.assert_allclose(np.asarray(out.logp)[:, :t], np.asarray(ref.logp), rtol=1e-6,
                             atol=1e-6)
  assert out.num_groups == ref.num_groups


@pytest.mark.parametrize("kv_cache", CACHES)
@pytest.mark.parametrize("slots,lanes", [(1, 1), (7, 1), (64, 1), (8, 2)])
def test_same_samples_whatever_the_number_of_slots(model, reference, slots, lanes, kv_cache):
  engine = SlotEngine(model, CFG, SC, num_slots=slots, lanes=lanes, kv_cache=kv_cache, **SMALL)
  out = engine.generate(PROMPTS, jax.random.key(3), n=3, stop_token_ids=STOPS)
  _same_samples(out, reference)
  lengths = np.asarray(reference.lengths)
  assert len(set(lengths.tolist())) >= 4                    # the rows do end at many lengths
  st = engine.last_stats
  assert st.useful_tokens == lengths.sum()
  # every row's first token comes from its prompt's prefill, the rest from decode steps
  assert st.computed_token_steps >= st.useful_tokens
  assert st.prefilled_prompts >= len(PROMPTS)
  if slots == 1:     # one slot: every request alone, nothing computed in vain but chunk tails
    assert st.decode_steps >= lengths.sum() - len(lengths)


@pytest.mark.parametrize("kv_cache", CACHES)
@pytest.mark.parametrize("slots,lanes", [(2, 1), (8, 2)])
def test_generate_groups_queues_what_on_group_asks_for(model, reference, slots, lanes, kv_cache):
  """`generate_groups`: the prompts `start` first, then whatever `on_group` returns when a
  group's n rows have all finished; each group handed over holds the rows `generate` draws for
  the same key (host arrays), and the output covers the queued prompts in index order."""
  engine = SlotEngine(model, CFG, SC, num_slots=slots, lanes=lanes, kv_cache=kv_cache, **SMALL)
  seen, handed = [], {}

  def on_group(p, out):
    assert isinstance(out.tokens, np.ndarray) and out.tokens.shape[0] == 3
    seen.append(p)
    handed[p] = out
    return [3] if p == 1 else []           # prompt 1 asks for prompt 3; prompt 2 never runs

  out, queued = engine.generate_groups(PROMPTS, jax.random.key(3), n=3, start=[1, 0],
                                       on_group=on_group, stop_token_ids=STOPS)
  assert sorted(seen) == [0, 1, 3] and seen.index(1) < seen.index(3)
  np.testing.assert_array_equal(queued, [0, 1, 3])
  ref_tokens, ref_len = np.asarray(reference.tokens), np.asarray(reference.lengths)
  t = ref_tokens.shape[1]
  for g, p in enumerate(queued):
    rows = slice(3 * p, 3 * p + 3)
    np.testing.assert_array_equal(np.asarray(out.tokens)[3 * g:3 * g + 3, :t], ref_tokens[rows])
    np.testing.assert_array_equal(handed[p].tokens[:, :t], ref_tokens[rows])
    np.testing.assert_array_equal(np.asarray(out.lengths)[3 * g:3 * g + 3], ref_len[rows])
    np.testing.assert_allclose(handed[p].logp[:, :t], np.asarray(reference.logp)[rows],
                               rtol=1e-6, atol=1e-6)
  assert out.num_groups == 3 and engine.last_stats.useful_tokens == sum(
      ref_len[3 * p:3 * p + 3].sum() for p in queued)
  # explicit row keys (row p·n + s takes keys[p·n + s]): a group's rows whatever else runs
  keys = jax.random.split(jax.random.key(9), 12)
  out2, _ = engine.generate_groups(PROMPTS, None, n=3, start=[2], on_group=lambda p, o: [],
                                   row_keys=keys, stop_token_ids=STOPS)
  ref2 = engine.generate_groups(PROMPTS, None, n=3, start=[2, 0], on_group=lambda p, o: [],
                                row_keys=keys, stop_token_ids=STOPS)[0]
  np.testing.assert_array_equal(np.asarray(out2.tokens), np.asarray(ref2.tokens)[3:6])
  # errors: a bad index, a prompt queued twice, an exception in on_group
  with pytest.raises(ValueError, match="outside"):
    engine.generate_groups(PROMPTS, jax.random.key(3), n=3, start=[4], on_group=lambda p, o: [])
  with pytest.raises(ValueError, match="queued twice"):
    engine.generate_groups(PROMPTS, jax.random.key(3), n=3, start=[0],
                           on_group=lambda p, o: [0])

  def broken(p, o):
    raise RuntimeError("scorer down")

  with pytest.raises(RuntimeError, match="scorer down"):
    engine.generate_groups(PROMPTS, jax.random.key(3), n=3, start=[0, 1], on_group=broken)
  with pytest.raises(ValueError, match="on_group must be callable"):
    engine.generate_groups(PROMPTS, jax.random.key(3), n=3, start=[0], on_group=None)


@pytest.mark.parametrize("kv_cache", CACHES)
@pytest.mark.parametrize("lanes", [1, 2])
def test_same_samples_on_a_multi_device_mesh_and_no_second_compile(reference, lanes, kv_cache):
  """Parameters sharded over 8 devices (data:2,fsdp:2,tensor:2): the engine's fresh pool, state
  and prompt store are placed on the mesh like its programs' outputs (an array on one device
  of the mesh is refused by jit), the samples are the single-device sampler's, and a second
  call compiles nothing."""
  from botjax.models.sharding import make_mesh, shard_model
  mesh = make_mesh("data:2,fsdp:2,tensor:2")
  sharded = shard_model(bm.Decoder(CFG, rngs=nnx.Rngs(0)), mesh)
  engine = SlotEngine(sharded, CFG, SC, num_slots=8, lanes=lanes, mesh=mesh, kv_cache=kv_cache,
                      **SMALL)
  out = engine.generate(PROMPTS, jax.random.key(3), n=3, stop_token_ids=STOPS)
  np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(reference.tokens))
  np.testing.assert_array_equal(np.asarray(out.lengths), np.asarray(reference.lengths))
  mask = np.asarray(reference.mask)
  np.testing.assert_allclose(np.asarray(out.logp)[mask], np.asarray(reference.logp)[mask],
                             atol=1e-5)
  refills, chunks = engine._programs.refill._cache_size(), engine._programs.chunk._cache_size()
  engine.generate(PROMPTS, jax.random.key(3), n=3, stop_token_ids=STOPS)   # the same work
  assert engine._programs.refill._cache_size() == refills
  if lanes == 1:   # the same schedule, so the same chunk widths too
    assert engine._programs.chunk._cache_size() == chunks


@pytest.mark.parametrize("kv_cache", CACHES)
@pytest.mark.parametrize("attention", ["xla", "cpu"])
def test_same_samples_with_sliding_windows_a_layer_scan_and_either_layout(attention, kv_cache):
  """The "xla" attention's layout ([layers, NB, bs, K, H] blocks, [layers, S, R, K, H]
  regions) and the "cpu" one's, a scanned decoder, and sliding-window layers (a window of 3
  on every other layer: shorter than most completions, so the window decides what is seen)."""
  cfg = dataclasses.replace(CFG, attention=attention, sliding_window=3, sliding_layers=(1, 0))
  model = bm.Decoder(cfg, rngs=nnx.Rngs(0), scan_layers=True)
  ref = Sampler(model, cfg, SC, host_threads=1).generate(PROMPTS, jax.random.key(5), n=2,
                                                         stop_token_ids=STOPS)
  assert np.asarray(ref.lengths).max() > 6
  engine = SlotEngine(model, cfg, SC, num_slots=3, lanes=1, kv_cache=kv_cache, **SMALL)
  assert engine.lanes[0].cache is None
  _same_samples(engine.generate(PROMPTS, jax.random.key(5), n=2, stop_token_ids=STOPS), ref)
  cache = engine.lanes[0].cache
  assert cache.layout == ("BSKH" if attention == "xla" else "BKHS")
  assert isinstance(cache, RegionKVCache if kv_cache == "regions" else PagedKVCache)


@pytest.mark.parametrize("kv_cache", CACHES)
@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (5, 1.0), (0, 0.8), (6, 0.9)])
def test_logprobs_equal_the_trainers_teacher_forced_ones(model, top_k, top_p, kv_cache):
  """Untruncated and, with top-k / top-p, under the recorded truncated support: the log-probs
  the update recomputes equal the engine's (2e-5, f32), and the sampler's."""
  sc = dataclasses.replace(SC, top_k=top_k, top_p=top_p)
  engine = SlotEngine(model, CFG, sc, num_slots=5, lanes=1, kv_cache=kv_cache, **SMALL)
  out = engine.generate(PROMPTS, jax.random.key(11), n=3, stop_token_ids=STOPS)
  mask = np.asarray(out.mask)
  assert (out.support_logp is not None) == (top_k > 0 or top_p < 1.0)
  tf, _ = jax.jit(lambda o: sample_logprobs(model, o, temperature=sc.logp_temperature))(out)
  np.testing.assert_allclose(np.asarray(tf)[mask], np.asarray(out.logp)[mask], atol=2e-5)
  ref = Sampler(model, CFG, sc, host_threads=1).generate(PROMPTS, jax.random.key(11), n=3,
                                                         stop_token_ids=STOPS)
  _same_samples(out, ref)
  if out.support_logp is not None:
    sup, ref_sup = np.asarray(out.support_logp), np.asarray(ref.support_logp)
    np.testing.assert_allclose(sup[mask], ref_sup[mask], atol=1e-5)
    assert np.isfinite(sup[mask]).mean() > 0.5            # the cut applied at most steps
    assert (np.asarray(out.logp)[mask] <= 0).all()


@pytest.mark.parametrize("kv_cache", CACHES)
def test_per_row_budgets_and_a_bounded_number_of_programs(model, kv_cache):
  """Any mix of lengths (per-row budgets) runs on the same few programs: refills by the
  number of new prompts (a power of 4 up to the slots) and chunks by their rows (S, S/2, S/4, …)."""
  gc.collect()   # frees the programs of an earlier engine of the same settings (shared, below)
  sc = dataclasses.replace(SC, eos_token_ids=(), gen_len_buckets=(32,),
                           prompt_len_buckets=(12,))
  engine = SlotEngine(model, CFG, sc, num_slots=6, lanes=1, kv_cache=kv_cache, **SMALL)
  sampler = Sampler(model, CFG, sc, host_threads=1)
  rng = np.random.default_rng(0)
  assert _narrower(6) == [3, 1] and _narrower(64) == [32, 16, 8, 4, 2, 1] and _narrower(1) == []
  bound = 1 + 3 + 1 + 2           # refills: U in {0, 1, 4, 6}; chunks: widths 6, 3, 1
  seen = []
  for call in range(6):
    num = int(rng.integers(1, 5))
    n = int(rng.integers(1, 4))
    prompts = [rng.integers(3, 64, size=int(rng.integers(1, 12))).tolist() for _ in range(num)]
    budgets = rng.integers(1, 33, size=num * n)
    out = engine.generate(prompts, jax.random.key(call), n=n, max_new_tokens=budgets.tolist())
    np.testing.assert_array_equal(np.asarray(out.lengths), budgets)
    assert (np.asarray(out.finish_reason) == 1).all()
    if call == 0:   # a row cut at its budget is the sampler's row cut there
      ref = sampler.generate(prompts, jax.random.key(call), n=n, max_new_tokens=32)
      for r, b in enumerate(budgets):
        np.testing.assert_array_equal(np.asarray(out.tokens)[r, :b], np.asarray(ref.tokens)[r, :b])
    seen.append(engine.num_compiled())
  assert seen[-1] <= bound, seen
  assert seen[-1] == seen[-2] or seen[-1] < bound


@pytest.mark.parametrize("kv_cache", CACHES)
@pytest.mark.parametrize("lanes", [1, 2])
def test_a_repeated_call_compiles_nothing(model, lanes, kv_cache):
  """The second call of the same work runs on the first call's refills: with placed parameters,
  the pool kept from the first call and each call's fresh state are alike committed, so no refill
  is compiled again (it was, once, before they were)."""
  gc.collect()   # frees the programs of an earlier engine of the same settings (shared, below)
  sc = dataclasses.replace(SC, eos_token_ids=(), gen_len_buckets=(64,), prompt_len_buckets=(8,))
  engine = SlotEngine(model, CFG, sc, num_slots=8, lanes=lanes, chunk_steps=4, block_size=8,
                      kv_cache=kv_cache)
  engine.set_params(jax.device_put(nnx.state(model), jax.devices()[0]))   # placed, as a trainer's
  rng = np.random.default_rng(0)
  prompts = rng.integers(3, 64, size=(4, 8)).tolist()
  budgets = rng.integers(2, 41, size=16).tolist()
  seen = []
  for call in range(3):
    out = engine.generate(prompts, jax.random.key(call), n=4, max_new_tokens=budgets)
    np.testing.assert_array_equal(np.asarray(out.lengths), budgets)
    seen.append(engine._programs.refill._cache_size())
  slots = 8 // lanes
  if lanes == 1:
    assert seen[0] == seen[1] == seen[2], seen
  # Each refill size (U new prompts) and chunk width a lane reaches is compiled once: at most U
  # in {0, 1, 4} and the lane's S and its halves (a pool committed unlike a fresh one would
  # compile a size twice).
  assert seen[-1] <= 3 and engine._programs.chunk._cache_size() <= 1 + len(_narrower(slots))


def test_engines_of_equal_settings_share_their_programs(model):
  """A second engine of the same model graph and decoding rule (a trainer's evaluation engine)
  runs on the first one's compiled programs, with its own parameters; another decoding rule
  gets programs of its own; the programs are freed with the last engine holding them."""
  gc.collect()
  # no stop ids: every row runs to its budget, so both engines run the same schedule
  sc = dataclasses.replace(SC, eos_token_ids=(), gen_len_buckets=(20,), prompt_len_buckets=(10,))
  budgets = [3, 17, 9, 20, 5, 11, 2, 14]
  first = SlotEngine(model, CFG, sc, num_slots=4, lanes=1, **SMALL)
  ref = first.generate(PROMPTS, jax.random.key(2), n=2, max_new_tokens=budgets)
  compiled = first.num_compiled()
  assert compiled >= 2
  other = bm.Decoder(CFG, rngs=nnx.Rngs(7))                  # the same graph, other weights
  second = SlotEngine(other, CFG, sc, num_slots=4, lanes=1, **SMALL)
  assert second._programs is first._programs
  out = second.generate(PROMPTS, jax.random.key(2), n=2, max_new_tokens=budgets)
  assert second.num_compiled() == compiled                    # nothing compiled again
  expect = Sampler(other, CFG, sc, host_threads=1).generate(PROMPTS, jax.random.key(2), n=2,
                                                            max_new_tokens=20)
  mask = np.asarray(out.mask)
  np.testing.assert_array_equal(np.asarray(out.tokens)[mask], np.asarray(expect.tokens)[mask])
  np.testing.assert_allclose(np.asarray(out.logp)[mask], np.asarray(expect.logp)[mask],
                             atol=1e-5)                       # its own parameters
  assert np.abs(np.asarray(out.logp) - np.asarray(ref.logp))[mask].max() > 1e-2
  hotter = SlotEngine(model, CFG, dataclasses.replace(sc, temperature=0.7), num_slots=4,
                      lanes=1, **SMALL)
  assert hotter._programs is not first._programs and hotter.num_compiled() == 0
  key = [k for k, v in slots_lib._SHARED.items() if v is first._programs][0]
  del first, second, hotter
  gc.collect()
  assert key not in slots_lib._SHARED


@pytest.mark.parametrize("late", [None, 0, 1])
def test_lanes_give_the_same_bits_whatever_their_timing(model, reference, late, monkeypatch):
  """Two lanes split a call's prompts between them before they start, so a lane that starts
  late (another job on its core) changes no row's bits: with one shared queue the other lane
  would take its requests, prefill them in other batches and round them differently."""
  engine = SlotEngine(model, CFG, SC, num_slots=4, lanes=2, **SMALL)
  first = engine.generate(PROMPTS, jax.random.key(3), n=3, stop_token_ids=STOPS)
  run, done = slots_lib._Lane.run, slots_lib._Call.done
  lane_of, served = {}, {}                       # thread -> lane; row -> the lane that ended it

  def delayed(lane, call):
    lane_of[threading.get_ident()] = lane.index
    if lane.index == late:
      time.sleep(0.5)
    return run(lane, call)

  def record(call, req):
    served[req.rid] = lane_of[threading.get_ident()]
    return done(call, req)

  monkeypatch.setattr(slots_lib._Lane, "run", delayed)
  monkeypatch.setattr(slots_lib._Call, "done", record)
  out = engine.generate(PROMPTS, jax.random.key(3), n=3, stop_token_ids=STOPS)
  # prompt p's rows p·n .. p·n + n − 1 on lane p mod 2, however late either lane starts
  assert served == {r: (r // 3) % 2 for r in range(3 * len(PROMPTS))}
  for name in ("tokens", "logp", "lengths", "finish_reason"):
    np.testing.assert_array_equal(np.asarray(getattr(out, name)),
                                  np.asarray(getattr(first, name)), err_msg=name)
  _same_samples(out, reference)


def test_engine_registry_and_errors(model):
  engine = make_engine("slots", model, SC, num_slots=4, lanes=1)
  assert isinstance(engine, SlotEngine) and isinstance(engine, RolloutEngine)
  assert engine.exact_logp and engine.config == SC
  out = engine.generate([[5, 6, 7]], jax.random.key(0), n=2)
  engine.set_params(nnx.state(bm.Decoder(CFG, rngs=nnx.Rngs(1))))
  other = engine.generate([[5, 6, 7]], jax.random.key(0), n=2)
  assert not np.array_equal(np.asarray(other.logp), np.asarray(out.logp))
  with pytest.raises(ValueError, match="max_new_tokens must be an int or 2 ints"):
    engine.generate([[5]], jax.random.key(0), n=2, max_new_tokens=[3, 4, 5])
  with pytest.raises(ValueError, match="prompt 1 is empty"):
    engine.generate([[5], []], jax.random.key(0))
  with pytest.raises(ValueError, match=r"outside \[0, 64\)"):
    engine.generate([[5, 99]], jax.random.key(0))
  with pytest.raises(ValueError, match="lanes must be an int >= 1 dividing num_slots=6"):
    SlotEngine(model, CFG, SC, num_slots=6, lanes=4)
  with pytest.raises(ValueError, match=r"kv_cache must be one of \('auto', 'paged', "
                                       r"'regions'\), got 'dense'"):
    SlotEngine(model, CFG, SC, kv_cache="dense")
  with pytest.raises(ValueError, match="drain_steps must be an int >= 1, got 0"):
    SlotEngine(model, CFG, SC, drain_steps=0)
  engine.close()


def test_auto_keeps_regions_for_short_budgets_and_the_pool_for_long_ones(model):
  """kv_cache="auto": one region per slot up to a generation bucket of
  `REGIONS_MAX_NEW_TOKENS`, the paged pool above it (decided per call, by its bucket)."""
  limit = slots_lib.REGIONS_MAX_NEW_TOKENS
  sc = dataclasses.replace(SC, eos_token_ids=(), gen_len_buckets=(limit, 2 * limit),
                           prompt_len_buckets=(8,))
  engine = SlotEngine(model, CFG, sc, num_slots=2, lanes=1, **SMALL)
  assert engine.uses_regions(limit) and not engine.uses_regions(limit + 1)
  engine.generate([[5, 6]], jax.random.key(0), n=2, max_new_tokens=3)
  assert isinstance(engine.lanes[0].cache, RegionKVCache)
  assert engine.lanes[0].cache.region == 8 + limit          # prompt bucket + generation bucket
  engine.generate([[5, 6]], jax.random.key(0), n=2, max_new_tokens=limit + 1)
  assert isinstance(engine.lanes[0].cache, PagedKVCache)
  fixed = SlotEngine(model, CFG, sc, num_slots=2, lanes=1, kv_cache="paged", **SMALL)
  assert not fixed.uses_regions(4)
  # the default number of slots: 128 where the config's budget keeps regions, else 64
  short = dataclasses.replace(SC, max_new_tokens=limit)
  long = dataclasses.replace(SC, max_new_tokens=limit + 1)
  assert SlotEngine(model, CFG, short, lanes=1).num_slots == slots_lib.REGION_SLOTS == 128
  assert SlotEngine(model, CFG, long, lanes=1).num_slots == slots_lib.SLOTS == 64
  assert SlotEngine(model, CFG, short, lanes=1, kv_cache="paged").num_slots == 64
  assert SlotEngine(model, CFG, long, lanes=1, kv_cache="regions").num_slots == 128
  assert make_engine("slots", model, short, host_threads=3).num_slots == 129   # 3 lanes


@pytest.mark.parametrize("kv_cache", CACHES)
def test_chunks_run_on_while_nothing_waits_and_narrow_when_half_end(model, kv_cache):
  """While requests wait, a chunk is k steps (the refill cadence); once none waits, a chunk
  runs up to `drain_steps`, and (paged) ends when at most half its rows are live, the next
  running half as wide. 4 slots, 4 requests of budgets 2, 3, 30, 30 (no stop token), k = 4:
  paged, the first chunk ends after 2 steps (rows of budget 2 and 3 done: 2 of 4 live) and the
  second (2 rows) runs the remaining 27 steps; regions (never narrowed), one chunk of all 4
  rows runs the 29 steps; with drain_steps = k either takes ceil(29 / 4) = 8 chunks or more."""
  sc = dataclasses.replace(SC, eos_token_ids=(), gen_len_buckets=(32,))
  budgets = [2, 3, 30, 30]
  runs = {}
  for drain in (64, 4):
    engine = SlotEngine(model, CFG, sc, num_slots=4, lanes=1, chunk_steps=4, drain_steps=drain,
                        block_size=4, tile_blocks=8, kv_cache=kv_cache)
    out = engine.generate([[5, 6], [7]], jax.random.key(1), n=2, max_new_tokens=budgets)
    np.testing.assert_array_equal(np.asarray(out.lengths), budgets)
    runs[drain] = (engine.last_stats, out)
  drained, stepped = runs[64][0], runs[4][0]
  if kv_cache == "paged":
    assert (drained.refills, drained.chunks, drained.decode_steps) == (1, 2, 2 + 27)
    assert stepped.chunks == 8 and stepped.decode_steps == 29
    assert drained.computed_token_steps == 4 + 4 * 2 + 2 * 27
  else:
    assert (drained.refills, drained.chunks, drained.decode_steps) == (1, 1, 29)
    assert stepped.chunks == 8 and stepped.decode_steps == 29
    assert drained.computed_token_steps == 4 + 4 * 29
  np.testing.assert_array_equal(np.asarray(runs[64][1].tokens), np.asarray(runs[4][1].tokens))


def test_region_cache_writes_against_numpy():
  """`RegionKVCache`: prompts written at the start of the slots' regions (a slot index ≥ S
  dropped), and one token per slot at its own position through a decoder step's view, with
  the mask it sees; in both layouts."""
  from botjax.sampling.regions import RegionStep
  rng = np.random.default_rng(0)
  for layout in ("BKHS", "BSKH"):
    cache = RegionKVCache.init(CFG, num_slots=3, region=6, layout=layout)
    order = [1 + layout.index(a) for a in "BSKH"]           # [L, slot, pos, K, H] view

    def view(x):
      return np.transpose(np.asarray(x), [0] + order)

    want_k = np.zeros((CFG.num_layers, 3, 6, CFG.num_kv_heads, CFG.head_dim), np.float32)
    want_v = want_k.copy()
    pk = rng.normal(size=(CFG.num_layers, 2, 4, CFG.num_kv_heads, CFG.head_dim)).astype(np.float32)
    pv = pk + 1

    def as_layout(x):                                     # [L, B, S, K, H] -> [L, *layout]
      return np.transpose(x, [0] + [1 + "BSKH".index(a) for a in layout])

    cache = cache.write_prompts(jnp.asarray([2, 3]), jnp.asarray(as_layout(pk)),
                                jnp.asarray(as_layout(pv)))      # slot 3: dropped
    want_k[:, 2, :4], want_v[:, 2, :4] = pk[:, 0], pv[:, 0]
    np.testing.assert_array_equal(view(cache.k), want_k)
    np.testing.assert_array_equal(view(cache.v), want_v)
    # a step: slot s writes at pos[s] and sees region slots < pos[s] (its own through new_slots)
    pos = jnp.asarray([0, 5, 2], jnp.int32)
    kv_layout = "BKSH"
    nk = rng.normal(size=(3, CFG.num_kv_heads, 1, CFG.head_dim)).astype(np.float32)
    pas = RegionStep(cache, pos).begin(jnp.ones((3, 1), bool), kv_layout=kv_layout)
    lay = pas.layer(pas.state, 1, window=2).write(jnp.asarray(nk), jnp.asarray(nk * 2),
                                                  kv_layout)
    for s, p in enumerate([0, 5, 2]):
      want_k[1, s, p], want_v[1, s, p] = nk[s, :, 0], 2 * nk[s, :, 0]
    np.testing.assert_array_equal(view(pas.finish(lay.state).k), want_k)
    np.testing.assert_array_equal(view(pas.finish(lay.state).v), want_v)
    seen = np.asarray(lay.allowed[:, 0])
    np.testing.assert_array_equal(seen, [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0],
                                         [0, 1, 0, 0, 0, 0]])     # window 2: pos − 1 only
    np.testing.assert_array_equal(np.asarray(lay.new_slots(jnp.ones((3, 1, 1), bool)))[:, 0],
                                  np.eye(6, dtype=bool)[[0, 5, 2]])


# -- the paged pool and its attention, against NumPy -------------------------------------------

def _oracle(q, ks, vs, window):
  """Per slot: softmax(q k^T) v over its own keys [T, K, H] (the last `window` ones)."""
  s, kh, g, h = q.shape
  out = np.zeros((s, kh, g, h))
  for i in range(s):
    k, v = ks[i], vs[i]
    if window is not None:
      k, v = k[-window:], v[-window:]
    sc = np.einsum("KGH,TKH->KGT", q[i], k)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out[i] = np.einsum("KGT,TKH->KGH", p, v)
  return out


@pytest.mark.parametrize("layout", ["BKHS", "BSKH"])
@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("tuning", ["auto", "off"])
def test_ragged_attention_against_numpy(layout, window, jit, tuning, monkeypatch):
  """Both products: the CPU-tuned one (`attention_cpu.paged_partials`, what a CPU target runs)
  and the portable one (`BOTJAX_XLA_CPU_TUNING=0`, what GPU and TPU programs hold)."""
  monkeypatch.setenv("BOTJAX_XLA_CPU_TUNING", tuning)
  rng = np.random.default_rng(1)
  cfg = dataclasses.replace(CFG, num_layers=2)
  bs, nb, s_num, kh, g, h = 4, 16, 3, 2, 2, 8
  lengths = [9, 1, 14]
  alloc = BlockAllocator(nb)
  owner, base = np.full(nb, s_num, np.int32), np.zeros(nb, np.int32)
  table = np.full((s_num, 4), -1, np.int32)
  pool = PagedKVCache.init(cfg, num_blocks=nb, block_size=bs, layout=layout)
  keys = [rng.normal(size=(n, kh, h)).astype(np.float32) for n in lengths]
  vals = [rng.normal(size=(n, kh, h)).astype(np.float32) for n in lengths]
  alloc.alloc(2)                                   # blocks 0, 1 held by no slot: skipped
  k_all, v_all = pool.k, pool.v
  for s, n in enumerate(lengths):                  # interleaved blocks, one token at a time
    blocks = []
    for t in range(n):
      if t % bs == 0:
        (b,) = alloc.alloc(1)
        owner[b], base[b] = s, t
        blocks.append(b)
      k_all, v_all = write_tokens(k_all, v_all, 1, jnp.asarray([blocks[-1]]),
                                  jnp.asarray([t % bs]), jnp.asarray(keys[s][t:t + 1]),
                                  jnp.asarray(vals[s][t:t + 1]), layout)
    table[s, :len(blocks)] = blocks
  q = rng.normal(size=(s_num, kh, g, h)).astype(np.float32)

  def f(q, k_all, v_all, num_tiles):
    return ragged_attention(q, k_all, v_all, jnp.asarray(owner), jnp.asarray(base),
                            jnp.asarray(lengths, jnp.int32), jnp.asarray(table), layout=layout,
                            window=window, tile=4, num_tiles=num_tiles, layer=1)

  f = jax.jit(f) if jit else f
  num_tiles = -(-alloc.high_water() // 4)
  out = f(jnp.asarray(q), k_all, v_all, jnp.int32(num_tiles))
  np.testing.assert_allclose(np.asarray(out), _oracle(q, keys, vals, window), atol=2e-6)
  # layer 0 was never written; a layer's tokens land where the table says
  assert not np.asarray(k_all[0]).any()


def test_block_allocator():
  alloc = BlockAllocator(6)
  assert alloc.trash == 5 and alloc.num_free == 5
  assert alloc.alloc(3) == [0, 1, 2] and alloc.high_water() == 3
  alloc.free([0, 2])
  assert alloc.alloc(1) == [0] and alloc.high_water() == 2
  with pytest.raises(RuntimeError, match="3 free blocks, 4 were asked for"):
    alloc.alloc(4)
  with pytest.raises(ValueError, match="block 2 is not in use"):
    alloc.free([2])
  with pytest.raises(ValueError, match="at least 2 blocks"):
    BlockAllocator(1)


@pytest.mark.parametrize("kv_cache", CACHES)
def test_plan_reports_the_engines_pool(model, kv_cache):
  """`models.plan(kv_slots=S)` counts the cache the engine allocates: S regions of the full
  length, or a pool of blocks for every slot at its full budget (less the pool's trash block)."""
  sc = dataclasses.replace(SC, prompt_len_buckets=(8,), gen_len_buckets=(16,))
  engine = SlotEngine(model, CFG, sc, num_slots=4, lanes=1, chunk_steps=4, block_size=4,
                      tile_blocks=1, kv_cache=kv_cache)
  engine.generate([[5, 6, 7]], jax.random.key(0), n=2, max_new_tokens=16)
  p = bm.plan(CFG, "data:1", num_devices=1, batch_size=64, seq_len=8 + 16, dtype=jnp.float32,
              compute_flops=False, kv_slots=4)
  block = 2 * CFG.num_layers * 4 * CFG.num_kv_heads * CFG.head_dim * 4      # k and v, bs = 4
  trash = block if kv_cache == "paged" else 0
  assert engine.last_stats.pool_bytes == p.kv_cache_bytes + trash
  assert "KV cache / device (4 slots)" in str(p)
  lockstep = bm.plan(CFG, "data:1", num_devices=1, batch_size=64, seq_len=24, dtype=jnp.float32,
                     compute_flops=False)
  assert lockstep.kv_cache_bytes == 16 * p.kv_cache_bytes             # 64 rows, not 4 slots


@pytest.mark.parametrize("kv_cache", CACHES)
@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (6, 0.9)])
def test_bfloat16_logprob_gap_is_measured_and_small(model, top_k, top_p, kv_cache, capsys):
  """bf16 compute (f32 weights): the engine's log-probs against the update's teacher-forced ones
  in bf16, and against the f32 model's, as mean and max |Δ log p| over the completion tokens.
  The two bf16 sides run the same weights at the same precision through other programs (the
  engine's decode chunks against one teacher-forced forward), so they differ by bf16 rounding.
  Measured on this model (printed; docs/scaling.md): mean 0.007 / max 0.03 untruncated, mean
  0.012 / max 0.15 under top-k 6, top-p 0.9."""
  m16 = bm.Decoder(CFG, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
  sc = dataclasses.replace(SC, top_k=top_k, top_p=top_p)
  out = SlotEngine(m16, CFG, sc, num_slots=5, lanes=1, kv_cache=kv_cache, **SMALL).generate(
      PROMPTS, jax.random.key(11), n=3, stop_token_ids=STOPS)
  mask = np.asarray(out.mask)
  lp = np.asarray(out.logp)[mask]
  tf16, _ = jax.jit(lambda o: sample_logprobs(m16, o, temperature=sc.logp_temperature))(out)
  tf32, _ = jax.jit(lambda o: sample_logprobs(model, o, temperature=sc.logp_temperature))(out)
  d16 = np.abs(np.asarray(tf16)[mask] - lp)
  d32 = np.abs(np.asarray(tf32)[mask] - lp)
  with capsys.disabled():
    print(f"\nbf16 slot engine ({kv_cache}), top_k={top_k} top_p={top_p}, {mask.sum()} tokens: "
          f"vs bf16 update mean {d16.mean():.2e} max {d16.max():.2e}; "
          f"vs f32 update mean {d32.mean():.2e} max {d32.max():.2e}")
  assert np.isfinite(lp).all() and mask.sum() > 50
  assert d16.mean() < BF16_MEAN_BOUND and d16.max() < BF16_MAX_BOUND
  assert d32.mean() < BF16_MEAN_BOUND and d32.max() < BF16_MAX_BOUND


def test_pool_defaults_are_the_cpu_ones_only_with_cpu_tuning(model, monkeypatch):
  """Blocks of 64 slots read 32 per trip where XLA:CPU tuning applies (attention_cpu's
  measured constants); the portable 32 and 128 with the switch off (and on GPU / TPU)."""
  from botjax import xla_cpu
  from botjax.models import attention_cpu
  monkeypatch.setenv(xla_cpu.ENV_VAR, "auto")
  engine = SlotEngine(model, CFG, SC)
  assert (engine.block_size, engine.tile_blocks) == (
      attention_cpu.PAGED_BLOCK_SIZE, attention_cpu.PAGED_TILE_BLOCKS) == (64, 32)
  monkeypatch.setenv(xla_cpu.ENV_VAR, "0")
  engine = SlotEngine(model, CFG, SC)
  assert (engine.block_size, engine.tile_blocks) == (32, 128)
