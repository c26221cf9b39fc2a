"""The matrix products of one `rl_step.py` iteration alone: a floor for its generate and update.

One RL iteration of `benchmarks/rl_step.py` multiplies activations by the same weights over and
over: each decode step runs every weight over its rows, and the update runs every weight
forward and twice backward over all of the batch's tokens. This times only those products, at
the iteration's shapes, the way botjax runs them on a small CPU host (two halves of the batch
in two host threads, each program compiled with `botjax.xla_cpu.compiler_options`), with no
attention, normalisation, activation, softmax, sampling or optimizer step. What is left of an
iteration above these figures is the cost of everything else.

  decode: 64 steps, each step every layer's q, k, v, o, gate, up and down weights and the
          (tied) output embedding over each half's 64 rows, one step after the other (each
          product's output is added into the [64, 1024] state the next one reads, so every
          step depends on the last, as in sampling);
  update: every weight over the update's tokens (8,192 completion tokens plus 16 shared prompts
          of `--prompt-len` tokens): x W forward, dY Wᵀ and Xᵀ dY backward. The log-probs'
          recomputed logits (`jax.checkpoint` per chunk) are not counted: with one chunk (64
          completion positions, chunk 128) XLA merges the recomputation with the forward
          product (the cost analysis of botjax's update differs by 8 MFLOP of 72.3 GFLOP per
          half with and without the checkpoint).

Each of the update's products is summed (a pass over its output) so that none is dropped by
the compiler; the figure is therefore a slight over-estimate of the products alone. The
reference is the same list of products and sums in NumPy (its BLAS, with its own threads), for
the update only (a decode step's products are too small for a fair NumPy loop).

  python benchmarks/gemm_floor.py                 # the wide model of rl_step.py --model=wide
  python benchmarks/gemm_floor.py --model tiny --vocab 313
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import time

from _machine import describe
from rl_step import MODEL_SIZES


def weight_shapes(size: str, vocab: int) -> list[tuple[int, int]]:
  """(in, out) of every weight matrix of `rl_step.MODEL_SIZES[size]`, the output embedding last."""
  dims = MODEL_SIZES[size]
  d, f = dims["hidden_size"], dims["intermediate_size"]
  n, k = dims["num_attention_heads"], dims["num_key_value_heads"]
  h = d // n
  layer = [(d, n * h), (d, k * h), (d, k * h), (n * h, d), (d, f), (d, f), (f, d)]
  return layer * dims["num_hidden_layers"] + [(d, vocab)]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", choices=sorted(MODEL_SIZES), default="wide")
  parser.add_argument("--vocab", type=int, default=0,
                      help="vocabulary rows (default: the size's own; tiny has none, pass 313)")
  parser.add_argument("--prompts", type=int, default=16)
  parser.add_argument("--group", type=int, default=8)
  parser.add_argument("--new-tokens", type=int, default=64)
  parser.add_argument("--prompt-len", type=int, default=24,
                      help="prompt tokens in the update (rl_step's arithmetic prompts: 20-24)")
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args()
  vocab = args.vocab or MODEL_SIZES[args.model]["vocab_size"]
  if not vocab:
    parser.error(f"--model={args.model} has no fixed vocabulary: pass --vocab")
  if args.prompts % 2:
    parser.error("--prompts must be even (two halves, as botjax splits the batch)")

  from botjax import xla_cpu
  xla_cpu.tune_host_allocator()        # as rl_step.py does for both sides

  import jax
  import jax.numpy as jnp
  import numpy as np

  shapes = weight_shapes(args.model, vocab)
  rows = args.prompts * args.group // 2                      # rows of one half
  tokens = rows * args.new_tokens + args.prompts // 2 * args.prompt_len
  print(f"machine: {describe()}; jax {jax.__version__}, numpy {np.__version__}")
  print(f"model: {args.model} ({len(shapes) - 1} weight matrices + output embedding of "
        f"{vocab} rows); two halves of {rows} rows in two host threads; update "
        f"{tokens} tokens per half")

  rng = np.random.default_rng(0)
  ws = [(rng.standard_normal(s) * s[0] ** -0.5).astype(np.float32) for s in shapes]
  width = max(max(s) for s in shapes)
  pool = concurrent.futures.ThreadPoolExecutor(2)

  def timed(run) -> float:
    run()
    ts = []
    for _ in range(args.repeats):
      t = time.perf_counter()
      run()
      ts.append(time.perf_counter() - t)
    return statistics.median(ts)

  # -- decode: a chain of products, one step after the other ----------------------------------
  def decode(ws, x):
    def step(_, x):
      out = x
      for w in ws:
        y = out[:, :w.shape[0]] @ w
        out = out + jnp.pad(y, ((0, 0), (0, width - y.shape[1])))
      return out * jnp.float32(1e-3)
    return jax.lax.fori_loop(0, args.new_tokens, step, x)

  dec = jax.jit(decode, compiler_options=xla_cpu.compiler_options(decode=True))
  wj = [jnp.asarray(w) for w in ws]
  x0 = jnp.zeros((rows, width), jnp.float32)
  dec_flop = 2 * args.new_tokens * sum(2 * rows * a * b for a, b in shapes)
  t_dec = timed(lambda: list(pool.map(lambda _: dec(wj, x0).block_until_ready(), range(2))))

  # -- update: forward and both backward products of every weight ----------------------------
  xs = [rng.standard_normal((tokens, a)).astype(np.float32) for a, _ in shapes]
  dys = [rng.standard_normal((tokens, b)).astype(np.float32) for _, b in shapes]

  # Each product is summed, so that none is dropped and no output buffer outlives the call
  # (returning them all would add the allocation of their 313 MB per half to the figure).
  def update(ws, xs, dys):
    total = jnp.float32(0.0)
    for w, x, dy in zip(ws, xs, dys):
      total += jnp.sum(x @ w) + jnp.sum(dy @ w.T) + jnp.sum(x.T @ dy)
    return total

  upd = jax.jit(update, compiler_options=xla_cpu.compiler_options())
  xj, dyj = [jnp.asarray(x) for x in xs], [jnp.asarray(d) for d in dys]
  upd_flop = 2 * sum(3 * 2 * tokens * a * b for a, b in shapes)
  t_upd = timed(lambda: list(pool.map(lambda _: upd(wj, xj, dyj).block_until_ready(),
                                      range(2))))

  def update_np():
    for _ in range(2):                                       # both halves, BLAS threads each
      for w, x, dy in zip(ws, xs, dys):
        (x @ w).sum(), (dy @ w.T).sum(), (x.T @ dy).sum()
  t_np = timed(update_np)

  print(f"decode products: {dec_flop / 1e9:.1f} GFLOP in {t_dec:.3f} s "
        f"({dec_flop / t_dec / 1e9:.0f} GFLOP/s)")
  print(f"update products: {upd_flop / 1e9:.1f} GFLOP in {t_upd:.3f} s "
        f"({upd_flop / t_upd / 1e9:.0f} GFLOP/s); NumPy {t_np:.3f} s "
        f"({upd_flop / t_np / 1e9:.0f} GFLOP/s); NumPy / XLA {t_np / t_upd:.2f}x")
  print(f"floor of one iteration's products: {t_dec + t_upd:.3f} s (medians of "
        f"{args.repeats}; {os.cpu_count()} cores)")


if __name__ == "__main__":
  main()
