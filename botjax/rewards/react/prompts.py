"""React task prompts: records {id, prompt, category?}, the built-in set, loaders and a split.

The built-in set (`data/prompts.jsonl`) holds 270 single-component requests written for botjax in
the style of the paper's synthetic, WebDev-Arena-like test prompts (BoT-GRPO, arXiv 2610.09804):
16 categories (`CATEGORIES`), 20 prompts each in landing, dashboards, forms, data, commerce and
games and 15 in each of the others. Every request is self-contained: sample data lives in the
component, nothing is fetched, and only react, react-dom and lucide-react may be imported. Ids are
`react-000`..`react-043` for the first 44 requests and `<category>-<NNN>` for the rest.
`data/references/<id>.tsx` holds a short reference solution for 64 of them (four per category),
which tests compile, lint and render with the pinned toolchain.

`split_prompts` holds out 20% by a seeded rule stratified by category (see its docstring): 216
train and 54 test prompts of the built-in set, 12 and 3 or 16 and 4 per category.

Larger sets come from local JSONL/JSON files or from a dataset the `datasets` library can open
offline (a local directory or the HF cache).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

BUILTIN_PATH = pathlib.Path(__file__).resolve().parent / "data" / "prompts.jsonl"
REFERENCES_DIR = BUILTIN_PATH.parent / "references"

# The built-in set's categories: the kinds of UI WebDev-Arena-style request sets cover.
CATEGORIES: dict[str, str] = {
    "landing": "landing pages and marketing sections (heroes, features, testimonials, footers)",
    "dashboards": "dashboards, stat cards and admin layouts",
    "forms": "forms and inputs with validation",
    "data": "data tables, lists, trees, feeds and viewers",
    "navigation": "navigation bars, sidebars, menus, tabs, breadcrumbs and pagination",
    "overlays": "modals, dialogs, drawers, popovers, tooltips and toasts",
    "cards": "cards and galleries",
    "commerce": "pricing tables and e-commerce (products, carts, checkout, orders)",
    "time": "calendars, planners, timers and clocks",
    "games": "small games",
    "calculators": "calculators, converters and generators",
    "charts": "charts drawn with SVG or CSS",
    "editors": "text and editor tools",
    "settings": "settings and profile pages",
    "apps": "small single-screen apps (todo lists, trackers, notes, chat, players)",
    "widgets": "interactive widgets (accordions, carousels, sliders, ratings, pickers)",
}

SYSTEM_PROMPT = (
    "You write single-file React components in TypeScript (TSX), styled with Tailwind CSS "
    "classes. Answer with one ```tsx code block holding the whole component, default-exported "
    "(export default function App() {...}). You may import only from react, react-dom and "
    "lucide-react; keep all data in the file; do not fetch anything from the network.")


@dataclasses.dataclass(frozen=True)
class ReactPrompt:
  """One React task: a unique id, the user request, and an optional category."""
  id: str
  prompt: str
  category: str | None = None

  def to_record(self) -> dict[str, Any]:
    """A plain dict (for PromptDataset, JSON files, metadata)."""
    out = {"id": self.id, "prompt": self.prompt}
    if self.category is not None:
      out["category"] = self.category
    return out


def _validate(raw: Any, where: str) -> ReactPrompt:
  if not isinstance(raw, Mapping):
    raise ValueError(f"{where}: a prompt record must be an object with 'id' and 'prompt', got "
                     f"{type(raw).__name__}")
  missing = [k for k in ("id", "prompt") if k not in raw]
  if missing:
    raise ValueError(f"{where}: missing field(s) {missing}; a record needs 'id' (str) and "
                     f"'prompt' (str), optionally 'category'")
  if not isinstance(raw["prompt"], str) or not raw["prompt"].strip():
    raise ValueError(f"{where}: 'prompt' must be a non-empty string, got {raw['prompt']!r}")
  category = raw.get("category")
  if category is not None and not isinstance(category, str):
    raise ValueError(f"{where}: 'category' must be a string or absent, got {category!r}")
  return ReactPrompt(id=str(raw["id"]), prompt=raw["prompt"], category=category)


def validate_prompts(raws: Iterable[Any], *, source: str = "<records>") -> list[ReactPrompt]:
  """Checks records and makes ReactPrompts.

  Raises:
    ValueError: naming the record, for a missing/empty field or a duplicated id.
  """
  out, seen = [], {}
  for i, raw in enumerate(raws):
    p = _validate(raw, f"{source}: record {i}")
    if p.id in seen:
      raise ValueError(f"{source}: record {i} repeats id {p.id!r} (first at record {seen[p.id]})")
    seen[p.id] = i
    out.append(p)
  return out


def load_prompts_jsonl(path: str | os.PathLike) -> list[ReactPrompt]:
  """Reads a JSONL file of {id, prompt, category?} records (blank lines are skipped)."""
  raws = []
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        raws.append(json.loads(line))
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from e
  return validate_prompts(raws, source=str(path))


def builtin_prompts() -> list[ReactPrompt]:
  """The built-in React prompt set: 270 requests in the 16 `CATEGORIES` (see the module doc)."""
  return load_prompts_jsonl(BUILTIN_PATH)


def reference_solutions() -> dict[str, str]:
  """The built-in set's reference solutions: {prompt id: TSX source} from `data/references/`."""
  return {path.stem: path.read_text(encoding="utf-8")
          for path in sorted(REFERENCES_DIR.glob("*.tsx"))}


