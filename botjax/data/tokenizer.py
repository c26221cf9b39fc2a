"""A tiny byte-level BPE tokenizer for the tiny model, saved as a Hugging Face `Qwen2Tokenizer`.

The tiny CPU model is a `qwen2` checkpoint, and transformers 5 builds `Qwen2Tokenizer` for any
checkpoint whose `model_type` is `qwen2`, rebuilding the pipeline from vocab + merges: NFC
normalisation, a split on the Qwen pre-tokenizer regex (single digits, letters runs,
punctuation runs, whitespace), byte-level mapping without a prefix space, a byte-level decoder.
A tokenizer trained with any other pipeline would give different ids through `AutoTokenizer`
than through its own `tokenizer.json`, so `build_tokenizer` trains with exactly this pipeline
and saves through `Qwen2Tokenizer` itself. Single-digit pre-tokenization suits arithmetic: every
number is spelled digit by digit.

Vocabulary layout: ids 0–3 are the special tokens `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`,
`<|pad|>`; ids 4–7 are the answer-format tags `<step`, `</step>`, `<final>`, `</final>` as
ordinary (non-special) added tokens, so they are single tokens the model can learn to emit and
`decode(..., skip_special_tokens=True)` keeps them; then the 256 byte symbols and the learned
merges. `eos_token` is `<|im_end|>` (a chat turn ends there, as in Qwen2.5-Instruct) and
`pad_token` is `<|pad|>`.

Chat template (ChatML): every message renders as `<|im_start|>{role}\\n{content}<|im_end|>\\n`;
`add_generation_prompt=True` appends `<|im_start|>assistant\\n`. There is no default system
message, to keep tiny prompts short.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Mapping
from typing import Any

from botjax.data import arithmetic, loaders, templates

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>")
TAG_TOKENS = ("<step", "</step>", "<final>", "</final>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|pad|>"
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_NUM_BYTES = 256


def chatml(messages: Iterable[Mapping[str, str]], *, add_generation_prompt: bool = False) -> str:
  """The text `CHAT_TEMPLATE` renders for `messages` (plain Python, for corpora and tests)."""
  text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
  return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def task_corpus(task: arithmetic.ArithmeticTask, num_problems: int = 2000, *,
                template: str = templates.ARITHMETIC_TEMPLATE,
                error_rate: float = 0.5) -> list[str]:
  """Training text for the tokenizer: chat-formatted prompts and worked solutions of a task.

  Each problem gives one conversation: the user turn is the templated prompt and the assistant
  turn an imperfect solution (so wrong values and format slips are also covered), followed by
  the reference solution on its own.
  """
  rng = random.Random(f"botjax-tokenizer-corpus:{task.seed}")
  texts = []
  for record in task.problems(num_problems, stream="tokenizer"):
    solution = arithmetic.imperfect_solution(record, rng, error_rate)
    texts.append(chatml([{"role": "user", "content": templates.format_prompt(record, template)},
                         {"role": "assistant", "content": solution}]))
    texts.append(arithmetic.reference_solution(record))
  return texts


def _records_corpus(records: Iterable[Mapping[str, Any]], template: str) -> list[str]:
  texts = []
  for record in records:
    prompt = templates.format_prompt(record, template)
    texts.append(chatml([{"role": "user", "content": prompt},
                         {"role": "assistant", "content": f"<final>{record['answer']}</final>"}]))
  return texts


def default_aime_corpus() -> list[str]:
  """The built-in AIME-style sample as chats (math template prompt, worked solution)."""
  texts = []
  for record in loaders.builtin_aime_sample():
    texts.append(chatml([
        {"role": "user", "content": templates.format_prompt(record, templates.MATH_TEMPLATE)},
        {"role": "assistant", "content": record["solution"]}]))
  return texts


def _pipeline_tokenizer():
  """An untrained `tokenizers.Tokenizer` with `Qwen2Tokenizer`'s exact pipeline."""
  from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
  from tokenizers.models import BPE
  from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

  tok = Tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                      fuse_unk=False, byte_fallback=False))
  tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
  ])
  tok.decoder = decoders.ByteLevel()
  return tok


