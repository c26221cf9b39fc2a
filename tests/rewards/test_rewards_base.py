"""RewardResult, spans_to_token_values / steps_to_arrays on a real tokenizer's offsets, combine."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from botjax.rewards import (RewardResult, as_result, batched, combine, rewards_array,
                            segment_steps, spans_to_token_values, steps_to_arrays)
from _util import imported

TEXT = ("<step 1>3 + 4 = 7</step>\n<step 2>7 * 2 = 14</step>\n"
        "<step 3>14 - 5 = 9</step>\n<final>9</final>")


@pytest.fixture(scope="module")
def tokenizer():
  """A byte-level BPE tokenizer trained here on task-like text (no download)."""
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.post_processor = processors.ByteLevel(trim_offsets=True)
  tok.decoder = decoders.ByteLevel()
  corpus = [TEXT, "<step 1>12 * 3 = 36</step>", "<final>42</final>", "the answer is 5"] * 20
  trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(corpus, trainer)
  return tok


def oracle(spans, offsets, T):
  """Loop oracle: token t gets the sum of values of spans containing its first character."""
  out = np.zeros(T, np.float32)
  for t, (start, _) in enumerate(offsets[:T]):
    out[t] = sum(v for a, b, v in spans if a <= start < b)
  return out


def test_spans_on_real_offsets(tokenizer):
  enc = tokenizer.encode(TEXT)
  offsets = enc.offsets
  steps = segment_steps(TEXT)
  spans = [(s.start, s.end, v) for s, v in zip(steps, (1.0, -1.0, 0.5))]
  T = len(offsets) + 3  # three padding slots
  values = spans_to_token_values(spans, offsets, T)
  assert values.shape == (T,) and values.dtype == np.float32
  for t, (start, end) in enumerate(offsets):
    piece = TEXT[start:end]
    if start < steps[0].end:
      assert values[t] == 1.0, piece
    elif steps[1].start <= start < steps[1].end:
      assert values[t] == -1.0, piece
    elif steps[2].start <= start < steps[2].end:
      assert values[t] == 0.5, piece
    else:  # newlines between steps and the final block
      assert values[t] == 0.0, piece
  np.testing.assert_array_equal(values[-3:], 0.0)
  # Every token of "7 * 2 = 14" has -1, so the detokenized -1 region is exactly step 2's text.
  ids = [i for i, v in zip(enc.ids, values) if v == -1.0]
  assert tokenizer.decode(ids) == TEXT[steps[1].start:steps[1].end]


def test_overlapping_spans_add_and_truncation():
  offsets = [(0, 2), (2, 4), (4, 6), (6, 9), (9, 9)]
  values = spans_to_token_values([(0, 5, 1.0), (3, 8, 0.5)], offsets, 7)
  # token starts 0, 2, 4, 6, 9: span 1 holds 0, 2, 4; span 2 holds 4, 6
  np.testing.assert_array_equal(values, [1.0, 1.0, 1.5, 0.5, 0.0, 0.0, 0.0])
  np.testing.assert_array_equal(spans_to_token_values([(0, 5, 1.0)], offsets, 2), [1.0, 1.0])
  with pytest.raises(ValueError, match="non-finite"):
    spans_to_token_values([(0, 5, float("nan"))], offsets, 5)
  with pytest.raises(ValueError, match="char_start <= char_end"):
    spans_to_token_values([(5, 1, 1.0)], offsets, 5)


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12),
                          st.sampled_from([-1.0, -0.5, 0.25, 1.0])), max_size=6),
       st.lists(st.integers(0, 4), min_size=1, max_size=16))
def test_spans_match_loop_oracle(raw_spans, widths):
  spans = [(a, a + w, v) for a, w, v in raw_spans]
  starts = np.cumsum([0, *widths[:-1]])
  offsets = [(int(s), int(s + w)) for s, w in zip(starts, widths)]
  np.testing.assert_allclose(spans_to_token_values(spans, offsets, 16), oracle(spans, offsets, 16))


def test_steps_to_arrays_on_real_offsets(tokenizer):
  preamble = "Let me think.\n"
  text = preamble + TEXT
  offsets = tokenizer.encode(text).offsets
  steps = [(s.start, s.end, v) for s, v in zip(segment_steps(text), (1.0, -1.0, 0.0))]
  T = len(offsets) + 2
  step_rewards, step_mask, token_step = steps_to_arrays([steps, None], [offsets, []], T, 4)
  np.testing.assert_array_equal(step_rewards, [[1.0, -1.0, 0.0, 0.0], [0.0] * 4])
  np.testing.assert_array_equal(step_mask, [[True, True, True, False], [False] * 4])
  assert token_step.dtype == np.int32 and token_step.shape == (2, T)
  np.testing.assert_array_equal(token_step[1], -1)
  for t, (start, _) in enumerate(offsets):
    if start < len(preamble):
      expected = -1  # before the first step
    elif start >= steps[2][0]:
      expected = 2  # step 3 and everything after it (the final block)
    elif start >= steps[1][0]:
      expected = 1
    else:
      expected = 0  # step 1 and the newline after it
    assert token_step[0, t] == expected, (t, text[start:])
  np.testing.assert_array_equal(token_step[0, len(offsets):], -1)


def test_steps_to_arrays_overflow():
  steps = [(0, 2, 1.0), (2, 4, -1.0), (4, 6, 1.0)]
  offsets = [(0, 1), (2, 3), (4, 5), (6, 7)]
  with pytest.raises(ValueError, match="S_max=2"):
    steps_to_arrays([steps], [offsets], 4, 2)
  r, m, ts = steps_to_arrays([steps], [offsets], 4, 2, on_overflow="truncate")
  np.testing.assert_array_equal(r, [[1.0, -1.0]])
  np.testing.assert_array_equal(ts, [[0, 1, 1, 1]])
  with pytest.raises(ValueError, match="text order"):
    steps_to_arrays([steps[::-1]], [offsets], 4, 3)


def test_results_and_combine():
  assert as_result(2) == RewardResult(reward=2.0)
  with pytest.raises(TypeError, match="RewardResult or a number"):
    as_result("1.0")
  assert not RewardResult(1.0, {"a": float("inf")}).is_finite()
  assert not RewardResult(1.0, {"a": "high"}).is_finite()
  assert not RewardResult(1.0, steps=[(0, 1)]).is_finite()
  assert RewardResult(1.0, {"a": 2}, [(0, 1, 0.5)], steps=[(0, 1, -1.0)]).is_finite()
  a = batched(lambda p, c, m: RewardResult(1.0, {"x": 2.0}, [(0, 3, 0.5)], steps=[(0, 3, 1.0)]))
  b = batched(lambda p, c, m: len(c))
  fn = combine({"a": a, "b": b}, {"a": 2.0, "b": -1.0})
  out = fn(["p", "q"], ["abc", "z"], [{}, {}])
  assert [r.reward for r in out] == [2.0 - 3.0, 2.0 - 1.0]
  assert out[0].components == {"a": 1.0, "a/x": 2.0, "b": 3.0}
  assert out[0].token_spans == [(0, 3, 1.0)]  # 0.5 scaled by the weight 2
  assert out[0].steps == [(0, 3, 1.0)]  # steps are not scaled
  np.testing.assert_array_equal(rewards_array(out), np.array([-1.0, 1.0], np.float32))
  with pytest.raises(ValueError, match="unknown"):
    combine({"a": a}, {"c": 1.0})
  with pytest.raises(ValueError, match="steps of one function"):
    combine({"a": a, "a2": a})(["p"], ["c"], [{}])


def test_import_is_light():
  """botjax.rewards is host Python: importing it pulls in neither jax nor sympy nor openai."""
  assert imported(["botjax.rewards"], ["jax", "flax", "sympy", "openai", "math_verify"]) == []


def token_step_oracle(steps, starts):
  """The spec, read literally: the step holding the first character; in a gap the step before;
  after the last step the last step; before the first step -1."""
  out = []
  for s in starts:
    holding = [k for k, (a, b, _) in enumerate(steps) if a <= s < b]
    before = [k for k, (_, b, _) in enumerate(steps) if b <= s]
    out.append(holding[0] if holding else (before[-1] if before else -1))
  return out


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6)), max_size=5),
       st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_token_step_matches_spec_oracle(gaps_and_widths, token_widths):
  steps, pos = [], 0
  for gap, width in gaps_and_widths:  # ordered, non-overlapping steps with gaps
    steps.append((pos + gap, pos + gap + width, 1.0))
    pos += gap + width
  starts = np.cumsum([0, *token_widths[:-1]])
  offsets = [(int(s), int(s + w)) for s, w in zip(starts, token_widths)]
  _, mask, token_step = steps_to_arrays([steps], [offsets], 12, 5)
  assert mask[0].sum() == len(steps)
  expected = token_step_oracle(steps, starts) if steps else [-1] * len(starts)
  np.testing.assert_array_equal(token_step[0, :len(offsets)], expected)
  np.testing.assert_array_equal(token_step[0, len(offsets):], -1)
