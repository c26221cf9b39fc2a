r"""Accelerator benchmark: rollout tokens/s, train-step time and MFU, peak memory, compile times.

  python benchmarks/accelerator.py                      # qwen2.5-3b, bf16, on all local devices
  python benchmarks/accelerator.py --tiny               # same code path, tiny model, CPU, < 1 min
  python benchmarks/accelerator.py --micro=32 --json=runs/accel.json

A random-init preset (default `qwen2.5-3b`) is created directly on the devices in bfloat16
(parameters and compute), each parameter born on its sharding of `--mesh` (default `fsdp:-1`, all
local devices), so the host never holds the full model. Then:

(a) rollout: `botjax.sampling.Sampler` draws `--samples` completions for each of `--prompts`
    random prompts of `--prompt_len` tokens, with no stop token, so every row generates exactly
    `--new_tokens` tokens (checked). tokens/s = generated tokens / seconds of a warm call
    (prefill included); the compile time is the first call minus the warm call.
(a') with `--skewed`: the same prompts with completion lengths spread as RL answers spread,
    row i forced to L_i tokens, L_i from a seeded log-normal (median `--skew_median`, sigma 0.9,
    clipped to [8, `--new_tokens`]). The lockstep `Sampler` decodes every row until the longest
    stops (its cache sized for `--new_tokens`); the slot engine (`botjax.sampling.SlotEngine`,
    `--slots` decode slots over a paged pool, refilled between chunks) stops each row at L_i.
    Useful tokens/s (Σ L_i / seconds of a warm call) of both, their ratio, the share of
    computed token-steps that were useful, the KV bytes (the sampler's cache, the engine's
    pool), compile times and the engine's program count.
(b) training: one `botjax.train.step` update (the trainer's jitted `make_update_fn`: chunked
    log-probs, the `--recipe` surrogate, AdamW) on `--train_seqs` sequences of `--train_len`
    tokens (half prompt, half completion) in `--micro` micro-batches, blocks rematerialised
    (`--remat`). It is compiled ahead of time (`.lower().compile()`, timed), run once to warm up,
    then timed.
    FLOPs: XLA counts a loop body once whatever its trip count, and the step loops over
    micro-batches and log-prob chunks. So the FLOPs are `--micro` times XLA's cost analysis of
    the same update on one micro-batch with `num_micro=1` and one log-prob chunk (its lowered
    HLO, which counts the whole mesh; else the compiled one, which counts one device's share,
    times the devices). This includes rematerialisation, so it is hardware FLOPs. Without a cost analysis, 6·N·tokens is used instead and the table says so;
    6·N·tokens (N parameters, tokens = sequences x length) is printed beside it either way.
    MFU = FLOPs / (step seconds x devices x peak bf16 FLOP/s per device), with the peak taken
    from `PEAK_BF16` by device kind (`--peak_tflops` overrides; unknown devices print n/a).
(c) peak device memory: the largest `peak_bytes_in_use` of `device.memory_stats()` over local
    devices, after the rollout and at the end (n/a where the backend reports none, e.g. CPU).
(d) compile times: model init (compile + run), sampler, train step, FLOPs lowering.

Sized for one H200 or one TPU host within about 6 minutes, compilation included (an estimate:
not yet measured on an accelerator). Shrink with the size flags if a device runs out of memory.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _machine import describe  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_bool("tiny", False, "CPU-sized run of the same code: preset `tiny`, 4 prompts x 2 "
                  "samples x 16 tokens, 8 sequences x 64 tokens, 2 micro-batches (explicit size "
                  "flags still win).")
flags.DEFINE_string("model", "qwen2.5-3b", "Preset of botjax.models.PRESETS (random init).")
flags.DEFINE_string("mesh", "fsdp:-1", "Mesh spec over the local devices, e.g. fsdp:8, data:2,fsdp:4.")
flags.DEFINE_string("dtype", "bfloat16", "Parameter and compute dtype: bfloat16 or float32.")
flags.DEFINE_integer("prompts", 64, "Rollout: prompts per call.")
flags.DEFINE_integer("samples", 8, "Rollout: completions per prompt.")
flags.DEFINE_integer("prompt_len", 256, "Rollout: tokens per random prompt.")
flags.DEFINE_integer("new_tokens", 512, "Rollout: generated tokens per completion (all of them).")
flags.DEFINE_bool("skewed", False, "Also time length-skewed rollouts: the lockstep Sampler "
                  "against the slot engine on log-normal completion lengths.")
flags.DEFINE_float("skew_median", 96.0, "--skewed: median completion length (sigma 0.9).")
flags.DEFINE_integer("slots", 128, "--skewed: decode slots of the slot engine.")
flags.DEFINE_integer("train_seqs", 512, "Training: sequences per step.")
flags.DEFINE_integer("train_len", 1024, "Training: tokens per sequence (half of them completion).")
flags.DEFINE_integer("micro", 16, "Training: micro-batches per step (gradient accumulation).")
flags.DEFINE_integer("chunk", 128, "Training: completion positions per log-prob chunk.")
flags.DEFINE_bool("remat", True, "Recompute each block in the backward pass (saves memory).")
flags.DEFINE_bool("scan_layers", True, "Stack the layers and run them as one lax.scan, as the "
                  "experiments' 3B presets do (shorter compiles; Decoder(scan_layers=)); the "
                  "FLOPs are counted on the unrolled twin.")
flags.DEFINE_string("recipe", "bot_grpo", "Recipe of botjax.algorithms.RECIPES for the update.")
flags.DEFINE_float("peak_tflops", 0.0, "Peak bf16 TFLOP/s per device (0: look up PEAK_BF16).")
flags.DEFINE_string("json", "", "Also write the results to this JSON file.")
flags.DEFINE_integer("seed", 0, "Seed of the weights, prompts and batch.")

TINY = {"model": "tiny", "prompts": 4, "samples": 2, "prompt_len": 16, "new_tokens": 16,
        "slots": 4, "skew_median": 6.0,
        "train_seqs": 8, "train_len": 64, "micro": 2, "chunk": 16}

# Dense bf16 peak FLOP/s per device, matched in order against the lower-cased device kind.
PEAK_BF16: tuple[tuple[tuple[str, ...], float, str], ...] = (
    (("h100 pcie",), 756e12, "H100 PCIe"),
    (("h100 nvl",), 835e12, "H100 NVL"),
    (("h100", "h200"), 989e12, "H100/H200 SXM"),
    (("a100",), 312e12, "A100"),
    (("l40s",), 362e12, "L40S"),
    (("v5 lite", "v5lite", "v5e"), 197e12, "TPU v5e"),
    (("v6 lite", "v6lite", "v6e"), 918e12, "TPU v6e"),
    (("v5p", "tpu v5"), 459e12, "TPU v5p"),
    (("tpu v4",), 275e12, "TPU v4"),
)


class UserError(Exception):
  """A bad flag value; printed without a traceback, exit code 2."""


def peak_flops(device_kind: str) -> tuple[float | None, str]:
  """(peak bf16 FLOP/s of one device or None, where the number came from)."""
  if FLAGS.peak_tflops > 0:
    return FLAGS.peak_tflops * 1e12, "--peak_tflops"
  kind = device_kind.lower()
  for keys, flops, name in PEAK_BF16:
    if any(k in kind for k in keys):
      return flops, f"{name} table entry"
  return None, f"unknown device kind {device_kind!r}"


def peak_memory() -> int | None:
  """Largest `peak_bytes_in_use` over local devices, or None where not reported."""
  import jax
  peaks = []
  for d in jax.local_devices():
    try:
      stats = d.memory_stats()
    except Exception:  # noqa: BLE001 - some backends raise instead of returning None
      stats = None
    if stats and "peak_bytes_in_use" in stats:
      peaks.append(int(stats["peak_bytes_in_use"]))
  return max(peaks) if peaks else None


def cost_flops(stage) -> float | None:
  """'flops' of a Lowered/Compiled cost analysis (a dict, or a list of one dict), or None."""
  try:
    cost = stage.cost_analysis()
  except Exception:  # noqa: BLE001 - unsupported on some backends
    return None
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  if not isinstance(cost, dict):
    return None
  flops = cost.get("flops")
  return float(flops) if flops is not None and flops > 0 and math.isfinite(flops) else None


def resolve_sizes() -> dict:
  """Flag values, with the --tiny defaults where a size flag was not given explicitly."""
  sizes = {name: FLAGS[name].value for name in TINY}
  if FLAGS.tiny:
    for name, value in TINY.items():
      if not FLAGS[name].present:
        sizes[name] = value
  for name in ("prompts", "samples", "prompt_len", "new_tokens", "train_seqs", "train_len",
               "micro", "chunk", "slots"):
    if sizes[name] < 1:
      raise UserError(f"--{name}={sizes[name]} must be a positive integer")
  if not sizes["skew_median"] > 0:
    raise UserError(f"--skew_median={sizes['skew_median']} must be positive")
  if sizes["train_len"] < 2:
    raise UserError(f"--train_len={sizes['train_len']} must be at least 2 (prompt + completion)")
  if sizes["train_seqs"] % sizes["micro"]:
    raise UserError(f"--train_seqs={sizes['train_seqs']} does not split into --micro="
                    f"{sizes['micro']} micro-batches; use a divisor of it")
  return sizes


def init_model(cfg, mesh, dtype, remat: bool, seed: int, scan_layers: bool = False):
  """A random-init Decoder whose parameters are created on their shardings (jitted init).

  Returns:
    (model, seconds of compile + run).
  """
  import jax
  from flax import nnx
  from botjax.models import Decoder
  from botjax.models.sharding import state_shardings

  def make():
    return Decoder(cfg, rngs=nnx.Rngs(seed), dtype=dtype, param_dtype=dtype, remat=remat,
                   scan_layers=scan_layers)

  def is_var(x):
    return isinstance(x, nnx.Variable)

  abstract = nnx.eval_shape(make)
  _, abstract_state = nnx.split(abstract)
  target = jax.tree.map(lambda v: v.get_value(), state_shardings(abstract_state, mesh),
                        is_leaf=is_var)

  @functools.partial(jax.jit, out_shardings=target)
  def init():
    _, state = nnx.split(make())
    return jax.tree.map(lambda v: v.get_value(), state, is_leaf=is_var)

  start = time.perf_counter()
  values = jax.block_until_ready(init())
  seconds = time.perf_counter() - start
  nnx.update(abstract, values)
  return abstract, seconds


def bench_rollout(model, cfg, mesh, sizes, dtype, seed: int) -> dict:
  """(a): generated tokens/s of the Sampler; compile time = first call - warm call."""
  import jax
  import numpy as np
  from botjax.sampling import Sampler, SamplingConfig
  P, n, Lp, T = sizes["prompts"], sizes["samples"], sizes["prompt_len"], sizes["new_tokens"]
  sampler = Sampler(model, cfg, SamplingConfig(
      temperature=1.0, max_new_tokens=T, eos_token_ids=(), pad_token_id=0,
      prompt_len_buckets=(Lp,), gen_len_buckets=(T,), batch_buckets=(P,)), mesh=mesh,
      cache_dtype=dtype)
  rng = np.random.default_rng(seed)
  prompts = rng.integers(1, cfg.vocab_size, size=(P, Lp)).tolist()

  def call(i):
    start = time.perf_counter()
    out = jax.block_until_ready(sampler.generate(prompts, jax.random.key(seed + i), n=n))
    return out, time.perf_counter() - start

  _, first = call(0)
  out, warm = call(1)
  lengths = np.asarray(out.lengths)
  if lengths.shape != (P * n,) or int(lengths.min()) != T or int(lengths.max()) != T:
    raise RuntimeError(f"expected {P * n} rows of {T} tokens, got lengths {lengths.min()}.."
                       f"{lengths.max()} over {lengths.shape[0]} rows")
  tokens = P * n * T
  del out
  return {"rollout_tokens": tokens, "rollout_s": warm, "rollout_tokens_per_s": tokens / warm,
          "rollout_first_call_s": first, "compile_sampler_s": max(first - warm, 0.0)}


def skewed_lengths(rows: int, budget: int, median: float, seed: int) -> list[int]:
  """[rows] completion lengths: a seeded log-normal (median, sigma 0.9) clipped to [8, budget]
  (to [1, budget] when the budget is under 8)."""
  import numpy as np
  drawn = np.exp(np.log(median) + 0.9 * np.random.default_rng(seed).standard_normal(rows))
  return np.clip(np.round(drawn), min(8, budget), budget).astype(int).tolist()


def bench_skewed(model, cfg, mesh, sizes, dtype, seed: int) -> dict:
  """(a'): useful tokens/s of the lockstep Sampler and the slot engine on skewed lengths."""
  import jax
  import numpy as np
  from botjax.sampling import Sampler, SamplingConfig, SlotEngine
  P, n, Lp, T = sizes["prompts"], sizes["samples"], sizes["prompt_len"], sizes["new_tokens"]
  sc = SamplingConfig(temperature=1.0, max_new_tokens=T, eos_token_ids=(), pad_token_id=0,
                      prompt_len_buckets=(Lp,), gen_len_buckets=(T,))
  rng = np.random.default_rng(seed + 1)
  prompts = rng.integers(1, cfg.vocab_size, size=(P, Lp)).tolist()
  lengths = skewed_lengths(P * n, T, sizes["skew_median"], seed + 2)
  useful = int(sum(lengths))
  sampler = Sampler(model, cfg, sc, mesh=mesh, cache_dtype=dtype)
  engine = SlotEngine(model, cfg, sc, num_slots=sizes["slots"], mesh=mesh, cache_dtype=dtype)

  def timed(fn, i):
    start = time.perf_counter()
    out = jax.block_until_ready(fn(jax.random.key(seed + i)))
    return out, time.perf_counter() - start

  def static(key):
    return sampler.generate(prompts, key, n=n, max_new_tokens=max(lengths))

  def slots(key):
    return engine.generate(prompts, key, n=n, max_new_tokens=lengths)

  _, s_first = timed(static, 0)
  _, s_warm = timed(static, 1)
  _, e_first = timed(slots, 0)
  out, e_warm = timed(slots, 1)
  got = np.asarray(out.lengths).tolist()
  if got != lengths:
    raise RuntimeError("the slot engine did not stop every row at its forced length")
  st = engine.last_stats
  del out
  kv_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * np.dtype(dtype).itemsize
  return {"skewed_useful_tokens": useful, "skewed_max_len": max(lengths),
          "skewed_median_len": float(np.median(lengths)),
          "skewed_static_s": s_warm, "skewed_static_tokens_per_s": useful / s_warm,
          "skewed_static_utilisation": useful / (P * n * max(lengths)),
          "skewed_static_kv_bytes": P * n * (Lp + T) * kv_token,
          "skewed_engine_s": e_warm, "skewed_engine_tokens_per_s": useful / e_warm,
          "skewed_engine_utilisation": st.utilisation, "skewed_engine_kv_bytes": st.pool_bytes,
          "skewed_engine_vs_static": s_warm / e_warm,
          "compile_skewed_static_s": max(s_first - s_warm, 0.0),
          "compile_skewed_engine_s": max(e_first - e_warm, 0.0),
          "skewed_engine_programs": engine.num_compiled()}


def make_batch(cfg, mesh, rows: int, length: int, seed: int, abstract: bool = False):
  """A random RLBatch of `rows` x `length` tokens (half completion), sharded on `mesh`."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from botjax.models.sharding import batch_sharding
  from botjax.train.step import RLBatch
  T = length // 2
  shapes = {
      "input_ids": ((rows, length), np.int32), "positions": ((rows, length), np.int32),
      "attention_mask": ((rows, length), np.bool_), "old_logp": ((rows, T), np.float32),
      "ref_logp": ((rows, T), np.float32), "advantages": ((rows, T), np.float32),
      "loss_mask": ((rows, T), np.bool_), "seq_weights": ((rows,), np.float32)}
  if abstract:
    return RLBatch(**{k: jax.ShapeDtypeStruct(s, d, sharding=batch_sharding(mesh, len(s)))
                      for k, (s, d) in shapes.items()})
  rng = np.random.default_rng(seed)
  host = {
      "input_ids": rng.integers(1, cfg.vocab_size, size=(rows, length), dtype=np.int32),
      "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy(),
      "attention_mask": np.ones((rows, length), bool),
      # a random-init model is near uniform: old log-probs near -log V keep ratios near 1
      "old_logp": np.full((rows, T), -math.log(cfg.vocab_size), np.float32),
      "ref_logp": np.full((rows, T), -math.log(cfg.vocab_size), np.float32),
      "advantages": rng.standard_normal((rows, T)).astype(np.float32),
      "loss_mask": np.ones((rows, T), bool),
      "seq_weights": np.ones((rows,), np.float32)}
  return RLBatch(**{k: jax.device_put(jnp.asarray(v), batch_sharding(mesh, v.ndim))
                    for k, v in host.items()})


def bench_train(model, cfg, mesh, sizes, seed: int) -> dict:
  """(b): one update's seconds, compile time and FLOPs."""
  import jax
  from jax.sharding import NamedSharding, PartitionSpec
  from botjax import algorithms
  from botjax.train import step as step_lib
  from botjax.train.config import OptimConfig
  B, L, micro, chunk = sizes["train_seqs"], sizes["train_len"], sizes["micro"], sizes["chunk"]
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  if (B // micro) % shards:
    raise UserError(f"a micro-batch of {B // micro} sequences (--train_seqs={B} / --micro="
                    f"{micro}) does not split over the {shards} batch shards of --mesh="
                    f"{FLAGS.mesh}; use fewer micro-batches or more sequences")
  recipe = algorithms.get_recipe(FLAGS.recipe)
  optimizer = step_lib.make_optimizer(OptimConfig(), total_steps=10)
  graphdef, params, rest = step_lib.split_model(model)
  state = step_lib.init_state(params, optimizer, seed)
  replicated = NamedSharding(mesh, PartitionSpec())
  # fresh scalars (step, key, optimizer counts) are uncommitted: place them like the trainer does
  state = jax.tree.map(lambda x: x if getattr(x, "committed", True)
                       else jax.device_put(x, replicated), state)
  batch = make_batch(cfg, mesh, B, L, seed)
  update = step_lib.make_update_fn(graphdef, rest, recipe, optimizer, num_micro=micro,
                                   chunk=chunk)
  start = time.perf_counter()
  compiled = update.lower(state, batch).compile()
  compile_s = time.perf_counter() - start

  # FLOPs: one micro-batch, one log-prob chunk, no scan, so XLA counts every op once. XLA's
  # cost analysis counts a loop body once, so a scanned model's FLOPs are those of its
  # unrolled twin (built abstractly: no weights in memory).
  T = L // 2
  f_graphdef, f_rest, f_state, twin = graphdef, rest, state, False
  if getattr(model, "scan_layers", False):
    from flax import nnx
    from botjax.models import Decoder
    twin = True
    abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(seed), dtype=model.dtype,
                                              param_dtype=model.dtype, remat=model.remat))
    f_graphdef, f_params, f_rest = step_lib.split_model(abstract)
    f_state = jax.eval_shape(lambda p: step_lib.init_state(p, optimizer, seed), f_params)
  one = step_lib.make_update_fn(f_graphdef, f_rest, recipe, optimizer, num_micro=1, chunk=T,
                                donate=False)
  start = time.perf_counter()
  lowered = one.lower(f_state, make_batch(cfg, mesh, B // micro, L, seed, abstract=True))
  per_micro = cost_flops(lowered)
  source = ("XLA cost analysis (lowered" + (", the unrolled twin of the scanned layers" if twin
            else "") + "), one micro-batch x micro")
  if per_micro is None and not twin:
    # a compiled SPMD program is one device's share: scale back to the whole mesh
    per_device = cost_flops(lowered.compile())
    per_micro = None if per_device is None else per_device * mesh.size
    source = "XLA cost analysis (compiled, per device x devices), one micro-batch x micro"
  flops_lowering_s = time.perf_counter() - start
  num_params = sum(x.size for x in jax.tree.leaves(params))
  estimate = 6.0 * num_params * B * L
  flops = per_micro * micro if per_micro is not None else estimate
  if per_micro is None:
    source = "6·N·tokens estimate (no XLA cost analysis available)"

  in_shardings = jax.tree.map(lambda x: x.sharding, state)
  state, metrics = compiled(state, batch)                   # warm-up run
  jax.block_until_ready(metrics)
  state = jax.device_put(state, in_shardings)               # a no-op when layouts agree
  start = time.perf_counter()
  state, metrics = compiled(state, batch)
  jax.block_until_ready((state, metrics))
  step_s = time.perf_counter() - start
  loss = float(metrics["loss"])
  if not math.isfinite(loss) or float(metrics["skipped"]):
    raise RuntimeError(f"the update gave loss {loss}, skipped {float(metrics['skipped'])}")
  return {"train_tokens": B * L, "train_step_s": step_s, "train_tokens_per_s": B * L / step_s,
          "flops_per_step": flops, "flops_source": source, "flops_6nt": estimate,
          "num_params": int(num_params), "compile_train_step_s": compile_s,
          "compile_flops_lowering_s": flops_lowering_s, "loss": loss}


def fmt_bytes(n: int | None) -> str:
  return "n/a" if n is None else f"{n / (1 << 30):.2f} GiB"


def run() -> dict:
  import jax
  import jax.numpy as jnp
  from botjax import models
  from botjax.models.sharding import make_mesh
  sizes = resolve_sizes()
  try:
    cfg = models.get_config(sizes["model"])
  except ValueError as e:
    raise UserError(str(e)) from None
  dtypes = {"bfloat16": jnp.bfloat16, "float32": jnp.float32}
  if FLAGS.dtype not in dtypes:
    raise UserError(f"--dtype={FLAGS.dtype!r} is not valid; use one of {sorted(dtypes)}")
  dtype = dtypes[FLAGS.dtype]
  try:
    mesh = make_mesh(FLAGS.mesh, jax.local_devices())
  except ValueError as e:
    raise UserError(str(e)) from None
  device = jax.local_devices()[0]
  peak, peak_source = peak_flops(device.device_kind)
  ndev = mesh.size
  machine = {"host": describe(), "jax": jax.__version__, "platform": device.platform,
             "device_kind": device.device_kind, "local_devices": jax.local_device_count(),
             "mesh": dict(mesh.shape), "peak_flops_per_device": peak,
             "peak_flops_source": peak_source}
  config = {"model": sizes["model"], "dtype": FLAGS.dtype, "remat": FLAGS.remat,
            "scan_layers": FLAGS.scan_layers, "skewed": FLAGS.skewed,
            "recipe": FLAGS.recipe, **{k: v for k, v in sizes.items() if k != "model"}}
  print(f"machine: {machine['host']}")
  print(f"jax {jax.__version__} on {device.platform}: {jax.local_device_count()} x "
        f"{device.device_kind}; mesh {dict(mesh.shape)}; peak bf16 "
        f"{'n/a' if peak is None else f'{peak / 1e12:.0f} TFLOP/s per device'} ({peak_source})")
  print(f"config: {json.dumps(config)}", flush=True)

  model, init_s = init_model(cfg, mesh, dtype, FLAGS.remat, FLAGS.seed, FLAGS.scan_layers)
  results = {"compile_init_s": init_s}
  results.update(bench_rollout(model, cfg, mesh, sizes, dtype, FLAGS.seed))
  if FLAGS.skewed:
    results.update(bench_skewed(model, cfg, mesh, sizes, dtype, FLAGS.seed))
  results["peak_memory_after_rollout_bytes"] = peak_memory()
  # The update donates the parameters the sampler holds: the rollout must come first.
  results.update(bench_train(model, cfg, mesh, sizes, FLAGS.seed))
  results["peak_memory_bytes"] = peak_memory()
  step = results["train_step_s"]
  results["mfu"] = None if peak is None else results["flops_per_step"] / (step * ndev * peak)
  results["mfu_6nt"] = None if peak is None else results["flops_6nt"] / (step * ndev * peak)

  def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f} %"

  P, n, T = sizes["prompts"], sizes["samples"], sizes["new_tokens"]
  rows = [
      (f"rollout {P} prompts x {n} samples x {T} new tokens",
       f"{results['rollout_tokens_per_s']:,.1f} tokens/s ({results['rollout_s']:.3f} s)"),
  ]
  if FLAGS.skewed:
    r = results
    rows += [
        (f"skewed rollout {P} x {n}, lengths median {r['skewed_median_len']:.0f} max "
         f"{r['skewed_max_len']}: lockstep",
         f"{r['skewed_static_tokens_per_s']:,.1f} useful tokens/s ({r['skewed_static_s']:.3f} s,"
         f" utilisation {r['skewed_static_utilisation']:.2f}, KV "
         f"{fmt_bytes(r['skewed_static_kv_bytes'])})"),
        (f"skewed rollout: slot engine ({sizes['slots']} slots)",
         f"{r['skewed_engine_tokens_per_s']:,.1f} useful tokens/s ({r['skewed_engine_s']:.3f} s,"
         f" {r['skewed_engine_vs_static']:.2f}x lockstep, utilisation "
         f"{r['skewed_engine_utilisation']:.2f}, KV pool {fmt_bytes(r['skewed_engine_kv_bytes'])},"
         f" {r['skewed_engine_programs']} programs, compile "
         f"{r['compile_skewed_engine_s']:.2f} s)"),
    ]
  rows += [
      (f"train step {sizes['train_seqs']} x {sizes['train_len']} tokens, {sizes['micro']} micro",
       f"{step:.3f} s ({results['train_tokens_per_s']:,.1f} tokens/s)"),
      ("FLOPs per train step", f"{results['flops_per_step']:.3e} ({results['flops_source']})"),
      ("MFU", pct(results["mfu"])),
      ("6·N·tokens per step / its MFU", f"{results['flops_6nt']:.3e} / {pct(results['mfu_6nt'])}"),
      ("peak device memory: after rollout / end",
       f"{fmt_bytes(results['peak_memory_after_rollout_bytes'])} / "
       f"{fmt_bytes(results['peak_memory_bytes'])}"),
      ("compile: model init (compile + run)", f"{init_s:.2f} s"),
      ("compile: sampler (first call - warm call)", f"{results['compile_sampler_s']:.2f} s"),
      ("compile: train step (lower + compile)", f"{results['compile_train_step_s']:.2f} s"),
      ("FLOPs lowering (one micro-batch)", f"{results['compile_flops_lowering_s']:.2f} s"),
  ]
  width = max(len(r[0]) for r in rows)
  print(f"\n{sizes['model']} ({results['num_params'] / 1e6:,.1f} M parameters, {FLAGS.dtype}) "
        f"on {ndev} x {device.device_kind}")
  print(f"| {'measure':<{width}} | result |")
  print(f"|{'-' * (width + 2)}|--------|")
  for name, value in rows:
    print(f"| {name:<{width}} | {value} |")
  report = {"machine": machine, "config": config, "results": results}
  if FLAGS.json:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.json)), exist_ok=True)
    with open(FLAGS.json, "w") as f:
      json.dump(report, f, indent=2)
    print(f"wrote {FLAGS.json}")
  return report


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    run()
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  if {"--help", "-h", "--helpshort"} & set(sys.argv[1:]):   # absl exits 1 on --help
    print(__doc__ + "\nflags:\n" + FLAGS.main_module_help())
    sys.exit(0)
  app.run(main)
