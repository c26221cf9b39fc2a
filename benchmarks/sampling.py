"""Generation throughput: botjax `Sampler` against `transformers` `generate` on the same weights.

A random Qwen2-family model (default: 4 layers, hidden 256, vocab 1024) is written with
`transformers` `save_pretrained` and loaded into botjax with `load_pretrained`, so both sides run
identical float32 weights. Both sample at temperature 1 with no top-k / top-p and no stop token,
so every row generates exactly `--new-tokens` tokens.

  python benchmarks/sampling.py                       # batch 64 x 32 prompt tokens, 128 new
  python benchmarks/sampling.py --batch 8 --new-tokens 32 --repeats 1   # quick check

Prints the machine, the compile time of the botjax program (first call minus a warm call),
generated tokens per second of each side (median of `--repeats` warm calls) and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from _machine import cpu_model as _cpu_model


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--prompt-len", type=int, default=32)
  parser.add_argument("--new-tokens", type=int, default=128)
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--hidden", type=int, default=256)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--kv-heads", type=int, default=2)
  parser.add_argument("--vocab", type=int, default=1024)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()

  import jax
  import numpy as np
  import torch
  import transformers

  import botjax.models as bm
  from botjax.sampling import Sampler, SamplingConfig

  print(f"machine: {_cpu_model()}, {os.cpu_count()} cores; jax {jax.__version__} on "
        f"{jax.devices()[0].platform} ({len(jax.devices())} device(s)); torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads; transformers {transformers.__version__}")
  print(f"model: qwen2, {args.layers} layers, hidden {args.hidden}, heads {args.heads}/"
        f"{args.kv_heads}, vocab {args.vocab}, float32; batch {args.batch} x {args.prompt_len} "
        f"prompt tokens, {args.new_tokens} new tokens, temperature 1")

  torch.manual_seed(args.seed)
  hf_cfg = transformers.Qwen2Config(
      vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
      num_hidden_layers=args.layers, num_attention_heads=args.heads,
      num_key_value_heads=args.kv_heads, max_position_embeddings=4096, tie_word_embeddings=True,
      pad_token_id=0, bos_token_id=1, eos_token_id=2)
  hf = transformers.Qwen2ForCausalLM(hf_cfg).float().eval()
  rng = np.random.default_rng(args.seed)
  prompts = rng.integers(3, args.vocab, size=(args.batch, args.prompt_len)).tolist()
  tokens = args.batch * args.new_tokens

  with tempfile.TemporaryDirectory() as path:
    hf.save_pretrained(path)
    model = bm.load_pretrained(path)
  sampler = Sampler(model, model.config, SamplingConfig(
      temperature=1.0, max_new_tokens=args.new_tokens, gen_len_buckets=(args.new_tokens,),
      prompt_len_buckets=(args.prompt_len,), batch_buckets=(args.batch,)))

  def run_botjax(seed):
    out = sampler.generate(prompts, jax.random.key(seed))
    jax.block_until_ready(out)
    return out

  start = time.perf_counter()
  out = run_botjax(0)
  first = time.perf_counter() - start
  assert int(np.asarray(out.lengths).min()) == args.new_tokens
  jax_times = []
  for r in range(args.repeats):
    start = time.perf_counter()
    run_botjax(r + 1)
    jax_times.append(time.perf_counter() - start)
  jax_time = statistics.median(jax_times)

  ids = torch.tensor(prompts, dtype=torch.long)
  mask = torch.ones_like(ids)
  hf.generation_config.eos_token_id = None

  def run_hf(new_tokens=args.new_tokens):
    with torch.no_grad():
      return hf.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                         top_k=None, top_p=None, max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, pad_token_id=0)

  run_hf(4)  # warm-up (allocator, thread pool)
  hf_times = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    gen = run_hf()
    hf_times.append(time.perf_counter() - start)
  assert gen.shape == (args.batch, args.prompt_len + args.new_tokens)
  hf_time = statistics.median(hf_times)

  print(f"botjax compile: {first - jax_time:.2f} s (first call {first:.2f} s)")
  print(f"botjax:       {tokens / jax_time:10.1f} tokens/s  ({jax_time:.3f} s per call, "
        f"median of {args.repeats})")
  print(f"transformers: {tokens / hf_time:10.1f} tokens/s  ({hf_time:.3f} s per call, "
        f"median of {args.repeats})")
  print(f"ratio botjax / transformers: {hf_time / jax_time:.2f}x")


if __name__ == "__main__":
  main()