def build_tokenizer(out_dir: str | os.PathLike,
                    corpus_or_task: (arithmetic.ArithmeticTask | Iterable[str]
                                     | Iterable[Mapping[str, Any]] | None) = None, *,
                    vocab_size: int = 512, num_problems: int = 2000,
                    template: str = templates.ARITHMETIC_TEMPLATE, min_frequency: int = 2,
                    model_max_length: int = 4096):
  """Trains a tiny byte-level BPE with the Qwen2 pipeline and saves it to `out_dir`.

  `transformers.AutoTokenizer.from_pretrained(out_dir)` then loads a `Qwen2Tokenizer` with the
  ChatML chat template, and gives the same ids as the saved `tokenizer.json` (also with a
  `config.json` of `model_type` qwen2 beside it). Training is deterministic: the same corpus
  gives byte-identical files.

  Args:
    out_dir: directory to write (`tokenizer.json`, `tokenizer_config.json`,
      `chat_template.jinja`); created if missing.
    corpus_or_task: an `ArithmeticTask` (its prompts and worked solutions, see `task_corpus`);
      an iterable of strings (used as is); an iterable of records with `problem` and `answer`
      (templated prompts plus `<final>` answers); or None for `ArithmeticTask()` plus the
      built-in AIME-style sample with the math template (`default_aime_corpus`).
    vocab_size: upper bound on the vocabulary, specials and tags included; must be at least
      264 (8 added tokens + 256 bytes). Fewer entries result when the corpus has too few
      frequent pairs; read `len(tokenizer)` for the real size.
    num_problems: problems drawn when `corpus_or_task` is a task.
    template: prompt template for tasks and records (a string or a key of `templates.TEMPLATES`).
    min_frequency: minimum count of a pair to become a merge.
    model_max_length: recorded in `tokenizer_config.json`.

  Returns:
    The `transformers` `Qwen2Tokenizer` that was saved.
  """
  from tokenizers import AddedToken, pre_tokenizers
  from tokenizers.trainers import BpeTrainer
  from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

  num_added = len(SPECIAL_TOKENS) + len(TAG_TOKENS)
  if vocab_size < num_added + _NUM_BYTES:
    raise ValueError(f"vocab_size={vocab_size}: must be >= {num_added + _NUM_BYTES} "
                     f"({num_added} special/tag tokens + {_NUM_BYTES} byte symbols)")
  template = templates.TEMPLATES.get(template, template)
  if corpus_or_task is None:
    texts = task_corpus(arithmetic.ArithmeticTask(), num_problems, template=template)
    texts += default_aime_corpus()
  elif isinstance(corpus_or_task, arithmetic.ArithmeticTask):
    texts = task_corpus(corpus_or_task, num_problems, template=template)
  elif isinstance(corpus_or_task, str):
    raise TypeError("corpus_or_task is a single string; pass a list of texts, records or an "
                    "ArithmeticTask")
  else:
    items = list(corpus_or_task)
    if all(isinstance(t, str) for t in items):
      texts = items
    elif all(isinstance(t, Mapping) for t in items):
      texts = _records_corpus(items, template)
    else:
      bad = next(t for t in items if not isinstance(t, (str, Mapping)))
      raise TypeError(f"corpus_or_task items must all be str or all be records (dicts); got "
                      f"{type(bad).__name__}: {bad!r:.60}")
  if not texts:
    raise ValueError("corpus_or_task is empty: the tokenizer needs some training text")

  tok = _pipeline_tokenizer()
  trainer = BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                       special_tokens=list(SPECIAL_TOKENS + TAG_TOKENS),
                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(texts, trainer)
  model = json.loads(tok.to_str())["model"]
  hf = Qwen2Tokenizer(
      vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]],
      unk_token=None, bos_token=None, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
      additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (EOS_TOKEN, PAD_TOKEN)],
      model_max_length=model_max_length)
  hf.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
  hf.chat_template = CHAT_TEMPLATE
  os.makedirs(out_dir, exist_ok=True)
  hf.save_pretrained(os.fspath(out_dir))
  return hf
