"""The built-in React prompt set: its size, ids, categories and balance, that it is self-contained,
and that every prompt is achievable with the pinned toolchain: its reference solution, or a stub
that follows the prompt's contract (`export default function App`), transpiles (esbuild), lints
without errors (ESLint) and renders a visible page in headless Chromium.

The default suite checks every reference solution (four per category) and one stub; the whole
set (and `tsc --strict` on the references) is a slow test.
"""
import collections
import json
import re

import pytest

from botjax.rewards.react import prompts as pr
from botjax.rewards.react import render as R
from botjax.rewards.react import toolchain as tc
from _util import load_experiment

PROMPTS = pr.builtin_prompts()
BY_ID = {p.id: p for p in PROMPTS}
REFERENCES = pr.reference_solutions()
# Balance: every category holds at least MIN_PER_CATEGORY prompts (so its 20% test share is at
# least 3) and the largest at most MAX_RATIO times the smallest.
MIN_PER_CATEGORY = 15
MAX_RATIO = 1.5


def test_size_ids_and_categories():
  assert len(PROMPTS) >= 250
  assert len(BY_ID) == len(PROMPTS), "ids must be unique"
  assert {p.category for p in PROMPTS} == set(pr.CATEGORIES)
  for p in PROMPTS:
    assert p.category in pr.CATEGORIES, p
    # the first 44 requests keep their ids; the others are named after their category
    assert re.fullmatch(rf"react-0[0-4]\d|{p.category}-\d{{3}}", p.id), p.id
    assert 80 <= len(p.prompt) <= 300 and p.prompt == p.prompt.strip(), p.id
  assert {f"react-{i:03d}" for i in range(44)} <= set(BY_ID)
  assert len({p.prompt for p in PROMPTS}) == len(PROMPTS), "a request appears twice"


def test_categories_are_balanced():
  counts = collections.Counter(p.category for p in PROMPTS)
  assert min(counts.values()) >= MIN_PER_CATEGORY, counts
  assert max(counts.values()) <= MAX_RATIO * min(counts.values()), counts


def test_prompts_are_self_contained():
  url = re.compile(r"://|\bdata:\w+/|\bwww\.|\b\w+\.(?:com|org|net|io|dev|app)\b", re.IGNORECASE)
  fetching = re.compile(r"\b(?:fetch\w*|api|apis|endpoint|url|urls|download from|load(?:ed|s)? "
                        r"from|unsplash|picsum|placeholder\.com)\b", re.IGNORECASE)
  # packages a request might name that the policy may not import (SYSTEM_PROMPT allows react,
  # react-dom and lucide-react)
  packages = re.compile(r"\b(?:recharts|chart\.js|d3|framer|axios|lodash|moment\.js|dayjs|"
                        r"react-router|redux|zustand|three\.js|shadcn|mui|antd|bootstrap)\b",
                        re.IGNORECASE)
  for bad, pattern in [("a hero image from https://images.example/a.png", url),
                       ("photos from www.example.org", url),
                       ("fetch the rates from an API", fetching),
                       ("a chart drawn with Recharts", packages)]:
    assert pattern.search(bad), bad
  for p in PROMPTS:
    for pattern in (url, fetching, packages):
      assert not pattern.search(p.prompt), (p.id, pattern.search(p.prompt).group(0))
  assert "do not fetch anything from the network" in pr.SYSTEM_PROMPT


def test_reference_solutions():
  assert len(REFERENCES) >= 60
  assert set(REFERENCES) <= set(BY_ID), set(REFERENCES) - set(BY_ID)
  per_category = collections.Counter(BY_ID[i].category for i in REFERENCES)
  assert set(per_category) == set(pr.CATEGORIES), per_category
  allowed = set(tc.ALLOWED_MODULES)
  for pid, code in REFERENCES.items():
    assert "export default function App()" in code, pid
    imported = set(re.findall(r"^import\b[^;]*?from\s+'([^']+)'", code, re.MULTILINE))
    assert imported <= allowed, (pid, imported - allowed)
    assert not re.search(r"https?://|\bfetch\(|XMLHttpRequest|WebSocket", code), pid


def _react_script():
  """experiments/react.py as a module."""
  return load_experiment("react")


def test_every_prompt_fits_the_tiny_runs_prompt_budget(tmp_path):
  # `experiments/react.py --model=tiny` rejects a chat prompt longer than its rollout's
  # max_prompt_tokens under the tokenizer the testbed trains on its warm-start corpus
  from botjax import data as data_lib
  from botjax.testbeds import react_tiny

  react = _react_script()
  react.FLAGS(["react.py", "--model=tiny", f"--workdir={tmp_path / 'run'}"])
  budget = react.train_config(tiny=True).rollout.max_prompt_tokens
  setup = react_tiny.TinyReactSetup()
  train, _ = pr.split_prompts(PROMPTS, test_fraction=setup.test_fraction)
  _, corpus = react_tiny.warm_start_corpus(PROMPTS, [p.to_record() for p in train], setup)
  tok = data_lib.build_tokenizer(tmp_path / "tok", corpus, vocab_size=setup.vocab_size)
  lengths = {p.id: len(tok.apply_chat_template(pr.chat_messages(p), add_generation_prompt=True,
                                                tokenize=True, return_dict=False))
             for p in PROMPTS}
  longest = max(lengths, key=lengths.get)
  assert lengths[longest] <= budget, (longest, lengths[longest], budget)


