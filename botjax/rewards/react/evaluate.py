"""Held-out evaluation of React policies: compile rate and the pairwise (ABBA) VLM win rate.

compile rate = (1/N) Σ_i 1[rollout i transpiles and renders]   (a blank page counts, as in the
                paper's App. C)
visible rate = (1/N) Σ_i 1[rollout i transpiles and renders something visible]   (stricter)
ABBA outcome of a prompt: four verdicts in the orders AB, BA, BA, AB; a 3–1 or 4–0 majority gives
1 to the winner and 0 to the loser, a 2–2 split gives 0.5 to each (unanswered rounds vote for
nobody, and the side with more votes wins); win rate = mean outcome over prompts, tie rate =
fraction of prompts at 0.5. Results are plain dicts (JSON-ready); the plots follow the paper's
Figure 1 (compile rate against step, one line per run) and Figure 2 (win-rate bars with ties).

References:
  BoT-GRPO (Yang et al.), §4.1, Figures 1–2 (no arXiv id found).
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from botjax import metrics
from botjax.rewards.react.judges import PairwiseJudge
from botjax.rewards.react.reward import ReactReward, ReactScore


def abba_outcome(verdicts: Sequence[float | None]) -> float:
  """Outcome for side A of one prompt's rounds: 1.0 (majority for A), 0.0 (for B), 0.5 (tie).

  Args:
    verdicts: per round 1.0 (A won), 0.0 (B won) or None (no answer); usually four (ABBA).
  """
  a = sum(1 for v in verdicts if v is not None and v >= 0.5)
  b = sum(1 for v in verdicts if v is not None and v < 0.5)
  if a == b:
    return 0.5
  return 1.0 if a > b else 0.0


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


def compile_rate(items: Sequence[ReactScore | bool]) -> float:
  """Fraction of rollouts that transpile and render, a blank page included (BoT-GRPO, arXiv
  2610.09804, §4.1 and App. C), by `botjax.metrics.compile_rate`.

  Args:
    items: N ReactScores (`compiles_and_renders` is read) or N booleans.

  Raises:
    ValueError: for an empty list.
  """
  ok = [it.compiles_and_renders if isinstance(it, ReactScore) else bool(it) for it in items]
  return metrics.compile_rate(ok)


def visible_rate(items: Sequence[ReactScore | bool]) -> float:
  """Fraction of rollouts that transpile and render something visible (not a blank page): the
  stricter companion of `compile_rate`.

  Args:
    items: N ReactScores (`renders_visible` is read) or N booleans.

  Raises:
    ValueError: for an empty list.
  """
  ok = [it.renders_visible if isinstance(it, ReactScore) else bool(it) for it in items]
  return metrics.compile_rate(ok)


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
  outcomes = [abba_outcome(v) for v in verdicts]
  out = {**win_rate(outcomes), "verdicts": verdicts, "outcomes": outcomes}
  if verdicts and all(v is not None for rounds in verdicts for v in rounds):
    # Every round answered: the shared metric gives the rates (the local rule agrees with it).
    letters = [["A" if v >= 0.5 else "B" for v in rounds] for rounds in verdicts]
    out["win_rate"], out["tie_rate"] = metrics.abba_win_rate(letters, labels="model")
  return out


def save_json(obj: Any, path: str | os.PathLike) -> None:
  """Writes `obj` as indented JSON (creating the directory)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=2, sort_keys=True)


def plot_compile_rate(runs: Mapping[str, Sequence[tuple[int, float]]], path: str | os.PathLike, *,
                      threshold: float | None = 0.8, title: str = "Compile rate") -> None:
  """Figure 1 style: compile rate against training step, one line per run.

  Args:
    runs: run name -> (step, compile rate) points.
    path: output image (.png, .pdf, .svg).
    threshold: a dashed horizontal reference line (the paper's 80%), or None.
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6.4, 4.0))
  for name, points in runs.items():
    points = sorted(points)
    ax.plot([s for s, _ in points], [100 * r for _, r in points], marker="o", ms=3, label=name)
  if threshold is not None:
    ax.axhline(100 * threshold, ls="--", c="gray", lw=1)
  ax.set_xlabel("training step")
  ax.set_ylabel("compile rate (%)")
  ax.set_ylim(0, 100)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=150)
  plt.close(fig)


def plot_win_rates(results: Mapping[str, Mapping[str, float]], path: str | os.PathLike, *,
                   title: str = "Pairwise win rate") -> None:
  """Figure 2 style: one bar per comparison, its win rate split into outright wins and ties.

  Args:
    results: comparison label (e.g. "vs GRPO") -> a `pairwise_win_rate`/`win_rate` dict.
    path: output image.
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  labels = list(results)
  wins = [100 * r["wins"] / max(r["n"], 1) for r in results.values()]
  ties = [100 * 0.5 * r["tie_rate"] for r in results.values()]
  fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(labels), 4.0))
  x = range(len(labels))
  ax.bar(x, wins, color="tab:blue", label="wins")
  ax.bar(x, ties, bottom=wins, color="tab:blue", alpha=0.35, hatch="//", label="ties (0.5 each)")
  for i, r in enumerate(results.values()):
    ax.text(i, 100 * r["win_rate"] + 1.5, f"{100 * r['win_rate']:.0f}%\n(ties {100 * r['tie_rate']:.0f}%)",
            ha="center", va="bottom", fontsize=8)
  ax.axhline(50, ls="--", c="gray", lw=1)
  ax.set_xticks(list(x), labels)
  ax.set_ylim(0, 115)
  ax.set_ylabel("win rate (%)")
  ax.set_title(title)
  ax.legend(loc="upper right", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=150)
  plt.close(fig)
