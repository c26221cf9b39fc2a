"""React prompt sets, compile rate, JSON results and the Figure 1/2 style plots."""
import collections
import hashlib
import json
import math
from fractions import Fraction

import hypothesis
import pytest
from hypothesis import strategies as st
from PIL import Image

from botjax import plotting
from botjax.rewards.base import RewardResult
from botjax.rewards.react import evaluate as ev
from botjax.rewards.react import prompts as pr
from botjax.rewards.react.render import RenderResult
from botjax.rewards.react.reward import ReactScore
from botjax.rewards.react.toolchain import CompileResult


def test_builtin_prompt_set():
  ps = pr.builtin_prompts()
  assert len(ps) == 270 and len({p.id for p in ps}) == 270   # the module docstring's figures
  assert {p.category for p in ps} == set(pr.CATEGORIES) and len(pr.CATEGORIES) == 16
  assert all(len(p.prompt) > 40 for p in ps)
  assert pr.load_prompts() == ps
  msgs = pr.chat_messages(ps[0])
  assert msgs[0]["role"] == "system" and "tsx" in msgs[0]["content"]
  assert msgs[1] == {"role": "user", "content": ps[0].prompt}


def _rule(prompts, fraction, seed):
  """The documented split rule written out on its own: per category, rank the ids by
  SHA-256(f"{seed}:{id}") and hold out the first floor(fraction * n + 1/2), in exact arithmetic."""
  groups = collections.defaultdict(list)
  for p in prompts:
    groups[p.category].append(p.id)
  held_out = set()
  for ids in groups.values():
    ranked = sorted(ids, key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
    held_out |= set(ranked[:math.floor(Fraction(str(fraction)) * len(ids) + Fraction(1, 2))])
  return held_out


def test_builtin_split_is_80_20_in_every_category():
  ps = pr.builtin_prompts()
  train, test = pr.split_prompts(ps, test_fraction=0.2)
  assert (len(train), len(test)) == (216, 54)                  # the module docstring's figures
  assert {p.id for p in test} == _rule(ps, 0.2, 0)
  sizes = collections.Counter(p.category for p in ps)
  held = collections.Counter(p.category for p in test)
  for category, n in sizes.items():
    assert held[category] == n // 5 and n % 5 == 0, (category, n, held[category])
  assert sorted(train + test, key=ps.index) == ps and not set(train) & set(test)
  assert pr.split_prompts(ps) == (train, test)                 # defaults: 0.2, seed 0
  other = pr.split_prompts(ps, test_fraction=0.2, seed=1)[1]
  assert collections.Counter(p.category for p in other) == held and other != test


def test_split_is_stable_when_prompts_are_added():
  ps = pr.builtin_prompts()
  _, test = pr.split_prompts(ps, test_fraction=0.2)
  # a new category, or more prompts in one category, never moves a prompt of another category
  new = [pr.ReactPrompt(f"maps-{i:03d}", "A map widget.", "maps") for i in range(10)]
  more_games = [pr.ReactPrompt(f"games-{i:03d}", "A puzzle.", "games") for i in range(100, 107)]
  for extra in (new, more_games):
    test2 = pr.split_prompts(ps + extra, test_fraction=0.2)[1]
    touched = {p.category for p in extra}
    assert ([p for p in test2 if p.category not in touched]
            == [p for p in test if p.category not in touched])
  old_games = {p.id for p in ps if p.category == "games"}
  moved = ({p.id for p in test if p.id in old_games}
           ^ {p.id for p in pr.split_prompts(ps + more_games)[1] if p.id in old_games})
  assert len(moved) <= len(more_games)


@hypothesis.given(
    categories=st.lists(st.sampled_from(["a", "b", "c", None]), max_size=40),
    fraction=st.integers(0, 100).map(lambda k: k / 100), seed=st.integers(0, 2**40),
    added=st.integers(0, 6), order=st.randoms(use_true_random=False))
def test_split_rule_properties(categories, fraction, seed, added, order):
  ps = [pr.ReactPrompt(f"p{i}", f"Request {i}.", c) for i, c in enumerate(categories)]
  train, test = pr.split_prompts(ps, test_fraction=fraction, seed=seed)
  assert {p.id for p in test} == _rule(ps, fraction, seed)
  # disjoint, covering, each side in input order
  assert train == [p for p in ps if p not in test] and test == [p for p in ps if p in test]
  # the sides depend on the ids, not on the order of the input
  shuffled = list(ps)
  order.shuffle(shuffled)
  train2, test2 = pr.split_prompts(shuffled, test_fraction=fraction, seed=seed)
  assert {p.id for p in test2} == {p.id for p in test}
  # adding k prompts to category "a" moves at most k of its earlier prompts, and no other prompt
  extra = [pr.ReactPrompt(f"new{i}", "More.", "a") for i in range(added)]
  test3 = {p.id for p in pr.split_prompts(ps + extra, test_fraction=fraction, seed=seed)[1]}
  old = {p.id for p in test}
  moved = {p.id for p in ps if (p.id in old) != (p.id in test3)}
  assert len(moved) <= added and all(p.category == "a" for p in ps if p.id in moved)


def test_split_edges_and_errors():
  ps = pr.builtin_prompts()
  assert pr.split_prompts(ps, test_fraction=0.0) == (ps, [])
  assert pr.split_prompts(ps, test_fraction=1.0) == ([], ps)
  assert pr.split_prompts([], test_fraction=0.2) == ([], [])
  # halves round up as in exact arithmetic, though 0.58 * 25 is 14.499999999999998 in floats
  for fraction, n, held_out in [(0.58, 25, 15), (0.7, 45, 32), (0.5, 1, 1), (0.5, 3, 2)]:
    same = [pr.ReactPrompt(f"x{i}", "A clock.", "time") for i in range(n)]
    assert len(pr.split_prompts(same, test_fraction=fraction)[1]) == held_out, (fraction, n)
  for bad in (1.5, -0.1, float("nan"), "0.2", None, True):
    with pytest.raises(ValueError, match=r"test_fraction must be a number in \[0, 1\], got"):
      pr.split_prompts(ps, test_fraction=bad)
  for bad in (1.5, "0", None, False):
    with pytest.raises(ValueError, match="seed must be an integer, got"):
      pr.split_prompts(ps, seed=bad)


def test_jsonl_loading_and_errors(tmp_path):
  good = tmp_path / "p.jsonl"
  good.write_text('{"id": "a", "prompt": "A clock."}\n\n{"id": 2, "prompt": "A timer.", '
                  '"category": "utilities"}\n')
  assert pr.load_prompts(good) == [pr.ReactPrompt("a", "A clock."),
                                   pr.ReactPrompt("2", "A timer.", "utilities")]
  cases = [('{"id": "a"}\n', "missing field"), ('{"id": "a", "prompt": ""}\n', "non-empty"),
           ('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n', "repeats id 'a'"),
           ('{"id": "a", "prompt": "x"\n', ":1: not valid JSON"),
           ('{"id": "a", "prompt": "x", "category": 3}\n', "category")]
  for i, (text, message) in enumerate(cases):
    path = tmp_path / f"bad{i}.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
      pr.load_prompts_jsonl(path)
  js = tmp_path / "p.json"
  js.write_text(json.dumps([{"id": "x", "prompt": "A form."}]))
  assert pr.load_prompts(js) == [pr.ReactPrompt("x", "A form.")]
  js.write_text(json.dumps({"id": "x"}))
  with pytest.raises(ValueError, match="JSON list"):
    pr.load_prompts(js)


def test_hf_loader_reads_a_local_dataset(tmp_path):
  rows = [{"instruction": f"Build widget {i}.", "uid": f"w{i}", "kind": "misc"} for i in range(5)]
  (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  ps = pr.load_hf_prompts(str(tmp_path), prompt_field="instruction", id_field="uid",
                          category_field="kind", limit=3)
  assert ps == [pr.ReactPrompt(f"w{i}", f"Build widget {i}.", "misc") for i in range(3)]
  ps = pr.load_prompts(str(tmp_path), prompt_fn=lambda r: r["instruction"].upper())
  assert ps[4] == pr.ReactPrompt("train-4", "BUILD WIDGET 4.")
  with pytest.raises(ValueError, match="no column 'prompt'"):
    pr.load_hf_prompts(str(tmp_path))


def _score(compiled_ok, rendered_ok, blank=False):
  comp = CompileResult(ok=compiled_ok)
  rend = RenderResult(ok=rendered_ok, blank=blank) if compiled_ok else None
  return ReactScore(RewardResult(reward=0.0), None, comp, rend, None, None, {})


def test_compile_rate_counts_blank_pages_and_visible_rate_does_not():
  items = [_score(True, True), _score(True, True, blank=True), _score(True, False),
           _score(False, False), _score(True, True)]
  # the paper's compile rate (App. C): transpiles and renders, a blank page included
  assert ev.compile_rate(items) == 3 / 5
  assert ev.visible_rate(items) == 2 / 5
  assert [it.compiles_and_renders for it in items] == [True, True, False, False, True]
  assert [it.renders_visible for it in items] == [True, False, False, False, True]
  assert ev.compile_rate([True, False, False, False]) == 0.25
  for fn in (ev.compile_rate, ev.visible_rate):
    with pytest.raises(ValueError, match="at least one"):
      fn([])


def test_json_and_plots(tmp_path):
  runs = {"BoT-GRPO": [(0, 0.1), (20, 0.6), (40, 0.85)], "GRPO": [(0, 0.1), (40, 0.5), (20, 0.3)]}
  wr = {"vs GRPO": ev.win_rate([1.0, 1.0, 0.5, 0.0]), "vs DAPO": ev.win_rate([1.0, 0.5])}
  ev.save_json({"compile": runs, "win": wr}, tmp_path / "out" / "eval.json")
  back = json.loads((tmp_path / "out" / "eval.json").read_text())
  assert back["win"]["vs GRPO"]["win_rate"] == 0.625 and back["compile"]["GRPO"][2] == [20, 0.3]
  plotting.plot_compile_rate(runs, tmp_path / "fig1.png")
  plotting.plot_win_rates(wr, tmp_path / "fig2.png")
  for name in ("fig1.png", "fig2.png"):
    with Image.open(tmp_path / name) as img:
      assert img.format == "PNG" and img.size[0] > 300 and img.size[1] > 300
      assert len(img.convert("RGB").getcolors(maxcolors=1 << 20)) > 10  # something was drawn


def test_win_rate_curve_plot(tmp_path):
  from botjax import plotting
  # per-checkpoint ABBA outcomes against a fixed baseline -> (step, win rate, tie rate)
  outcomes = {0: [0.0, 0.5, 0.0, 0.5], 10: [1.0, 0.5, 0.0, 0.5], 20: [1.0, 1.0, 0.5, 1.0]}
  points = []
  for step, out in outcomes.items():
    r = ev.win_rate(out)
    wins, ties = sum(o == 1.0 for o in out), sum(o == 0.5 for o in out)
    assert r["win_rate"] == (wins + 0.5 * ties) / 4 and r["tie_rate"] == ties / 4
    points.append((step, r["win_rate"], r["tie_rate"]))
  assert points == [(0, 0.25, 0.5), (10, 0.5, 0.5), (20, 0.875, 0.25)]
  path = plotting.plot_win_rate_curve({"bot_grpo": points}, tmp_path / "curve.png")
  with Image.open(path) as img:
    assert img.format == "PNG" and img.size[0] > 300 and img.size[1] > 300
    assert len(img.convert("RGB").getcolors(maxcolors=1 << 20)) > 10
  with pytest.raises(plotting.PlotError, match="no win-rate points"):
    plotting.plot_win_rate_curve({"bot_grpo": []}, tmp_path / "empty.png")
  with pytest.raises(plotting.PlotError, match="must lie in"):
    plotting.plot_win_rate_curve({"bot_grpo": [(0, 1.5, 0.0)]}, tmp_path / "bad.png")
