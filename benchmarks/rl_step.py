"""Seconds per full RL iteration: botjax `RLTrainer` against TRL `GRPOTrainer` on CPU.

One iteration = 16 prompts x 8 completions, 64 new tokens each, an exact-answer reward,
group-normalised advantages and one optimizer update over all 128 completions (GRPO, no KL
term, no reference model). Both sides load the same tiny random Qwen2 checkpoint (3 layers,
hidden 96, tied embeddings) and the same tokenizer, written to a temp dir with `transformers`
`save_pretrained` and `botjax.data.build_tokenizer`, and get the same arithmetic prompts as
ChatML user turns.

Same number of tokens on both sides: neither trainer can be told to ignore EOS, and a random
model samples close to uniformly over its ~300 ids, so a few completions would stop early at
`<|im_end|>`. The checkpoint is therefore edited so that special tokens are practically never
sampled: hidden dimension 0 of every (tied) embedding row is set to +c and to -c for the EOS, pad
and BOS rows. The residual stream then carries a large positive dimension 0 at every position,
which gives every ordinary token the same logit offset (softmax-invariant) and the special tokens
an offset about 2 c sqrt(hidden) lower (~e^-10 less likely). Both sides run these identical
weights; the mean completion length of each side is printed to show that practically all
completions are 64 tokens long (with the default seed, one TRL completion in iteration 6 still
stops early: mean 63.8 there), and generated tokens per second are printed as well.

  python benchmarks/rl_step.py                  # 4 warm-up + 8 timed iterations per side
  python benchmarks/rl_step.py --iters 3 --warmup 1
  python benchmarks/rl_step.py --model wide     # 2.6 M parameters: compute rather than dispatch

Each side runs in a fresh process of this script (`--no-separate` runs both in this one). In one
process the TRL side took 0.88-1.06 s per iteration after the botjax side, against 0.72-0.76 s
in a process of its own (2-core machine, 2026-12-02). The processes build the model and
tokenizer from the same seed; their digests are compared and must match.

The two processes run in lockstep (default): this script lets them do one iteration at a time,
alternately (botjax then TRL, then TRL then botjax, ...), over pipes, so they never run at once
and both meet the same machine. This VM's speed drifts by 20-40% within minutes (a 1024^3
numpy matmul took 9.1-12.7 ms in the same quarter hour), which made back-to-back runs of the
two sides (`--no-lockstep`) disagree by more than the effects being measured. The report adds
the median of the paired ratios (iteration i of TRL over iteration i of botjax).

Same work on both sides: TRL's `GRPOConfig` turns gradient checkpointing on by default (the
backward recomputes the forward), botjax's trainer keeps activations, so the TRL side runs with
it off (`--trl-gradient-checkpointing` restores TRL's default: TRL 0.564 s per iteration with
it, 0.468-0.492 s without, on 2026-12-02).

Two things botjax's trainer does that TRL's does not, both exact (the same update up to float
rounding) and on by default, each with a flag to measure without it:
  - the update runs each group's prompt through the model once, not once per completion
    (`TrainConfig.share_prompts`, `Decoder.shared_prefix`; `--no-share-prompts`);
  - on hosts with at most 4 cores, sampling splits the prompts over 2 host threads (same
    draws) and the update computes the gradients of two halves of the batch in 2 threads, then
    applies their sum (`TrainConfig.host_threads`; `--host-threads 1`): XLA:CPU runs one
    program's small kernels one after another and leaves the second core mostly idle.

Needs the `bench` extra (`pip install -e .[bench]`: trl, accelerate, datasets, torch). Prints the
machine, versions, the median seconds per iteration of each side, the ratio TRL/botjax, the mean
completion length of each side and the per-phase split (generate / reward / rest) of each side.
Timings are medians of warm iterations. Run it on an idle machine: CPU use by other processes is
sampled before each side and after both, and the ratio is flagged when it was above 20%. Other
jobs slow torch's default OpenMP threads (one per core) far more than XLA's, so a busy machine
inflates the ratio several-fold; `--torch-threads 1` makes the TRL side robust to that.

Iterations 0 and 1 of botjax are compile time (iteration 1 compiles the update a second time,
because the train state is no longer uncommitted after the first update), and its next two or
three iterations are still 10-30% slower than the steady state (no page faults or compiles
there; measured, cause not found); the default `--warmup 4` skips them on both sides.

Process set-up, shared by both sides: `botjax.xla_cpu.tune_host_allocator()` runs first
(glibc malloc keeps freed memory, so XLA:CPU does not page-fault each execution's buffers
again; it speeds up the TRL side as well, see `--no-tune-allocator`), and
botjax's programs compile with `xla_cpu.compiler_options()` (one thread per XLA op, the
memory-optimised schedule, no YNNPACK fusions in the decode loop); both are printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import platform
import statistics
import tempfile
import time

from _machine import cpu_model as _cpu_model


def _minor_faults() -> int:
  """Minor page faults of this process so far (first touches of freshly mapped memory)."""
  import resource
  return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _loadavg() -> str:
  try:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
  except OSError:
    return "n/a"


def _cpu_busy(seconds: float = 1.0) -> float | None:
  """Fraction of all cores busy over `seconds` (from /proc/stat), before our own work starts."""
  def read():
    with open("/proc/stat") as f:
      v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]   # total, idle + iowait
  try:
    t0, i0 = read()
    time.sleep(seconds)
    t1, i1 = read()
  except (OSError, ValueError, IndexError):
    return None
  return 1.0 - (i1 - i0) / max(t1 - t0, 1)


# -- lockstep: the parent lets the two sides run one iteration at a time, alternately ----------

class _Control:
  """The child's end of the lockstep pipes (`--control-fds R,W`); a no-op without them."""

  def __init__(self, fds: str):
    self.r, self.w = (int(x) for x in fds.split(",")) if fds else (None, None)
    self.ready_sent = False

  def wait(self) -> None:
    """Tells the parent this side is set up (first call), then blocks until it says go."""
    if self.r is None:
      return
    if not self.ready_sent:
      os.write(self.w, b"r")
      self.ready_sent = True
    if os.read(self.r, 1) != b"g":
      raise SystemExit("the benchmark's parent process went away")

  def done(self) -> None:
    if self.w is not None:
      os.write(self.w, b"d")


