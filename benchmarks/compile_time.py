"""Compile time of the RL update of Qwen2.5-3B on CPU, with the layers unrolled or scanned.

Builds the decoder abstractly (`nnx.eval_shape`: no weights in memory), the TrainState and the
RLBatch as `jax.ShapeDtypeStruct`s, and times the three stages of `jax.jit` of
`botjax.train.step.update` (the trainer's update: chunked log-probs, the recipe's loss, AdamW):
`.trace()`, `.lower()` and `.compile()`. The config is the `qwen2.5-3b` preset (hidden 2048,
16 / 2 heads, intermediate 11008, vocabulary 151,936) at its full depth of 36 layers or
`--layers`; the model runs float32 parameters and computation with blocks rematerialised, as
the experiments' 3B presets do; the batch is 2 rows of 512 prompt + 512 completion tokens
(1,024 each), one micro-batch, no prompt sharing (`--num_prompts=1` shares the rows' prompt
through `Decoder.shared_prefix`, as the trainer does for a group). With `--decode`, the
sampler's decode step (one token per row against a 1,024-slot KV cache) is timed the same way.
A tiny model's update is compiled first, untimed, so that the first row does not carry the
process's one-time start-up.

  python benchmarks/compile_time.py [--layers 36] [--scan both|on|off] [--decode]
"""

import argparse
import dataclasses
import datetime
import functools
import time

import jax
import jax.numpy as jnp
from flax import nnx

import botjax.models as bm
from botjax import algorithms
from botjax.models import Decoder, KVCache
from botjax.train import step as step_lib
from botjax.train.config import OptimConfig

from _machine import describe


def _stages(fn, *args) -> tuple[float, float, float]:
  """Seconds of `fn.trace(*args)`, `.lower()` and `.compile()`."""
  t0 = time.perf_counter()
  traced = fn.trace(*args)
  t1 = time.perf_counter()
  lowered = traced.lower()
  t2 = time.perf_counter()
  lowered.compile()
  t3 = time.perf_counter()
  return t1 - t0, t2 - t1, t3 - t2


def _abstract_model(cfg, *, remat: bool, scan: bool):
  return nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0), dtype=jnp.float32,
                                        param_dtype=jnp.float32, remat=remat, scan_layers=scan))


def update_stages(cfg, *, scan: bool, remat: bool, batch_size: int, prompt_len: int,
                  completion_len: int, num_prompts: int, recipe: str = "bot_grpo"):
  """(trace, lower, compile) seconds of the jitted RL update from abstract shapes."""
  graphdef, params, rest = step_lib.split_model(_abstract_model(cfg, remat=remat, scan=scan))
  optimizer = step_lib.make_optimizer(OptimConfig(), 10)
  state = jax.eval_shape(lambda p: step_lib.init_state(p, optimizer, 0), params)
  batch = step_lib.RLBatch.abstract(batch_size, prompt_len, completion_len)
  fn = functools.partial(step_lib.update, graphdef=graphdef, rest=rest,
                         recipe=algorithms.get_recipe(recipe), optimizer=optimizer,
                         num_micro=1, chunk=128, num_prompts=num_prompts)
  return _stages(jax.jit(fn, donate_argnums=0), state, batch)


def decode_stages(cfg, *, scan: bool, batch_size: int, max_len: int):
  """(trace, lower, compile) seconds of one jitted decode step (1 token per row, traced slot)."""
  graphdef, state = nnx.split(_abstract_model(cfg, remat=False, scan=scan))
  cache = jax.eval_shape(lambda: KVCache.init(cfg, batch_size=batch_size, max_len=max_len))
  s = jax.ShapeDtypeStruct

  def step(state, cache, ids, pos, index):
    logits, cache = nnx.merge(graphdef, state)(ids, pos, cache=cache, cache_index=index)
    return logits, cache

  ids = s((batch_size, 1), jnp.int32)
  return _stages(jax.jit(step, donate_argnums=1), state, cache, ids, ids,
                 s((), jnp.int32))


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--layers", type=int, nargs="+", default=[36],
                  help="decoder depths to measure (default: the preset's 36)")
  ap.add_argument("--scan", choices=("both", "on", "off"), default="both",
                  help="scanned layers, unrolled layers, or both (scan first)")
  ap.add_argument("--batch", type=int, default=2, help="rows")
  ap.add_argument("--prompt_len", type=int, default=512)
  ap.add_argument("--completion_len", type=int, default=512)
  ap.add_argument("--remat", type=int, default=1, help="1: rematerialise blocks (3B preset)")
  ap.add_argument("--num_prompts", type=int, default=0,
                  help="U > 0: share prompts through Decoder.shared_prefix")
  ap.add_argument("--decode", action="store_true", help="also time the sampler's decode step")
  args = ap.parse_args()

  base = bm.get_config("qwen2.5-3b")
  print(f"machine: {describe()}")
  print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"jax {jax.__version__}, backend {jax.default_backend()}")
  print(f"config: qwen2.5-3b (hidden {base.hidden_size}, vocab {base.vocab_size}), float32, "
        f"remat {'on' if args.remat else 'off'}, batch {args.batch} x "
        f"({args.prompt_len} + {args.completion_len}) tokens, num_prompts {args.num_prompts}")
  scans = {"both": (True, False), "on": (True,), "off": (False,)}[args.scan]
  # one-time costs of the first compile in a process (backend start-up), not in the table
  update_stages(bm.get_config("tiny"), scan=False, remat=False, batch_size=1, prompt_len=8,
                completion_len=8, num_prompts=0)
  print(f"{'step':<7} {'layers':>6} {'scan':>5} {'trace s':>8} {'lower s':>8} {'compile s':>9} "
        f"{'total s':>8}", flush=True)
  for layers in args.layers:
    cfg = dataclasses.replace(base, num_layers=layers)
    for scan in scans:
      rows = [("update", update_stages(
          cfg, scan=scan, remat=bool(args.remat), batch_size=args.batch,
          prompt_len=args.prompt_len, completion_len=args.completion_len,
          num_prompts=args.num_prompts))]
      if args.decode:
        rows.append(("decode", decode_stages(cfg, scan=scan, batch_size=args.batch,
                                             max_len=args.prompt_len + args.completion_len)))
      for name, (tr, lo, co) in rows:
        print(f"{name:<7} {layers:>6} {'on' if scan else 'off':>5} {tr:>8.1f} {lo:>8.1f} "
              f"{co:>9.1f} {tr + lo + co:>8.1f}", flush=True)


if __name__ == "__main__":
  main()
