"""Forward throughput (tokens/s) of botjax against `transformers` on the same weights, on CPU.

A Qwen2-family model with 4 layers, hidden 256 (8 heads, 2 kv heads, MLP 1024, vocab 8192),
random weights saved by `transformers` and loaded by botjax, batch 32 x 256 tokens, float32.
Both sides run the full forward to logits; botjax under `jax.jit`, torch in `inference_mode`
with its default thread count. Prints the machine, both timings and the ratio.

  python benchmarks/forward.py [--batch 32] [--seq 256] [--reps 5]
"""

import argparse
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx

import botjax.models as bm

from _machine import cpu_model as cpu_name


def best_of(fn, reps: int) -> float:
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batch", type=int, default=32)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--reps", type=int, default=5)
  args = ap.parse_args()

  cfg = transformers.Qwen2Config(
      vocab_size=8192, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
      num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True,
      rope_theta=1e6, max_position_embeddings=4096, pad_token_id=0, bos_token_id=1,
      eos_token_id=2)
  torch.manual_seed(0)
  hf = transformers.Qwen2ForCausalLM(cfg).eval()
  with tempfile.TemporaryDirectory() as d:
    hf.save_pretrained(d)
    model = bm.load_pretrained(d)
  graphdef, state = nnx.split(model)

  @jax.jit
  def forward(state, ids, pos):
    return nnx.merge(graphdef, state)(ids, pos)[0]

  rng = np.random.RandomState(0)
  ids = rng.randint(3, cfg.vocab_size, (args.batch, args.seq)).astype(np.int32)
  pos = np.broadcast_to(np.arange(args.seq, dtype=np.int32), ids.shape).copy()
  ids_j, pos_j = jnp.asarray(ids), jnp.asarray(pos)
  ids_t, pos_t = torch.tensor(ids, dtype=torch.long), torch.tensor(pos, dtype=torch.long)

  t0 = time.perf_counter()
  out_j = np.asarray(forward(state, ids_j, pos_j))
  compile_s = time.perf_counter() - t0
  with torch.inference_mode():
    out_t = hf(input_ids=ids_t, position_ids=pos_t).logits.numpy()
  err = float(np.abs(out_j - out_t).max())

  def run_jax():
    forward(state, ids_j, pos_j).block_until_ready()

  def run_torch():
    with torch.inference_mode():
      hf(input_ids=ids_t, position_ids=pos_t)

  t_jax = best_of(run_jax, args.reps)
  t_torch = best_of(run_torch, args.reps)
  tokens = args.batch * args.seq
  print(f"machine: {cpu_name()}, {os.cpu_count()} cores; jax {jax.__version__} "
        f"({jax.devices()[0].platform}), torch {torch.__version__} "
        f"({torch.get_num_threads()} threads)")
  print(f"model: qwen2 4 layers, hidden 256, vocab {cfg.vocab_size}; batch {args.batch} x "
        f"{args.seq} tokens, float32; max |logits diff| {err:.2e}")
  print(f"botjax (jit, compile {compile_s:.1f} s): {t_jax * 1e3:8.1f} ms  "
        f"{tokens / t_jax:12,.0f} tokens/s")
  print(f"transformers (torch eager):     {t_torch * 1e3:8.1f} ms  "
        f"{tokens / t_torch:12,.0f} tokens/s")
  print(f"ratio botjax / transformers throughput: {t_torch / t_jax:.2f}x "
        f"(best of {args.reps}; shared machines make single timings noisy)")


if __name__ == "__main__":
  main()
