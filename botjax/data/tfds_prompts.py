"""A TensorFlow Datasets builder for prompt records, stored as `array_record` files.

Imported only through `botjax.data.loaders.prepare_tfds` / `load_tfds`, which turn a missing
`tensorflow_datasets` into an ImportError that says what to install; it reads and validates
records with `botjax.data.records` (and does not import `loaders`). TensorFlow itself is not
needed: `download_and_prepare` writes array_record shards and `as_data_source()` reads them with
random access (`as_dataset()`, which returns a tf.data pipeline, would need TensorFlow).

Each example holds `id`, `problem`, `answer` (text), `year` (int32, -1 when unknown) and `index`
(its line/row in the source file, to give the file order back); other fields of the source
records are not stored. The split names and source files are given when the dataset is prepared.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from botjax.data import records as records_lib

NO_YEAR = -1


class BotjaxPrompts(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Prompt records (problem, answer, id, year) from local problem files, one file per split.

  Args (keyword-only, besides those of `GeneratorBasedBuilder`):
    source_files: split name → problem file (JSONL/JSON/Parquet/CSV); needed only to prepare.
    field_map: canonical field → column of the source files.
  """

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Prompt records: id, problem, answer, year."}

  def __init__(self, *, source_files: Mapping[str, str | os.PathLike] | None = None,
               field_map: Mapping[str, str] | None = None, **kwargs: Any):
    self._source_files = {k: os.fspath(v) for k, v in (source_files or {}).items()}
    self._field_map = dict(field_map or {})
    super().__init__(**kwargs)

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls):
    # No checksums file sits beside this builder (it downloads nothing). TFDS 4.9.10 would look
    # it up next to the module and, for a module inside a package, import the
    # `importlib_resources` backport, which tensorflow-datasets does not install.
    return None

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
        description="Math prompt records for botjax (problem text and reference answer).",
        features=tfds.features.FeaturesDict({
            "id": tfds.features.Text(),
            "problem": tfds.features.Text(),
            "answer": tfds.features.Text(),
            "year": tfds.features.Scalar(dtype=np.int32),
            "index": tfds.features.Scalar(dtype=np.int32),
        }),
        supervised_keys=None,
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # local files only
    if not self._source_files:
      raise ValueError("BotjaxPrompts: pass source_files={'train': path, ...} to prepare it")
    return {split: self._generate_examples(path) for split, path in self._source_files.items()}

  def _generate_examples(self, path: str):
    for index, record in enumerate(records_lib.load_records(path, field_map=self._field_map)):
      yield record["id"], {
          "index": index,
          "id": record["id"],
          "problem": record["problem"],
          "answer": record["answer"],
          "year": int(record.get("year", NO_YEAR)),
      }


def prepare(source_files: Mapping[str, str | os.PathLike], data_dir: str | os.PathLike, *,
            field_map: Mapping[str, str] | None = None) -> str:
  """Writes the array_record dataset; returns the prepared version directory."""
  if not source_files:
    raise ValueError("source_files is empty: give {'train': path, ...}")
  builder = BotjaxPrompts(data_dir=os.fspath(data_dir), file_format="array_record",
                          source_files=source_files, field_map=field_map)
  builder.download_and_prepare()
  return os.fspath(builder.data_dir)


def _text(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def load(data_dir: str | os.PathLike, split: str = "train") -> list[dict[str, Any]]:
  """Reads one split of a prepared dataset back as validated records, in source-file order.

  TFDS stores examples shuffled by key; the stored `index` restores the file order. A year of -1
  means none.
  """
  builder = BotjaxPrompts(data_dir=os.fspath(data_dir), file_format="array_record")
  splits = sorted(builder.info.splits.keys())
  if split not in splits:
    raise ValueError(f"split {split!r} not in the prepared dataset at {data_dir}; it has "
                     f"{splits}")
  source = builder.as_data_source()[split]
  examples = sorted((source[i] for i in range(len(source))), key=lambda ex: int(ex["index"]))
  raws = []
  for example in examples:
    raw = {k: _text(example[k]) for k in ("id", "problem", "answer")}
    year = int(example["year"])
    if year != NO_YEAR:
      raw["year"] = year
    raws.append(raw)
  return records_lib.validate_records(raws, source=f"tfds:{data_dir}[{split}]", location="row {}")
