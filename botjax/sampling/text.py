"""Text in, text out: prompts through the tokenizer (and chat template), completions back with
the character offsets of every generated token.

Reward functions work on strings and return character spans; `offsets[b][t] = (start, end)` maps
generated token t of row b to `completions[b][start:end]`, which is how
`botjax.rewards.spans_to_token_values` turns spans into token-level values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from botjax.sampling.output import FINISH_STOP, SampleOutput
from botjax.sampling.sampler import Sampler

Message = Mapping[str, str]
Prompt = str | Sequence[Message]


def _backend(tokenizer: Any) -> Tokenizer:
  """The Rust `tokenizers.Tokenizer` behind a tokenizer; TypeError for pure-Python ones."""
  if isinstance(tokenizer, Tokenizer):
    return tokenizer
  backend = getattr(tokenizer, "backend_tokenizer", None)
  if not isinstance(backend, Tokenizer):
    raise TypeError(f"{type(tokenizer).__name__} has no Rust `tokenizers` backend; pass a fast "
                    "tokenizer (transformers TokenizersBackend) or a tokenizers.Tokenizer")
  return backend


def decode_with_offsets(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
  """Decodes token ids and returns, for each token, the span of text it produced.

  Tokens are decoded incrementally with `tokenizers.decoders.DecodeStream`, so
  `text = c₀ + c₁ + …` where cᵢ is the new text after token i and
  `offsets[i] = (len(c₀…cᵢ₋₁), len(c₀…cᵢ))`. Tokens that hold only part of a multi-byte character
  produce no text on their own; all tokens that complete a chunk of text share that chunk's span,
  so the first character of each token's span is the first character it helped to write. Special
  tokens are decoded as their text.

  Args:
    tokenizer: a `transformers` tokenizer or a `tokenizers.Tokenizer`.
    ids: the token ids of one completion.

  Returns:
    text: the decoded string.
    offsets: len(ids) pairs (start, end), 0 ≤ start ≤ end ≤ len(text), non-decreasing.
  """
  ids = [int(i) for i in ids]
  backend = _backend(tokenizer)
  pieces: list[str] = []
  offsets: list[tuple[int, int]] = []
  pending: list[int] = []          # tokens waiting for the rest of a multi-byte character
  length = 0

  def emit(chunk: str, index: int) -> None:
    nonlocal length
    start = length
    length += len(chunk)
    pieces.append(chunk)
    for j in pending + [index]:
      offsets[j] = (start, length)
    pending.clear()

  stream = DecodeStream(skip_special_tokens=False)
  for i, token in enumerate(ids):
    offsets.append((length, length))
    chunk = stream.step(backend, token)
    if chunk is None:
      pending.append(i)
    else:
      emit(chunk, i)
  if pending:                      # the text ends inside a character: take what decode() gives
    text = "".join(pieces)
    full = backend.decode(ids, skip_special_tokens=False)
    tail = full[len(text):] if full.startswith(text) else ""
    emit(tail, pending.pop())
  return "".join(pieces), offsets


def encode_prompts(tokenizer: Any, prompts: Sequence[Prompt], *,
                   chat_template: bool | None = None) -> tuple[list[list[int]], list[str]]:
  """Tokenizes prompts: plain strings as they are, chat messages through the chat template.

  Args:
    tokenizer: a `transformers` tokenizer (with a chat template when chat prompts are used).
    prompts: P prompts, each a string or a list of `{"role": ..., "content": ...}` messages.
    chat_template: None applies the template to message lists only; True also wraps each string
      as one user message; False refuses message lists.

  Returns:
    ids: P token-id lists.
    texts: P prompt strings as the model sees them (after the template).
  """
  ids, texts = [], []
  for p, prompt in enumerate(prompts):
    if isinstance(prompt, str):
      if chat_template:
        prompt = [{"role": "user", "content": prompt}]
      else:
        texts.append(prompt)
        ids.append(list(tokenizer(prompt)["input_ids"]))
        continue
    if chat_template is False:
      raise ValueError(f"prompt {p} is a list of messages but chat_template=False")
    if not isinstance(prompt, Sequence) or not all(isinstance(m, Mapping) for m in prompt):
      raise TypeError(f"prompt {p} must be a string or a list of message dicts, "
                      f"got {type(prompt).__name__}")
    text = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True,
                                         tokenize=False)
    texts.append(text)
    # The template already wrote any BOS / special tokens as text.
    ids.append(list(tokenizer(text, add_special_tokens=False)["input_ids"]))
  return ids, texts


class TokenOffsets(Sequence):
  """Per-row token offsets, computed when a row is first read (`TextSamples.offsets`).

  Only token-level and step rewards need them, and decoding token by token costs about
  1 µs per token on the host (8 ms for 128 completions of 64 tokens), several times the
  batched decode of the texts; rows that are never read are never decoded this way.
  """

  def __init__(self, tokenizer: Any, rows: Sequence[Sequence[int]], stopped: Sequence[bool],
               texts: Sequence[str]):
    self._tokenizer, self._rows, self._stopped, self._texts = tokenizer, rows, stopped, texts
    self._done: dict[int, list[tuple[int, int]]] = {}

  def __len__(self) -> int:
    return len(self._rows)

  def __getitem__(self, b):
    if isinstance(b, slice):
      return [self[i] for i in range(*b.indices(len(self)))]
    b = range(len(self))[b]
    if b not in self._done:
      ids = self._rows[b]
      text, offs = decode_with_offsets(self._tokenizer, ids[:-1] if self._stopped[b] else ids)
      if text != self._texts[b]:
        raise RuntimeError(f"row {b}: decoding token by token gave {text!r}, the batched "
                           f"decode {self._texts[b]!r}; the token offsets would not match")
      if self._stopped[b]:
        offs.append((len(text), len(text)))
      self._done[b] = offs
    return self._done[b]

  def __eq__(self, other) -> bool:
    return isinstance(other, Sequence) and list(self) == list(other)


@dataclasses.dataclass(frozen=True)
class TextSamples:
  """Decoded completions with their token offsets.

  Attributes:
    output: the `SampleOutput` (B = P·n rows, group ids = prompt index).
    prompts: B prompt strings (after the chat template), row b is prompt `group_ids[b]`.
    completions: B completion strings; the stop token that ended a row is not part of the text.
    offsets: B lists of `lengths[b]` pairs (start, end) into `completions[b]`, one per generated
      token, the final stop token included (it gets the empty span at the end of the text);
      from `decode_completions` a `TokenOffsets`, which computes each row when first read.
  """
  output: SampleOutput
  prompts: list[str]
  completions: list[str]
  offsets: Sequence[list[tuple[int, int]]]


def decode_completions(tokenizer: Any, output: SampleOutput,
                       prompt_texts: Sequence[str] | None = None) -> TextSamples:
  """Turns a `SampleOutput` into strings and per-token character offsets (host side).

  Args:
    tokenizer: the model's tokenizer.
    output: what `Sampler.generate` returned.
    prompt_texts: optional P prompt strings, repeated per row into `TextSamples.prompts`.

  Returns:
    `TextSamples` for the B rows of `output`.
  """
  tokens, lengths, finish, group_ids = jax.device_get(
      (output.tokens, output.lengths, output.finish_reason, output.group_ids))
  tokens, lengths = np.asarray(tokens), np.asarray(lengths)
  backend = _backend(tokenizer)
  rows = [tokens[b, :int(lengths[b])].tolist() for b in range(tokens.shape[0])]
  stopped = [int(finish[b]) == FINISH_STOP and len(rows[b]) > 0 for b in range(len(rows))]
  # The texts in one batched call (the stop token that ended a row is not part of its text).
  completions = backend.decode_batch([r[:-1] if s else r for r, s in zip(rows, stopped)],
                                     skip_special_tokens=False)
  prompts = ([prompt_texts[int(g)] for g in np.asarray(group_ids)] if prompt_texts is not None
             else [""] * tokens.shape[0])
  return TextSamples(output=output, prompts=prompts, completions=list(completions),
                     offsets=TokenOffsets(tokenizer, rows, stopped, completions))


def generate_text(sampler: Sampler, tokenizer: Any, prompts: Sequence[Prompt], key: jax.Array,
                  *, n: int = 1, max_new_tokens: int | None = None, params: Any = None,
                  chat_template: bool | None = None,
                  stop_token_ids: Sequence[Sequence[int]] | None = None) -> TextSamples:
  """Generates `n` completions per prompt from strings or chat messages.

  Args:
    sampler: a `Sampler` for the model that `tokenizer` belongs to.
    tokenizer: the model's tokenizer (`botjax.models.load_tokenizer(path)`).
    prompts: P prompts, each a string or a list of chat messages (see `encode_prompts`).
    key: PRNG key; the same key gives the same completions.
    n: completions per prompt (the group size G).
    max_new_tokens: overrides `SamplingConfig.max_new_tokens` for this call.
    params: model parameters to sample with (default: the sampler's current ones).
    chat_template: see `encode_prompts`.
    stop_token_ids: optional P lists of extra stop ids, one per prompt (see `Sampler.generate`).

  Returns:
    `TextSamples` with B = P·n rows, rows of prompt p adjacent, `group_ids = p`.
  """
  ids, texts = encode_prompts(tokenizer, prompts, chat_template=chat_template)
  output = sampler.generate(ids, key, n=n, max_new_tokens=max_new_tokens, params=params,
                            stop_token_ids=stop_token_ids)
  return decode_completions(tokenizer, output, texts)