def load_hf_prompts(name: str, split: str = "train", *, prompt_field: str = "prompt",
                    id_field: str | None = None, category_field: str | None = None,
                    config_name: str | None = None, limit: int | None = None,
                    prompt_fn: Callable[[Mapping[str, Any]], str] | None = None
                    ) -> list[ReactPrompt]:
  """Loads prompts with `datasets.load_dataset` (a local directory or file set, or the HF cache).

  Args:
    name: a dataset name or a local path `datasets` can open.
    split: the split to read.
    prompt_field: the column holding the request (ignored when `prompt_fn` is given).
    id_field: the column holding a unique id; None numbers the rows "<split>-<i>".
    category_field: an optional column with a category.
    config_name: the dataset configuration.
    limit: keep the first `limit` rows.
    prompt_fn: builds the request from a row (e.g. the first user turn of a conversation).
  """
  try:
    import datasets
  except ImportError as e:
    raise ImportError("load_hf_prompts needs `pip install 'datasets>=5.2,<5.3'`") from e
  ds = datasets.load_dataset(name, config_name, split=split)
  if prompt_fn is None and prompt_field not in ds.column_names:
    raise ValueError(f"{name}[{split}] has no column {prompt_field!r}; columns: {ds.column_names}")
  raws = []
  for i, row in enumerate(ds):
    if limit is not None and i >= limit:
      break
    raws.append({"id": row[id_field] if id_field else f"{split}-{i}",
                 "prompt": prompt_fn(row) if prompt_fn else row[prompt_field],
                 "category": row.get(category_field) if category_field else None})
  return validate_prompts(raws, source=f"{name}[{split}]")


def load_prompts(source: str | os.PathLike | None = None, **hf_kwargs) -> list[ReactPrompt]:
  """Built-in set (None), a .jsonl/.json file, or anything `load_hf_prompts` opens."""
  if source is None:
    return builtin_prompts()
  path = pathlib.Path(source)
  if path.is_file() and path.suffix == ".jsonl":
    return load_prompts_jsonl(path)
  if path.is_file() and path.suffix == ".json":
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
    if not isinstance(data, list):
      raise ValueError(f"{path}: expected a JSON list of prompt records, got {type(data).__name__}")
    return validate_prompts(data, source=str(path))
  return load_hf_prompts(str(source), **hf_kwargs)


def split_prompts(prompts: Sequence[ReactPrompt], *, test_fraction: float = 0.2,
                  seed: int = 0) -> tuple[list[ReactPrompt], list[ReactPrompt]]:
  """Seeded train/test split stratified by category (the paper held out 20%).

  The rule: group the prompts by `category` (prompts without one form a group of their own); rank
  each group's prompts by the SHA-256 digest of `f"{seed}:{id}"`; the first
  `floor(test_fraction * n + 1/2)` of a group of n go to test, the rest to train. So every
  category is split at `test_fraction` up to rounding (15 prompts -> 3 test, 20 -> 4), and:
  - the split depends only on the ids, the categories, `test_fraction` and `seed`, not on the
    order of `prompts`;
  - adding or removing prompts of one category never moves a prompt of another;
  - adding k prompts to a category moves at most k of its earlier prompts between the sides.

  Args:
    prompts: records with unique ids.
    test_fraction: the held-out share of each category, in [0, 1].
    seed: an integer; another seed gives another split with the same sizes.

  Returns:
    (train, test), each in the order of `prompts`.

  Raises:
    ValueError: for a test_fraction outside [0, 1] or a seed that is not an integer.
  """
  if (isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real)
      or not 0.0 <= test_fraction <= 1.0):
    raise ValueError(f"test_fraction must be a number in [0, 1], got {test_fraction!r}")
  if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
    raise ValueError(f"seed must be an integer, got {seed!r}")
  groups: dict[str | None, list[ReactPrompt]] = {}
  for p in prompts:
    groups.setdefault(p.category, []).append(p)
  held_out: set[str] = set()
  for group in groups.values():
    ranked = sorted(group, key=lambda p: hashlib.sha256(f"{seed}:{p.id}".encode()).digest())
    # + 1e-9: halves round up as they do in decimal (0.58 * 25 is 14.499999999999998 in floats)
    n_test = math.floor(float(test_fraction) * len(group) + 0.5 + 1e-9)
    held_out.update(p.id for p in ranked[:n_test])
  train = [p for p in prompts if p.id not in held_out]
  test = [p for p in prompts if p.id in held_out]
  return train, test


def chat_messages(prompt: str | ReactPrompt, *, system: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
  """Chat messages for the policy: the system instructions and the user request."""
  text = prompt.prompt if isinstance(prompt, ReactPrompt) else prompt
  return [{"role": "system", "content": system}, {"role": "user", "content": text}]
