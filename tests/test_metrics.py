"""botjax.metrics against direct combinatorial oracles."""

import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _util import both
from botjax import metrics


def pass_at_k_oracle(n, c, k):
  # The definition: probability that a random k-subset of the n samples holds a correct one.
  return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@given(n=st.integers(1, 60), data=st.data())
def test_pass_at_k_matches_binomial_definition(n, data):
  c = data.draw(st.integers(0, n))
  k = data.draw(st.integers(1, n))
  assert metrics.pass_at_k(n, c, k) == pytest.approx(pass_at_k_oracle(n, c, k), abs=1e-12)


@given(n=st.integers(1, 300), k=st.integers(1, 300))
def test_pass_at_k_boundaries(n, k):
  k = min(k, n)
  assert metrics.pass_at_k(n, n, k) == 1.0
  assert metrics.pass_at_k(n, 0, k) == 0.0


def test_pass_at_k_vectorised_and_large_n():
  n = np.array([8, 8, 8, 16])
  c = np.array([0, 1, 4, 3])
  got = metrics.pass_at_k(n, c, 2)
  np.testing.assert_allclose(got, [pass_at_k_oracle(8, 0, 2), pass_at_k_oracle(8, 1, 2),
                                   pass_at_k_oracle(8, 4, 2), pass_at_k_oracle(16, 3, 2)])
  assert metrics.pass_at_k(8, 1, 1) == pytest.approx(1 / 8)
  # Large n: binomials overflow float, the product form does not.
  assert metrics.pass_at_k(5000, 10, 1000) == pytest.approx(pass_at_k_oracle(5000, 10, 1000))
  with pytest.raises(ValueError, match="k <= n"):
    metrics.pass_at_k(4, 1, 5)
  with pytest.raises(ValueError, match="c <= n"):
    metrics.pass_at_k(4, 5, 1)


def test_avg_at_n():
  assert metrics.avg_at_n([[1, 0, 0, 1], [1, 1, 1, 1]]) == pytest.approx(0.75)
  assert metrics.avg_at_n([[True], [False, True]]) == pytest.approx(0.75)
  with pytest.raises(ValueError):
    metrics.avg_at_n([])


def test_maj_at_k_and_tie_break():
  answers = [["3", "4", "4", None], ["1", "2", "2", "1"], [None, None, "5", "5"], ["7", "8"]]
  refs = ["4", "1", "5", "8"]
  # k=2: p0 tie 3/4 -> "3" (first) wrong; p1 tie 1/2 -> "1" right; p2 no votes wrong;
  # p3 tie 7/8 -> "7" wrong.
  assert metrics.maj_at_k(answers, refs, 2) == pytest.approx(1 / 4)
  # k=3 needs 3 answers per problem.
  with pytest.raises(ValueError, match="fewer than k"):
    metrics.maj_at_k(answers, refs, 3)
  assert metrics.maj_at_k(answers[:3], refs[:3], 4) == pytest.approx(3 / 3)
  assert metrics.majority_vote(["b", "a", "a", "b"]) == "b"
  assert metrics.maj_at_k([["4.0"]], ["4"], 1, equal=lambda a, b: float(a) == float(b)) == 1.0


def test_abba_win_rate():
  v = [("A", "A", "A", "B"),    # 3-1: win
       ("A", "B", "B", "A"),    # 2-2: tie
       ("B", "B", "B", "B"),    # 0-4: loss
       ("A", "A", "A", "A")]    # 4-0: win
  assert metrics.abba_win_rate(v) == (pytest.approx(2.5 / 4), pytest.approx(1 / 4))
  # Positional labels: rounds 2 and 3 show B first, so "A" (first shown) there is model B.
  # A judge that always prefers the first screenshot is a pure position bias: a 2-2 tie.
  assert metrics.abba_win_rate([("A", "A", "A", "A")], labels="position") == (0.5, 1.0)
  assert metrics.abba_win_rate([("A", "B", "B", "A")], labels="position") == (1.0, 0.0)
  with pytest.raises(ValueError, match="four verdicts"):
    metrics.abba_win_rate([("A", "C", "A", "A")])
  with pytest.raises(ValueError, match="labels must be"):
    metrics.abba_win_rate(v, labels="first")


def _abba_outcome_loop(rounds):
  # the rule written out: count the answered votes for each side; more votes wins, equal ties
  a = b = 0
  for v in rounds:
    if v == "A":
      a += 1
    elif v == "B":
      b += 1
  return 1.0 if a > b else (0.0 if b > a else 0.5)