def stub_component(prompt: pr.ReactPrompt) -> str:
  """A trivial component that follows the prompt's contract: default-exported App, Tailwind
  classes, the request shown as text."""
  return f"""export default function App() {{
  const request = {json.dumps(prompt.prompt)};
  return (
    <main className="min-h-screen bg-slate-50 p-8">
      <h1 className="text-2xl font-bold text-slate-900">{{{json.dumps(prompt.category)}}}</h1>
      <p className="mt-4 max-w-2xl text-slate-700">{{request}}</p>
    </main>
  );
}}
"""


@pytest.fixture(scope="module")
def toolchain():
  """One toolchain worker pool and one browser for the module."""
  # generous limits: on a loaded 2-core machine good pages must not time out
  with tc.NodePool(size=2, timeout_s=60) as pool, \
       R.Renderer(concurrency=2, timeout_s=20.0, settle_ms=100) as renderer:
    yield pool, renderer


def items_for(ids):
  """(id, source, text the page must show) of each prompt: its reference solution (any visible
  text), else the stub (the request's first words)."""
  return [(i, REFERENCES[i], None) if i in REFERENCES
          else (i, stub_component(BY_ID[i]), BY_ID[i].prompt[:40]) for i in ids]


def check(toolchain, items, *, typecheck=False):
  """Compiles, lints and renders each (label, source, needle) in one batch; returns the failures:
  a compile error, an ESLint error (fatal or error), a tsc diagnostic (`typecheck`), a page that
  fails, shows nothing, logs a console error, or lacks `needle` in its text."""
  pool, renderer = toolchain
  compiled = pool.check([src for _, src, _ in items], lint=True, bundle=True, css=True,
                        typecheck=typecheck)
  failures = []
  for (label, _, _), c in zip(items, compiled):
    if not c.ok:
      failures.append((label, "compile", [d.message for d in c.diagnostics[:3]]))
    bad_lint = [(m.line + 1, m.rule, m.message) for m in c.lint if m.severity != "warning"]
    if bad_lint:
      failures.append((label, "lint", bad_lint[:3]))
    tsc = [(d.line + 1, d.message) for d in c.diagnostics if d.source == "tsc"]
    if tsc:
      failures.append((label, "tsc", tsc[:3]))
  built = [(item, c) for item, c in zip(items, compiled) if c.ok]
  pages = [renderer.page(c.bundle, c.css, [pool.vendor(v) for v in c.vendors]) for _, c in built]
  for ((label, _, needle), _), r in zip(built, renderer.render(pages)):
    if not r.visible or r.console_errors or not r.text.strip():
      failures.append((label, "render", r.error, r.blank, r.console_errors[:2]))
    elif needle is not None and needle not in r.text:
      failures.append((label, "render", f"{needle!r} is not on the page", r.text[:200]))
  return failures


def default_sample():
  """The first reference solution (by id) of every category and the first stub; the stubs differ
  only in their text, and the slow test renders every prompt and every reference."""
  first_ref = {}
  for i in sorted(REFERENCES):
    first_ref.setdefault(BY_ID[i].category, i)
  first_stub = min(p.id for p in PROMPTS if p.id not in REFERENCES)
  return sorted(first_ref.values()) + [first_stub]


def test_default_sample_covers_every_category():
  ids = default_sample()
  assert len(ids) == len(set(ids)) == len(pr.CATEGORIES) + 1
  assert {BY_ID[i].category for i in ids if i in REFERENCES} == set(pr.CATEGORIES)
  assert any(i not in REFERENCES for i in ids)


def test_sample_compiles_lints_and_renders(toolchain):
  failures = check(toolchain, items_for(default_sample()))
  assert not failures, failures


@pytest.mark.slow   # the whole set, and tsc --strict on the references: minutes on 2 cores
def test_every_prompt_compiles_lints_and_renders(toolchain):
  ids = [p.id for p in PROMPTS]
  failures = check(toolchain, items_for(ids))
  failures += check(toolchain, [(i, REFERENCES[i], None) for i in sorted(REFERENCES)],
                    typecheck=True)
  assert not failures, failures


def test_the_check_catches_broken_components(toolchain):
  # each kind of failure the check must report, batched with a good stub
  stub = items_for([default_sample()[-1]])[0]

  def app(body):
    return "export default function App() {\n" + body + "\n}"

  items = [
      ("compile", app("  return <div>;"), None),
      ("lint", app("  const unused = 1;\n  return <p>x</p>;"), None),
      ("blank", app("  return <div />;"), None),
      ("throws", app("  throw new Error('no');"), None),
      ("console", app("  console.error('bad');\n  return <p>x</p>;"), None),
      ("off-topic", app("  return <p>Hello</p>;"), stub[2]),
      stub,
      ("tsc", app("  const n: number = 'one';\n  return <p>{n}</p>;"), None),
  ]
  kinds = collections.defaultdict(set)
  failures = check(toolchain, items[:-1]) + check(toolchain, items[-1:], typecheck=True)
  for label, kind, *_ in failures:
    kinds[label].add(kind)
  # a syntax error is also ESLint's fatal parsing error
  assert kinds == {"compile": {"compile", "lint"}, "lint": {"lint"}, "blank": {"render"},
                   "throws": {"render"}, "console": {"render"}, "off-topic": {"render"},
                   "tsc": {"tsc"}}, dict(kinds)
