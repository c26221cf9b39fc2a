"""Extraction, the φ kernel, line penalties and the line -> token mapping (no Node, no browser)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from botjax.rewards.base import spans_to_token_values, steps_to_arrays
from botjax.rewards.react import extract as E
from botjax.rewards.react import penalties as P

COMPONENT = """import { useState } from 'react';

export default function App() {
  const [n, setN] = useState(0);
  return <button onClick={() => setN(n + 1)}>{n}</button>;
}"""


def test_fenced_block_keeps_line_numbers():
  text = f"Sure! Here is the counter.\n\n```tsx\n{COMPONENT}\n```\n\nIt counts clicks."
  ext = E.extract_component(text)
  assert ext.code == COMPONENT and ext.fenced and ext.lang == "tsx"
  assert ext.first_line == 3 and ext.num_lines == 6
  # code line 2 is "export default function App() {" in the completion, newline included
  a, b = ext.code_line_span(2)
  assert text[a:b] == "export default function App() {\n"
  assert ext.completion_line(5) == 8
  with pytest.raises(ValueError, match="outside"):
    ext.code_line_span(6)


def test_prefers_tsx_block_and_handles_unclosed_fence():
  text = "```bash\nnpm i\n```\ntext\n```jsx\nconst A = 1;\n```\n```tsx\nexport default 1;\n```"
  ext = E.extract_component(text)
  assert ext.code == "export default 1;" and ext.lang == "tsx" and ext.first_line == 8
  truncated = "Here:\n```tsx\nimport React from 'react';\nexport default function App() {"
  ext = E.extract_component(truncated)
  assert ext.num_lines == 2 and ext.first_line == 2 and ext.code.endswith("App() {")


def test_bare_tsx_and_prose():
  text = "The component:\n" + COMPONENT + "\n\n"
  ext = E.extract_component(text)
  assert not ext.fenced and ext.first_line == 1 and ext.code == COMPONENT
  assert E.extract_component("I cannot help with that request.") is None
  assert E.extract_component("```tsx\n\n```") is None
  with pytest.raises(TypeError, match="str"):
    E.extract_component(None)


def test_line_spans_cover_every_character():
  text = "a\nbc\n\nd"
  spans = E.line_spans(text)
  assert spans == ((0, 2), (2, 5), (5, 6), (6, 7))
  assert E.line_spans("x\n") == ((0, 2), (2, 2))


def test_phi_values():
  # w = 3: φ = 1, 3/4, 1/2, 1/4, 0, 0
  np.testing.assert_allclose(P.phi(np.arange(6)), [1, 0.75, 0.5, 0.25, 0, 0])
  assert P.phi(-2) == 0.5 and P.phi(1, window=0) == 0.0 and P.phi(2, window=1) == 0.0
  with pytest.raises(ValueError, match="window"):
    P.phi(1, window=-1)


@given(st.integers(-50, 50), st.integers(0, 8))
def test_phi_properties(d, w):
  v = P.phi(d, window=w)
  assert 0.0 <= v <= 1.0
  assert v == P.phi(-d, window=w)
  assert (v == 0.0) == (abs(d) >= w + 1)


@given(st.dictionaries(st.integers(0, 19), st.floats(-3, 0, allow_nan=False), max_size=6))
def test_spread_matches_loop_oracle(penalties):
  got = P.spread(penalties, 20, window=3)
  want = np.zeros(20)
  for j in range(20):
    for line, p in penalties.items():
      want[j] += p * max(0.0, 1 - abs(j - line) / 4)
  np.testing.assert_allclose(got, want, atol=1e-12)
  assert np.all(got <= 0)


def test_compile_and_lint_penalties():
  assert P.compile_line_penalties([3, 3, 7, -1]) == {3: -1.0, 7: -1.0}
  assert P.compile_line_penalties([3, 7], renormalise=True) == {3: -0.5, 7: -0.5}
  lint = P.lint_line_penalties([(1, "error"), (1, "warning"), (4, "fatal")])
  assert lint == pytest.approx({1: -0.12, 4: -0.5})
  assert P.lint_score(["fatal", "error", "warning", "warning"]) == pytest.approx(-0.64)
  assert P.lint_score(["fatal"] * 5, floor=-1.0) == -1.0
  assert P.merge({1: -1.0}, {1: -0.1, 4: -0.02}) == pytest.approx({1: -1.1, 4: -0.02})
  with pytest.raises(ValueError, match="severity"):
    P.LintWeights().of("info")


def _bpe_tokenizer():
  from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator([COMPONENT, "Sure! Here is the counter. It counts clicks."] * 20, trainer)
  return tok


def test_line_penalties_become_token_rewards_with_a_real_tokenizer():
  text = f"Sure! Here is the counter.\n\n```tsx\n{COMPONENT}\n```\n\nIt counts clicks."
  ext = E.extract_component(text)
  values = P.spread({4: -1.0}, ext.num_lines, window=3)  # the `return` line
  spans = P.line_spans_of(values, ext, weight=0.5)
  enc = _bpe_tokenizer().encode(text)
  assert enc.ids and len(enc.offsets) == len(enc.ids)
  T = len(enc.ids) + 5  # padded
  token_values = spans_to_token_values(spans, enc.offsets, T)
  lines = E.line_spans(text)
  for t, (start, _) in enumerate(enc.offsets):
    line = next(j for j, (a, b) in enumerate(lines) if a <= start < b)
    code_line = line - ext.first_line
    want = 0.0
    if 0 <= code_line < ext.num_lines:
      want = 0.5 * -1.0 * max(0.0, 1 - abs(code_line - 4) / 4)
    assert token_values[t] == pytest.approx(want), (t, text[start:start + 10])
  # prose tokens (outside the block) and padding get nothing; the flagged line gets the most
  assert np.all(token_values[len(enc.ids):] == 0)
  assert token_values.min() == pytest.approx(-0.5)
  with pytest.raises(ValueError, match="one per code line"):
    P.line_spans_of(values[:-1], ext)


_PROSE = st.text(st.sampled_from("abc XYZ.,!?\n"), max_size=40).filter(lambda s: "```" not in s)
_CODE_LINES = st.lists(st.sampled_from(["const a = 1;", "  return <p>hi</p>;", "", "}", "// x"]),
                       min_size=1, max_size=8)


@given(_PROSE, _CODE_LINES, _PROSE)
def test_fenced_extraction_property(before, code_lines, after):
  code = "export default function App() {\n" + "\n".join(code_lines)
  text = f"{before}\n```tsx\n{code}\n```\n{after}"
  ext = E.extract_component(text)
  assert ext.code == code and ext.num_lines == len(code.split("\n"))
  for i, line in enumerate(code.split("\n")):
    a, b = ext.code_line_span(i)
    assert text[a:b].rstrip("\n") == line


# ------------------------------------------------------------------ steps (PURE on React)
BLOCKS = """import { useState } from 'react';