# -- the shared setup ------------------------------------------------------------------------

# The two model sizes of --model. "wide" is where compute rather than per-op dispatch dominates
# on CPU; its vocabulary is padded past the task tokenizer's 313 ids to 1024 rows, as real
# checkpoints pad theirs (Qwen2.5: 151,936 rows for 151,665 ids), and the padding rows are
# suppressed like the special ids, so they are computed in every softmax but never sampled.
MODEL_SIZES = {
    "tiny": dict(hidden_size=96, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=256, vocab_size=None),
    "wide": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=512, vocab_size=1024),
}
# c of the embedding edit per size: at c=0.5 the wide model's 711 padding rows still carried
# 22% of the probability at some positions (its layers swamp dimension 0 more); at c=2 they
# carry ~1e-12 and the ordinary ids stay near uniform (entropy 5.70 nats of ln 313 = 5.75).
SPECIAL_LOGIT_GAP = {"tiny": 0.5, "wide": 2.0}


def build_setup(workdir: str, *, num_records: int, seed: int, special_logit_gap: float,
                size: str = "tiny"):
  """Writes tokenizer + random Qwen2 of `MODEL_SIZES[size]` to `workdir/model`; returns (dir,
  records, tokenizer, parameter count, suppressed special ids, digest)."""
  import torch
  import transformers

  from botjax import data as data_lib

  task = data_lib.ArithmeticTask(num_ops=(2, 3), operand_range=(1, 9), ops=("+", "-"),
                                 max_abs_value=99, seed=seed)
  train, _ = data_lib.make_splits(task, num_records, 0)
  records = [{"problem": r["problem"], "answer": str(r["answer"])} for r in train]
  model_dir = os.path.join(workdir, "model")
  tok = data_lib.build_tokenizer(model_dir, task, vocab_size=320, template="{problem}")
  special = sorted({tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id, tok.pad_token_id,
                    tok.convert_tokens_to_ids("<|endoftext|>")})
  dims = dict(MODEL_SIZES[size])
  vocab = dims.pop("vocab_size") or len(tok)
  if vocab < len(tok):
    raise ValueError(f"model vocabulary {vocab} is smaller than the tokenizer's {len(tok)} ids")
  cfg = transformers.Qwen2Config(
      vocab_size=vocab, **dims, tie_word_embeddings=True,
      bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), eos_token_id=tok.eos_token_id,
      pad_token_id=tok.pad_token_id, rope_theta=10000.0, max_position_embeddings=512)
  torch.manual_seed(seed)
  model = transformers.Qwen2ForCausalLM(cfg)
  with torch.no_grad():
    emb = model.model.embed_tokens.weight
    emb[:, 0] = special_logit_gap
    emb[special, 0] = -special_logit_gap
    emb[len(tok):, 0] = -special_logit_gap     # padding rows of a padded vocabulary
  model.save_pretrained(model_dir)
  tok.save_pretrained(model_dir)
  n_params = sum(p.numel() for p in model.parameters())
  digest = hashlib.sha256()
  for name in ("model.safetensors", "tokenizer.json"):
    with open(os.path.join(model_dir, name), "rb") as f:
      digest.update(f.read())
  return model_dir, records, tok, n_params, special, digest.hexdigest()[:12]


