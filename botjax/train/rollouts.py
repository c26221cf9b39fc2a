"""Rollout assembly: prompts -> sampled groups -> host scores -> the token-level arrays of a step.

One RL step's data is gathered in this order:

  1. `RolloutCollector.collect` reads P prompt records at the saved position of the prompt source.
     With DAPO dynamic sampling it samples again for groups whose accuracy (the reward's verifier
     signal; the sequence reward when it has none) is constant, up to the recipe's
     `max_resample_rounds` (DAPO, arXiv 2503.14476, §3.2 eq. 11); groups still missing become
     loss-free filler rows, so that the batch keeps its shape. On the slot engine the extra
     groups are requests in the same queue (`RolloutCollector._collect_in_queue`): a constant
     group queues the next prompt as soon as it is scored, and the same groups are kept.
  2. `RolloutCollector.sample_and_score` samples G completions per record with the rollout
     engine (`botjax.sampling.RolloutEngine`, holding the current parameters) and scores them in
     the reward pool (`botjax.rewards.RewardPool`).
  3. `assemble` turns the samples and their `RewardResult`s into arrays, reading only the reward's
     `RewardSpec`: token spans -> `local` [B, T], steps -> the step arrays, the verifier component
     -> `verifier` [B]. A row whose score failed for infrastructure reasons
     (`RewardResult.infra_failure`: a worker timeout, a crashed browser, an unreachable judge)
     gets an all-False mask and, in `collect`, a group of its own (id P), so that its fallback
     score enters neither the loss nor any other row's group statistics.

Everything here is host numpy except the engine call; `Rollouts` is what `botjax.train.batch.
build_batch` turns into the update's batch, and `rollout_metrics` into the step's metrics.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable, Mapping, Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from botjax.rewards.base import (RewardResult, RewardSpec, spans_to_token_values,
                                 steps_to_arrays)
from botjax.sampling import RolloutEngine, decode_completions, encode_prompts


class PromptSource(Protocol):
  """Prompt records by global index (deterministic), so a run can resume at any position."""

  def get(self, index: int) -> Mapping[str, Any]:
    ...


class ListPrompts:
  """A PromptSource over a list of records, reshuffled each epoch with a fixed seed."""

  def __init__(self, records: Sequence[Mapping[str, Any]], *, seed: int = 0, shuffle: bool = True):
    if not records:
      raise ValueError("the prompt list is empty")
    self.records = list(records)
    self.seed = seed
    self.shuffle = shuffle
    self._perm_cache: dict[int, np.ndarray] = {}

  def _perm(self, epoch: int) -> np.ndarray:
    if epoch not in self._perm_cache:
      n = len(self.records)
      self._perm_cache = {epoch: (np.random.default_rng([self.seed, epoch]).permutation(n)
                                  if self.shuffle else np.arange(n))}
    return self._perm_cache[epoch]

  def get(self, index: int) -> Mapping[str, Any]:
    epoch, i = divmod(int(index), len(self.records))
    return self.records[int(self._perm(epoch)[i])]


def default_prompt(record: Mapping[str, Any]):
  """Chat messages for a record: its `messages`, else its `prompt`/`problem` as one user turn."""
  if "messages" in record:
    return list(record["messages"])
  text = record.get("prompt", record.get("problem"))
  if text is None:
    raise KeyError(f"prompt record has neither 'messages', 'prompt' nor 'problem': {sorted(record)}")
  return [{"role": "user", "content": str(text)}]


@dataclasses.dataclass
class Rollouts:
  """Host (numpy) arrays of B scored completions; prompt columns left-padded, completions right.

  Shapes: prompt_ids/prompt_mask [B, Lp]; tokens/mask/logp/local [B, T]; rewards/lengths/
  finish/verifier/infra [B]; steps: step_rewards/step_mask [B, S], token_step [B, T] (or None).
  `mask` is False on every token of a filler row and of an infrastructure failure (`infra`).
  """
  prompt_ids: np.ndarray
  prompt_mask: np.ndarray
  tokens: np.ndarray
  mask: np.ndarray
  logp: np.ndarray
  lengths: np.ndarray
  finish: np.ndarray
  rewards: np.ndarray
  local: np.ndarray
  verifier: np.ndarray | None
  step_rewards: np.ndarray | None
  step_mask: np.ndarray | None
  token_step: np.ndarray | None
  group_ids: np.ndarray
  results: list[RewardResult]
  completions: list[str]
  infra: np.ndarray | None = None   # [B] bool; None: no row failed for infrastructure reasons
  support: np.ndarray | None = None  # [B, T] f32 top-k / top-p support thresholds of the tokens
                                     # (`SampleOutput.support_logp`, −inf: no cut); None: none

  def __post_init__(self):
    if self.infra is None:
      self.infra = np.zeros((self.rewards.shape[0],), bool)


# -- from results to arrays -------------------------------------------------------------------


def assemble(*, prompt_ids, prompt_mask, tokens, mask, logp, lengths, finish, group_ids,
             completions: Sequence[str], offsets: Sequence, results: Sequence[RewardResult],
             spec: RewardSpec, support=None) -> Rollouts:
  """Scored samples as `Rollouts`, reading the reward's signals as its `spec` declares them.

    local[b, t]   = Σ of the token spans of row b holding token t's first character
    step arrays   = `steps_to_arrays` of the rows' steps (when the spec declares steps)
    verifier[b]   = 1[component `spec.verifier` of row b > 0]        (None without a verifier)
    infra[b]      = results[b].infra_failure; such a row's mask, local and steps are cleared

  Args:
    prompt_ids, prompt_mask: [B, Lp] left-padded prompts.
    tokens, mask, logp: [B, T] sampled completion tokens, their mask and behaviour log-probs.
    lengths, finish, group_ids: [B].
    completions: B completion strings.
    offsets: B per-token (start, end) character offsets into `completions[b]`.
    results: B reward results.
    spec: the reward's `RewardSpec`.
    support: [B, T] the sampler's support thresholds (`SampleOutput.support_logp`), or None.

  Returns:
    The `Rollouts`.

  Raises:
    ValueError: a result carries a signal that `spec` does not declare, or lacks its verifier.
  """
  spec.check_results(results)
  tokens = np.asarray(tokens)
  B, T = tokens.shape
  infra = np.asarray([bool(r.infra_failure) for r in results], bool).reshape(B)
  mask = np.asarray(mask, bool) & ~infra[:, None]
  local = np.zeros((B, T), np.float32)
  if spec.token_spans:
    for b, r in enumerate(results):
      if r.token_spans and not infra[b]:
        local[b] = spans_to_token_values(r.token_spans, offsets[b], T)
  step_rewards = step_mask = token_step = None
  if spec.steps and any(r.steps for r in results):
    s_max = max(1, max(len(r.steps or ()) for r in results))
    step_rewards, step_mask, token_step = steps_to_arrays(
        [[] if infra[b] else (r.steps or []) for b, r in enumerate(results)], offsets, T, s_max)
  return Rollouts(
      prompt_ids=np.asarray(prompt_ids), prompt_mask=np.asarray(prompt_mask), tokens=tokens,
      mask=mask, logp=np.asarray(logp, np.float32), lengths=np.asarray(lengths),
      finish=np.asarray(finish), rewards=np.asarray([r.reward for r in results], np.float32),
      local=local, verifier=spec.verifier_values(results), step_rewards=step_rewards,
      step_mask=step_mask, token_step=token_step, group_ids=np.asarray(group_ids),
      results=list(results), completions=list(completions), infra=infra,
      support=None if support is None else np.asarray(support, np.float32))


def accuracy_signal(roll: Rollouts) -> np.ndarray:
  """[B] what DAPO dynamic sampling filters on: the verifier (accuracy) when the reward declares
  one, else the sequence reward (DAPO, arXiv 2503.14476, eq. 11: 0 < |{correct}| < G)."""
  return roll.verifier if roll.verifier is not None else roll.rewards


def varying_groups(values: np.ndarray, valid: np.ndarray, num_groups: int,
                   group_size: int) -> np.ndarray:
  """[P] bool: the valid values of each group of `group_size` contiguous rows are not all equal."""
  v = np.asarray(values, np.float64).reshape(num_groups, group_size)
  ok = np.asarray(valid, bool).reshape(num_groups, group_size)
  hi = np.where(ok, v, -np.inf).max(axis=1)
  lo = np.where(ok, v, np.inf).min(axis=1)
  return ok.any(axis=1) & (hi > lo)


def regroup(roll: Rollouts, num_groups: int, group_size: int) -> Rollouts:
  """`roll` with groups numbered 0..P-1 in row order (P contiguous blocks of G rows), and group P
  for the rows lost to infrastructure failures (so advantages run with num_groups = P + 1: such
  a row's fallback score enters no other row's group statistics)."""
  P, G = num_groups, group_size
  if roll.rewards.shape[0] != P * G:
    raise ValueError(f"{roll.rewards.shape[0]} rows are not {P} groups of {G}")
  ids = np.where(roll.infra, P, np.repeat(np.arange(P), G)).astype(np.int32)
  return dataclasses.replace(roll, group_ids=ids)


# -- row sets ---------------------------------------------------------------------------------


def _pad_to(x: np.ndarray, width: int, *, left: bool, value=0) -> np.ndarray:
  pad = width - x.shape[1]
  if pad <= 0:
    return x
  cfg = ((0, 0), (pad, 0)) if left else ((0, 0), (0, pad))
  return np.pad(x, cfg + ((0, 0),) * (x.ndim - 2), constant_values=value)


def concat_rollouts(parts: Sequence[Rollouts], pad_id: int) -> Rollouts:
  """Concatenates row sets, padding prompt columns on the left and token columns on the right."""
  if len(parts) == 1:
    return parts[0]
  lp = max(p.prompt_ids.shape[1] for p in parts)
  t = max(p.tokens.shape[1] for p in parts)
  has_steps = all(p.step_rewards is not None for p in parts)
  s = max(p.step_rewards.shape[1] for p in parts) if has_steps else 0
  cat = lambda xs: np.concatenate(xs, axis=0)  # noqa: E731
  return Rollouts(
      prompt_ids=cat([_pad_to(p.prompt_ids, lp, left=True, value=pad_id) for p in parts]),
      prompt_mask=cat([_pad_to(p.prompt_mask, lp, left=True, value=False) for p in parts]),
      tokens=cat([_pad_to(p.tokens, t, left=False, value=pad_id) for p in parts]),
      mask=cat([_pad_to(p.mask, t, left=False, value=False) for p in parts]),
      logp=cat([_pad_to(p.logp, t, left=False) for p in parts]),
      lengths=cat([p.lengths for p in parts]),
      finish=cat([p.finish for p in parts]),
      rewards=cat([p.rewards for p in parts]),
      local=cat([_pad_to(p.local, t, left=False) for p in parts]),
      verifier=(cat([p.verifier for p in parts])
                if all(p.verifier is not None for p in parts) else None),
      step_rewards=cat([_pad_to(p.step_rewards, s, left=False) for p in parts]) if has_steps else None,
      step_mask=cat([_pad_to(p.step_mask, s, left=False, value=False) for p in parts]) if has_steps else None,
      token_step=cat([_pad_to(p.token_step, t, left=False, value=-1) for p in parts]) if has_steps else None,
      group_ids=cat([p.group_ids for p in parts]),
      results=[r for p in parts for r in p.results],
      completions=[c for p in parts for c in p.completions],
      infra=cat([p.infra for p in parts]),
      support=(cat([_pad_to(p.support, t, left=False, value=-np.inf) for p in parts])
               if all(p.support is not None for p in parts) else None),
  )


def take_rows(r: Rollouts, rows: np.ndarray) -> Rollouts:
  """The rows `rows` (int [n]) of `r`."""
  sel = lambda x: None if x is None else x[rows]  # noqa: E731
  return Rollouts(
      prompt_ids=r.prompt_ids[rows], prompt_mask=r.prompt_mask[rows], tokens=r.tokens[rows],
      mask=r.mask[rows], logp=r.logp[rows], lengths=r.lengths[rows], finish=r.finish[rows],
      rewards=r.rewards[rows], local=r.local[rows], verifier=sel(r.verifier),
      step_rewards=sel(r.step_rewards), step_mask=sel(r.step_mask), token_step=sel(r.token_step),
      group_ids=r.group_ids[rows], results=[r.results[i] for i in rows],
      completions=[r.completions[i] for i in rows], infra=r.infra[rows],
      support=sel(r.support))


def filler_rollouts(like: Rollouts | None, rows: int, pad_id: int) -> Rollouts:
  """`rows` rows that carry no loss (mask all False), shaped like `like`, to keep a batch's shape
  when dynamic sampling runs out of groups."""
  lp = like.prompt_ids.shape[1] if like is not None else 1
  t = like.tokens.shape[1] if like is not None else 1
  z = lambda shape, dt=np.float32: np.zeros(shape, dt)  # noqa: E731
  pm = z((rows, lp), bool)
  pm[:, -1] = True
  has = lambda name: like is not None and getattr(like, name) is not None  # noqa: E731
  return Rollouts(
      prompt_ids=np.full((rows, lp), pad_id, np.int32), prompt_mask=pm,
      tokens=np.full((rows, t), pad_id, np.int32), mask=z((rows, t), bool),
      logp=z((rows, t)), lengths=z((rows,), np.int32), finish=z((rows,), np.int32),
      rewards=z((rows,)), local=z((rows, t)),
      verifier=z((rows,)) if like is None or like.verifier is not None else None,
      step_rewards=z((rows, like.step_rewards.shape[1])) if has("step_rewards") else None,
      step_mask=z((rows, like.step_mask.shape[1]), bool) if has("step_mask") else None,
      token_step=np.full((rows, t), -1, np.int32) if has("token_step") else None,
      group_ids=z((rows,), np.int32), results=[RewardResult(0.0)] * rows,
      completions=[""] * rows,
      support=np.full((rows, t), -np.inf, np.float32) if has("support") else None)


def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


# Completion columns are trimmed to the longest completion, rounded up to this multiple: the
# sampler pads to its generation bucket (a power of two), and every padded column would cost
# the update a full forward and backward pass. A handful of multiples = a handful of programs.
TRIM_MULTIPLE = 32
# Prompt columns (left padding) are trimmed to the longest prompt rounded up to this multiple,
# for the same reason: the sampler's prompt bucket is a power of two, so prompts of 17-24
# tokens came to the update as 32 columns (benchmark update 8% shorter rows).
PROMPT_TRIM_MULTIPLE = 8


def trim_columns(r: Rollouts, multiple: int, prompt_multiple: int = 1) -> Rollouts:
  """Drops trailing completion columns and leading prompt columns that no row uses.

  Completions keep a multiple of `multiple` columns and prompts a multiple of
  `prompt_multiple` (never more than they had). Dropped columns hold only padding, so
  positions (a cumulative sum of the mask) and every row's tokens are unchanged.
  """
  used = int(r.mask.any(axis=0).nonzero()[0].max()) + 1 if r.mask.any() else 1
  t = min(r.tokens.shape[1], _round_up(used, multiple))
  lp = r.prompt_ids.shape[1]
  prompt_cols = r.prompt_mask.any(axis=0)
  p_used = lp - int(prompt_cols.nonzero()[0].min()) if prompt_cols.any() else 1
  keep = min(lp, _round_up(p_used, prompt_multiple))
  if t != r.tokens.shape[1]:
    cut = lambda x: None if x is None else x[:, :t]  # noqa: E731
    r = dataclasses.replace(r, tokens=cut(r.tokens), mask=cut(r.mask), logp=cut(r.logp),
                            local=cut(r.local), token_step=cut(r.token_step),
                            support=cut(r.support))
  if keep != lp:
    r = dataclasses.replace(r, prompt_ids=r.prompt_ids[:, lp - keep:],
                            prompt_mask=r.prompt_mask[:, lp - keep:])
  return r


# -- collection -------------------------------------------------------------------------------


class RolloutCollector:
  """Samples and scores one RL step's rollouts from a prompt source.

  Determinism: round `r` of step `s` samples with `fold_in(key, r)`, reads prompts from the
  integer `position` (saved with checkpoints), and passes `(step, row)` to the reward function in
  each item's metadata (`_step`, `_row`) so that noisy judges can seed themselves. The engine
  samples with whatever parameters it holds (the trainer calls `engine.set_params` after each
  update).

  Args:
    engine: the rollout engine (`botjax.sampling.RolloutEngine`).
    tokenizer: the model's tokenizer.
    prompts: a PromptSource.
    prompt_fn: record -> chat messages, a string, or a list of token ids.
    pool: the `RewardPool` that scores completions (its `spec` is the reward's).
    prompts_per_step, group_size: P and G.
    max_prompt_tokens: longest prompt accepted (a longer one raises ValueError).
    dynamic_sampling: resample groups of constant accuracy (DAPO §3.2).
    max_resample_rounds: extra sampling rounds for dynamic sampling.
    pad_id: the pad token id.
    resample_in_queue: with an engine that has `generate_groups` (the slot engine), dynamic
      sampling asks for its extra groups in the engine's queue (`_collect_in_queue`) instead of
      in extra rounds; False keeps the rounds.
  """

  def __init__(self, *, engine: RolloutEngine, tokenizer, prompts: PromptSource,
               prompt_fn: Callable, pool, prompts_per_step: int, group_size: int,
               max_prompt_tokens: int, dynamic_sampling: bool, max_resample_rounds: int,
               pad_id: int, resample_in_queue: bool = True):
    self.engine, self.tokenizer, self.prompts = engine, tokenizer, prompts
    self.prompt_fn = prompt_fn
    self.pool = pool
    self.spec: RewardSpec = pool.spec
    self.P, self.G = int(prompts_per_step), int(group_size)
    self.max_prompt_tokens = int(max_prompt_tokens)
    self.dynamic_sampling, self.max_resample_rounds = bool(dynamic_sampling), int(max_resample_rounds)
    self.pad_id = int(pad_id)
    self.resample_in_queue = bool(resample_in_queue)
    self.position = 0   # prompt-source position (records consumed)
    self.timing = {"generate_s": 0.0, "reward_s": 0.0}

  @classmethod
  def for_run(cls, cfg, recipe, *, engine: RolloutEngine, tokenizer, prompts: PromptSource,
              reward_fn, prompt_fn: Callable = default_prompt) -> RolloutCollector:
    """The collector of a run: `reward_fn` in a `RewardPool` as `cfg.reward` says, P, G and
    the prompt limit from `cfg.rollout`, DAPO resampling as `recipe` says, the engine's pad id.

    Args:
      cfg: the `TrainConfig`; recipe: the run's `Recipe`; the others as the constructor's.
    """
    from botjax.rewards.pool import RewardPool
    pool = RewardPool(reward_fn, num_workers=cfg.reward.workers, timeout_s=cfg.reward.timeout_s,
                      fallback_reward=cfg.reward.fallback_reward, kind=cfg.reward.kind)
    r = cfg.rollout
    return cls(engine=engine, tokenizer=tokenizer, prompts=prompts, prompt_fn=prompt_fn,
               pool=pool, prompts_per_step=r.prompts_per_step, group_size=r.group_size,
               max_prompt_tokens=r.max_prompt_tokens, dynamic_sampling=recipe.dynamic_sampling,
               max_resample_rounds=recipe.max_resample_rounds,
               pad_id=engine.config.pad_token_id, resample_in_queue=r.resample_in_queue)

  def encode(self, records) -> tuple[list[list[int]], list[str]]:
    """Prompt token ids and texts of records (through `prompt_fn` and the chat template)."""
    prompts = [self.prompt_fn(rec) for rec in records]
    if all(isinstance(p, (list, tuple)) and p and isinstance(p[0], (int, np.integer))
           for p in prompts):
      texts = [self.tokenizer.decode(p) for p in prompts]
      return [list(map(int, p)) for p in prompts], texts
    ids, texts = encode_prompts(self.tokenizer, prompts)
    for i, p in enumerate(ids):
      if len(p) > self.max_prompt_tokens:
        raise ValueError(f"prompt {i} has {len(p)} tokens > rollout.max_prompt_tokens="
                         f"{self.max_prompt_tokens}")
    return ids, texts

  def sample_and_score(self, records, key, *, step: int, group_offset: int = 0) -> Rollouts:
    """Samples G completions per record with the engine's parameters and scores them on the
    host. Moves nothing (the position is `collect`'s).

    In a multi-process run (`jax.process_count() > 1`) `records` are this process's share
    (`botjax.distributed.process_slice`) and the result holds every process's rows (see
    `_sample_and_score_shared`)."""
    if jax.process_count() > 1:
      return self._sample_and_score_shared(records, key, step=step, group_offset=group_offset)
    G = self.G
    ids, texts = self.encode(records)
    t0 = time.perf_counter()
    out = self.engine.generate(ids, key, n=G)
    jax.block_until_ready(out.tokens)
    t1 = time.perf_counter()
    ts = decode_completions(self.tokenizer, out, texts)
    meta = []
    for b in range(len(ts.completions)):
      m = dict(records[b // G])
      m.update(_step=int(step), _row=int(group_offset * G + b))
      meta.append(m)
    results = self.pool(ts.prompts, ts.completions, meta)
    self.timing["generate_s"] += t1 - t0
    self.timing["reward_s"] += time.perf_counter() - t1
    tokens, mask, logp, lengths, finish, prompt_ids, prompt_mask, group_ids, support = (
        jax.device_get((out.tokens, out.mask, out.logp, out.lengths, out.finish_reason,
                        out.prompt_ids, out.prompt_mask, out.group_ids, out.support_logp)))
    return assemble(prompt_ids=prompt_ids, prompt_mask=prompt_mask, tokens=tokens, mask=mask,
                    logp=logp, lengths=lengths, finish=finish,
                    group_ids=np.asarray(group_ids) + group_offset, completions=ts.completions,
                    offsets=ts.offsets, results=results, spec=self.spec,
                    support=support)

  def _sample_and_score_shared(self, records, key, *, step: int, group_offset: int) -> Rollouts:
    """`sample_and_score` in a multi-process run: each process encodes its share of the
    prompts, the prompts are all-gathered so that every process calls the engine on the same
    global batch, every process decodes all rows (cheap tokenizer work) but scores only the
    rows of its own prompts, and the reward results are all-gathered
    (`botjax.distributed.allgather_objects`): each row is scored once, on one process, and
    every process assembles the same `Rollouts`."""
    from botjax import distributed
    G = self.G
    mine = self.encode(records)
    parts = distributed.allgather_objects(mine)
    first = sum(len(ids) for ids, _ in parts[:jax.process_index()])
    ids = [p for part_ids, _ in parts for p in part_ids]
    texts = [t for _, part_texts in parts for t in part_texts]
    t0 = time.perf_counter()
    out = distributed.gather(self.engine.generate(ids, key, n=G))
    t1 = time.perf_counter()
    ts = decode_completions(self.tokenizer, out, texts)
    own = range(first * G, (first + len(records)) * G)
    meta = []
    for b in own:
      m = dict(records[b // G - first])
      m.update(_step=int(step), _row=int(group_offset * G + b))
      meta.append(m)
    scored = self.pool([ts.prompts[b] for b in own], [ts.completions[b] for b in own], meta)
    t2 = time.perf_counter()
    results = [r for part in distributed.allgather_objects(list(scored)) for r in part]
    self.timing["generate_s"] += t1 - t0
    self.timing["reward_s"] += t2 - t1
    return assemble(prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask, tokens=out.tokens,
                    mask=out.mask, logp=out.logp, lengths=out.lengths, finish=out.finish_reason,
                    group_ids=np.asarray(out.group_ids) + group_offset,
                    completions=ts.completions, offsets=ts.offsets, results=results,
                    spec=self.spec)

  def _pool_counts(self, before: dict) -> tuple[float, float]:
    """(failures, timeouts) of the reward pool since `before`, summed over the processes (each
    scores its own rows)."""
    pool = self.pool.metrics()
    counts = (float(pool["failures"] - before["failures"]),
              float(pool["timeouts"] - before["timeouts"]))
    if jax.process_count() == 1:
      return counts
    from botjax import distributed
    every = distributed.allgather_objects(counts)
    return float(sum(c[0] for c in every)), float(sum(c[1] for c in every))

  def collect(self, key, step: int, *, advance: bool = True) -> tuple[Rollouts, dict]:
    """One step's P·G rollouts and their sampling metrics.

    Reads P prompt records per sampling round from `position` and, with `advance` (the
    default), moves `position` past them, so that the next call reads the next records (the
    trainer saves it with each checkpoint). `advance=False` leaves it where it was: the same
    call again returns the same rollouts (for a deterministic reward). In a multi-process run
    each process reads only its contiguous share of the P records (process p of N: records
    p·P/N .. (p+1)·P/N - 1; P must divide by N) and scores only their rows; every process
    returns the same rollouts and metrics.

    Groups are renumbered 0..P-1 in row order; rows that failed for infrastructure reasons get
    group P (so advantages run with num_groups = P + 1).

    Returns:
      (rollouts, info): sample_rounds, constant_groups (fraction of the first round's groups
      whose accuracy is constant), dynamic_sampling_short (groups filled with loss-free rows),
      rollouts/infra_failures, reward_failures / reward_timeouts (the pool's), generate_s,
      reward_s, generate_tokens_per_s.
    """
    P, G = self.P, self.G
    position, pool_before = self.position, self.pool.metrics()
    self.timing = {"generate_s": 0.0, "reward_s": 0.0}
    if self.in_queue:
      return self._collect_in_queue(key, step, advance=advance)
    rounds = 1 + (self.max_resample_rounds if self.dynamic_sampling else 0)
    kept: list[Rollouts] = []
    n_kept = 0
    info = {"sample_rounds": 0, "constant_groups": 0.0}
    share = range(P)
    if jax.process_count() > 1:   # each process reads (and scores) its share of the prompts
      from botjax import distributed
      share = range(P)[distributed.process_slice(P)]
    for rnd in range(rounds):
      records = [self.prompts.get(position + i) for i in share]
      position += P
      part = self.sample_and_score(records, jax.random.fold_in(key, rnd), step=step,
                                   group_offset=rnd * P)
      info["sample_rounds"] += 1
      varies = varying_groups(accuracy_signal(part), ~part.infra, P, G)
      if rnd == 0:
        info["constant_groups"] = float(1.0 - varies.mean())
      if not self.dynamic_sampling:
        kept, n_kept = [part], P
        break
      groups = np.flatnonzero(varies)[:P - n_kept]
      if groups.size:
        kept.append(take_rows(part, (groups[:, None] * G + np.arange(G)[None, :]).reshape(-1)))
        n_kept += groups.size
      if n_kept >= P:
        break
    return self._finish(kept, n_kept, info, pool_before, position, advance)

  def _finish(self, kept: list[Rollouts], n_kept: int, info: dict, pool_before: dict,
              position: int, advance: bool) -> tuple[Rollouts, dict]:
    """`collect`'s end: the kept groups (filled with loss-free rows to P), the metrics, and
    the position moved to `position` with `advance`."""
    P, G = self.P, self.G
    roll = concat_rollouts(kept, self.pad_id) if kept else None
    if n_kept < P:  # dynamic sampling ran out of rounds: fill with loss-free rows
      info["dynamic_sampling_short"] = float(P - n_kept)
      filler = filler_rollouts(kept[-1] if kept else None, (P - n_kept) * G, self.pad_id)
      roll = filler if roll is None else concat_rollouts([roll, filler], self.pad_id)
    info["rollouts/infra_failures"] = float(roll.infra.sum())
    failures, timeouts = self._pool_counts(pool_before)
    info.update({
        "reward_failures": failures,
        "reward_timeouts": timeouts,
        **self.timing,
        "generate_tokens_per_s": float(roll.mask.sum()) / max(self.timing["generate_s"], 1e-9)})
    if advance:
      self.position = position
    return regroup(roll, P, G), info

  @property
  def in_queue(self) -> bool:
    """Whether DAPO's extra groups are asked for in the engine's queue (`_collect_in_queue`):
    dynamic sampling on, `resample_in_queue`, one process, and an engine with
    `generate_groups` (the slot engine)."""
    return (self.dynamic_sampling and self.resample_in_queue and jax.process_count() == 1
            and callable(getattr(self.engine, "generate_groups", None)))

  def _collect_in_queue(self, key, step: int, *, advance: bool) -> tuple[Rollouts, dict]:
    """`collect` with DAPO's dynamic sampling in one engine call: the C = P·(1 + R) candidate
    prompts at the position are encoded, the first P are queued, and each group is scored as
    soon as its G rows finish (on the engine's host thread); a group of constant accuracy
    queues the next candidate, so the slots never wait for a round to end.

    The kept groups are those of the rounds path: the groups of varying accuracy among the
    shortest prefix of candidates holding P of them (or all C), in candidate order (each
    constant group queues exactly one more, so the queued set is that prefix whatever the
    order in which groups finish), and candidate c = r·P + i samples with round r's key and
    row i·G + s, as the rounds path does. The position moves past the queued candidates only
    (the rounds path moves past whole rounds); `sample_rounds` is ⌈queued / P⌉, and
    `sampled_groups` the number queued."""
    P, G = self.P, self.G
    position, pool_before = self.position, self.pool.metrics()
    cands = P * (1 + self.max_resample_rounds)
    records = [self.prompts.get(position + c) for c in range(cands)]
    ids, texts = self.encode(records)
    c = np.repeat(np.arange(cands), G)                    # each row's candidate, s = row % G
    rnd, row = c // P, (c % P) * G + np.arange(cands * G) % G
    row_keys = jax.vmap(jax.random.fold_in)(
        jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.asarray(rnd)), jnp.asarray(row))
    parts: dict[int, Rollouts] = {}
    varies: dict[int, bool] = {}
    nxt = [P]
    lock = threading.Lock()
    reward_s = [0.0]

    def on_group(p: int, out) -> list[int]:
      t0 = time.perf_counter()
      ts = decode_completions(self.tokenizer, out, [texts[p]])
      meta = []
      for s in range(G):
        m = dict(records[p])
        m.update(_step=int(step), _row=int(p * G + s))
        meta.append(m)
      with lock:
        results = self.pool(ts.prompts, ts.completions, meta)
        part = assemble(prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask,
                        tokens=out.tokens, mask=out.mask, logp=out.logp, lengths=out.lengths,
                        finish=out.finish_reason, group_ids=np.full((G,), p, np.int32),
                        completions=ts.completions, offsets=ts.offsets, results=results,
                        spec=self.spec, support=out.support_logp)
        parts[p] = part
        varies[p] = bool(varying_groups(accuracy_signal(part), ~part.infra, 1, G)[0])
        more = []
        if not varies[p] and nxt[0] < cands:
          more, nxt[0] = [nxt[0]], nxt[0] + 1
        reward_s[0] += time.perf_counter() - t0
        return more

    t0 = time.perf_counter()
    _, queued = self.engine.generate_groups(ids, key, n=G, start=range(P), on_group=on_group,
                                            row_keys=row_keys)
    total = time.perf_counter() - t0
    self.timing["reward_s"] += reward_s[0]
    self.timing["generate_s"] += max(0.0, total - reward_s[0])
    first = np.asarray([varies[p] for p in range(P)])
    info = {"sample_rounds": int(-(-len(queued) // P)), "sampled_groups": float(len(queued)),
            "constant_groups": float(1.0 - first.mean())}
    good = [p for p in sorted(parts) if varies[p]][:P]
    return self._finish([parts[p] for p in good], len(good), info, pool_before,
                        position + len(queued), advance)


def rollout_metrics(roll: Rollouts, spec: RewardSpec) -> dict:
  """A step's rollout metrics over the rows that carry loss (no filler rows, no infrastructure
  failures).

  Keys: reward_mean / reward_std (the sequence reward), response_length (tokens),
  truncated_fraction (rows cut at max_new_tokens), accuracy (the verifier's mean, when the
  reward declares one), reward/<component> (the mean of each named component of the results);
  with a reward that declares token spans (`spec.token_spans`), the local signal S_t [B, T] on
  the scored tokens: local/mean, local/min, local/max, and local/row_sum (the mean over rows of
  Σ_t S_t, the row's token-span total).
  """
  real = roll.mask.any(axis=1)
  r, lengths = roll.rewards[real], roll.lengths[real]
  out = {
      "reward_mean": float(r.mean()) if r.size else 0.0,
      "reward_std": float(r.std()) if r.size else 0.0,
      "response_length": float(lengths.mean()) if lengths.size else 0.0,
      "truncated_fraction": float((roll.finish[real] == 1).mean()) if real.any() else 0.0,
  }
  if roll.verifier is not None:
    out["accuracy"] = float(roll.verifier[real].mean()) if real.any() else 0.0
  comps: dict[str, list] = {}
  for res, ok in zip(roll.results, real):
    if ok:
      for k, v in res.components.items():
        comps.setdefault(k, []).append(v)
  out.update({f"reward/{k}": float(np.mean(v)) for k, v in comps.items()})
  if spec.token_spans:
    tokens = roll.local[roll.mask]
    out.update({
        "local/mean": float(tokens.mean()) if tokens.size else 0.0,
        "local/min": float(tokens.min()) if tokens.size else 0.0,
        "local/max": float(tokens.max()) if tokens.size else 0.0,
        "local/row_sum": float(np.where(roll.mask, roll.local, 0.0)[real].sum(axis=1).mean())
                         if real.any() else 0.0,
    })
  return out
