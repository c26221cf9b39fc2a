"""The jax callback bridge inside jit, vmap (sequential and broadcast_all) and grad."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from botjax.rewards.bridge import host_io_callback, host_reward_callback

EOS = 2


def count_eos(ids: np.ndarray) -> np.ndarray:
  """Host reward: number of EOS tokens per row, as float32 (works on any leading dims)."""
  return (ids == EOS).sum(axis=-1).astype(np.float32)


IDS = np.array([[1, 2, 3, 2], [2, 2, 2, 0], [0, 0, 0, 0]], np.int32)  # [B=3, T=4]


def test_inside_jit():
  reward = host_reward_callback(count_eos, out_shape=(3,))
  out = jax.jit(lambda ids: reward(ids) * 2.0)(IDS)
  np.testing.assert_array_equal(np.asarray(out), [4.0, 6.0, 0.0])
  assert out.dtype == jnp.float32


@pytest.mark.parametrize("vmap_method,expected_calls", [("sequential", 3), ("broadcast_all", 1)])
def test_inside_vmap(vmap_method, expected_calls):
  calls = []

  def row_reward(ids):
    calls.append(ids.shape)
    return count_eos(ids)

  reward = host_reward_callback(row_reward, out_shape=(), vmap_method=vmap_method)
  out = jax.jit(jax.vmap(reward))(IDS)
  np.testing.assert_array_equal(np.asarray(out), [2.0, 3.0, 0.0])
  assert len(calls) == expected_calls
  assert calls[0] == ((4,) if vmap_method == "sequential" else (3, 4))


def test_no_gradient_through_reward():
  reward = host_reward_callback(count_eos, out_shape=(3,))

  def loss(w):
    # Only the explicit w**2 term carries gradient; the reward is a constant for autodiff.
    return jnp.sum(reward(IDS) * w) + jnp.sum(w ** 2)

  w = jnp.array([1.0, 2.0, 3.0])
  g = jax.jit(jax.grad(loss))(w)
  np.testing.assert_allclose(np.asarray(g), [2.0 + 2.0, 4.0 + 3.0, 6.0 + 0.0])


def test_float_input_gets_zero_gradient():
  reward = host_reward_callback(lambda x: np.square(x).sum(), out_shape=())
  g = jax.grad(lambda x: reward(x) + x.sum())(jnp.ones((3,)))
  np.testing.assert_array_equal(np.asarray(g), np.ones((3,)))


def test_io_callback_ordered_in_loop():
  seen = []

  def log_and_score(i):
    seen.append(int(i))
    return np.float32(i) * 0.5

  reward = host_io_callback(log_and_score, out_shape=(), ordered=True)

  def body(i, acc):
    return acc + reward(i)

  total = jax.jit(lambda: jax.lax.fori_loop(0, 5, body, jnp.float32(0.0)))()
  assert float(total) == 5.0  # 0.5 * (0 + 1 + 2 + 3 + 4)
  assert seen == [0, 1, 2, 3, 4]


def test_declared_shape_mismatch_and_bad_method():
  with pytest.raises(ValueError, match="vmap_method"):
    host_reward_callback(count_eos, out_shape=(3,), vmap_method="loop")
  bad = host_reward_callback(lambda ids: np.zeros((5,), np.float32), out_shape=(3,))
  with pytest.raises(Exception, match="declared"):
    jax.block_until_ready(jax.jit(bad)(IDS))


# -- a RewardFn (strings) with a tokenizer, inside jit and vmap ------------------------------

TEXTS = ["<step 1>3 + 4 = 7</step>\n<step 2>7 * 2 = 14</step>\n<final>14</final>",
         "<step 1>3 + 4 = 8</step>\n<step 2>8 * 2 = 16</step>\n<final>16</final>",
         "<step 1>3 + 4 = 7</step>\n<final>7</final>",
         "no steps at all"]
META = [{"answer": "14", "step_values": [7, 14]}] * len(TEXTS)
STOP = 0   # id of the stop token appended to some rows


@pytest.fixture(scope="module")
def tokenizer():
  """A byte-level BPE tokenizer trained here on the texts (no download)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=280, show_progress=False, special_tokens=["<eos>"],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(TEXTS * 10, trainer)
  assert tok.token_to_id("<eos>") == STOP
  return tok


