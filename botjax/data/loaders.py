"""Prompt sources (the AIME 1983–2024 set on the Hugging Face Hub, other hub datasets, TFDS, the
built-in sample, local files) → validated prompt records; train/eval splits.

A prompt record is a dict with `problem` (non-empty str) and `answer` (str; ints are converted),
and optionally `id` (str) and `year` (int); other fields pass through unchanged. Record
validation and the local file readers live in `botjax.data.records` and are re-exported here.

Sources:

- the AIME 1983–2024 problem set (933 problems; Veeraboina 2024, on Kaggle and on the Hugging
  Face Hub as `di-zhang-fdu/AIME_1983_2024`), spec `hf:di-zhang-fdu/AIME_1983_2024`
  (`AIME_1983_2024_SOURCE`), the training data of the BoT-GRPO paper (arXiv 2610.09804);
- Hugging Face `datasets` (`load_hf_dataset`): downloaded into the HF cache when online, read
  from it when offline (`HF_HUB_OFFLINE=1`);
- local files: JSONL (`.jsonl`), a JSON array (`.json`), Parquet (`.parquet`, needs `pyarrow`),
  CSV (`.csv`, e.g. the Kaggle AIME 1983–2024 file with `field_map=AIME_1983_2024_FIELDS`);
- TensorFlow Datasets with the `array_record` file format (`prepare_tfds` / `load_tfds`; needs
  `tensorflow-datasets`, not tensorflow), see `botjax/data/tfds_prompts.py`;
- the built-in sample `builtin_aime_sample()` (15 AIME-style problems, for tests and CPU demos).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

from botjax.data.records import (  # noqa: F401  (re-exported)
    EXPECTED,
    OPTIONAL_FIELDS,
    REQUIRED_FIELDS,
    DataFormatError,
    load_csv,
    load_json,
    load_jsonl,
    load_parquet,
    load_records,
    validate_record,
    validate_records,
)

# The AIME 1983–2024 problem set (Veeraboina, 2024): one CSV, `AIME_Dataset_1983_2024.csv`, with
# the columns ID ("1983-1", "2024-II-4"), Year, Problem Number, Question, Answer, Part ("I"/"II",
# empty before 2000). 933 problems: AIME 1983–2023 and AIME 2024 II.
AIME_1983_2024 = "di-zhang-fdu/AIME_1983_2024"
AIME_1983_2024_SOURCE = "hf:" + AIME_1983_2024
AIME_1983_2024_FIELDS = {"id": "ID", "year": "Year", "problem": "Question", "answer": "Answer"}
# Hub datasets whose columns botjax knows: `load_source("hf:<name>")` applies the field map.
HF_FIELD_MAPS = {AIME_1983_2024: AIME_1983_2024_FIELDS}
BUILTIN_SOURCES = ("builtin:aime_sample",)


def describe_source(spec: str | os.PathLike) -> str:
  """A one-line human description of a `load_source` spec (no data is read)."""
  spec = os.fspath(spec)
  if spec == AIME_1983_2024_SOURCE:
    return (f"AIME 1983–2024 problem set (933 problems, Hugging Face Hub dataset "
            f"{AIME_1983_2024})")
  if spec == "builtin:aime_sample":
    return "botjax's built-in sample of 15 AIME-style problems (not contest problems)"
  if spec.startswith("hf:"):
    return f"Hugging Face Hub dataset {spec[3:]}"
  if spec.startswith("tfds:"):
    return f"TFDS dataset prepared at {spec[5:]}"
  return f"local file {spec}"


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


_TRUE = ("1", "on", "yes", "true")


def hub_offline() -> bool:
  """True when `HF_HUB_OFFLINE` or `HF_DATASETS_OFFLINE` is set now (read at call time)."""
  return any(os.environ.get(v, "").strip().lower() in _TRUE
             for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


@contextlib.contextmanager
def _datasets_offline(datasets_module, offline: bool):
  """`datasets` reads HF_HUB_OFFLINE once, at import; this honours a value set later."""
  before = datasets_module.config.HF_HUB_OFFLINE
  datasets_module.config.HF_HUB_OFFLINE = bool(before or offline)
  try:
    yield
  finally:
    datasets_module.config.HF_HUB_OFFLINE = before


def load_hf_dataset(name: str, split: str = "train", *, config_name: str | None = None,
                    field_map: Mapping[str, str] | None = None, offline: bool | None = None,
                    **load_kwargs: Any) -> list[dict[str, Any]]:
  """Loads problems with Hugging Face `datasets.load_dataset` and validates them.

  Online, a dataset missing from the cache is downloaded into it (with `datasets`' progress
  bars); offline, only the cache is read.

  Args:
    name: hub id (e.g. `di-zhang-fdu/AIME_1983_2024`) or a builder name such as "parquet" /
      "json" with `data_files=` in `load_kwargs`.
    split: split to load.
    config_name: dataset configuration, if any.
    field_map: canonical field → dataset column.
    offline: read only the HF cache (default: `hub_offline()`, i.e. HF_HUB_OFFLINE or
      HF_DATASETS_OFFLINE set).
    **load_kwargs: passed to `datasets.load_dataset` (revision, data_files, cache_dir, ...).

  Returns:
    Validated records.

  Raises:
    ImportError: `datasets` is not installed.
    RuntimeError: the dataset could not be loaded (offline without a cache, unknown name); the
      message says how to fix it.
  """
  try:
    import datasets
  except ImportError:
    raise ImportError(f"loading the Hugging Face dataset {name!r} needs the datasets package: "
                      "pip install datasets (or pip install 'botjax[data]'); or read a local "
                      "file with load_records(path) / --train_data=path.csv") from None
  offline = hub_offline() if offline is None else bool(offline)
  try:
    with _datasets_offline(datasets, offline):
      ds = datasets.load_dataset(name, config_name, split=split, **load_kwargs)
  except Exception as e:  # network, auth, missing dataset: all end the same way for the user
    cache = load_kwargs.get("cache_dir") or datasets.config.HF_DATASETS_CACHE
    if offline:
      hint = (f"Offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and the dataset is not "
              f"in the datasets cache at {cache}. Run once where there is network (unset "
              f"HF_HUB_OFFLINE) to fill the cache, or copy that cache here, or")
    else:
      hint = "Is the machine offline, or the name wrong? Otherwise"
    raise RuntimeError(
        f"could not load Hugging Face dataset {name!r} (config {config_name!r}, split "
        f"{split!r}): {type(e).__name__}: {e}. {hint} download it where there is network "
        "(datasets.load_dataset(...).to_csv(path)) and pass the file (load_records(path), "
        "--train_data=path).") from e
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
                field_map: Mapping[str, str] | None = None, offline: bool | None = None,
                **hf_kwargs: Any) -> list[dict[str, Any]]:
  """Loads prompt records from a one-string source spec (for `--train_data=` flags).

  Specs:
    `hf:di-zhang-fdu/AIME_1983_2024`  the AIME 1983–2024 set (`AIME_1983_2024_SOURCE`);
    `hf:<name>`             Hugging Face `datasets` (`load_hf_dataset(name, split)`); a dataset
                            of `HF_FIELD_MAPS` gets its field map unless one is given;
    `tfds:<data_dir>`       a dataset prepared by `prepare_tfds` (`load_tfds(data_dir, split)`);
    `builtin:aime_sample`   the bundled AIME-style sample (`builtin_aime_sample`);
    anything else           a local file (`load_records`: .jsonl, .json, .parquet, .csv).

  Args:
    spec: the source.
    split: split for `hf:` and `tfds:` sources (files and the builtin sample have one).
    field_map: canonical field → column, for files and `hf:`.
    offline: for `hf:` sources, read only the HF cache (default: HF_HUB_OFFLINE decides); other
      sources never use the network.
    **hf_kwargs: for `hf:` sources, passed to `load_hf_dataset` (cache_dir, revision, ...).

  Returns:
    Validated records.
  """
  spec = os.fspath(spec)
  if spec.startswith("builtin:"):
    if spec not in BUILTIN_SOURCES:
      raise ValueError(f"unknown built-in source {spec!r}; available: {list(BUILTIN_SOURCES)}")
    return builtin_aime_sample()
  if spec.startswith("hf:"):
    name = spec[len("hf:"):]
    if field_map is None:
      field_map = HF_FIELD_MAPS.get(name)
    return load_hf_dataset(name, split, field_map=field_map, offline=offline, **hf_kwargs)
  if spec.startswith("tfds:"):
    return load_tfds(spec[len("tfds:"):], split)
  if not os.path.exists(spec):
    raise FileNotFoundError(f"no file {spec!r}; a source is a local .jsonl/.json/.parquet/.csv "
                            f"file, {AIME_1983_2024_SOURCE}, hf:<dataset>, tfds:<data_dir> or "
                            "builtin:aime_sample")
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