def make_reward():
  import logging

  from botjax.rewards import is_correct
  logging.getLogger("math_verify").setLevel(logging.ERROR)   # its "timeout is disabled" notes

  def score(completion: str, answer: str) -> float:
    return 1.0 if is_correct(completion, str(answer), integer=True) else 0.0
  return score


# -- botjax ----------------------------------------------------------------------------------

def bench_botjax(model_dir, records, args, workdir):
  from botjax import models
  from botjax.rewards import RewardResult
  from botjax.train.config import RewardConfig, RolloutConfig, TrainConfig, OptimConfig
  from botjax.train.loop import RLTrainer
  from botjax.train.rollouts import ListPrompts

  score = make_reward()

  def reward_fn(prompts, completions, metadata):
    return [RewardResult(reward=score(c, m["answer"])) for c, m in zip(completions, metadata)]

  cfg = TrainConfig(
      recipe="grpo", recipe_overrides=(("kl_coef", 0.0),),
      optim=OptimConfig(learning_rate=1e-6),
      rollout=RolloutConfig(prompts_per_step=args.prompts, group_size=args.group,
                            max_new_tokens=args.new_tokens, temperature=1.0),
      reward=RewardConfig(kind="inline"), steps=args.warmup + args.iters, seed=args.seed,
      checkpoint_every=0, eval_every=0, tensorboard=False, progress=False,
      share_prompts=args.share_prompts, host_threads=args.host_threads,
      workdir=os.path.join(workdir, "botjax-run"))
  t0 = time.perf_counter()
  model = models.load_pretrained(model_dir)
  tok = models.load_tokenizer(model_dir)
  trainer = RLTrainer(cfg, model=model, tokenizer=tok,
                      prompts=ListPrompts(records, seed=args.seed, shuffle=False),
                      reward_fn=reward_fn)
  setup_s = time.perf_counter() - t0
  steps = []
  control = _Control(args.control_fds)
  try:
    for i in range(args.warmup + args.iters):
      control.wait()
      faults = _minor_faults()
      m = trainer.step()
      m["faults"] = _minor_faults() - faults
      control.done()
      m["tokens"] = m["response_length"] * args.prompts * args.group
      print(f"  botjax iter {i}{' (warm-up)' if i < args.warmup else ''}: {m['step_s']:.3f} s "
            f"(generate {m['generate_s']:.3f}, reward {m['reward_s']:.3f}, "
            f"advantages+update {m['update_s']:.3f}), mean length {m['response_length']:.1f}, "
            f"{m['faults']:.0f} page faults", flush=True)
      steps.append(m)
  finally:
    trainer.close()
  return {"setup_s": setup_s, "warm": steps[:args.warmup], "timed": steps[args.warmup:]}


