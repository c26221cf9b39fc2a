"""Tests of the tiny Qwen2-pipeline BPE tokenizer: parity with AutoTokenizer, offsets, chat."""

import json
import random

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from botjax.data import arithmetic as ar
from botjax.data import templates
from botjax.data import tokenizer as tk

SAMPLES = [
    "<step 1>3 + 4 = 7</step>\n<step 2>7 * 2 = 14</step>\n<step 3>14 - 5 = 9</step>\n"
    "<final>9</final>",
    "What is ((12 - 7) * 3) + 405?",
    "Final answer: -42",
    "Unicode: café, naïve, ∑ x², 日本語 and e\u0301 (combining accent, NFC-normalised).",
    "  leading spaces, tabs\tand\n\nblank lines  ",
    "Find $\\frac{a}{b}$ where {x} = 2^{10}.",
]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
  out = tmp_path_factory.mktemp("tiny_tok")
  tk.build_tokenizer(out, ar.ArithmeticTask(seed=0), vocab_size=384, num_problems=1000)
  return out


def test_autotokenizer_matches_raw_tokenizer_json(tok_dir, tmp_path):
  auto = AutoTokenizer.from_pretrained(tok_dir)
  raw = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
  assert type(auto).__name__ == "Qwen2Tokenizer"
  assert len(auto) <= 384
  texts = SAMPLES + tk.task_corpus(ar.ArithmeticTask(seed=9), 20)
  for text in texts:
    ids = auto(text)["input_ids"]
    assert ids == raw.encode(text).ids, text
  # A qwen2 config.json beside the tokenizer (as in a tiny checkpoint) does not change ids.
  for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    (tmp_path / name).write_bytes((tok_dir / name).read_bytes())
  (tmp_path / "config.json").write_text(json.dumps(
      {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 384}))
  with_config = AutoTokenizer.from_pretrained(tmp_path)
  assert type(with_config).__name__ == "Qwen2Tokenizer"
  for text in texts:
    assert with_config(text)["input_ids"] == raw.encode(text).ids


def test_special_tokens_tags_and_digits(tok_dir):
  auto = AutoTokenizer.from_pretrained(tok_dir)
  ids = [auto.convert_tokens_to_ids(t) for t in tk.SPECIAL_TOKENS + tk.TAG_TOKENS]
  assert ids == list(range(8))
  assert auto.eos_token == "<|im_end|>" and auto.eos_token_id == 2
  assert auto.pad_token == "<|pad|>" and auto.pad_token_id == 3
  assert auto.bos_token is None
  text = "<step 1>3 + 45 = 48</step>\n<final>48</final>"
  pieces = auto.convert_ids_to_tokens(auto(text)["input_ids"])
  for tag in tk.TAG_TOKENS:
    assert tag in pieces  # each tag is one token
  assert "4" in pieces and "8" in pieces and "48" not in pieces  # digits stay single
  # Tags are ordinary tokens: skip_special_tokens keeps them, drops the chat specials.
  ids = auto("<|im_start|>" + text + "<|im_end|>")["input_ids"]
  assert ids[0] == 1 and ids[-1] == 2
  assert auto.decode(ids, skip_special_tokens=True) == text


def test_round_trip_and_offsets(tok_dir):
  import unicodedata
  auto = AutoTokenizer.from_pretrained(tok_dir)
  for text in SAMPLES:
    enc = auto(text, return_offsets_mapping=True)
    norm = unicodedata.normalize("NFC", text)
    assert auto.decode(enc["input_ids"]) == norm
    # Offsets index the input string and tile it: no gaps, no overlaps for byte-level BPE
    # (a multi-byte character split over tokens gives each piece the whole character).
    ends = 0
    for (s, e), i in zip(enc["offset_mapping"], enc["input_ids"]):
      assert s <= e and s >= ends - 1
      ends = max(ends, e)
      piece = auto.decode([i])
      if piece.isascii():
        assert text[s:e] == piece
    assert ends == len(text) or norm != text


def test_chat_template(tok_dir):
  auto = AutoTokenizer.from_pretrained(tok_dir)
  msgs = templates.chat_messages("What is 3 + 4?", "arithmetic")
  text = auto.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  assert text == tk.chatml(msgs, add_generation_prompt=True)
  assert text.startswith("<|im_start|>user\nCompute") and text.endswith(
      "What is 3 + 4?<|im_end|>\n<|im_start|>assistant\n")
  no_gen = auto.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
  assert no_gen == text[:-len("<|im_start|>assistant\n")]
  ids = auto.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True,
                                 return_dict=False)
  assert ids == auto(text)["input_ids"]


def test_build_is_deterministic_and_validates(tmp_path):
  corpus = [ar.reference_solution(r) for r in ar.ArithmeticTask(seed=1).problems(300)]
  tk.build_tokenizer(tmp_path / "a", corpus, vocab_size=300)
  tk.build_tokenizer(tmp_path / "b", list(corpus), vocab_size=300)
  assert ((tmp_path / "a" / "tokenizer.json").read_bytes()
          == (tmp_path / "b" / "tokenizer.json").read_bytes())
  records = [{"problem": "Compute 2+2.", "answer": "4"}] * 3
  t = tk.build_tokenizer(tmp_path / "c", records, vocab_size=280, template="math")
  assert len(t) <= 280 and t("<final>4</final>")["input_ids"][0] == 6
  with pytest.raises(ValueError, match="vocab_size=100: must be >= 264"):
    tk.build_tokenizer(tmp_path / "d", corpus, vocab_size=100)
  with pytest.raises(TypeError, match="single string"):
    tk.build_tokenizer(tmp_path / "d", "some text")
  with pytest.raises(TypeError, match="all be str or all be records"):
    tk.build_tokenizer(tmp_path / "d", ["a", 3])
  with pytest.raises(ValueError, match="empty"):
    tk.build_tokenizer(tmp_path / "d", [])


def test_tokens_of_arithmetic_solutions_are_short(tok_dir):
  auto = AutoTokenizer.from_pretrained(tok_dir)
  rng = random.Random(0)
  lengths = []
  for r in ar.ArithmeticTask(seed=4).problems(50):
    lengths.append(len(auto(ar.imperfect_solution(r, rng, 0.5))["input_ids"]))
  # About 12 tokens per step (tags, digits, operator) plus the final: a 4-step answer < 80.
  assert max(lengths) < 80


def test_default_corpus_covers_the_math_template(tmp_path):
  from botjax.data import loaders
  tok = tk.build_tokenizer(tmp_path)
  assert len(tok) == 512
  record = loaders.builtin_aime_sample()[0]
  prompt = templates.format_prompt(record, templates.MATH_TEMPLATE)
  # Learned merges cover the template's words: well under one token per 2 characters.
  assert len(tok(prompt)["input_ids"]) < len(prompt) / 3
  assert tok.decode(tok(record["solution"])["input_ids"]) == record["solution"]
