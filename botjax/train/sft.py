"""Supervised warm start: teacher-forced cross-entropy on completion tokens.

Used by the CPU quick-start to give the tiny model partial competence before RL, and usable
as a plain SFT step for any `botjax.models.Decoder`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from botjax import xla_cpu
from botjax.sampling import positions_from_mask
from botjax.train import step as step_lib
from botjax.train.config import OptimConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class SFTConfig:
  """Supervised fine-tuning: AdamW (`step.make_optimizer`) with linear warm-up over
  `warmup_steps` and cosine decay to 10% of `learning_rate` at `steps`."""
  steps: int = 400
  batch_size: int = 64
  learning_rate: float = 3e-3
  warmup_steps: int = 20
  weight_decay: float = 0.0
  max_grad_norm: float = 1.0
  seed: int = 0


def pack_examples(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                  pad_id: int):
  """Left-pads prompts and right-pads completions into one [N, Lp + T] layout.

  Returns:
    (input_ids int32[N, L], positions int32[N, L], attention_mask bool[N, L],
     loss_mask bool[N, T], T).
  """
  if len(prompts) != len(completions) or not prompts:
    raise ValueError(f"need as many prompts as completions (>0), got {len(prompts)} and "
                     f"{len(completions)}")
  lp = max(len(p) for p in prompts)
  t = max(len(c) for c in completions)
  n = len(prompts)
  ids = np.full((n, lp + t), pad_id, np.int32)
  attn = np.zeros((n, lp + t), bool)
  for i, (p, c) in enumerate(zip(prompts, completions)):
    ids[i, lp - len(p):lp] = p
    ids[i, lp:lp + len(c)] = c
    attn[i, lp - len(p):lp + len(c)] = True
  return ids, positions_from_mask(attn), attn, attn[:, lp:], t


def sft(model: nnx.Module, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
        cfg: SFTConfig, *, pad_id: int = 0, log_every: int = 0) -> tuple[nnx.Module, list[float]]:
  """Trains `model` in place to maximise log p(completion | prompt); returns it and the losses.

  Batches are drawn without replacement per epoch with `cfg.seed`; the loss is the mean
  negative log-likelihood over completion tokens.
  """
  ids, pos, attn, loss_mask, t = pack_examples(prompts, completions, pad_id)
  graphdef, params, rest = step_lib.split_model(model)
  tx = step_lib.make_optimizer(OptimConfig(   # AdamW, linear warm-up, cosine decay to 10%
      learning_rate=cfg.learning_rate, warmup_steps=cfg.warmup_steps, schedule="cosine",
      weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm), cfg.steps)
  opt_state = tx.init(params)

  @functools.partial(xla_cpu.jit, donate_argnums=(0, 1))
  def train_step(params, opt_state, ids, pos, attn, lmask):
    def loss_fn(p):
      logp, _ = step_lib.split_logprobs(graphdef, p, rest, ids, pos, attn, completion_len=t)
      return -jnp.sum(jnp.where(lmask, logp, 0.0)) / jnp.maximum(jnp.sum(lmask), 1)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  rng = np.random.default_rng(cfg.seed)
  n = ids.shape[0]
  bs = min(cfg.batch_size, n)
  order, cursor, losses = rng.permutation(n), 0, []
  for s in range(cfg.steps):
    if cursor + bs > n:
      order, cursor = rng.permutation(n), 0
    rows = order[cursor:cursor + bs]
    cursor += bs
    params, opt_state, loss = train_step(params, opt_state, ids[rows], pos[rows], attn[rows],
                                         loss_mask[rows])
    losses.append(float(loss))
    if log_every and (s + 1) % log_every == 0:
      print(f"sft step {s + 1}/{cfg.steps}: loss {np.mean(losses[-log_every:]):.4f}", flush=True)
  nnx.update(model, params)
  return model, losses