# -- TRL -------------------------------------------------------------------------------------

def bench_trl(model_dir, records, args, workdir):
  import datasets
  import transformers
  import trl

  score = make_reward()
  lengths: list[list[int]] = []

  def exact_answer(prompts, completions, completion_ids, answer, **kwargs):
    lengths.append([len(c) for c in completion_ids])
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [score(t, a) for t, a in zip(texts, answer)]

  n_steps = args.warmup + args.iters
  rows = records[:args.prompts * n_steps]
  ds = datasets.Dataset.from_list(
      [{"prompt": [{"role": "user", "content": r["problem"]}], "answer": r["answer"]}
       for r in rows])
  batch = args.prompts * args.group
  gargs = trl.GRPOConfig(
      output_dir=os.path.join(workdir, "trl-run"), per_device_train_batch_size=batch,
      gradient_accumulation_steps=1, generation_batch_size=batch, num_generations=args.group,
      max_completion_length=args.new_tokens, temperature=1.0, top_p=1.0, top_k=0,
      learning_rate=1e-6, lr_scheduler_type="constant", warmup_steps=0, beta=0.0,
      num_iterations=1, max_steps=n_steps, use_cpu=True, bf16=False, fp16=False,
      logging_steps=1, report_to=[], save_strategy="no", shuffle_dataset=False,
      seed=args.seed, disable_tqdm=True, dataloader_num_workers=0, log_completions=False,
      gradient_checkpointing=args.trl_gradient_checkpointing)

  lockstep = _Control(args.control_fds)

  class Timer(transformers.TrainerCallback):
    def __init__(self):
      self.steps: list[float] = []
      self._t = 0.0

    def on_step_begin(self, a, state, control, **kw):
      lockstep.wait()
      self._t = time.perf_counter()

    def on_step_end(self, a, state, control, **kw):
      self.steps.append(time.perf_counter() - self._t)
      lockstep.done()

  timer = Timer()
  tok = transformers.AutoTokenizer.from_pretrained(model_dir)
  t0 = time.perf_counter()
  trainer = trl.GRPOTrainer(model=model_dir, reward_funcs=[exact_answer], args=gargs,
                            train_dataset=ds, processing_class=tok, callbacks=[timer])
  setup_s = time.perf_counter() - t0

  # Per-phase timings: wrap the generation and reward methods of this trainer instance.
  phase = {"generate_s": [], "reward_s": []}

  def timed(name, fn):
    def wrapper(*a, **kw):
      t = time.perf_counter()
      try:
        return fn(*a, **kw)
      finally:
        phase[name].append(time.perf_counter() - t)
    return wrapper

  trainer.remove_callback(transformers.PrinterCallback)   # its per-step log dicts: read below
  trainer._generate = timed("generate_s", trainer._generate)
  trainer._calculate_rewards = timed("reward_s", trainer._calculate_rewards)
  trainer.train()
  steps = []
  for i, s in enumerate(timer.steps):
    m = {"step_s": s, "generate_s": phase["generate_s"][i], "reward_s": phase["reward_s"][i],
         "response_length": statistics.fmean(lengths[i])}
    m["update_s"] = s - m["generate_s"] - m["reward_s"]
    m["tokens"] = float(sum(lengths[i]))
    print(f"  TRL    iter {i}{' (warm-up)' if i < args.warmup else ''}: {s:.3f} s "
          f"(generate {m['generate_s']:.3f}, reward {m['reward_s']:.3f}, "
          f"rest {m['update_s']:.3f}), mean length {m['response_length']:.1f}", flush=True)
    steps.append(m)
  trl_step_time = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
  if trl_step_time:
    print(f"  TRL's own step_time metric (training_step without the optimizer step), timed iterations: "
          f"{', '.join(f'{x:.3f}' for x in trl_step_time[args.warmup:])} s", flush=True)
  if len(steps) != n_steps:
    raise RuntimeError(f"TRL ran {len(steps)} optimizer steps, expected {n_steps} (one per "
                       f"generation of {batch} completions)")
  return {"setup_s": setup_s, "warm": steps[:args.warmup], "timed": steps[args.warmup:]}


