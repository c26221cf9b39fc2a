"""Prompt templates for the reasoning tasks, and chat messages built from them.

Both templates ask for the paper's answer format (docs/CONTRACTS.md "Text format"): numbered
`<step i>...</step>` lines, then `<final>answer</final>`. They are written for this library (the
paper's own prompt is not public); each holds one `{problem}` field.

- `MATH_TEMPLATE`: AIME-style problems for instruction-tuned models (Qwen2.5, SmolLM3, Phi-4-mini).
  It states the format once, gives a two-step example of the tags, and says the answer is an
  integer, which is what AIME scoring needs.
- `ARITHMETIC_TEMPLATE`: the synthetic arithmetic task for the tiny CPU model. It is short,
  because every prompt token costs sequence length on CPU, and it names the exact step shape
  `a op b = c` that the step rewards check.

The chat wrapping (system/user/assistant roles, special tokens) belongs to the tokenizer's chat
template; `chat_messages` only builds the message list for `apply_chat_template`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MATH_TEMPLATE = (
    "Solve the following math problem. Reason in short, numbered steps and put each step on its "
    "own line inside step tags, then give only the final answer inside final tags, for example:\n"
    "<step 1>...</step>\n"
    "<step 2>...</step>\n"
    "<final>42</final>\n"
    "Each step should state one deduction or calculation. The final answer is an integer.\n\n"
    "Problem: {problem}"
)

ARITHMETIC_TEMPLATE = (
    "Compute step by step, left to right. Write one <step i>a op b = c</step> per operation, "
    "then <final>c</final>.\n{problem}"
)

TEMPLATES = {"math": MATH_TEMPLATE, "arithmetic": ARITHMETIC_TEMPLATE}


def format_prompt(problem: str | Mapping[str, Any], template: str = MATH_TEMPLATE) -> str:
  """Fills a template's `{problem}` field with a problem text (or a record's `problem`).

  Args:
    problem: the problem text, or a record with a `problem` field.
    template: a template string with one `{problem}` field, or a key of `TEMPLATES`.

  Returns:
    The user-turn text.
  """
  template = TEMPLATES.get(template, template)
  if "{problem}" not in template:
    raise ValueError(f"template {template[:60]!r}... has no '{{problem}}' field; use one of "
                     f"{sorted(TEMPLATES)} or a string containing '{{problem}}'")
  if isinstance(problem, Mapping):
    if "problem" not in problem:
      raise ValueError(f"record {problem.get('id', '?')!r} has no 'problem' field "
                       f"(fields: {sorted(problem)})")
    problem = problem["problem"]
  # str.replace, not str.format: problem texts contain braces (LaTeX).
  return template.replace("{problem}", str(problem))


def chat_messages(problem: str | Mapping[str, Any], template: str = MATH_TEMPLATE, *,
                  system: str | None = None) -> list[dict[str, str]]:
  """The message list `[{"role": "system", ...}?, {"role": "user", ...}]` of one prompt."""
  messages = [] if system is None else [{"role": "system", "content": system}]
  messages.append({"role": "user", "content": format_prompt(problem, template)})
  return messages
