"""Text helper: prompts through the tokenizer and chat template, completions with offsets."""

import jax
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings, strategies as st

import botjax.models as bm
from botjax.data import tokenizer as tk
from botjax.rewards import spans_to_token_values
from botjax.sampling import (FINISH_LENGTH, FINISH_STOP, SampleOutput, Sampler, SamplingConfig,
                             TokenOffsets, decode_completions, decode_with_offsets,
                             encode_prompts, generate_text)

CORPUS = [
    "<step 1>3 + 4 = 7</step>\n<step 2>7 * 2 = 14</step>\n<final>14</final>",
    "What is 12 - 7? Think step by step.",
    "café naïve déjà vu, the answer is x² + 1",
] * 20


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """A tiny qwen2 checkpoint with the project's tiny tokenizer, loaded like a user checkpoint."""
  path = tmp_path_factory.mktemp("tiny_ckpt")
  tok = tk.build_tokenizer(path, CORPUS, vocab_size=300, min_frequency=2)
  cfg = bm.DecoderConfig(vocab_size=320, hidden_size=32, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=8, intermediate_size=64, qkv_bias=True,
                         tie_word_embeddings=True, eos_token_id=(tok.eos_token_id,),
                         pad_token_id=tok.pad_token_id)
  bm.save_pretrained(bm.Decoder(cfg, rngs=nnx.Rngs(0)), str(path))
  return bm.load_pretrained(str(path)), bm.load_tokenizer(str(path))


def _ids(tok, text):
  return tok(text, add_special_tokens=False)["input_ids"]


def test_offsets_tile_the_text_and_share_multibyte_characters(checkpoint):
  _, tok = checkpoint
  text_in = "日本 café <final>9</final><|im_end|>x²"
  ids = _ids(tok, text_in)
  text, offsets = decode_with_offsets(tok, ids)
  assert text == text_in == tok.decode(ids, skip_special_tokens=False,
                                       clean_up_tokenization_spaces=False)
  assert len(offsets) == len(ids) and offsets[0][0] == 0 and offsets[-1][1] == len(text)
  for (s0, e0), (s1, e1) in zip(offsets, offsets[1:]):
    assert s0 <= e0 and (s1 == s0 and e1 == e0 or s1 == e0)   # shared span, or contiguous
  # 日 and 本 are three bytes each; byte-level tokens that build a character share its span.
  nihon = [o for o in offsets if o[1] <= 2]
  assert len(nihon) > 2 and {o for o in nihon} <= {(0, 1), (0, 2), (1, 2)}
  # Every span's text is what its tokens decode to.
  for start, end in sorted(set(offsets)):
    group = [i for i, o in enumerate(offsets) if o == (start, end)]
    assert tok.decode([ids[i] for i in group], skip_special_tokens=False) == text[start:end]
  # A reward span over "café" reaches exactly the tokens that write it.
  c = text.index("café")
  values = spans_to_token_values([(c, c + 4, 1.0)], offsets, len(ids))
  hit = [i for i, v in enumerate(values) if v == 1.0]
  assert "".join(tok.decode([ids[i]]) for i in hit).strip() == "café"


def test_text_cut_inside_a_character_still_decodes(checkpoint):
  _, tok = checkpoint
  ids = _ids(tok, "ab日")
  cut = ids[:-1]                                     # the last byte of 日 is missing
  text, offsets = decode_with_offsets(tok, cut)
  assert text == tok.decode(cut, skip_special_tokens=False, clean_up_tokenization_spaces=False)
  assert text.startswith("ab") and len(offsets) == len(cut) and offsets[-1][1] == len(text)


def test_encode_prompts_strings_and_chat(checkpoint):
  _, tok = checkpoint
  messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]
  ids, texts = encode_prompts(tok, ["What is 3 + 4?", messages])
  assert texts[0] == "What is 3 + 4?" and ids[0] == tok("What is 3 + 4?")["input_ids"]
  assert texts[1] == tk.chatml(messages, add_generation_prompt=True)
  assert ids[1] == tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
  wrapped_ids, wrapped = encode_prompts(tok, ["hi"], chat_template=True)
  assert wrapped == [tk.chatml([{"role": "user", "content": "hi"}], add_generation_prompt=True)]
  assert wrapped_ids[0] == _ids(tok, wrapped[0])
  with pytest.raises(ValueError, match="chat_template=False"):
    encode_prompts(tok, [messages], chat_template=False)
  with pytest.raises(TypeError, match="prompt 0"):
    encode_prompts(tok, [[1, 2, 3]])