# -- report ----------------------------------------------------------------------------------

def _run_side(side: str, tmp: str, digest: str) -> dict:
  """Runs one side in a fresh process of this script; returns its {setup_s, warm, timed}."""
  out = os.path.join(tmp, f"{side}.json")
  # this run's own flags, then the side and the result file (argparse: the last value wins)
  cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--side", side,
         "--json-out", out]
  proc = subprocess.run(cmd)
  if proc.returncode:
    raise SystemExit(f"the {side} side failed (exit {proc.returncode}): {' '.join(cmd)}")
  return _side_result(side, out, digest)


def _side_result(side: str, out: str, digest: str) -> dict:
  """A finished side's {setup_s, warm, timed} from its result file, digest checked."""
  with open(out) as f:
    got = json.load(f)
  if got["digest"] != digest:
    raise SystemExit(f"the {side} side built a different model/tokenizer ({got['digest']} vs "
                     f"{digest}): the comparison would not be like for like")
  return got["results"]["botjax" if side == "botjax" else "TRL"]


def _run_lockstep(tmp: str, digest: str, n_steps: int) -> dict:
  """Runs both sides in fresh processes, one iteration at a time, alternately.

  Each side waits for a go before every iteration and reports when it is done, so the two
  never run at once and the machine's slow drifts (20-40% over minutes here) reach both sides
  alike; which side goes first alternates from one iteration to the next.
  """
  procs = {}
  try:
    for side in ("botjax", "trl"):
      go_r, go_w = os.pipe()
      done_r, done_w = os.pipe()
      out = os.path.join(tmp, f"{side}.json")
      cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--side", side,
             "--json-out", out, "--control-fds", f"{go_r},{done_w}"]
      proc = subprocess.Popen(cmd, pass_fds=(go_r, done_w))
      os.close(go_r)
      os.close(done_w)
      procs[side] = (proc, go_w, done_r, out, cmd)

    def expect(side: str, what: bytes) -> None:
      proc, _, done_r, _, cmd = procs[side]
      if os.read(done_r, 1) != what:
        raise SystemExit(f"the {side} side failed (exit {proc.wait()}): {' '.join(cmd)}")

    for side in procs:
      expect(side, b"r")                        # both set up before the first iteration
    for i in range(n_steps):
      for side in (("botjax", "trl") if i % 2 == 0 else ("trl", "botjax")):
        os.write(procs[side][1], b"g")
        expect(side, b"d")
    results = {}
    for side, (proc, go_w, done_r, out, cmd) in procs.items():
      os.close(go_w)
      if proc.wait():
        raise SystemExit(f"the {side} side failed (exit {proc.returncode}): {' '.join(cmd)}")
      results["botjax" if side == "botjax" else "TRL"] = _side_result(side, out, digest)
    return results
  finally:
    for proc, *_ in procs.values():
      if proc.poll() is None:
        proc.kill()


