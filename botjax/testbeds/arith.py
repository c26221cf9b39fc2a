"""The embedded CPU testbed: the step-verified arithmetic task end to end.

`prepare(workdir, setup)` builds (once, then reuses) a tiny tokenizer, a tiny Qwen2-architecture
model and its supervised warm start on imperfect worked solutions, saved as a Hugging Face
checkpoint so that RL runs load it through the same path as a user's checkpoint. `make_trainer`
wires a recipe to that checkpoint with the exact step judge, and `make_eval_fn` measures
held-out accuracy by sampling. Everything is deterministic by seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import time
from typing import Sequence

import jax
from flax import nnx

from botjax import algorithms, xla_cpu
from botjax import data as data_lib
from botjax import models
from botjax.rewards import MathReward, is_correct
from botjax.sampling import make_engine
from botjax.testbeds.arith_judge import ExactArithmeticJudge
from botjax.train import config as config_lib
from botjax.train.evaluate import evaluate
from botjax.train.loop import RLTrainer
from botjax.train.rollouts import ListPrompts
from botjax.train.sft import SFTConfig, sft


@dataclasses.dataclass(frozen=True, kw_only=True)
class TinyModelSetup:
  """A testbed's tokenizer size, tiny Qwen2-architecture model (`tiny_model`) and supervised warm
  start (`warm_start`); every field is part of the cache key (`setup_digest`)."""
  vocab_size: int
  hidden_size: int = 96
  num_layers: int = 3
  num_heads: int = 4
  num_kv_heads: int = 2
  intermediate_size: int = 256
  warm_steps: int
  warm_batch: int
  warm_lr: float = 3e-3
  seed: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArithmeticSetup(TinyModelSetup):
  """The task, the tiny model and its warm start (all cached under `<workdir>/warmstart-<hash>`)."""
  num_ops: tuple[int, int] = (2, 3)
  operand_range: tuple[int, int] = (1, 9)
  ops: tuple[str, ...] = ("+", "-")
  max_abs_value: int = 99
  task_seed: int = 0
  num_train: int = 4000
  num_eval: int = 128
  vocab_size: int = 320
  warm_error_rate: float = 0.6       # fraction of warm-start solutions with one mistake
  warm_steps: int = 400
  warm_batch: int = 32

  def task(self) -> data_lib.ArithmeticTask:
    return data_lib.ArithmeticTask(num_ops=self.num_ops, operand_range=self.operand_range,
                                   ops=self.ops, max_abs_value=self.max_abs_value,
                                   seed=self.task_seed)

  def digest(self) -> str:
    return setup_digest(self)


def setup_digest(setup, **extra) -> str:
  """Cache key of a testbed setup dataclass (its fields plus `extra`): 10 hex digits."""
  blob = json.dumps({**dataclasses.asdict(setup), **extra}, sort_keys=True).encode()
  return hashlib.sha256(blob).hexdigest()[:10]


# The tiny model learns the answer format from its warm start, so the prompt is the bare
# question: every prompt token costs compute on CPU (ARITHMETIC_TEMPLATE is ~60 tokens).
QUICKSTART_TEMPLATE = "{problem}"


def prompt_messages(record):
  return data_lib.chat_messages(record, QUICKSTART_TEMPLATE)


@dataclasses.dataclass
class Prepared:
  """A testbed's warm-start checkpoint dir and its train / held-out records."""
  checkpoint: str
  train: list[dict]
  eval: list[dict]
  setup: object          # the setup dataclass (ArithmeticSetup, react_tiny.TinyReactSetup)
  seconds: float
  cached: bool


def tiny_model(tok, setup: TinyModelSetup, *,
               max_position_embeddings: int) -> tuple[models.Decoder, int]:
  """A random tiny Qwen2-architecture Decoder sized by `setup` (hidden_size, num_layers,
  num_heads, num_kv_heads, intermediate_size, seed) for the tokenizer `tok`; returns it and the
  EOS id (`<|im_end|>`)."""
  eos = tok.convert_tokens_to_ids("<|im_end|>")
  cfg = dataclasses.replace(
      models.get_config("tiny"), vocab_size=len(tok), hidden_size=setup.hidden_size,
      num_layers=setup.num_layers, num_heads=setup.num_heads, num_kv_heads=setup.num_kv_heads,
      head_dim=setup.hidden_size // setup.num_heads, intermediate_size=setup.intermediate_size,
      bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), eos_token_id=(eos,),
      pad_token_id=tok.pad_token_id, max_position_embeddings=max_position_embeddings)
  return models.Decoder(cfg, rngs=nnx.Rngs(setup.seed)), eos


