"""Problem files and hubs → validated prompt records; train/eval splits.

A prompt record is a dict with `problem` (non-empty str) and `answer` (str; ints are converted),
and optionally `id` (str) and `year` (int); other fields pass through unchanged. Every loader
checks each record and raises `DataFormatError` naming the file, the line (JSONL, 1-based) or
row (Parquet/CSV, 0-based data row) and the missing or malformed field.

Sources:

- local files: JSONL (`.jsonl`), a JSON array (`.json`), Parquet (`.parquet`, needs `pyarrow`),
  CSV (`.csv`, e.g. the Kaggle "AIME 1983–2024" file with `field_map=AIME_1983_2024_FIELDS`);
- Hugging Face `datasets` (`load_hf_dataset`; needs network or a filled cache);
- TensorFlow Datasets with the `array_record` file format (`prepare_tfds` / `load_tfds`; needs
  `tensorflow-datasets`, not tensorflow), see `botjax/data/tfds_prompts.py`;
- the built-in sample `builtin_aime_sample()`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

REQUIRED_FIELDS = ("problem", "answer")
OPTIONAL_FIELDS = ("id", "year")
EXPECTED = ("expected fields: problem (non-empty str), answer (str or int), "
            "optional id (str or int), year (int)")
# Column names of the Kaggle "AIME Problem Set 1983-2024" CSV (Veeraboina, 2024).
AIME_1983_2024_FIELDS = {"id": "ID", "year": "Year", "problem": "Question", "answer": "Answer"}


class DataFormatError(ValueError):
  """A record of a problem file does not have the expected fields or types."""


def _where(source: str, location: str) -> str:
  return f"{source}: {location}" if location else source


def validate_record(raw: Mapping[str, Any], *, source: str = "<records>", location: str = "",
                    field_map: Mapping[str, str] | None = None,
                    default_id: str | None = None) -> dict[str, Any]:
  """Checks one raw record and returns it in canonical form.

  Args:
    raw: the record as read (a JSON object, a table row).
    source: file or dataset name, for error messages.
    location: e.g. "line 3" or "row 2", for error messages.
    field_map: canonical field name → name in `raw`, e.g. `{"problem": "Question"}`. Source
      fields not named in the map keep their names.
    default_id: the `id` to use when the record has none.

  Returns:
    A new dict with `problem` (str), `answer` (str, stripped), `id` (str), `year` (int, only if
    present) and every other field of `raw`.

  Raises:
    DataFormatError: naming the source, the location and the field.
  """
  where = _where(source, location)
  if not isinstance(raw, Mapping):
    raise DataFormatError(f"{where}: expected an object with fields, got "
                          f"{type(raw).__name__} {str(raw)[:60]!r}; {EXPECTED}")
  field_map = dict(field_map or {})
  unknown = sorted(set(field_map) - set(REQUIRED_FIELDS + OPTIONAL_FIELDS))
  if unknown:
    raise ValueError(f"field_map keys {unknown} are not record fields; valid keys are "
                     f"{list(REQUIRED_FIELDS + OPTIONAL_FIELDS)}")
  renamed = {src: dst for dst, src in field_map.items()}
  record = {k: v for k, v in raw.items() if k not in renamed}
  for src, dst in renamed.items():  # a mapped column wins over a same-named unmapped one
    if src in raw:
      record[dst] = raw[src]
  for name in REQUIRED_FIELDS:
    if name not in record or record[name] is None:
      column = field_map.get(name, name)
      hint = "" if name in field_map else (f"; if it has another name, pass field_map="
                                           f"{{{name!r}: '<name in the file>'}}")
      raise DataFormatError(f"{where}: missing required field {column!r} (found fields: "
                            f"{sorted(raw)}); {EXPECTED}{hint}")
  problem = record["problem"]
  if not isinstance(problem, str) or not problem.strip():
    raise DataFormatError(f"{where}: field {field_map.get('problem', 'problem')!r} must be a "
                          f"non-empty string, got {type(problem).__name__} {problem!r:.60}")
  answer = record["answer"]
  if isinstance(answer, bool) or not isinstance(answer, (str, int)):
    if isinstance(answer, float) and answer.is_integer():
      answer = int(answer)  # integer answers stored as floats by table readers
    else:
      raise DataFormatError(f"{where}: field {field_map.get('answer', 'answer')!r} must be a "
                            f"string or an integer, got {type(answer).__name__} {answer!r:.60}")
  answer = str(answer).strip()
  if not answer:
    raise DataFormatError(f"{where}: field {field_map.get('answer', 'answer')!r} is empty")
  record["problem"], record["answer"] = problem, answer
  if record.get("id") is None:
    if default_id is None:
      raise DataFormatError(f"{where}: missing field 'id' and no default id")
    record["id"] = default_id
  elif isinstance(record["id"], bool) or not isinstance(record["id"], (str, int)):
    raise DataFormatError(f"{where}: field {field_map.get('id', 'id')!r} must be a string or an "
                          f"integer, got {type(record['id']).__name__}")
  record["id"] = str(record["id"])
  if "year" in record:
    year = record["year"]
    if year is None:
      del record["year"]
    else:
      try:
        if isinstance(year, bool) or (isinstance(year, float) and not year.is_integer()):
          raise ValueError
        record["year"] = int(year)
      except (TypeError, ValueError):
        raise DataFormatError(f"{where}: field {field_map.get('year', 'year')!r} must be an "
                              f"integer year, got {year!r:.40}") from None
  return record


def validate_records(raws: Iterable[Mapping[str, Any]], *, source: str = "<records>",
                     location: str = "item {}", start: int = 0,
                     field_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
  """`validate_record` on each item; ids default to `"{source-stem}-{i}"` and must be unique."""
  stem = os.path.splitext(os.path.basename(source))[0] or "record"
  records, seen = [], {}
  for i, raw in enumerate(raws, start):
    record = validate_record(raw, source=source, location=location.format(i),
                             field_map=field_map, default_id=f"{stem}-{i}")
    if record["id"] in seen:
      raise DataFormatError(f"{_where(source, location.format(i))}: duplicate id "
                            f"{record['id']!r} (first at {location.format(seen[record['id']])})")
    seen[record["id"]] = i
    records.append(record)
  return records


def load_jsonl(path: str | os.PathLike, *,
               field_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
  """Reads a JSONL file of problems, one JSON object per line (blank lines are skipped).

  Errors name the 1-based line: `aime.jsonl: line 3: missing required field 'answer' ...`.
  """
  path = os.fspath(path)
  raws, lines = [], []
  with open(path, encoding="utf-8") as f:
    for line_no, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        raws.append(json.loads(line))
      except json.JSONDecodeError as e:
        raise DataFormatError(f"{path}: line {line_no}: not valid JSON ({e.msg} at column "
                              f"{e.colno}); each line must be one object, {EXPECTED}") from None
      lines.append(line_no)
  records, seen = [], {}
  stem = os.path.splitext(os.path.basename(path))[0]
  for raw, line_no in zip(raws, lines):
    record = validate_record(raw, source=path, location=f"line {line_no}", field_map=field_map,
                             default_id=f"{stem}-{line_no}")
    if record["id"] in seen:
      raise DataFormatError(f"{path}: line {line_no}: duplicate id {record['id']!r} (first at "
                            f"line {seen[record['id']]})")
    seen[record["id"]] = line_no
    records.append(record)
  return records


def load_json(path: str | os.PathLike, *,
              field_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
  """Reads a JSON file holding an array of problem objects; errors name the 0-based item."""
  path = os.fspath(path)
  with open(path, encoding="utf-8") as f:
    try:
      data = json.load(f)
    except json.JSONDecodeError as e:
      raise DataFormatError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
  if not isinstance(data, list):
    raise DataFormatError(f"{path}: expected a JSON array of problem objects, got "
                          f"{type(data).__name__}")
  return validate_records(data, source=path, location="item {}", field_map=field_map)


def load_parquet(path: str | os.PathLike, *,
                 field_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
  """Reads a Parquet file of problems with `pyarrow`; errors name the column or 0-based row."""
  try:
    import pyarrow.parquet as pq
  except ImportError:
    raise ImportError("reading Parquet needs pyarrow: pip install pyarrow "
                      "(or botjax[data])") from None
  path = os.fspath(path)
  table = pq.read_table(path)
  columns = set(table.column_names)
  for name in REQUIRED_FIELDS:
    column = (field_map or {}).get(name, name)
    if column not in columns:
      raise DataFormatError(f"{path}: missing required column {column!r} (found columns: "
                            f"{sorted(columns)}); {EXPECTED}")
  return validate_records(table.to_pylist(), source=path, location="row {}",
                          field_map=field_map)


def load_csv(path: str | os.PathLike, *,
             field_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
  """Reads a CSV file with a header row; `year` and integer answers may be written as text."""
  path = os.fspath(path)
  with open(path, encoding="utf-8", newline="") as f:
    reader = csv.DictReader(f)
    rows = list(reader)
    columns = set(reader.fieldnames or ())
  for name in REQUIRED_FIELDS:
    column = (field_map or {}).get(name, name)
    if column not in columns:
      raise DataFormatError(f"{path}: missing required column {column!r} (found columns: "
                            f"{sorted(columns)}); {EXPECTED}")
  return validate_records(rows, source=path, location="row {}", field_map=field_map)


_READERS = {".jsonl": load_jsonl, ".json": load_json, ".parquet": load_parquet,
            ".csv": load_csv}


def load_records(path: str | os.PathLike, *,
                 field_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
  """Reads a problem file, choosing the reader by its suffix (.jsonl, .json, .parquet, .csv)."""
  suffix = os.path.splitext(os.fspath(path))[1].lower()
  if suffix not in _READERS:
    raise ValueError(f"{os.fspath(path)}: unknown file type {suffix!r}; expected one of "
                     f"{sorted(_READERS)}")
  return _READERS[suffix](path, field_map=field_map)


def builtin_aime_sample() -> list[dict[str, Any]]:
  """Fifteen AIME-style problems with integer answers, bundled with botjax.

  The problems were written for botjax in the style of AIME (counting, number theory, geometry,
  sequences); they are not contest problems. `year` (2016–2025) is a label so that
  `split_by_year` has something to split: years 2024 and 2025 hold five problems. Each record
  also has a worked `solution` in the step format.
  """
  text = resources.files("botjax.data.builtin").joinpath("aime_sample.jsonl").read_text(
      encoding="utf-8")
  return validate_records((json.loads(line) for line in text.splitlines() if line.strip()),
                          source="builtin/aime_sample.jsonl", location="line {}", start=1)


def load_hf_dataset(name: str, split: str = "train", *, config_name: str | None = None,
                    field_map: Mapping[str, str] | None = None,
                    **load_kwargs: Any) -> list[dict[str, Any]]:
  """Loads problems with Hugging Face `datasets.load_dataset` and validates them.

  Args:
    name: hub id (e.g. an AIME dataset) or a builder name such as "parquet" / "json" with
      `data_files=` in `load_kwargs` (works offline).
    split: split to load.
    config_name: dataset configuration, if any.
    field_map: canonical field → dataset column.
    **load_kwargs: passed to `datasets.load_dataset` (revision, data_files, cache_dir, ...).

  Returns:
    Validated records.

  Raises:
    ImportError: `datasets` is not installed.
    RuntimeError: the dataset could not be loaded (offline without a cache, unknown name); the
      message says how to use a local file instead.
  """
  try:
    import datasets
  except ImportError:
    raise ImportError("load_hf_dataset needs Hugging Face datasets: pip install datasets "
                      "(or botjax[data]); or read a local file with load_records(path)") from None
  try:
    ds = datasets.load_dataset(name, config_name, split=split, **load_kwargs)
  except Exception as e:  # network, auth, missing dataset: all end the same way for the user
    offline = any(os.environ.get(v, "").lower() in ("1", "true", "yes")
                  for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    raise RuntimeError(
        f"could not load Hugging Face dataset {name!r} (config {config_name!r}, split "
        f"{split!r}): {type(e).__name__}: {e}. "
        + ("Offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and the dataset is not "
           "in the cache. " if offline else "Is the machine offline, or the name wrong? ")
        + "Download it where there is network (datasets.load_dataset(...).to_json(path)) and "
          "pass the file to load_records(path).") from e
  missing = [field_map.get(f, f) if field_map else f for f in REQUIRED_FIELDS]
  missing = [c for c in missing if c not in ds.column_names]
  if missing:
    raise DataFormatError(f"hf:{name}[{split}]: missing required column(s) {missing} (found "
                          f"columns: {sorted(ds.column_names)}); {EXPECTED}; pass field_map")
  return validate_records(ds, source=f"hf:{name}[{split}]", location="row {}",
                          field_map=field_map)


def _tfds_module():
  try:
    from botjax.data import tfds_prompts
  except ImportError as e:
    raise ImportError("the TFDS loader needs tensorflow-datasets and array_record (not "
                      "tensorflow): pip install tensorflow-datasets array_record "
                      f"(or botjax[data]); import failed with: {e}") from None
  return tfds_prompts


def prepare_tfds(source_files: Mapping[str, str | os.PathLike], data_dir: str | os.PathLike, *,
                 field_map: Mapping[str, str] | None = None) -> str:
  """Builds a TFDS dataset (array_record files) from problem files, one per split.

  Args:
    source_files: split name → problem file (any `load_records` format), e.g.
      `{"train": "train.jsonl", "test": "test.jsonl"}`.
    data_dir: TFDS data directory to write.
    field_map: canonical field → file column.

  Returns:
    The directory holding the prepared dataset version.
  """
  return _tfds_module().prepare(source_files, data_dir, field_map=field_map)


def load_tfds(data_dir: str | os.PathLike, split: str = "train") -> list[dict[str, Any]]:
  """Reads a split prepared by `prepare_tfds` via random-access `as_data_source` (no TF)."""
  return _tfds_module().load(data_dir, split)


def load_source(spec: str | os.PathLike, *, split: str = "train",
                field_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
  """Loads prompt records from a one-string source spec (for `--data=` flags).

  Specs:
    `builtin:aime_sample`   the bundled AIME-style sample (`builtin_aime_sample`);
    `hf:<name>`             Hugging Face `datasets` (`load_hf_dataset(name, split)`);
    `tfds:<data_dir>`       a dataset prepared by `prepare_tfds` (`load_tfds(data_dir, split)`);
    anything else           a local file (`load_records`: .jsonl, .json, .parquet, .csv).

  Args:
    spec: the source.
    split: split for `hf:` and `tfds:` sources (files and the builtin sample have one).
    field_map: canonical field → column, for files and `hf:`.

  Returns:
    Validated records.
  """
  spec = os.fspath(spec)
  if spec.startswith("builtin:"):
    name = spec[len("builtin:"):]
    if name != "aime_sample":
      raise ValueError(f"unknown built-in source {spec!r}; available: ['builtin:aime_sample']")
    return builtin_aime_sample()
  if spec.startswith("hf:"):
    return load_hf_dataset(spec[len("hf:"):], split, field_map=field_map)
  if spec.startswith("tfds:"):
    return load_tfds(spec[len("tfds:"):], split)
  if not os.path.exists(spec):
    raise FileNotFoundError(f"no file {spec!r}; a source is a local .jsonl/.json/.parquet/.csv "
                            "file, builtin:aime_sample, hf:<dataset> or tfds:<data_dir>")
  return load_records(spec, field_map=field_map)


# -- Splits --------------------------------------------------------------------------------

def split_by_year(records: Sequence[Mapping[str, Any]],
                  eval_years: Iterable[int] = (2024, 2025)) -> tuple[list[dict], list[dict]]:
  """(train, eval): records whose `year` is in `eval_years` form the eval set.

  Raises:
    DataFormatError: a record has no `year` (naming its id).
  """
  eval_years = frozenset(int(y) for y in eval_years)
  train, evals = [], []
  for record in records:
    if record.get("year") is None:
      raise DataFormatError(f"record {record.get('id', '?')!r} has no 'year'; split_by_year "
                            "needs a year on every record (use split_random otherwise)")
    (evals if int(record["year"]) in eval_years else train).append(dict(record))
  return train, evals


def split_random(records: Sequence[Mapping[str, Any]], eval_fraction: float = 0.2, *,
                 seed: int = 0) -> tuple[list[dict], list[dict]]:
  """(train, eval): a seeded split with round(eval_fraction·N) eval records, order kept.

  Records with the same `problem` text always fall on the same side (the split is made over
  distinct problems), so no problem leaks into both.
  """
  if not 0.0 <= eval_fraction <= 1.0:
    raise ValueError(f"eval_fraction={eval_fraction}: must lie in [0, 1]")
  problems = sorted({r["problem"] for r in records})
  rng = random.Random(f"botjax-split:{seed}")
  rng.shuffle(problems)
  eval_problems = set(problems[:round(eval_fraction * len(problems))])
  train = [dict(r) for r in records if r["problem"] not in eval_problems]
  evals = [dict(r) for r in records if r["problem"] in eval_problems]
  return train, evals


def fingerprint(records: Sequence[Mapping[str, Any]]) -> str:
  """A short hash of the records' ids, problems and answers (order-sensitive)."""
  h = hashlib.sha256()
  for r in records:
    h.update(json.dumps([r.get("id"), r["problem"], r["answer"]]).encode("utf-8"))
  return h.hexdigest()[:16]
