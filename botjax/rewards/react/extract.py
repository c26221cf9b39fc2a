"""Find the React component in a completion and keep its lines tied to the completion's characters.

A completion is prose plus (usually) a fenced code block. The component's line ℓ (0-indexed within
the code) is line `first_line + ℓ` of the completion, and every completion line j covers the
half-open character range `line_spans[j]` (its newline included), so a per-line value becomes a
`(char_start, char_end, value)` span the trainer maps onto tokens.
"""
from __future__ import annotations

import dataclasses
import re

# Languages accepted on a fence, in order of preference when several blocks are present.
CODE_LANGS = ("tsx", "jsx", "typescript", "ts", "javascript", "js", "react")

_FENCE_OPEN = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([A-Za-z0-9_+.-]*)[^\n]*$")
# Bare-code heuristics: a component without fences starts at its first import/export/declaration.
_CODE_START = re.compile(
    r"^\s*(import\s|export\s|\"use client\"|'use client'|(?:async\s+)?function\s+[A-Z]|"
    r"(?:const|let|class)\s+[A-Z]\w*|interface\s|type\s+\w+\s*=)")
_LOOKS_LIKE_REACT = re.compile(r"(from\s+['\"]react['\"]|<[A-Za-z][^>]*>|\breturn\s*\(|React\.)")


@dataclasses.dataclass(frozen=True)
class ExtractedCode:
  """A component cut out of a completion.

  Attributes:
    code: the component source (no fences), lines joined by "\\n".
    first_line: index (0-based) of the completion line holding code line 0.
    num_lines: number of code lines (code.split("\\n") minus a trailing empty line).
    fenced: True when the code came from a fenced block.
    lang: the fence's language tag ("" when none or bare code).
    line_spans: (char_start, char_end) of every completion line, newline included, half-open.
  """
  code: str
  first_line: int
  num_lines: int
  fenced: bool
  lang: str
  line_spans: tuple[tuple[int, int], ...]

  def completion_line(self, code_line: int) -> int:
    """Completion line index of code line `code_line` (0-based)."""
    if not 0 <= code_line < max(self.num_lines, 1):
      raise ValueError(f"code line {code_line} is outside the component's {self.num_lines} lines")
    return self.first_line + code_line

  def code_line_span(self, code_line: int) -> tuple[int, int]:
    """(char_start, char_end) in the completion of code line `code_line` (0-based)."""
    return self.line_spans[self.completion_line(code_line)]


def line_spans(text: str) -> tuple[tuple[int, int], ...]:
  """Half-open character spans of the lines of `text`, each including its trailing newline.

  The last line may be empty ("a\\n" has lines "a\\n" and ""): every character belongs to exactly
  one line, and `len(line_spans(t)) == t.count("\\n") + 1`.
  """
  spans, start = [], 0
  for i, ch in enumerate(text):
    if ch == "\n":
      spans.append((start, i + 1))
      start = i + 1
  spans.append((start, len(text)))
  return tuple(spans)


def _fenced_blocks(lines: list[str]) -> list[tuple[int, int, str]]:
  """(first code line, end line exclusive, lang) of every fenced block; an unclosed fence runs to
  the end of the text (a truncated completion)."""
  blocks, i = [], 0
  while i < len(lines):
    m = _FENCE_OPEN.match(lines[i])
    if not m:
      i += 1
      continue
    fence, lang = m.group(1), m.group(2).lower()
    close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
    j = i + 1
    while j < len(lines) and not close.match(lines[j]):
      j += 1
    blocks.append((i + 1, j, lang))
    i = j + 1
  return blocks


def extract_component(completion: str) -> ExtractedCode | None:
  """Cuts the component out of a completion: a fenced block, or bare TSX.

  Among fenced blocks the first tagged tsx/jsx/ts/js (in `CODE_LANGS` order) wins, else the
  longest untagged one. Without fences, the code runs from the first line that starts an import,
  export or capitalised declaration to the end, if the text looks like React at all.

  Args:
    completion: the decoded completion string.

  Returns:
    ExtractedCode, or None when no code can be found (prose only, or an empty block).
  """
  if not isinstance(completion, str):
    raise TypeError(f"completion must be a str, got {type(completion).__name__}")
  spans = line_spans(completion)
  lines = [completion[a:b].rstrip("\n") for a, b in spans]
  blocks = _fenced_blocks(lines)
  chosen = None
  for lang in CODE_LANGS:
    chosen = next((b for b in blocks if b[2] == lang and b[1] > b[0]), None)
    if chosen:
      break
  if chosen is None:
    untagged = [b for b in blocks if b[2] == "" and b[1] > b[0]]
    if untagged:
      chosen = max(untagged, key=lambda b: b[1] - b[0])
  if chosen is not None:
    start, end, lang = chosen
    fenced = True
  else:
    if blocks or not _LOOKS_LIKE_REACT.search(completion):
      return None
    start = next((i for i, line in enumerate(lines) if _CODE_START.match(line)), None)
    if start is None:
      return None
    end, lang, fenced = len(lines), "", False
    while end > start and not lines[end - 1].strip():
      end -= 1
  code = "\n".join(lines[start:end])
  if not code.strip():
    return None
  return ExtractedCode(code=code, first_line=start, num_lines=end - start, fenced=fenced,
                       lang=lang, line_spans=spans)
