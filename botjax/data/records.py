"""Prompt records: validation and the local file readers (JSONL, JSON, Parquet, CSV).

A prompt record is a dict with `problem` (non-empty str) and `answer` (str; ints are converted),
and optionally `id` (str) and `year` (int); other fields pass through unchanged. Every reader
checks each record and raises `DataFormatError` naming the file, the line (JSONL, 1-based) or
row (Parquet/CSV, 0-based data row) and the missing or malformed field.

The hubs, the built-in sample and the splits are in `botjax.data.loaders`; the TFDS builder in
`botjax.data.tfds_prompts`. Both import this module, and it imports neither.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

REQUIRED_FIELDS = ("problem", "answer")
OPTIONAL_FIELDS = ("id", "year")
EXPECTED = ("expected fields: problem (non-empty str), answer (str or int), "
            "optional id (str or int), year (int)")


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
