"""`botjax.train.evaluate`: maj@k for every k, against a plain loop over what the scorer saw."""

import collections
import dataclasses

from flax import nnx

from botjax import data, models
from botjax.sampling import Sampler, SamplingConfig
from botjax.train.evaluate import evaluate


def _majority_loop(answers):
  """The most frequent answer; ties go to the one that appeared first (None never votes)."""
  counts = collections.Counter(a for a in answers if a is not None)
  if not counts:
    return None
  best = max(counts.values())
  return next(a for a in answers if a is not None and counts[a] == best)


def test_maj_at_k_for_each_k_matches_a_plain_loop(tmp_path):
  task = data.ArithmeticTask(num_ops=(1, 1), operand_range=(1, 3), ops=("+",), seed=1)
  tok = data.build_tokenizer(str(tmp_path / "tok"), task, vocab_size=280, num_problems=50)
  cfg = dataclasses.replace(models.get_config("tiny"), vocab_size=len(tok), num_layers=1,
                            hidden_size=32, head_dim=8, intermediate_size=64,
                            eos_token_id=(tok.eos_token_id,), pad_token_id=tok.pad_token_id)
  sampler = Sampler(models.Decoder(cfg, rngs=nnx.Rngs(0)), cfg,
                    SamplingConfig(max_new_tokens=3, eos_token_ids=(tok.eos_token_id,),
                                   pad_token_id=tok.pad_token_id))
  records = task.problems(6)
  seen = collections.defaultdict(list)   # record object -> its completions, in sampling order

  def correct_fn(text, record):
    seen[id(record)].append(text)
    return False

  def answer_fn(text):   # few distinct values, so votes are real majorities and ties
    return None if not text else len(text) % 3

  def answer_equal(answer, reference):
    return answer == int(reference) % 3

  n = 8
  out = evaluate(sampler, tok, records, correct_fn=correct_fn, n=n, ks=(1, 2, 4, 16),
                 batch_prompts=3, answer_fn=answer_fn, answer_equal=answer_equal)
  assert sorted(k for k in out if k.startswith("maj@")) == ["maj@1", "maj@2", "maj@4", "maj@8"]
  assert all(len(seen[id(r)]) == n for r in records)
  for k in (1, 2, 4, 8):
    want = sum(
        (w := _majority_loop([answer_fn(t) for t in seen[id(r)][:k]])) is not None
        and answer_equal(w, r["answer"]) for r in records) / len(records)
    assert out[f"maj@{k}"] == want, k
