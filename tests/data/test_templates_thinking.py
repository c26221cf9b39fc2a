"""Thinking on/off in chat prompts: the family mapping, its errors, and rendered prompts.

The rendering tests use a tiny locally built tokenizer whose chat template mimics SmolLM3's
thinking logic (read from the model's published template): `enable_thinking` defaults to true,
a `/think` or `/no_think` in the system message overrides it and is removed from the system text,
and thinking off opens the assistant turn with an empty `<think>\\n\\n</think>\\n` block.
"""

import pytest

from botjax.data import build_tokenizer
from botjax.data import templates as T

SMOLLM3_LIKE = (
    "{%- if enable_thinking is not defined -%}{%- set enable_thinking = true -%}{%- endif -%}"
    "{%- set reasoning_mode = '/think' if enable_thinking else '/no_think' -%}"
    "{%- set custom = '' -%}"
    "{%- if messages[0].role == 'system' -%}"
    "{%- if '/no_think' in messages[0].content -%}{%- set reasoning_mode = '/no_think' -%}"
    "{%- elif '/think' in messages[0].content -%}{%- set reasoning_mode = '/think' -%}{%- endif -%}"
    "{%- set custom = messages[0].content.replace('/no_think', '').replace('/think', '')"
    ".rstrip() -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>system\\nReasoning Mode: ' + reasoning_mode + '\\n' -}}"
    "{{- (custom if custom else 'default instructions') + '<|im_end|>\\n' -}}"
    "{%- for message in messages if message.role != 'system' -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if reasoning_mode == '/no_think' -%}{{- '<think>\\n\\n</think>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  corpus = ["Reasoning Mode: /think /no_think <think> </think> default instructions",
            "What is 3 + 4? The answer is 7.", "system user assistant"] * 20
  tok = build_tokenizer(tmp_path_factory.mktemp("tok"), corpus, vocab_size=300)
  tok.chat_template = SMOLLM3_LIKE
  return tok


def render(tok, messages, **kwargs):
  return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)


def test_family_mapping():
  assert T.thinking_family("smollm3-3b") == "smollm3"
  assert T.thinking_family("HuggingFaceTB/SmolLM3-3B") == "smollm3"
  assert T.thinking_family("/ckpts/models--microsoft--Phi-4-mini-reasoning/snap") == (
      "phi-4-mini-reasoning")
  for name in ("qwen2.5-3b", "Qwen/Qwen2.5-3B", "llama-3.1-8b-instruct", "tiny"):
    assert T.thinking_family(name) is None
    assert T.thinking_mode(name) == T.THINK_NEVER
  assert T.thinking_mode("smollm3-3b") == T.THINK_SWITCHABLE
  assert T.thinking_mode("phi-4-mini-reasoning") == T.THINK_ALWAYS


def test_kwargs_and_flags():
  assert T.thinking_kwargs("smollm3-3b", None) == {}
  assert T.thinking_kwargs("smollm3-3b", True) == {"enable_thinking": True}
  assert T.thinking_kwargs("smollm3-3b", False) == {"enable_thinking": False}
  assert T.thinking_kwargs("phi-4-mini-reasoning", True) == {}
  assert T.thinking_kwargs("phi-4-mini-reasoning", None) == {}
  assert T.thinking_kwargs("qwen2.5-3b", False) == {}
  assert T.thinking_system_flag("smollm3-3b", True) == "/think"
  assert T.thinking_system_flag("smollm3-3b", False) == "/no_think"
  assert T.thinking_system_flag("smollm3-3b", None) is None
  assert T.thinking_system_flag("qwen2.5-3b", False) is None


def test_errors_name_the_families_that_can():
  with pytest.raises(ValueError, match=r"qwen2\.5-3b.*no thinking mode.*phi-4-mini-reasoning.*smollm3"):
    T.thinking_kwargs("qwen2.5-3b", True)
  with pytest.raises(ValueError, match=r"always reasons.*smollm3"):
    T.thinking_kwargs("phi-4-mini-reasoning", False)
  with pytest.raises(ValueError, match="no thinking mode"):
    T.chat_messages("1 + 1", thinking=True, model="llama-3.1-8b-instruct")
  with pytest.raises(ValueError, match="needs model="):
    T.chat_messages("1 + 1", thinking=False)


def test_parse_thinking():
  assert T.parse_thinking("auto") is None
  assert T.parse_thinking("on") is True
  assert T.parse_thinking("OFF") is False
  assert T.parse_thinking(None) is None and T.parse_thinking(True) is True
  with pytest.raises(ValueError, match=r"'maybe'.*\['auto', 'on', 'off'\]"):
    T.parse_thinking("maybe")


def test_chat_messages_flags():
  assert T.chat_messages("1 + 1", thinking=None, model="smollm3-3b") == T.chat_messages("1 + 1")
  off = T.chat_messages("1 + 1", thinking=False, model="smollm3-3b")
  assert off[0] == {"role": "system", "content": "/no_think"}
  assert off[1] == T.chat_messages("1 + 1")[0]
  on = T.chat_messages({"problem": "1 + 1"}, system="Be brief.", thinking=True, model="smollm3-3b")
  assert on[0] == {"role": "system", "content": "Be brief. /think"}
  # families without a switch get no message change
  assert T.chat_messages("1 + 1", thinking=True, model="phi-4-mini-reasoning") == (
      T.chat_messages("1 + 1"))
  assert T.chat_messages("1 + 1", thinking=False, model="qwen2.5-3b") == T.chat_messages("1 + 1")


def test_rendered_prompt_thinking_on_off(tokenizer):
  model = "HuggingFaceTB/SmolLM3-3B"
  plain = T.chat_messages("What is 3 + 4?")
  default = render(tokenizer, plain)
  assert "Reasoning Mode: /think" in default and "<think>" not in default
  on_flag = render(tokenizer, T.chat_messages("What is 3 + 4?", thinking=True, model=model))
  on_kwargs = render(tokenizer, plain, **T.thinking_kwargs(model, True))
  assert on_flag == on_kwargs == default            # SmolLM3 thinks by default
  off_flag = render(tokenizer, T.chat_messages("What is 3 + 4?", thinking=False, model=model))
  off_kwargs = render(tokenizer, plain, **T.thinking_kwargs(model, False))
  assert off_flag == off_kwargs != default
  assert "Reasoning Mode: /no_think" in off_flag
  assert off_flag.endswith("<|im_start|>assistant\n<think>\n\n</think>\n")
  assert "/no_think<|im_end|>" not in off_flag      # the flag is not left in the system text
  custom = render(tokenizer, T.chat_messages("What is 3 + 4?", system="Be brief.",
                                             thinking=False, model=model))
  assert "Be brief.<|im_end|>" in custom and custom.endswith("<think>\n\n</think>\n")


def test_token_ids_differ_through_encode_prompts(tokenizer):
  from botjax.sampling import encode_prompts
  model = "smollm3-3b"
  ids, texts = encode_prompts(tokenizer, [
      T.chat_messages("What is 3 + 4?", thinking=True, model=model),
      T.chat_messages("What is 3 + 4?", thinking=False, model=model)])
  assert ids[0] != ids[1]
  assert texts[1].endswith("<think>\n\n</think>\n") and not texts[0].endswith("</think>\n")
  assert tokenizer.decode(ids[1]) == texts[1]