def num_params(model) -> int:
  return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def warm_start(model, tok, prompt_ids, completion_ids, setup, tmp: str, ckpt: str, *,
               log_every: int) -> None:
  """SFT of `model` on the pairs (setup's warm_steps, warm_batch, warm_lr, seed), then saves it
  as a Hugging Face checkpoint with `setup.json` in `tmp` and renames `tmp` to `ckpt`, so that a
  half-built warm start is never taken for a finished one."""
  sft(model, prompt_ids, completion_ids,
      SFTConfig(steps=setup.warm_steps, batch_size=setup.warm_batch, learning_rate=setup.warm_lr,
                seed=setup.seed), pad_id=tok.pad_token_id, log_every=log_every)
  models.save_pretrained(model, tmp)
  with open(os.path.join(tmp, "setup.json"), "w") as f:
    json.dump({**dataclasses.asdict(setup), "environment": xla_cpu.numerics_environment()}, f,
              indent=2)
  os.replace(tmp, ckpt)


def prepare(workdir: str, setup: ArithmeticSetup = ArithmeticSetup(), *,
            verbose: bool = True) -> Prepared:
  """Builds or reuses the tokenizer + warm-started tiny model; returns the checkpoint dir."""
  t0 = time.perf_counter()
  task = setup.task()
  train, held_out = data_lib.make_splits(task, setup.num_train, setup.num_eval)
  # The numerics environment is part of the key: a warm start built under other XLA flags, CPU
  # or device count has other weights, and the runs from it other figures.
  env = xla_cpu.numerics_environment()
  ckpt = os.path.join(workdir, f"warmstart-{setup.digest()}-{setup_digest(setup, **env)}")
  if os.path.exists(os.path.join(ckpt, "config.json")):
    return Prepared(ckpt, train, held_out, setup, time.perf_counter() - t0, cached=True)
  tmp = ckpt + ".partial"
  tok = data_lib.build_tokenizer(tmp, task, vocab_size=setup.vocab_size,
                                 template=QUICKSTART_TEMPLATE)
  model, eos = tiny_model(tok, setup, max_position_embeddings=512)
  rng = random.Random(setup.seed)
  prompts, completions = [], []
  for rec in train:
    text = data_lib.imperfect_solution(rec, rng, setup.warm_error_rate)
    p = tok.apply_chat_template(prompt_messages(rec), add_generation_prompt=True,
                                tokenize=True, return_dict=False)
    c = tok(text, add_special_tokens=False)["input_ids"] + [eos]
    prompts.append(p)
    completions.append(c)
  if verbose:
    print(f"warm start: {len(train)} imperfect solutions (error rate {setup.warm_error_rate}), "
          f"{setup.warm_steps} SFT steps on a {num_params(model) / 1e6:.2f}M-parameter model",
          flush=True)
  warm_start(model, tok, prompts, completions, setup, tmp, ckpt, log_every=100 if verbose else 0)
  return Prepared(ckpt, train, held_out, setup, time.perf_counter() - t0, cached=False)


def correct_fn(completion: str, record) -> bool:
  return bool(is_correct(completion, str(record["answer"]), integer=True))


def make_eval_fn(records: Sequence[dict], *, n: int = 4, temperature: float = 1.0,
                 max_new_tokens: int = 64, seed: int = 1234):
  """`(trainer, step) -> metrics`: held-out accuracy of sampled completions (avg@n, pass@k)."""
  cache: dict = {}

  def fn(trainer: RLTrainer, step: int) -> dict:
    if "engine" not in cache:   # the run's engine kind, with the evaluation's decoding rule
      sc = dataclasses.replace(trainer.sampling, temperature=temperature,
                               max_new_tokens=max_new_tokens, top_k=0, top_p=1.0)
      cache["engine"] = make_engine(trainer.cfg.rollout.engine, trainer.model(), sc,
                                    mesh=trainer.mesh)
    return evaluate(cache["engine"], trainer.tokenizer, records, correct_fn=correct_fn,
                    params=trainer.full_state(), n=n, key=jax.random.PRNGKey(seed),
                    ks=(1, 2, 4), prompt_fn=prompt_messages)
  return fn


