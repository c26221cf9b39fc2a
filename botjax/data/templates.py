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

Thinking (reasoning) mode of the paper's three families, from one setting `thinking`
(None = the model's default, True = on, False = off):

| family | default | on | off |
|---|---|---|---|
| SmolLM3 (`smollm3-3b`, `HuggingFaceTB/SmolLM3-3B`) | thinks | `/think` system flag, `enable_thinking=True` | `/no_think` system flag, `enable_thinking=False` |
| Phi-4-mini-reasoning | always thinks (`<think>...</think>`, no switch) | nothing to add | ValueError |
| Qwen2.5, Llama 3.x, `tiny` (everything else) | no think mode | ValueError | nothing to add |

SmolLM3's own chat template reads `enable_thinking` (default true) and lets a `/think` or
`/no_think` in the system message override it; it removes the flag from the system text, and with
thinking off it opens the assistant turn with an empty `<think>\n\n</think>\n` block. The system
flag therefore works wherever the template is applied without extra arguments (the trainer's
`encode_prompts`), and `thinking_kwargs` gives the same switch to callers of `apply_chat_template`.
Phi-4-mini-reasoning's template has no switch; its model card's system prompt ("Your name is Phi,
an AI math expert developed by Microsoft.") comes from the template, not from here.
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


THINK_SWITCHABLE = "switchable"   # a chat-template switch turns reasoning on and off
THINK_ALWAYS = "always"           # the model always reasons in <think>...</think>
THINK_NEVER = "never"             # no think mode

# family -> (thinking mode, lower-case name fragments that identify it). Matched against preset
# names, Hub repo ids and local checkpoint paths; the first family with a matching fragment wins.
THINKING_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "smollm3": (THINK_SWITCHABLE, ("smollm3",)),
    "phi-4-mini-reasoning": (THINK_ALWAYS, ("phi-4-mini-reasoning", "phi4-mini-reasoning")),
}
THINKING_CHOICES = ("auto", "on", "off")


def thinking_family(model: str) -> str | None:
  """The family of `THINKING_FAMILIES` a model name belongs to, or None (no think mode).

  Args:
    model: a preset name (`smollm3-3b`), a Hub repo id (`HuggingFaceTB/SmolLM3-3B`) or a local
      checkpoint path whose name contains the model's name.
  """
  name = str(model).lower()
  for family, (_, fragments) in THINKING_FAMILIES.items():
    if any(f in name for f in fragments):
      return family
  return None


def thinking_mode(model: str) -> str:
  """`THINK_SWITCHABLE`, `THINK_ALWAYS` or `THINK_NEVER` for a model name."""
  family = thinking_family(model)
  return THINK_NEVER if family is None else THINKING_FAMILIES[family][0]


def parse_thinking(value: str | bool | None) -> bool | None:
  """`--thinking` flag value -> None (auto: the model's default), True (on) or False (off)."""
  if value is None or isinstance(value, bool):
    return value
  table = {"auto": None, "on": True, "off": False}
  key = str(value).strip().lower()
  if key not in table:
    raise ValueError(f"thinking={value!r} is not valid; use one of {list(THINKING_CHOICES)}")
  return table[key]


def _families_with(mode: str) -> list[str]:
  return sorted(f for f, (m, _) in THINKING_FAMILIES.items() if m in mode)


def check_thinking(model: str, thinking: bool | None) -> None:
  """Raises ValueError when `model` cannot run with `thinking` (None always passes).

  Thinking on needs a switchable or always-thinking family; thinking off needs a switchable
  family or one with no think mode. The message names the families that can.
  """
  mode = thinking_mode(model)
  if thinking is True and mode == THINK_NEVER:
    raise ValueError(
        f"model {model!r} has no thinking mode, so thinking cannot be turned on; families that "
        f"think: {_families_with((THINK_SWITCHABLE, THINK_ALWAYS))} (use thinking=auto or off)")
  if thinking is False and mode == THINK_ALWAYS:
    raise ValueError(
        f"model {model!r} ({thinking_family(model)}) always reasons in <think>...</think> and has "
        f"no switch to turn it off; families that can: {_families_with((THINK_SWITCHABLE,))} and "
        f"every model without a think mode (use thinking=auto or on)")


def thinking_kwargs(model: str, thinking: bool | None) -> dict[str, Any]:
  """Extra keyword arguments of `tokenizer.apply_chat_template` for a thinking setting.

  Args:
    model: preset name, Hub repo id or checkpoint path (see `thinking_family`).
    thinking: None (the model's default), True or False.

  Returns:
    `{"enable_thinking": thinking}` for a switchable family with thinking set, else `{}`.

  Raises:
    ValueError: the family cannot run with that setting (see `check_thinking`).
  """
  check_thinking(model, thinking)
  if thinking is None or thinking_mode(model) != THINK_SWITCHABLE:
    return {}
  return {"enable_thinking": bool(thinking)}


def thinking_system_flag(model: str, thinking: bool | None) -> str | None:
  """`"/think"` or `"/no_think"` for a switchable family with thinking set, else None."""
  check_thinking(model, thinking)
  if thinking is None or thinking_mode(model) != THINK_SWITCHABLE:
    return None
  return "/think" if thinking else "/no_think"


def chat_messages(problem: str | Mapping[str, Any], template: str = MATH_TEMPLATE, *,
                  system: str | None = None, thinking: bool | None = None,
                  model: str | None = None) -> list[dict[str, str]]:
  """The message list `[{"role": "system", ...}?, {"role": "user", ...}]` of one prompt.

  Args:
    problem: the problem text, or a record with a `problem` field.
    template: a template string with one `{problem}` field, or a key of `TEMPLATES`.
    system: optional system message.
    thinking: None leaves the model's default; True / False turn reasoning on / off. For a
      switchable family (SmolLM3) this appends `/think` / `/no_think` to the system message (a
      system message holding only the flag when `system` is None); other families get no
      message change.
    model: the model name, required when `thinking` is not None (see `thinking_family`).

  Returns:
    The messages for `apply_chat_template`.

  Raises:
    ValueError: `thinking` is set without `model`, or the family cannot run with it.
  """
  if thinking is not None and model is None:
    raise ValueError("chat_messages(thinking=...) needs model= (a preset name, repo id or path)")
  flag = None if thinking is None else thinking_system_flag(model, thinking)
  if flag is not None:
    system = flag if system is None else f"{system.rstrip()} {flag}"
  messages = [] if system is None else [{"role": "system", "content": system}]
  messages.append({"role": "user", "content": format_prompt(problem, template)})
  return messages
