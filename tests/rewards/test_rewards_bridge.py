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