def test_abba_outcomes_match_the_vote_count_with_unanswered_rounds():
  every = [list(r) for r in itertools.product(("A", "B", None), repeat=4)]   # 81 prompts
  got = metrics.abba_outcomes(every)
  assert got.shape == (81,) and got.dtype == np.float64
  np.testing.assert_array_equal(got, [_abba_outcome_loop(r) for r in every])
  assert metrics.abba_outcomes([["A", None, "B", "A"]])[0] == 1.0        # 2-1, one unanswered
  assert metrics.abba_outcomes([[None] * 4])[0] == 0.5                   # nobody answered: a tie
  win, tie = metrics.abba_win_rate(every)
  assert win == pytest.approx(np.mean([_abba_outcome_loop(r) for r in every]))
  assert tie == pytest.approx(np.mean([_abba_outcome_loop(r) == 0.5 for r in every]))
  # positional labels: a None stays unanswered, the answered rounds map through ROUND_ORDERS
  assert metrics.abba_outcomes([["A", None, None, "A"]], labels="position")[0] == 1.0
  assert metrics.abba_outcomes([[None, "A", "A", None]], labels="position")[0] == 0.0
  with pytest.raises(ValueError, match="at least one prompt"):
    metrics.abba_win_rate([])


def test_compile_rate():
  assert metrics.compile_rate([True, False, True, True]) == 0.75
  with pytest.raises(ValueError):
    metrics.compile_rate([])


# --- the log-prob mismatch of a rollout engine ----------------------------------------------


def mismatch_oracle(train, engine, mask):
  deltas = [float(np.float32(train[i, t]) - np.float32(engine[i, t]))
            for i in range(train.shape[0]) for t in range(train.shape[1]) if mask[i, t]]
  if not deltas:
    return dict(mean_abs_diff=0.0, max_abs_diff=0.0, outside_frac=0.0, tokens=0.0)
  ratios = [math.exp(d) for d in deltas]
  return dict(mean_abs_diff=sum(abs(d) for d in deltas) / len(deltas),
              max_abs_diff=max(abs(d) for d in deltas),
              outside_frac=sum(r < 0.5 or r > 2.0 for r in ratios) / len(deltas),
              tokens=float(len(deltas)))


def mismatch_case(seed, b=6, t=9):
  rng = np.random.default_rng(seed)
  train = -rng.exponential(1.0, size=(b, t)).astype(np.float32)
  engine = (train + rng.normal(0.0, 0.6, size=(b, t))).astype(np.float32)
  mask = np.arange(t)[None, :] < rng.integers(0, t + 1, size=b)[:, None]
  mask[1] = False                                                   # an empty row
  train[~mask] = np.nan
  return train, engine, mask


@pytest.mark.parametrize("jit", [False, True])
def test_logp_mismatch_matches_oracle(jit):
  fn = both(metrics.logp_mismatch)[jit]
  for seed in range(3):
    train, engine, mask = mismatch_case(seed)
    got = {k: float(v) for k, v in fn(train, engine, mask).items()}
    want = mismatch_oracle(train, engine, mask)
    assert got.keys() == want.keys()
    for k in want:
      assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-6), k
    assert 0.0 < want["outside_frac"] < 1.0          # the case has tokens on both sides


def test_logp_mismatch_of_an_empty_mask_is_zero_and_shapes_are_checked():
  z = jnp.zeros((2, 3))
  got = metrics.logp_mismatch(z, z + jnp.nan, jnp.zeros((2, 3), bool))
  assert {k: float(v) for k, v in got.items()} == dict(mean_abs_diff=0.0, max_abs_diff=0.0,
                                                       outside_frac=0.0, tokens=0.0)
  with pytest.raises(ValueError, match="mask has shape"):
    metrics.logp_mismatch(z, z, jnp.zeros((2, 4), bool))


_LPF = st.floats(-20.0, 0.0, width=32)


@given(data=st.data())
def test_logp_mismatch_properties(data):
  b, t = 4, 5
  train = np.array(data.draw(st.lists(_LPF, min_size=b * t, max_size=b * t)), np.float32)
  engine = np.array(data.draw(st.lists(_LPF, min_size=b * t, max_size=b * t)), np.float32)
  train, engine = train.reshape(b, t), engine.reshape(b, t)
  mask = np.array(data.draw(st.lists(st.booleans(), min_size=b * t, max_size=b * t))).reshape(b, t)
  got = {k: float(v) for k, v in metrics.logp_mismatch(train, engine, mask).items()}
  # mask invariance: padding values change nothing
  junk = np.where(mask, 0.0, np.nan).astype(np.float32)
  again = metrics.logp_mismatch(train + junk, engine + junk, mask)
  assert {k: float(v) for k, v in again.items()} == got
  # an engine that agrees with the trainer has no mismatch
  same = {k: float(v) for k, v in metrics.logp_mismatch(train, train, mask).items()}
  assert same == dict(mean_abs_diff=0.0, max_abs_diff=0.0, outside_frac=0.0,
                      tokens=float(mask.sum()))
  assert 0.0 <= got["mean_abs_diff"] <= got["max_abs_diff"] and 0.0 <= got["outside_frac"] <= 1.0
  # symmetric in the two engines
  swapped = {k: float(v) for k, v in metrics.logp_mismatch(engine, train, mask).items()}
  assert swapped == pytest.approx(got)