def _batch(tokenizer, T=48):
  """Right-padded ids [B, T] and mask; rows 0 and 2 end with the stop token."""
  ids = np.full((len(TEXTS), T), 7, np.int32)    # padding ids are arbitrary: the mask hides them
  mask = np.zeros((len(TEXTS), T), bool)
  for b, text in enumerate(TEXTS):
    row = tokenizer.encode(text).ids + ([STOP] if b % 2 == 0 else [])
    assert len(row) <= T
    ids[b, :len(row)], mask[b, :len(row)] = row, True
  return ids, mask


def _host_path(tokenizer, fn, ids, mask):
  """What the trainer does on the host: texts and offsets, fn, spans -> tokens."""
  from botjax.rewards import call_reward_fn, spans_to_token_values
  from botjax.sampling.text import decode_with_offsets
  texts, offsets = [], []
  for b in range(ids.shape[0]):
    row = ids[b][mask[b]].tolist()
    stopped = row[-1] == STOP
    text, offs = decode_with_offsets(tokenizer, row[:-1] if stopped else row)
    texts.append(text)
    offsets.append(offs + ([(len(text), len(text))] if stopped else []))
  assert texts == TEXTS
  results = call_reward_fn(fn, [""] * len(texts), texts, META)
  values = np.stack([spans_to_token_values(r.token_spans, o, ids.shape[1])
                     for r, o in zip(results, offsets)])
  return np.asarray([r.reward for r in results], np.float32), values


@pytest.mark.parametrize("vmap_method", ["sequential", "broadcast_all"])
def test_reward_fn_callback_in_jit_and_vmap_matches_the_host_path(tokenizer, vmap_method):
  from botjax.rewards import MathReward
  from botjax.testbeds.arith_judge import ExactArithmeticJudge
  from botjax.rewards.bridge import reward_fn_callback
  fn = MathReward(ExactArithmeticJudge(), w_g=3.0, w_s=0.5)
  ids, mask = _batch(tokenizer)
  want_r, want_v = _host_path(tokenizer, fn, ids, mask)
  # the reward has a signal: rows differ, and steps give token values of both signs
  assert len(set(want_r.tolist())) > 1 and want_v.max() > 0 > want_v.min()
  g = reward_fn_callback(fn, tokenizer, batch_size=ids.shape[0], completion_len=ids.shape[1],
                         metadata=META, stop_token_ids=[STOP], vmap_method=vmap_method)
  r, v = jax.jit(g)(ids, mask)
  np.testing.assert_array_equal(np.asarray(r), want_r)
  np.testing.assert_array_equal(np.asarray(v), want_v)
  # vmap over two copies of the batch, the second with its rows reversed
  ids2, mask2 = np.stack([ids, ids[::-1]]), np.stack([mask, mask[::-1]])
  meta_rev = META[::-1]   # the same for every row here, so reversing rows reverses the outputs
  assert meta_rev == META
  rs, vs = jax.jit(jax.vmap(g))(ids2, mask2)
  np.testing.assert_array_equal(np.asarray(rs), np.stack([want_r, want_r[::-1]]))
  np.testing.assert_array_equal(np.asarray(vs), np.stack([want_v, want_v[::-1]]))
  # differentiable code around it: the rewards are constants (d/dw Σ r·w + Σ w = r + 1)
  grad = jax.grad(lambda w: jnp.sum(g(ids, mask)[0] * w) + jnp.sum(w))(jnp.ones((ids.shape[0],)))
  np.testing.assert_allclose(np.asarray(grad), want_r + 1.0)


def test_reward_fn_callback_checks_shapes_and_the_spec(tokenizer):
  from botjax.rewards import RewardResult
  from botjax.rewards.bridge import reward_fn_callback

  def undeclared_spans(prompts, completions, metadata):   # no spec: a plain sequence reward
    return [RewardResult(1.0, token_spans=[(0, 1, 1.0)]) for _ in completions]

  ids, mask = _batch(tokenizer)
  g = reward_fn_callback(undeclared_spans, tokenizer, batch_size=4, completion_len=ids.shape[1])
  with pytest.raises(ValueError, match="spec declares"):
    g.host(ids, mask)
  with pytest.raises(ValueError, match="must end in"):
    g.host(ids[:, :10], mask[:, :10])
  with pytest.raises(ValueError, match="metadata has 2 items"):
    reward_fn_callback(undeclared_spans, tokenizer, batch_size=4, completion_len=8,
                       metadata=[{}, {}])
