"""Held-out evaluation: sample n completions per problem; report avg@n, pass@k and maj@k."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from botjax import metrics as metrics_lib
from botjax.sampling import RolloutEngine, decode_completions, encode_prompts


def evaluate(engine: RolloutEngine, tokenizer, records: Sequence[Mapping[str, Any]], *,
             correct_fn: Callable[[str, Mapping[str, Any]], bool], params=None, n: int = 4,
             key=None, ks: Sequence[int] = (1, 2, 4), prompt_fn: Callable | None = None,
             batch_prompts: int = 64, answer_fn: Callable[[str], Any] | None = None,
             answer_equal: Callable[[Any, Any], bool] | None = None) -> dict:
  """Samples `n` completions for each record and scores them with `correct_fn`.

  Args:
    engine: a rollout engine (`botjax.sampling.make_engine`; its SamplingConfig sets
      temperature, top-k/p and the length budget), e.g. `RLTrainer.engine`, which holds the
      current parameters.
    tokenizer: the model's tokenizer.
    records: evaluation records (`problem`, `answer`, ...).
    correct_fn: `(completion, record) -> bool`.
    params: parameters to evaluate, set on the engine first (`engine.set_params`); None: the
      ones it holds.
    n: samples per problem.
    key: PRNG key (default PRNGKey(0)): the same key gives the same evaluation.
    ks: the k of pass@k and, with `answer_fn`, of maj@k (k <= n; maj@n is always reported).
    prompt_fn: record -> chat messages or string.
    batch_prompts: prompts per engine call.
    answer_fn: extracts an answer from a completion for maj@k (None: no maj@k).
    answer_equal: `(extracted answer, reference str) -> bool` for maj@k (default ==).

  Returns:
    {"accuracy": avg@n, "pass@k": ..., "maj@k" for k in ks and n (with answer_fn; majority
     vote over the first k samples, `botjax.metrics.maj_at_k`), "length": mean completion
     tokens, "num_problems": P}
  """
  if not records:
    raise ValueError("no evaluation records")
  key = jax.random.PRNGKey(0) if key is None else key
  prompt_fn = prompt_fn or (lambda r: [{"role": "user", "content": str(r["problem"])}])
  if params is not None:
    engine.set_params(params)
  correct = np.zeros((len(records), n), bool)
  answers: list[list[Any]] = [[] for _ in records]
  lengths = []
  for start in range(0, len(records), batch_prompts):
    chunk = records[start:start + batch_prompts]
    ids, texts = encode_prompts(tokenizer, [prompt_fn(r) for r in chunk])
    out = engine.generate(ids, jax.random.fold_in(key, start), n=n)
    if jax.process_count() > 1:   # every process holds only its rows of the global arrays
      from botjax import distributed
      out = distributed.gather(out)
    ts = decode_completions(tokenizer, out, texts)
    lengths.extend(np.asarray(out.lengths).tolist())
    for b, text in enumerate(ts.completions):
      i = start + b // n
      correct[i, b % n] = bool(correct_fn(text, records[i]))
      if answer_fn is not None:
        answers[i].append(answer_fn(text))
  c = correct.sum(axis=1)
  out = {"accuracy": float(correct.mean()), "num_problems": len(records),
         "length": float(np.mean(lengths))}
  for k in ks:
    if k <= n:
      out[f"pass@{k}"] = float(np.mean([metrics_lib.pass_at_k(n, int(ci), k) for ci in c]))
  if answer_fn is not None:
    golds = [str(r["answer"]) for r in records]
    for k in sorted({*(k for k in ks if k <= n), n}):
      out[f"maj@{k}"] = metrics_lib.maj_at_k(answers, golds, k, equal=answer_equal)
  return out