def test_generate_text_end_to_end(checkpoint):
  model, tok = checkpoint
  sampler = Sampler(model, None, SamplingConfig(temperature=1.0, max_new_tokens=16,
                                                eos_token_ids=(tok.eos_token_id,),
                                                pad_token_id=tok.pad_token_id))
  prompts = ["3 + 4 =", [{"role": "user", "content": "What is 12 - 7?"}]]
  key = jax.random.key(0)
  free = generate_text(sampler, tok, prompts, key, n=2)
  # Stop row 0 at (the first occurrence of) its 3rd token: same key, same draws up to there.
  stop = int(free.output.tokens[0, 2])
  out = generate_text(sampler, tok, prompts, key, n=2, stop_token_ids=[[stop], []])
  assert sampler.num_compiled() == 1
  tokens, lengths = np.asarray(out.output.tokens), np.asarray(out.output.lengths)
  finish = np.asarray(out.output.finish_reason)
  assert finish[0] == FINISH_STOP and lengths[0] <= 3
  chat = tk.chatml(prompts[1], add_generation_prompt=True)
  assert out.prompts == ["3 + 4 =", "3 + 4 =", chat, chat]
  assert len(out.completions) == len(out.offsets) == 4
  for b in range(4):
    n = int(lengths[b])
    kept = n - 1 if finish[b] == FINISH_STOP else n       # the stop token is not in the text
    assert out.completions[b] == tok.decode(tokens[b, :kept].tolist(), skip_special_tokens=False,
                                            clean_up_tokenization_spaces=False)
    assert len(out.offsets[b]) == n
    assert out.offsets[b][-1][1] == len(out.completions[b])
    if finish[b] == FINISH_STOP:
      assert out.offsets[b][-1] == (len(out.completions[b]),) * 2
  np.testing.assert_array_equal(out.output.group_ids, [0, 0, 1, 1])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_batched_texts_and_lazy_offsets_equal_token_by_token_decoding(checkpoint, seed):
  """Random ids (stray bytes of multi-byte characters, special tokens, stopped rows): the
  batched texts and the offsets computed on first read equal `decode_with_offsets` per row."""
  _, tok = checkpoint
  rng = np.random.default_rng(seed)
  b, t = 6, 12
  tokens = rng.integers(0, len(tok), (b, t)).astype(np.int32)
  lengths = rng.integers(0, t + 1, b).astype(np.int32)
  finish = np.where(rng.random(b) < 0.5, FINISH_STOP, FINISH_LENGTH).astype(np.int32)
  z = np.zeros((b, t), np.float32)
  out = SampleOutput(prompt_ids=np.zeros((b, 1), np.int32), prompt_mask=np.ones((b, 1), bool),
                     tokens=tokens, mask=np.arange(t)[None] < lengths[:, None], logp=z,
                     lengths=lengths, finish_reason=finish, group_ids=np.arange(b) // 2,
                     num_groups=3)
  got = decode_completions(tok, out, ["p0", "p1", "p2"])
  assert got.prompts == ["p0", "p0", "p1", "p1", "p2", "p2"]
  assert isinstance(got.offsets, TokenOffsets) and len(got.offsets) == b
  for row in [3, 0, 5, 1, 2, 4]:                 # any order of first reads
    ids = tokens[row, :lengths[row]].tolist()
    stopped = finish[row] == FINISH_STOP and ids
    text, offs = decode_with_offsets(tok, ids[:-1] if stopped else ids)
    if stopped:
      offs.append((len(text), len(text)))
    assert got.completions[row] == text
    assert got.offsets[row] == offs and len(offs) == lengths[row]
  assert got.offsets[-1] == got.offsets[5] and got.offsets[1:3] == [got.offsets[1], got.offsets[2]]


def test_lazy_offsets_refuse_a_text_they_do_not_match(checkpoint):
  _, tok = checkpoint
  ids = _ids(tok, "3 + 4 = 7")
  offsets = TokenOffsets(tok, [ids], [False], ["3 + 4 = 8"])
  with pytest.raises(RuntimeError, match="row 0: decoding token by token gave '3 \\+ 4 = 7'"):
    offsets[0]
  assert TokenOffsets(tok, [ids], [False], ["3 + 4 = 7"])[0] == decode_with_offsets(tok, ids)[1]