def quickstart_config(recipe: str, *, seed: int = 0, workdir: str, steps: int = 200,
                      overrides: Sequence[str] = ()) -> config_lib.TrainConfig:
  """The quick-start's RL settings for one recipe (CPU-sized, same for every recipe).

  Every recipe keeps its own estimator, surrogate, clipping and aggregation; two settings are
  made uniform so that the comparison is about those: no KL term (the default of verl, TRL,
  DAPO, Dr. GRPO and GSPO; it also saves the reference forward pass on CPU) and the BoT-GRPO
  paper's GRPO std (eq. 1, population: `algorithms.PAPER_PROTOCOL`), so that BoT-GRPO with
  w_s = 0 is exactly GRPO. Dr. GRPO's constant normaliser and DAPO's overlong lengths follow
  this run's 64-token budget (the trainer applies `Recipe.for_budget`).
  """
  max_new = 64
  recipe_overrides = [*algorithms.PAPER_PROTOCOL, ("kl_coef", 0.0)]
  cfg = config_lib.TrainConfig(
      recipe=recipe, steps=steps, seed=seed, workdir=workdir, recipe_overrides=tuple(recipe_overrides),
      optim=config_lib.OptimConfig(learning_rate=3e-4, warmup_steps=5, max_grad_norm=1.0),
      rollout=config_lib.RolloutConfig(prompts_per_step=16, group_size=8, max_prompt_tokens=128,
                                       max_new_tokens=max_new, temperature=1.0),
      reward=config_lib.RewardConfig(workers=1, timeout_s=30.0, kind="inline"),
      eval_every=10, checkpoint_every=0, log_every=1, tensorboard=False)
  return config_lib.apply_overrides(cfg, overrides)


def make_trainer(prepared: Prepared, cfg: config_lib.TrainConfig, *, w_s: float = 0.5,
                 strategy: str = "error_propagation", window: int = 1, noise: float = 0.0,
                 eval_n: int = 4, run_config: dict | None = None, reward_fn=None,
                 **trainer_kwargs) -> RLTrainer:
  """An RLTrainer on the warm-started model with held-out evaluation.

  Args:
    prepared: the testbed (`prepare`).
    cfg: the TrainConfig (`quickstart_config`).
    w_s, strategy, window, noise: the default reward: `MathReward` with the exact step judge
      (`ExactArithmeticJudge`, verdicts flipped with probability `noise`), w_g = 3.
    eval_n: samples per held-out problem.
    run_config: extra entries of the saved config.
    reward_fn: a reward function to train on instead (its `spec` declares what it gives; its
      name is saved in the config); w_s, strategy, window and noise are then unused.
    **trainer_kwargs: further `RLTrainer` arguments (e.g. `engine=`, `eval_fn=None`).
  """
  model = models.load_pretrained(prepared.checkpoint)
  tok = models.load_tokenizer(prepared.checkpoint)
  run_config = dict(run_config or {})
  if reward_fn is None:
    judge = ExactArithmeticJudge(noise=noise, seed=cfg.seed)
    reward_fn = MathReward(judge, w_g=3.0, w_s=w_s, strategy=strategy, window=window)
    reward = {"w_s": w_s, "strategy": strategy, "window": window, "noise": noise}
  else:
    reward = {"reward_fn": getattr(reward_fn, "__name__", type(reward_fn).__name__)}
  run_config.update(train=config_lib.to_dict(cfg), reward=reward,
                    setup=dataclasses.asdict(prepared.setup))
  kwargs = dict(prompts=ListPrompts(prepared.train, seed=cfg.seed), prompt_fn=prompt_messages,
                eval_fn=make_eval_fn(prepared.eval, n=eval_n), run_config=run_config,
                checkpoint=prepared.checkpoint)
  kwargs.update(trainer_kwargs)
  return RLTrainer(cfg, model=model, tokenizer=tok, reward_fn=reward_fn, **kwargs)
