"""Speed of the token-level advantage estimators against NumPy and a streaming pass.

  python benchmarks/advantages.py [--batch 4096 --tokens 2048 --groups 512 --repeats 7]

A ragged batch (lengths uniform in [0, T], random non-contiguous group ids) is built once. For
BoT-GRPO and GRPO (token advantages [B, T]) it prints the jitted botjax time, the time of a
vectorised NumPy implementation of the same estimator written here, and the time of one
streaming pass over the same inputs (a jitted masked sum over the [B, T] token rewards), with
the ratios NumPy/botjax and botjax/streaming. Times are medians of `--repeats` runs after a
warm-up, with `block_until_ready`. The NumPy and botjax results are checked to agree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from botjax import advantages as adv
from _machine import cpu_model


def median_time_donated(fn, make_input, repeats: int) -> float:
  """Median time of fn(x) where x (fresh for every call, made outside the timing) is donated."""
  inputs = [make_input() for _ in range(repeats + 1)]
  jax.block_until_ready(inputs)
  times = []
  for i, x in enumerate(inputs):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(x))
    if i:  # the first call compiles
      times.append(time.perf_counter() - t0)
    inputs[i] = None
  return statistics.median(times)


def median_time(fn, repeats: int) -> float:
  fn()  # warm-up (compilation for jitted functions)
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


# ------------------------------------------------------------------------------------------
# NumPy references (vectorised: bincount segment sums, no Python loop over rows)
# ------------------------------------------------------------------------------------------


def numpy_bot_grpo(token_rewards, mask, group_ids, num_groups, eps=1e-6):
  """BoT-GRPO in float32 NumPy: row sums, bincount segment sums, two passes (mean, variance)."""
  f32 = np.float32
  r = np.where(mask, token_rewards, f32(0))
  length = mask.sum(-1, dtype=f32)
  inv_len = f32(1) / np.maximum(length, f32(1))
  k = np.maximum(np.bincount(group_ids, weights=length > 0, minlength=num_groups), 1)
  mean_g = np.bincount(group_ids, weights=r.sum(-1) * inv_len, minlength=num_groups) / k
  centred = np.where(mask, token_rewards - mean_g.astype(f32)[group_ids][:, None], f32(0))
  row_sq = np.einsum("bt,bt->b", centred, centred) * inv_len
  var_g = np.bincount(group_ids, weights=row_sq, minlength=num_groups) / k
  scale = (1.0 / (np.sqrt(var_g) + eps)).astype(f32)
  centred *= scale[group_ids][:, None]
  return centred


def numpy_grpo_tokens(rewards, mask, group_ids, num_groups, eps=1e-6):
  n = np.bincount(group_ids, minlength=num_groups)
  mean = (np.bincount(group_ids, weights=rewards, minlength=num_groups) / np.maximum(n, 1))
  centred = rewards - mean[group_ids]
  sq = np.bincount(group_ids, weights=centred * centred, minlength=num_groups)
  std = np.sqrt(sq / np.maximum(n - 1, 1))
  a = np.where(n[group_ids] >= 2, centred / (std[group_ids] + eps), 0.0)
  return np.where(mask, a[:, None], 0.0).astype(np.float32)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=4096)
  parser.add_argument("--tokens", type=int, default=2048)
  parser.add_argument("--groups", type=int, default=512)
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args()
  b, t, p = args.batch, args.tokens, args.groups

  print(f"machine: {cpu_model()}, {os.cpu_count()} cores visible; jax {jax.__version__} on "
        f"{jax.devices()[0].platform} ({len(jax.devices())} device(s))")
  print(f"batch: B={b} completions, T={t} (ragged, lengths uniform in [0, T]), {p} groups "
        f"(random, non-contiguous); median of {args.repeats} runs after warm-up")

  rng = np.random.default_rng(0)
  lengths = rng.integers(0, t + 1, size=b)
  mask_np = np.arange(t)[None, :] < lengths[:, None]
  group_np = rng.integers(0, p, size=b).astype(np.int32)
  rewards_np = rng.integers(0, 2, size=b).astype(np.float32)
  local_np = rng.uniform(-1, 0, size=(b, t)).astype(np.float32)
  token_np = np.where(mask_np, 3.0 * rewards_np[:, None] + 0.5 * local_np, 0.0).astype(
      np.float32)

  mask = jax.device_put(mask_np)
  group_ids = jax.device_put(group_np)
  rewards = jax.device_put(rewards_np)
  token_rewards = jax.device_put(token_np)

  bot = jax.jit(adv.bot_grpo, static_argnames="num_groups")
  grpo_tokens = jax.jit(
      lambda r, m, g: jnp.where(m, adv.grpo(r, g, num_groups=p)[:, None], 0.0))
  stream = jax.jit(lambda r, m: jnp.sum(jnp.where(m, r, 0.0)))

  np.testing.assert_allclose(np.asarray(bot(token_rewards, mask, group_ids, num_groups=p)),
                             numpy_bot_grpo(token_np, mask_np, group_np, p), rtol=1e-4,
                             atol=1e-4)
  np.testing.assert_allclose(np.asarray(grpo_tokens(rewards, mask, group_ids)),
                             numpy_grpo_tokens(rewards_np, mask_np, group_np, p), rtol=1e-4,
                             atol=1e-5)

  t_stream = median_time(lambda: stream(token_rewards, mask).block_until_ready(), args.repeats)
  rows = [
      ("bot_grpo",
       lambda: bot(token_rewards, mask, group_ids, num_groups=p).block_until_ready(),
       lambda: numpy_bot_grpo(token_np, mask_np, group_np, p)),
      ("grpo (token advantages)",
       lambda: grpo_tokens(rewards, mask, group_ids).block_until_ready(),
       lambda: numpy_grpo_tokens(rewards_np, mask_np, group_np, p)),
  ]
  print(f"streaming pass (jitted masked sum over [B, T]): {t_stream * 1e3:8.2f} ms")
  for name, fn_jax, fn_np in rows:
    t_jax = median_time(fn_jax, args.repeats)
    t_np = median_time(fn_np, max(3, args.repeats // 2))
    print(f"{name:24s} botjax {t_jax * 1e3:8.2f} ms | numpy {t_np * 1e3:8.2f} ms | "
          f"numpy/botjax {t_np / t_jax:5.1f}x | botjax/streaming {t_jax / t_stream:5.2f}x")
    if name == "bot_grpo":
      # Inside a jitted train step XLA plans buffers once; a stand-alone jit call instead
      # allocates (and first-touches) a fresh 4·B·T-byte output every time. Donating the
      # token rewards lets the output reuse their buffer, which isolates the estimator's cost.
      bot_donated = jax.jit(adv.bot_grpo, static_argnames="num_groups", donate_argnums=0)
      t_don = median_time_donated(
          lambda x: bot_donated(x, mask, group_ids, num_groups=p),
          lambda: jnp.array(token_np), args.repeats)
      print(f"{'bot_grpo (donated input)':24s} botjax {t_don * 1e3:8.2f} ms | numpy "
            f"{t_np * 1e3:8.2f} ms | numpy/botjax {t_np / t_don:5.1f}x | botjax/streaming "
            f"{t_don / t_stream:5.2f}x")


if __name__ == "__main__":
  main()
