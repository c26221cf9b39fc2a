"""`PromptDataset`: deterministic, resumable iteration over prompt records.

The whole iteration state is one integer, `position`: the number of records handed out so far.
Position p maps to epoch e = p // N and slot p mod N of that epoch's order, a permutation of the
N records seeded by (seed, e). So the record at any position is a pure function of (records,
seed, shuffle, position): a trainer saves `state_dict()` (the position plus a fingerprint of the
records) in its checkpoint and, after `load_state_dict`, gets exactly the records it would have
got without the interruption. Nothing is read ahead or buffered.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from botjax.data import loaders


class PromptDataset:
  """Prompt records with epoch shuffling and a saveable integer position.

  Example:
    ds = PromptDataset(train_records, seed=0)
    batch = ds.next_batch(8)            # list of 8 records
    state = ds.state_dict()             # {"position": 8, ...}: save with the checkpoint
    ds2 = PromptDataset(train_records, seed=0); ds2.load_state_dict(state)
    assert ds2.next_batch(8) == ds.next_batch(8)

  Args:
    records: prompt records (dicts with at least `problem` and `answer`), validated on entry.
    seed: seed of the per-epoch orders.
    shuffle: shuffle each epoch; False keeps the file order in every epoch.
    num_epochs: stop after this many epochs (None: repeat forever).
    position: starting position (records already consumed).
  """

  def __init__(self, records: Sequence[Mapping[str, Any]], *, seed: int = 0,
               shuffle: bool = True, num_epochs: int | None = None, position: int = 0):
    if num_epochs is not None and num_epochs < 1:
      raise ValueError(f"num_epochs={num_epochs}: must be >= 1 or None (repeat forever)")
    self._records = loaders.validate_records(records, source="PromptDataset")
    if not self._records:
      raise ValueError("PromptDataset needs at least one record")
    self.seed = int(seed)
    self.shuffle = bool(shuffle)
    self.num_epochs = num_epochs
    self._fingerprint = loaders.fingerprint(self._records)
    self._order_cache: tuple[int, list[int]] | None = None
    self._position = 0
    self.set_position(position)

  def __len__(self) -> int:
    """N, the number of records in one epoch."""
    return len(self._records)

  def __getitem__(self, index: int) -> dict[str, Any]:
    """The record at `index` in the original (unshuffled) order; a copy."""
    return dict(self._records[index])

  @property
  def position(self) -> int:
    """Records handed out so far, over all epochs."""
    return self._position

  @property
  def epoch(self) -> int:
    """The epoch of the next record (0-based)."""
    return self._position // len(self)

  @property
  def total(self) -> int | None:
    """Positions available in all, `num_epochs · N` (None when repeating forever)."""
    return None if self.num_epochs is None else self.num_epochs * len(self)

  def order(self, epoch: int) -> list[int]:
    """The permutation of record indices used in `epoch`."""
    if self._order_cache is not None and self._order_cache[0] == epoch:
      return self._order_cache[1]
    order = list(range(len(self)))
    if self.shuffle:
      random.Random(f"botjax-prompts:{self.seed}:{epoch}").shuffle(order)
    self._order_cache = (epoch, order)
    return order

  def record_at(self, position: int) -> dict[str, Any]:
    """The record handed out at `position` (does not move the dataset); a copy."""
    if position < 0 or (self.total is not None and position >= self.total):
      raise IndexError(f"position={position} outside [0, {self.total})")
    epoch, slot = divmod(position, len(self))
    return dict(self._records[self.order(epoch)[slot]])

  def set_position(self, position: int) -> None:
    """Moves to `position`; 0 ≤ position ≤ total."""
    position = int(position)
    if position < 0 or (self.total is not None and position > self.total):
      raise ValueError(f"position={position}: must lie in [0, {self.total}] "
                       f"({self.num_epochs} epochs of {len(self)} records)")
    self._position = position

  def __iter__(self) -> Iterator[dict[str, Any]]:
    return self

  def __next__(self) -> dict[str, Any]:
    if self.total is not None and self._position >= self.total:
      raise StopIteration
    record = self.record_at(self._position)
    self._position += 1
    return record

  def next_batch(self, batch_size: int, *, drop_remainder: bool = False) -> list[dict[str, Any]]:
    """The next `batch_size` records (crossing epoch boundaries); fewer at the very end.

    Raises:
      StopIteration: no record is left (or, with `drop_remainder`, fewer than batch_size).
    """
    if batch_size < 1:
      raise ValueError(f"batch_size={batch_size}: must be >= 1")
    left = None if self.total is None else self.total - self._position
    if left is not None and (left == 0 or (drop_remainder and left < batch_size)):
      raise StopIteration
    n = batch_size if left is None else min(batch_size, left)
    batch = [self.record_at(self._position + i) for i in range(n)]
    self._position += n
    return batch

  def state_dict(self) -> dict[str, Any]:
    """JSON-serialisable iteration state: position, seed, shuffle, size and fingerprint."""
    return {"position": self._position, "seed": self.seed, "shuffle": self.shuffle,
            "num_records": len(self), "fingerprint": self._fingerprint}

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    """Restores a `state_dict()`; the records, seed and shuffle must be the same.

    Raises:
      ValueError: the state belongs to different records or settings (naming what differs).
    """
    if "position" not in state:
      raise ValueError(f"state {dict(state)!r} has no 'position'; pass a state_dict()")
    mine = self.state_dict()
    for key in ("num_records", "fingerprint", "seed", "shuffle"):
      if key in state and state[key] != mine[key]:
        raise ValueError(f"cannot restore: saved {key}={state[key]!r} but this dataset has "
                         f"{key}={mine[key]!r}; the position would point at other records")
    self.set_position(state["position"])