def _median(steps, key):
  return statistics.median(s[key] for s in steps)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--iters", type=int, default=8, help="timed iterations per side")
  parser.add_argument("--warmup", type=int, default=4,
                      help="untimed iterations per side first (botjax compiles here)")
  parser.add_argument("--model", choices=sorted(MODEL_SIZES), default="tiny",
                      help="tiny: 3 layers, hidden 96, vocab 313 (0.12 M parameters; per-op "
                           "dispatch dominates on CPU); wide: 4 layers, hidden 256, 4/2 heads, "
                           "MLP 512, vocab padded to 1024 (2.6 M parameters; compute dominates)")
  parser.add_argument("--prompts", type=int, default=16)
  parser.add_argument("--group", type=int, default=8)
  parser.add_argument("--new-tokens", type=int, default=64)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--special-logit-gap", type=float, default=None,
                      help="c of the embedding edit that keeps EOS/pad from being sampled "
                           "(default 0.5 for --model=tiny, 2 for wide; 0 = unedited random "
                           "model; completions may then stop early)")
  parser.add_argument("--side", choices=("both", "botjax", "trl"), default="both")
  parser.add_argument("--tune-allocator", action=argparse.BooleanOptionalAction, default=True,
                      help="call botjax.xla_cpu.tune_host_allocator() first (both sides "
                           "run with it; --no-tune-allocator measures glibc's defaults)")
  parser.add_argument("--separate", action=argparse.BooleanOptionalAction, default=True,
                      help="with --side both, run each side in a fresh process of this script "
                           "(default; in one process each side slows the other down)")
  parser.add_argument("--rounds", type=int, default=1,
                      help="with separate processes, measure botjax then TRL this many times "
                           "(the machine's speed drifts over minutes; the table pools the "
                           "rounds' timed iterations and the ratio of each round is printed)")
  parser.add_argument("--lockstep", action=argparse.BooleanOptionalAction, default=True,
                      help="with separate processes, run the two sides one iteration at a time, "
                           "alternately (default), so drifts of the machine's speed reach both "
                           "alike; --no-lockstep runs all of botjax, then all of TRL")
  parser.add_argument("--trl-gradient-checkpointing", action=argparse.BooleanOptionalAction,
                      default=False,
                      help="TRL's GRPOConfig turns gradient checkpointing on by default, which "
                           "recomputes the forward pass in the backward; botjax's trainer does "
                           "not (TrainConfig remat off), so for the same work it is off here")
  parser.add_argument("--share-prompts", action=argparse.BooleanOptionalAction, default=True,
                      help="botjax's update runs each group's prompt through the model once "
                           "(TrainConfig.share_prompts, default); TRL runs it once per completion")
  parser.add_argument("--host-threads", type=int, default=0,
                      help="botjax's TrainConfig.host_threads: threads for sampling and the "
                           "update (0 = automatic: 2 on hosts with at most 4 cores; 1 = one "
                           "program at a time)")
  parser.add_argument("--json-out", default="", help=argparse.SUPPRESS)
  parser.add_argument("--control-fds", default="", help=argparse.SUPPRESS)
  parser.add_argument("--torch-threads", type=int, default=0,
                      help="torch.set_num_threads for the TRL side (0 = torch's default, one per "
                           "core); 1 makes TRL far less sensitive to other jobs on the machine")
  args = parser.parse_args()
  if args.special_logit_gap is None:
    args.special_logit_gap = SPECIAL_LOGIT_GAP[args.model]
  if args.iters < 1 or args.warmup < 0 or args.rounds < 1:
    parser.error("--iters and --rounds must be >= 1 and --warmup >= 0")
  if args.host_threads < 0:
    parser.error(f"--host-threads must be >= 0 (0 = automatic), got {args.host_threads}")

  from botjax import xla_cpu
  # before JAX starts its threads; both sides share it
  allocator = xla_cpu.tune_host_allocator() if args.tune_allocator else False

  import jax
  import torch
  import transformers

  if args.torch_threads:
    torch.set_num_threads(args.torch_threads)
  versions = (f"jax {jax.__version__} ({jax.devices()[0].platform}), torch {torch.__version__} "
              f"({torch.get_num_threads()} threads), transformers {transformers.__version__}")
  try:
    import accelerate
    import trl
    versions += f", trl {trl.__version__}, accelerate {accelerate.__version__}"
  except ImportError:
    if args.side != "botjax":
      raise SystemExit("TRL is not installed: pip install -e .[bench]  (or run --side botjax)")
  print(f"machine: {_cpu_model()}, {os.cpu_count()} cores, load average {_loadavg()}")
  busy_fractions = []

  def check_busy(when: str):
    frac = _cpu_busy()
    if frac is None:
      return
    busy_fractions.append(frac)
    print(f"CPU busy {when}: {100 * frac:.0f}% of {os.cpu_count()} cores (other processes; 1 s "
          f"sample)", flush=True)
    if frac > 0.2:
      print("WARNING: other jobs are using the CPU; they slow the TRL side (torch's OpenMP "
            "threads spin at every op) far more than the botjax side, which inflates the ratio. "
            "Compare on an idle machine, or pass --torch-threads 1.", flush=True)
  print(f"versions: python {platform.python_version()}, {versions}")
  print(f"host allocator: {'freed memory kept for reuse (xla_cpu.tune_host_allocator)' if allocator else 'unchanged'}; "
        f"XLA:CPU options of botjax's programs: {xla_cpu.compiler_options()}")

  n_steps = args.warmup + args.iters
  with tempfile.TemporaryDirectory(prefix="botjax-rl-bench-") as tmp:
    t0 = time.perf_counter()
    model_dir, records, tok, n_params, special, digest = build_setup(
        tmp, num_records=max(64, args.prompts * n_steps), seed=args.seed,
        special_logit_gap=args.special_logit_gap, size=args.model)
    dims = MODEL_SIZES[args.model]
    print(f"setup: {args.model} Qwen2 ({n_params / 1e6:.2f} M parameters, vocab "
          f"{dims['vocab_size'] or len(tok)} for {len(tok)} token ids, "
          f"{dims['num_hidden_layers']} layers, hidden {dims['hidden_size']}, heads "
          f"{dims['num_attention_heads']}/{dims['num_key_value_heads']}, MLP "
          f"{dims['intermediate_size']}, tied embeddings), special ids {special} suppressed with c="
          f"{args.special_logit_gap}; built in {time.perf_counter() - t0:.1f} s; digest {digest}")
    print(f"iteration: {args.prompts} prompts x {args.group} completions, {args.new_tokens} new "
          f"tokens, exact-answer reward, GRPO advantages, one AdamW update, no KL, TRL gradient "
          f"checkpointing {'on' if args.trl_gradient_checkpointing else 'off'}; "
          f"{args.warmup} warm-up + {args.iters} timed iterations per side")
    print(f"botjax: prompts shared by their group's completions in the update "
          f"{'on' if args.share_prompts else 'off'}; host threads "
          f"{args.host_threads or 'automatic (2 on hosts with at most 4 cores)'}")
    results = {}
    separate = args.side == "both" and args.separate
    rounds = args.rounds if separate else 1
    round_ratios = []
    for rnd in range(rounds):
      per_round = {}
      label = f" (round {rnd + 1} of {rounds})" if rounds > 1 else ""
      if separate and args.lockstep:
        check_busy(f"before both sides{label}")
        print(f"both sides{label}, each in a fresh process, one iteration at a time, "
              f"alternately:", flush=True)
        per_round = _run_lockstep(tmp, digest, n_steps)
      for side, name, bench in (("botjax", "botjax", bench_botjax), ("trl", "TRL", bench_trl)):
        if args.side not in ("both", side) or (separate and args.lockstep):
          continue
        check_busy(f"before the {name} side{label}")
        if separate:
          print(f"{name} side{label}, in a fresh process:", flush=True)
          per_round[name] = _run_side(side, tmp, digest)
        else:
          print(f"{name} {'RLTrainer' if side == 'botjax' else 'GRPOTrainer'}:", flush=True)
          per_round[name] = bench(model_dir, records, args, tmp)
      for name, r in per_round.items():     # the rounds' timed iterations are pooled
        if name in results:
          results[name]["timed"] += r["timed"]
        else:
          results[name] = r
      if len(per_round) == 2:
        round_ratios.append(_median(per_round["TRL"]["timed"], "step_s")
                            / _median(per_round["botjax"]["timed"], "step_s"))
    if args.json_out:
      with open(args.json_out, "w") as f:
        json.dump({"digest": digest, "results": results}, f, default=float)
      return

  check_busy("after both sides")
  busy = any(f > 0.2 for f in busy_fractions)
  print()
  print(f"load average after: {_loadavg()}")
  print(f"{'':8s} {'s/iter':>8s} {'min':>7s} {'max':>7s} {'generate':>9s} {'reward':>7s} "
        f"{'update':>7s} {'mean len':>9s} {'gen tok/s':>10s} {'first iter':>11s}")
  for name, r in results.items():
    t = r["timed"]
    gen_tps = statistics.median(s["tokens"] / s["generate_s"] for s in t)
    first = (r["warm"] or t)[0]["step_s"]
    print(f"{name:8s} {_median(t, 'step_s'):8.3f} {min(s['step_s'] for s in t):7.3f} "
          f"{max(s['step_s'] for s in t):7.3f} {_median(t, 'generate_s'):9.3f} "
          f"{_median(t, 'reward_s'):7.3f} {_median(t, 'update_s'):7.3f} "
          f"{statistics.fmean(s['response_length'] for s in t):9.2f} {gen_tps:10.0f} "
          f"{first:11.2f}")
  print("(medians over the timed iterations; 'update' is advantages + log-probs + backward + "
        "optimizer step, for TRL everything in the step outside generate and reward)")
  if "botjax" in results:
    t = results["botjax"]["timed"]
    s = _median(t, "step_s")
    parts = {k: _median(t, k) for k in ("generate_s", "reward_s", "update_s")}
    other = statistics.median(x["step_s"] - x["generate_s"] - x["reward_s"] - x["update_s"]
                              for x in t)
    print("botjax per-phase split: " + ", ".join(
        f"{k[:-2]} {v:.3f} s ({100 * v / s:.0f}%)" for k, v in parts.items())
        + f", other {other:.3f} s")
  if len(results) == 2:
    b, t = _median(results["botjax"]["timed"], "step_s"), _median(results["TRL"]["timed"], "step_s")
    ratio = t / b
    print(f"ratio TRL / botjax: {ratio:.2f}x per iteration ({t:.3f} s vs {b:.3f} s); target >= 2x: "
          f"{'met' if ratio >= 2 else 'NOT met'}"
          + (" (machine busy: not a valid comparison, see the warning above)" if busy else ""))
    if len(round_ratios) > 1:
      print(f"ratio per round{' (lockstep)' if args.lockstep else ' (botjax first, then TRL, each in a fresh process)'}: "
            f"{', '.join(f'{x:.2f}x' for x in round_ratios)}; median "
            f"{statistics.median(round_ratios):.2f}x")
    pairs = [t_["step_s"] / b_["step_s"]
             for b_, t_ in zip(results["botjax"]["timed"], results["TRL"]["timed"])]
    print(f"median of the paired ratios (iteration i of TRL / iteration i of botjax"
          f"{', run back to back' if args.lockstep else ''}): {statistics.median(pairs):.2f}x "
          f"over {len(pairs)} pairs (range {min(pairs):.2f}-{max(pairs):.2f}x)")
    bmin = min(s["step_s"] for s in results["botjax"]["timed"])
    tmin = min(s["step_s"] for s in results["TRL"]["timed"])
    print(f"ratio of the fastest iterations (less sensitive to other jobs on the machine): "
          f"{tmin / bmin:.2f}x ({tmin:.3f} s vs {bmin:.3f} s)")
    for k, label in (("generate_s", "generate"), ("update_s", "update")):
      bk, tk = _median(results["botjax"]["timed"], k), _median(results["TRL"]["timed"], k)
      print(f"  {label}: TRL / botjax {tk / max(bk, 1e-9):.2f}x")


if __name__ == "__main__":
  main()
