"""Sampling configuration: decoding rule, stop tokens and shape buckets.

`SamplingConfig` is frozen and hashable, so a `Sampler` can close over it at trace time: changing
any field compiles a new program, while prompts, keys, parameters and `max_new_tokens` (inside its
bucket) are run-time arguments.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


def _check_buckets(name: str, buckets: tuple[int, ...]) -> None:
  if not isinstance(buckets, tuple):
    raise TypeError(f"{name} must be a tuple of ints, got {type(buckets).__name__} {buckets!r}")
  if any(not isinstance(b, int) or b < 1 for b in buckets):
    raise ValueError(f"{name} must hold positive ints, got {buckets!r}")
  if any(a >= b for a, b in zip(buckets, buckets[1:])):
    raise ValueError(f"{name} must be strictly increasing, got {buckets!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingConfig:
  """How to decode, when to stop and how to bucket shapes.

  Decoding rule for each new token, in this order (the order of `transformers` logits warpers):

    z = logits / τ                     (τ = `temperature`; τ = 0 means greedy argmax)
    z = top_k(z, k)                    (keep the k largest; ties with the k-th are kept)
    z = top_p(z, p)                    (keep the smallest top set whose probability is ≥ p)
    y ~ softmax(z)

  The log-probability reported for the sampled token depends on `truncated_logp`:

  * untruncated: `log_softmax(logits / τ)[y]`, tempered but not cut by top-k / top-p, which is
    what `botjax.models.token_logprobs(..., temperature=τ)` computes in the trainer (see
    `logp_temperature`). The token was drawn from the cut distribution, so with top-k / top-p
    the PPO ratio's behaviour policy is then not the one that sampled.
  * truncated: `log_softmax(top_p(top_k(logits / τ)))[y]`, the distribution the token was
    drawn from, and each step's kept support is recorded (`SampleOutput.support_logp`); the
    trainer's log-probs are taken under the same support
    (`botjax.models.logprobs.logprobs_from_hidden(..., support=)`), so the sampler's and the
    update's log-probs agree and the ratio is 1 at the sampling parameters. An engine that
    reports truncated log-probs without its cut (vLLM) is scored under the cut the trainer
    takes from its own logits by the same rule (`UpdatePrograms.logprobs_own_cut`).

  Greedy decoding reports `log_softmax(logits)[y]` (τ treated as 1), untruncated.

  Attributes:
    max_new_tokens: default cap on generated tokens per row (a call may pass a smaller or larger
      one; it is bucketed by `gen_len_buckets`).
    temperature: τ ≥ 0; 0 selects greedy decoding.
    top_k: keep the k most likely tokens; 0 disables.
    top_p: nucleus mass in (0, 1]; 1 disables.
    eos_token_ids: ids that end a row (finish reason 0, the token is kept and scored).
    stop_token_ids: further ids that end a row, exactly like `eos_token_ids`.
    pad_token_id: id written into prompt padding and after a row has stopped.
    prompt_len_buckets: allowed padded prompt lengths; () means powers of two ≥ `min_len_bucket`.
    gen_len_buckets: allowed padded generation lengths; () means powers of two ≥ `min_len_bucket`.
    batch_buckets: allowed padded numbers of prompts per call; () means powers of two.
    min_len_bucket: smallest power-of-two length bucket (used when a bucket tuple is empty).
    truncated_logp: report log-probs under the top-k / top-p truncated distribution and record
      its support (see above); None (default): on exactly when sampling with top-k or top-p.
  """
  max_new_tokens: int = 256
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  eos_token_ids: tuple[int, ...] = ()
  stop_token_ids: tuple[int, ...] = ()
  pad_token_id: int = 0
  prompt_len_buckets: tuple[int, ...] = ()
  gen_len_buckets: tuple[int, ...] = ()
  batch_buckets: tuple[int, ...] = ()
  min_len_bucket: int = 16
  truncated_logp: bool | None = None

  def __post_init__(self):
    if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
    if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
            and self.temperature >= 0):
      raise ValueError(f"temperature must be a finite float >= 0 (0 = greedy), "
                       f"got {self.temperature!r}")
    if not isinstance(self.top_k, int) or self.top_k < 0:
      raise ValueError(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
    if not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
      raise ValueError(f"top_p must lie in (0, 1] (1 = off), got {self.top_p!r}")
    for name in ("eos_token_ids", "stop_token_ids"):
      ids = getattr(self, name)
      if not isinstance(ids, tuple) or any(not isinstance(i, int) or i < 0 for i in ids):
        raise ValueError(f"{name} must be a tuple of non-negative ints, got {ids!r}")
    if not isinstance(self.pad_token_id, int) or self.pad_token_id < 0:
      raise ValueError(f"pad_token_id must be an int >= 0, got {self.pad_token_id!r}")
    for name in ("prompt_len_buckets", "gen_len_buckets", "batch_buckets"):
      _check_buckets(name, getattr(self, name))
    if not isinstance(self.min_len_bucket, int) or self.min_len_bucket < 1:
      raise ValueError(f"min_len_bucket must be an int >= 1, got {self.min_len_bucket!r}")
    if not (self.truncated_logp is None or isinstance(self.truncated_logp, bool)):
      raise ValueError(f"truncated_logp must be None, True or False, got {self.truncated_logp!r}")

  @classmethod
  def for_model(cls, model, tokenizer=None, *, stop_token_ids=(), **fields) -> SamplingConfig:
    """The config for a model and its tokenizer: their stop and pad ids, plus `fields`.

      cfg = SamplingConfig.for_model(model, tok, max_new_tokens=256, temperature=1.0)

    Args:
      model: a `botjax.models.Decoder` (its `config`) or a `DecoderConfig`.
      tokenizer: the model's tokenizer, or None.
      stop_token_ids: extra ids that end a completion.
      **fields: the other `SamplingConfig` fields (decoding rule, budget, buckets).

    Returns:
      A config whose `eos_token_ids` are the model config's `eos_token_id` (one id or several)
      followed by the tokenizer's `eos_token_id` when it is another id, and whose
      `pad_token_id` is the tokenizer's pad id, else the model config's, else 0.
    """
    config = getattr(model, "config", model)
    ids = getattr(config, "eos_token_id", None)
    ids = [] if ids is None else [ids] if isinstance(ids, (int, np.integer)) else list(ids)
    eos = [int(t) for t in ids]
    tok_eos = getattr(tokenizer, "eos_token_id", None)
    if tok_eos is not None and int(tok_eos) not in eos:
      eos.append(int(tok_eos))
    pad = getattr(tokenizer, "pad_token_id", None)
    pad_id = int(pad if pad is not None else getattr(config, "pad_token_id", None) or 0)
    return cls(eos_token_ids=tuple(eos), stop_token_ids=tuple(int(t) for t in stop_token_ids),
               pad_token_id=pad_id, **fields)

  @property
  def greedy(self) -> bool:
    """True when decoding is argmax (temperature 0)."""
    return self.temperature == 0

  @property
  def logp_temperature(self) -> float:
    """The temperature under which `SampleOutput.logp` is computed: τ, or 1 when greedy.

    Pass it as `temperature=` to `botjax.models.token_logprobs` to reproduce the sampler's
    log-probabilities in the trainer.
    """
    return 1.0 if self.greedy else float(self.temperature)

  @property
  def logp_truncated(self) -> bool:
    """Whether log-probs are taken under the truncated distribution (see `truncated_logp`):
    sampling (τ > 0) with top-k or top-p, unless `truncated_logp=False`."""
    cuts = not self.greedy and (self.top_k > 0 or self.top_p < 1.0)
    return cuts and self.truncated_logp is not False

  @property
  def all_stop_ids(self) -> tuple[int, ...]:
    """EOS and stop ids, deduplicated, in first-seen order."""
    return tuple(dict.fromkeys(self.eos_token_ids + self.stop_token_ids))
