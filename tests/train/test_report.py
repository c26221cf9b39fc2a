"""botjax.train.report: mean ± standard error over seeds, against a plain NumPy computation."""
import math

import hypothesis
import numpy as np
import pytest

from hypothesis import strategies as st

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


def _holm_loop(p):
  """Holm's step-down procedure, literally: the i-th smallest p times (m − i), running max, cap 1."""
  m = len(p)
  order = sorted(range(m), key=lambda i: p[i])
  out, running = [0.0] * m, 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, p[i] * (m - rank)))
    out[i] = running
  return out


@hypothesis.given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
def test_holm_matches_the_step_down_loop(p):
  np.testing.assert_allclose(report.holm(p), _holm_loop(p), rtol=1e-12)
  assert np.all(report.holm(p) >= np.asarray(p))


def test_holm_known_values_and_errors():
  # m = 3: 0.01·3 = 0.03, 0.04·2 = 0.08, 0.03·... sorted (0.01, 0.03, 0.04) -> (0.03, 0.06, 0.06)
  np.testing.assert_allclose(report.holm([0.04, 0.01, 0.03]), [0.06, 0.03, 0.06])
  with pytest.raises(ValueError, match=r"in \[0, 1\], got \[1.5\]"):
    report.holm([1.5])


@hypothesis.settings(deadline=None, max_examples=50)
@hypothesis.given(st.lists(st.floats(-1, 1), min_size=2, max_size=6),
                  st.lists(st.floats(-1, 1), min_size=2, max_size=6))
def test_welch_matches_the_equations_and_scipy(a, b):
  from scipy import integrate, stats
  hypothesis.assume(np.var(a) > 1e-6 and np.var(b) > 1e-6)
  d, t, p = report.welch(a, b)
  na, nb = len(a), len(b)
  va, vb = np.var(a, ddof=1) / na, np.var(b, ddof=1) / nb
  t_ref = (np.mean(a) - np.mean(b)) / np.sqrt(va + vb)
  nu = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
  # the two-sided tail of Student's t by quadrature of its density
  tail = integrate.quad(lambda x: stats.t.pdf(x, nu), abs(t_ref), np.inf)[0]
  np.testing.assert_allclose([d, t, p], [np.mean(a) - np.mean(b), t_ref, 2 * tail],
                             rtol=1e-6, atol=1e-9)
  ref = stats.ttest_ind(a, b, equal_var=False)
  np.testing.assert_allclose([t, p], [ref.statistic, ref.pvalue], rtol=1e-9, atol=1e-12)


def test_welch_degenerate_samples_and_errors():
  assert report.welch([1, 1], [1, 1]) == (0.0, 0.0, 1.0)
  d, t, p = report.welch([2, 2], [1, 1])
  assert d == 1.0 and t == np.inf and p == 0.0
  with pytest.raises(ValueError, match=">= 2 values per side, got 1 and 2"):
    report.welch([1.0], [1.0, 2.0])


def _runs_of(values):
  """{name: per-seed records} whose eval/accuracy is constant at each given value."""
  return {name: [[{"step": s, "eval/accuracy": v} for s in range(0, 50, 10)] for v in vals]
          for name, vals in values.items()}


def test_contrast_table_and_ranking_note():
  runs = _runs_of({"a": [0.50, 0.52, 0.51], "b": [0.40, 0.41, 0.39], "c": [0.50, 0.49, 0.53],
                   "d": [0.3]})
  text = report.contrast_table(runs, [("a", "b"), ("a", "c"), ("a", "d")])
  lines = [l for l in text.splitlines() if l.startswith("| a")]
  assert len(lines) == 2 and "Holm, 2 tests" in text and "Left out" in text and "a − d" in text
  p_ab = report.welch([0.50, 0.52, 0.51], [0.40, 0.41, 0.39])[2]
  p_ac = report.welch([0.50, 0.52, 0.51], [0.50, 0.49, 0.53])[2]
  holm = report.holm([p_ab, p_ac])
  assert f"{p_ab:.3f} | {holm[0]:.3f} | ✓" in lines[0]
  assert f"{p_ac:.3f} | {holm[1]:.3f} | —" in lines[1]
  note = report.ranking_note(runs)
  assert note.startswith("Highest mean of the last 5 evaluations: a (0.510), runner-up c (0.507)")
  assert "within noise" in note
  sep = report.ranking_note(_runs_of({"a": [0.50, 0.52, 0.51], "b": [0.40, 0.41, 0.39]}))
  assert "is significant" in sep
