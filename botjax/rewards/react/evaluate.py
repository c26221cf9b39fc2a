"""Held-out evaluation of React policies: compile rate and the pairwise (ABBA) VLM win rate.

compile rate = (1/N) Σ_i 1[rollout i transpiles and renders]   (a blank page counts, as in the
                paper's App. C)
visible rate = (1/N) Σ_i 1[rollout i transpiles and renders something visible]   (stricter)
ABBA outcome of a prompt: four verdicts in the orders AB, BA, BA, AB; a 3–1 or 4–0 majority gives
1 to the winner and 0 to the loser, a 2–2 split gives 0.5 to each (unanswered rounds vote for
nobody, and the side with more votes wins); win rate = mean outcome over prompts, tie rate =
fraction of prompts at 0.5 (`botjax.metrics.abba_outcomes`). Results are plain dicts
(JSON-ready); the figures of these results (Figure 1, `plot_compile_rate`; Figure 2,
`plot_win_rates`) are drawn by `botjax.plotting`.

References:
  BoT-GRPO (Yang et al.), §4.1, Figures 1–2 (no arXiv id found).
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from botjax import metrics
from botjax.rewards.react.judges import PairwiseJudge
from botjax.rewards.react.reward import ReactReward, ReactScore


def win_rate(outcomes: Sequence[float]) -> dict[str, float]:
  """Win rate (ties count 0.5), tie rate and counts of a list of per-prompt outcomes."""
  n = len(outcomes)
  wins = sum(1 for o in outcomes if o == 1.0)
  losses = sum(1 for o in outcomes if o == 0.0)
  ties = sum(1 for o in outcomes if o == 0.5)
  if wins + losses + ties != n:
    raise ValueError(f"outcomes must be 0.0, 0.5 or 1.0, got {sorted(set(outcomes))}")
  return {"win_rate": (wins + 0.5 * ties) / n if n else 0.0, "tie_rate": ties / n if n else 0.0,
          "wins": wins, "losses": losses, "ties": ties, "n": n}


def _fraction(items: Sequence[ReactScore | bool], attribute: str) -> float:
  """Fraction of N items that are true: a ReactScore's `attribute`, or a boolean as it is."""
  return metrics.compile_rate([getattr(it, attribute) if isinstance(it, ReactScore) else bool(it)
                               for it in items])


def compile_rate(items: Sequence[ReactScore | bool]) -> float:
  """Fraction of N rollouts (ReactScores or booleans) that transpile and render, a blank page
  included (BoT-GRPO, arXiv 2610.09804, §4.1 and App. C), by `botjax.metrics.compile_rate`;
  ValueError for an empty list."""
  return _fraction(items, "compiles_and_renders")


def visible_rate(items: Sequence[ReactScore | bool]) -> float:
  """Fraction of N rollouts (ReactScores or booleans) that transpile and render something
  visible (not a blank page): the stricter companion of `compile_rate`; ValueError for an empty
  list."""
  return _fraction(items, "renders_visible")


def evaluate_compile_rate(reward: ReactReward, prompts: Sequence[str],
                          completions: Sequence[str]) -> dict[str, Any]:
  """Compiles and renders every completion (N of them).

  Returns:
    {"compile_rate": `compile_rate`, "visible_rate": `visible_rate`, "n": N, "items": N dicts
     {"ok": compiles and renders, "visible": and not blank, "reason": why not ok, "blank page"
     for an ok but blank item, None for a visible one}}.
  """
  scores = reward.score(prompts, completions)
  per_item = []
  for s in scores:
    reason = None
    if not s.compiles_and_renders:
      if s.extracted is None:
        reason = "no component"
      elif not s.compiled.ok:
        reason = "compile: " + "; ".join(d.message for d in s.compiled.diagnostics[:2])
      else:
        reason = "render: " + str(s.rendered.error if s.rendered else "not rendered")
    elif not s.renders_visible:
      reason = "blank page"
    per_item.append({"ok": s.compiles_and_renders, "visible": s.renders_visible, "reason": reason})
  return {"compile_rate": compile_rate(scores), "visible_rate": visible_rate(scores),
          "n": len(scores), "items": per_item}


def pairwise_win_rate(judge: PairwiseJudge, prompts: Sequence[str],
                      shots_a: Sequence[bytes | None],
                      shots_b: Sequence[bytes | None]) -> dict[str, Any]:
  """ABBA pairwise VLM win rate of checkpoint A over checkpoint B on held-out prompts.

  Args:
    judge: the pairwise VLM judge.
    prompts: N requests.
    shots_a, shots_b: N screenshots (PNG) of each checkpoint's rollout, None where it failed.

  Returns:
    {"win_rate", "tie_rate", "wins", "losses", "ties", "n", "verdicts": N lists of 4,
     "outcomes": N floats}.
  """
  if not len(prompts) == len(shots_a) == len(shots_b):
    raise ValueError(f"need one screenshot per prompt and checkpoint, got {len(prompts)} prompts, "
                     f"{len(shots_a)} and {len(shots_b)} screenshots")
  verdicts = judge.client.map(lambda x: judge.compare(*x), list(zip(prompts, shots_a, shots_b)))
  letters = [[None if v is None else "A" if v >= 0.5 else "B" for v in rounds]
             for rounds in verdicts]
  outcomes = metrics.abba_outcomes(letters, labels="model").tolist()
  return {**win_rate(outcomes), "verdicts": verdicts, "outcomes": outcomes}


def save_json(obj: Any, path: str | os.PathLike) -> None:
  """Writes `obj` as indented JSON (creating the directory)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=2, sort_keys=True)
