"""botjax.train.report: mean ± standard error over seeds, against a plain NumPy computation."""
import math

import numpy as np
import pytest

from botjax.train import report


def _recs(accs):
  return [{"step": 10 * i, "eval/accuracy": a} for i, a in enumerate(accs)]


def _se_loop(xs):
  """Standard error written out: sqrt(sum (x - mean)^2 / (N - 1)) / sqrt(N)."""
  m = sum(xs) / len(xs)
  return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) / math.sqrt(len(xs))


def test_standard_error_is_sample_std_over_sqrt_n():
  xs = [0.25, 0.5, 0.625]
  assert report.standard_error(xs) == pytest.approx(_se_loop(xs))
  assert report.standard_error(xs) != pytest.approx(np.std(xs))   # not the population SD
  assert report.mean_se(xs) == f"{np.mean(xs):.3f} ± {_se_loop(xs):.3f}"
  assert report.mean_se([0.4]) == "0.400"
  with pytest.raises(ValueError, match="at least 2 values, got 1"):
    report.standard_error([0.4])


def test_summary_table_cells_are_mean_and_standard_error():
  finals = [0.5, 0.625, 0.875]
  runs = {"bot_grpo": [_recs([0.25, f]) for f in finals], "grpo": [_recs([0.25, 0.375])]}
  table = report.summary_table(runs)
  rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table.splitlines()
          if line.startswith("| ") and "algorithm" not in line}
  assert rows["bot_grpo"][3] == f"{np.mean(finals):.3f} ± {_se_loop(finals):.3f}"
  gains = [f - 0.25 for f in finals]
  assert rows["bot_grpo"][5].rstrip(" |") == f"{np.mean(gains):.3f} ± {_se_loop(gains):.3f}"
  assert rows["grpo"][3] == "0.375"                       # one seed: the mean alone
  assert "mean ± standard error over N (the seeds column) seeds" in table
  three = report.summary_table({"bot_grpo": runs["bot_grpo"]})
  assert "mean ± standard error over 3 seeds" in three
  assert "standard error" not in report.summary_table({"grpo": runs["grpo"]}).split("\n\n")[1]
