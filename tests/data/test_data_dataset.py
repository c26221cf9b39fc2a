"""Tests of PromptDataset: deterministic epochs, resumable position, state checks."""

import collections
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from botjax.data import ArithmeticTask, PromptDataset, builtin_aime_sample

RECORDS = ArithmeticTask(seed=11).problems(37)


def test_each_epoch_is_a_permutation_and_epochs_differ():
  ds = PromptDataset(RECORDS, seed=1)
  epoch0 = [r["id"] for r in ds.next_batch(37)]
  epoch1 = [r["id"] for r in ds.next_batch(37)]
  ids = [r["id"] for r in RECORDS]
  assert sorted(epoch0) == sorted(ids) == sorted(epoch1)
  assert epoch0 != ids and epoch0 != epoch1
  assert ds.position == 74 and ds.epoch == 2
  # Same seed: same stream; other seed: another one.
  assert [r["id"] for r in PromptDataset(RECORDS, seed=1).next_batch(74)] == epoch0 + epoch1
  assert [r["id"] for r in PromptDataset(RECORDS, seed=2).next_batch(37)] != epoch0
  unshuffled = PromptDataset(RECORDS, shuffle=False)
  assert [r["id"] for r in unshuffled.next_batch(40)] == ids + ids[:3]


@given(k=st.integers(0, 120), batch=st.integers(1, 16), seed=st.integers(0, 5))
def test_resume_from_saved_position_gives_the_same_next_items(k, batch, seed):
  ds = PromptDataset(RECORDS, seed=seed)
  for _ in range(k):
    next(ds)
  state = json.loads(json.dumps(ds.state_dict()))  # as stored in a checkpoint
  expected = ds.next_batch(batch)
  restored = PromptDataset(RECORDS, seed=seed)
  restored.load_state_dict(state)
  assert restored.position == k
  assert restored.next_batch(batch) == expected
  assert [restored.record_at(k + i) for i in range(batch)] == expected


def test_finite_epochs_and_batches():
  ds = PromptDataset(RECORDS[:5], seed=0, num_epochs=2)
  assert ds.total == 10
  b1 = ds.next_batch(4)
  b2 = ds.next_batch(4)
  b3 = ds.next_batch(4)  # the last 2
  assert (len(b1), len(b2), len(b3)) == (4, 4, 2)
  assert collections.Counter(r["id"] for r in b1 + b2 + b3) == {r["id"]: 2 for r in RECORDS[:5]}
  with pytest.raises(StopIteration):
    ds.next_batch(1)
  ds.set_position(8)
  with pytest.raises(StopIteration):
    ds.next_batch(4, drop_remainder=True)
  assert len(list(PromptDataset(RECORDS[:5], num_epochs=3))) == 15
  with pytest.raises(ValueError, match="position=11: must lie in \\[0, 10\\]"):
    ds.set_position(11)
  with pytest.raises(ValueError, match="num_epochs=0"):
    PromptDataset(RECORDS, num_epochs=0)


def test_records_are_copies_and_validated():
  ds = PromptDataset(builtin_aime_sample(), seed=0)
  r = next(ds)
  r["answer"] = "tampered"
  assert ds.record_at(0)["answer"] != "tampered"
  assert ds[0]["id"] == "botjax-sample-01" and len(ds) == 15
  with pytest.raises(ValueError, match="item 1: missing required field 'answer'"):
    PromptDataset([{"problem": "a", "answer": "1"}, {"problem": "b"}])
  with pytest.raises(ValueError, match="at least one record"):
    PromptDataset([])


def test_restoring_into_other_data_is_refused():
  ds = PromptDataset(RECORDS, seed=3)
  ds.next_batch(5)
  state = ds.state_dict()
  with pytest.raises(ValueError, match="saved fingerprint="):
    PromptDataset(RECORDS[:-1] + [RECORDS[0] | {"id": "other"}], seed=3).load_state_dict(state)
  with pytest.raises(ValueError, match="saved seed=3 but this dataset has seed=4"):
    PromptDataset(RECORDS, seed=4).load_state_dict(state)
  with pytest.raises(ValueError, match="no 'position'"):
    PromptDataset(RECORDS, seed=3).load_state_dict({"seed": 3})
  # A bare position (e.g. an int saved by a trainer) restores too.
  other = PromptDataset(RECORDS, seed=3)
  other.load_state_dict({"position": 5})
  assert other.next_batch(3) == ds.next_batch(3)