export default function App() {
  const [n, setN] = useState(0);
  \t
  return <button onClick={() => setN(n + 1)}>{n}</button>;
}"""


def _block_oracle(text, ext, penalties, weight):
  """Plain loop: a step starts at every non-blank line that follows a blank line (or the text's
  start); penalties of code line l go to the step holding completion line first_line + l."""
  lines = text.split("\n")
  step_of_line, step, prev_blank = [], -1, True
  for line in lines:
    blank = not line.strip()
    if not blank and prev_blank:
      step += 1
    step_of_line.append(max(step, 0))
    prev_blank = blank
  scores = [0.0] * (step + 1 if step >= 0 else 1)
  for l, p in penalties.items():
    scores[step_of_line[ext.first_line + l]] += weight * p
  return step_of_line, scores


def test_steps_are_blank_line_separated_blocks_scored_by_their_line_penalties():
  text = f"Sure! Here it is.\n\n```tsx\n{BLOCKS}\n```\n\nIt counts clicks."
  ext = E.extract_component(text)
  # code lines: 0 import, 1 blank, 2 export, 3 const, 4 whitespace only, 5 return, 6 }
  penalties = {0: -1.0, 3: -0.1, 4: -0.02, 5: -0.5, 6: -0.3}
  steps = P.step_spans_of(penalties, text, ext, weight=0.5)
  # prose | fence + import | export + const (+ the whitespace line) | return, }, fence | outro
  assert [text[a:b] for a, b, _ in steps] == [
      "Sure! Here it is.\n\n", "```tsx\nimport { useState } from 'react';\n\n",
      "export default function App() {\n  const [n, setN] = useState(0);\n  \t\n",
      "  return <button onClick={() => setN(n + 1)}>{n}</button>;\n}\n```\n\n",
      "It counts clicks."]
  assert [v for _, _, v in steps] == pytest.approx([0.0, -0.5, -0.06, -0.4, 0.0])
  step_of_line, want = _block_oracle(text, ext, penalties, 0.5)
  assert [v for _, _, v in steps] == pytest.approx(want)
  # the steps tile the completion: every character lies in exactly one step
  assert steps[0][0] == 0 and steps[-1][1] == len(text)
  assert all(b == a2 for (_, b, _), (a2, _, _) in zip(steps, steps[1:]))
  # token -> step through the trainer's packing, with a real tokenizer's offsets
  enc = _bpe_tokenizer().encode(text)
  rewards, mask, token_step = steps_to_arrays([steps], [enc.offsets], len(enc.ids) + 3, 8)
  assert mask[0].tolist() == [True] * 5 + [False] * 3
  assert rewards[0, :5] == pytest.approx([v for _, _, v in steps])
  starts = np.cumsum([0] + [len(line) + 1 for line in text.split("\n")])
  for t, (start, _) in enumerate(enc.offsets):
    line = int(np.searchsorted(starts, start, side="right")) - 1
    assert token_step[0, t] == step_of_line[line], (t, text[start:start + 10])
  assert np.all(token_step[0, len(enc.ids):] == -1)


def test_steps_without_a_component_or_text():
  prose = "\n\nI cannot write code.\n\nSorry."
  steps = P.step_spans_of({3: -1.0}, prose, None)
  assert steps == [(0, prose.index("Sorry"), 0.0), (prose.index("Sorry"), len(prose), 0.0)]
  assert P.step_spans_of({}, "", None) == [(0, 0, 0.0)]
  assert P.step_spans_of({}, "\n \n", None) == [(0, 3, 0.0)]
  assert P.text_blocks("a\nb\n\n  \nc") == [(0, 2), (4, 5)]
  ext = E.extract_component(f"```tsx\n{BLOCKS}\n```")
  with pytest.raises(ValueError, match="not cut from this completion"):
    P.step_spans_of({}, "other text", ext)
