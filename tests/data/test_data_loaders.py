"""Tests of the problem-file loaders (JSONL, JSON, Parquet, CSV, HF datasets, TFDS) and splits."""

import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest

from botjax.data import loaders as L
from _aime_data import aime_rows, fill_hf_datasets_cache, write_aime_csv

GOOD = [
    {"id": "a-1", "year": 1990, "problem": "Find 2 + 2.", "answer": "4"},
    {"id": "a-2", "year": 2024, "problem": "Find 3 * 3.", "answer": 9, "solution": "<final>9</final>"},
    {"year": 2025, "problem": "Find $\\frac{10}{2}$.", "answer": " 5 "},
]


def _write_jsonl(path, rows, blank_after=None):
  with open(path, "w") as f:
    for i, row in enumerate(rows):
      f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
      if blank_after == i:
        f.write("\n")
  return path


def _check_good(records, default_id):
  assert [r["id"] for r in records] == ["a-1", "a-2", default_id]
  assert [r["answer"] for r in records] == ["4", "9", "5"]  # ints and padding normalised
  assert [r["year"] for r in records] == [1990, 2024, 2025]
  assert records[1]["solution"] == "<final>9</final>"  # extra fields pass through
  assert records[2]["problem"] == "Find $\\frac{10}{2}$."


def test_jsonl_good_file(tmp_path):
  path = _write_jsonl(tmp_path / "p.jsonl", GOOD, blank_after=0)
  records = L.load_records(path)
  _check_good(records, "p-4")  # default id from the 1-based line (line 2 is blank)


@pytest.mark.parametrize("bad_line,match", [
    ({"id": "x", "problem": "p"}, r"p\.jsonl: line 3: missing required field 'answer' \(found "
     r"fields: \['id', 'problem'\]\); expected fields: problem"),
    ({"answer": "1"}, r"line 3: missing required field 'problem'"),
    ({"problem": "", "answer": "1"}, r"line 3: field 'problem' must be a non-empty string"),
    ({"problem": "p", "answer": [1]}, r"line 3: field 'answer' must be a string or an integer, "
     r"got list"),
    ({"problem": "p", "answer": "1", "year": "19x3"}, r"line 3: field 'year' must be an integer "
     r"year, got '19x3'"),
    ({"id": "a-1", "problem": "p", "answer": "1"}, r"line 3: duplicate id 'a-1' \(first at line 1\)"),
    ('{"problem": "p", "answer": ', r"line 3: not valid JSON"),
    ("[1, 2]", r"line 3: expected an object with fields, got list"),
])
def test_jsonl_bad_line_names_line_and_field(tmp_path, bad_line, match):
  path = _write_jsonl(tmp_path / "p.jsonl", GOOD[:2] + [bad_line])
  with pytest.raises(L.DataFormatError, match=match):
    L.load_jsonl(path)


def test_field_map_for_kaggle_style_columns(tmp_path):
  path = tmp_path / "aime.csv"
  path.write_text('ID,Year,Problem Number,Question,Answer\n'
                  '1983-I-1,1983,1,"Find x, given ""quotes"".",60\n'
                  '2024-II-3,2024,3,Another problem,7\n')
  records = L.load_records(path, field_map=L.AIME_1983_2024_FIELDS)
  assert records[0] == {"id": "1983-I-1", "year": 1983, "Problem Number": "1",
                        "problem": 'Find x, given "quotes".', "answer": "60"}
  train, evals = L.split_by_year(records, eval_years=[2024])
  assert [r["id"] for r in train] == ["1983-I-1"] and [r["id"] for r in evals] == ["2024-II-3"]
  with pytest.raises(L.DataFormatError, match=r"missing required column 'problem' \(found "
                     r"columns: \['Answer', 'ID', 'Problem Number', 'Question', 'Year'\]\)"):
    L.load_records(path)
  with pytest.raises(ValueError, match="field_map keys \\['question'\\]"):
    L.validate_record({"problem": "p", "answer": "1"}, field_map={"question": "Q"})


def test_json_array(tmp_path):
  path = tmp_path / "p.json"
  path.write_text(json.dumps(GOOD))
  _check_good(L.load_records(path), "p-2")
  path.write_text(json.dumps(GOOD[:1] + [{"problem": "q"}]))
  with pytest.raises(L.DataFormatError, match="p.json: item 1: missing required field 'answer'"):
    L.load_records(path)
  path.write_text(json.dumps({"problem": "q"}))
  with pytest.raises(L.DataFormatError, match="expected a JSON array"):
    L.load_records(path)


def test_parquet_good_and_bad(tmp_path):
  pa = pytest.importorskip("pyarrow")
  import pyarrow.parquet as pq
  good = [dict(r, answer=str(r["answer"]), solution=r.get("solution")) for r in GOOD]
  path = tmp_path / "p.parquet"
  pq.write_table(pa.Table.from_pylist(good), path)
  records = L.load_records(path)
  _check_good(records, "p-2")  # 0-based row
  bad = [dict(g) for g in good]
  bad[1]["answer"] = None
  pq.write_table(pa.Table.from_pylist(bad), path)
  with pytest.raises(L.DataFormatError, match=r"p\.parquet: row 1: missing required field "
                     r"'answer'"):
    L.load_records(path)
  pq.write_table(pa.Table.from_pylist([{"question": "q", "answer": "1"}]), path)
  with pytest.raises(L.DataFormatError, match=r"missing required column 'problem' \(found "
                     r"columns: \['answer', 'question'\]\)"):
    L.load_records(path)
  assert L.load_parquet(path, field_map={"problem": "question"})[0]["problem"] == "q"


def test_unknown_suffix(tmp_path):
  with pytest.raises(ValueError, match="unknown file type '.txt'; expected one of"):
    L.load_records(tmp_path / "p.txt")


def test_builtin_sample_answers_and_split():
  records = L.builtin_aime_sample()
  assert len(records) == 15 and len({r["id"] for r in records}) == 15
  for r in records:
    assert r["answer"].isdigit() and 0 <= int(r["answer"]) <= 999
    assert r["solution"].endswith(f"<final>{r['answer']}</final>")
    assert r["solution"].startswith("<step 1>")
  train, evals = L.split_by_year(records)
  assert {r["year"] for r in evals} == {2024, 2025} and len(evals) == 5 and len(train) == 10
  # Spot-check a few answers by computing them here.
  by_id = {r["id"]: int(r["answer"]) for r in records}
  assert by_id["botjax-sample-02"] == pow(7, 2026, 1000)
  assert by_id["botjax-sample-11"] == sum(d for d in range(1, 2025) if 2024 % d == 0) % 1000
  assert by_id["botjax-sample-13"] == sum(1 for n in range(1, 1000)
                                          if sum(map(int, str(n))) == 10)
  with pytest.raises(L.DataFormatError, match="record 'x' has no 'year'"):
    L.split_by_year([{"id": "x", "problem": "p", "answer": "1"}])


def test_split_random_is_seeded_and_disjoint():
  records = [{"id": str(i), "problem": f"p{i % 40}", "answer": "1"} for i in range(50)]
  train, evals = L.split_random(records, 0.2, seed=0)
  assert len({r["problem"] for r in evals}) == 8  # 20% of 40 distinct problems
  assert not {r["problem"] for r in train} & {r["problem"] for r in evals}
  assert len(train) + len(evals) == 50
  assert L.split_random(records, 0.2, seed=0) == (train, evals)
  assert L.split_random(records, 0.2, seed=1) != (train, evals)
  with pytest.raises(ValueError, match="eval_fraction=1.5"):
    L.split_random(records, 1.5)


def test_hf_datasets_local_files_and_offline_error(tmp_path, monkeypatch):
  if importlib.util.find_spec("datasets") is None:
    with pytest.raises(ImportError, match="pip install datasets"):
      L.load_hf_dataset("some/dataset")
    return
  path = _write_jsonl(tmp_path / "p.jsonl", [dict(r, answer=str(r["answer"])) for r in GOOD])
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
  monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
  records = L.load_hf_dataset("json", data_files=str(path), cache_dir=str(tmp_path / "cache"))
  assert [r["answer"] for r in records] == ["4", "9", "5"]
  assert records[2]["id"] == "hf:json[train]-2"
  with pytest.raises(RuntimeError, match=r"could not load Hugging Face dataset "
                     r"'botjax-test/no-such-aime'.*Offline mode is on.*load_records\(path\)"):
    L.load_hf_dataset("botjax-test/no-such-aime", cache_dir=str(tmp_path / "cache"))


def test_tfds_missing_gives_install_hint(tmp_path):
  code = ("import sys; sys.modules['tensorflow_datasets'] = None\n"
          "from botjax.data import loaders\n"
          "try:\n  loaders.load_tfds('x')\nexcept ImportError as e:\n  print(e)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert "pip install tensorflow-datasets array_record" in out.stdout


def test_tfds_array_record_round_trip(tmp_path):
  if importlib.util.find_spec("tensorflow_datasets") is None:
    pytest.skip("tensorflow_datasets not installed (pip install tensorflow-datasets array_record)")
  records = L.builtin_aime_sample()
  train, evals = L.split_by_year(records)
  _write_jsonl(tmp_path / "train.jsonl", train)
  _write_jsonl(tmp_path / "test.jsonl", evals + [{"problem": "No year.", "answer": "0",
                                                   "id": "ny"}])
  version_dir = L.prepare_tfds({"train": tmp_path / "train.jsonl",
                                "test": tmp_path / "test.jsonl"}, tmp_path / "tfds")
  files = os.listdir(version_dir)
  assert any(".array_record-" in f and "-train." in f for f in files), files
  core = ("id", "problem", "answer", "year")
  assert L.load_tfds(tmp_path / "tfds", "train") == [{k: r[k] for k in core} for r in train]
  back = L.load_tfds(tmp_path / "tfds", "test")
  assert back[:-1] == [{k: r[k] for k in core} for r in evals]
  assert back[-1] == {"id": "ny", "problem": "No year.", "answer": "0"}
  assert "tensorflow" not in sys.modules
  with pytest.raises(ValueError, match="split 'validation' not in the prepared dataset"):
    L.load_tfds(tmp_path / "tfds", "validation")
  _write_jsonl(tmp_path / "bad.jsonl", [{"problem": "p"}])
  with pytest.raises(L.DataFormatError, match="bad.jsonl: line 1: missing required field"):
    L.prepare_tfds({"train": tmp_path / "bad.jsonl"}, tmp_path / "tfds_bad")


def test_load_source_specs(tmp_path):
  assert L.load_source("builtin:aime_sample") == L.builtin_aime_sample()
  path = _write_jsonl(tmp_path / "p.jsonl", GOOD)
  assert L.load_source(path) == L.load_records(path)
  with pytest.raises(ValueError, match="unknown built-in source 'builtin:math'"):
    L.load_source("builtin:math")
  with pytest.raises(FileNotFoundError, match="no file 'nope.jsonl'; a source is"):
    L.load_source("nope.jsonl")


# -- The AIME 1983–2024 set, in its real column layout ----------------------------------------

needs_datasets = pytest.mark.skipif(importlib.util.find_spec("datasets") is None,
                                    reason="datasets not installed (pip install datasets)")


@needs_datasets
def test_aime_1983_2024_loads_offline_from_the_hf_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # never the network; read the cache only
  rows = aime_rows(40)
  csv_path = write_aime_csv(tmp_path / "AIME_Dataset_1983_2024.csv", rows)
  cache = tmp_path / "datasets-cache"
  with pytest.raises(RuntimeError, match=r"'di-zhang-fdu/AIME_1983_2024'.*Offline mode is on.*"
                     + str(cache)):
    L.load_source(L.AIME_1983_2024_SOURCE, cache_dir=str(cache))
  fill_hf_datasets_cache(cache, csv_path)
  records = L.load_source(L.AIME_1983_2024_SOURCE, cache_dir=str(cache))
  assert len(records) == 40
  for record, (rid, year, number, question, answer, part) in zip(records, rows):
    assert (record["id"], record["year"], record["problem"], record["answer"]) == (
        rid, year, question, str(answer))
    assert record["Problem Number"] == number and (record["Part"] or "") == part
  # the same file read directly, with the same field map, gives the same problems
  direct = L.load_records(csv_path, field_map=L.AIME_1983_2024_FIELDS)
  core = ("id", "year", "problem", "answer")
  assert [{k: r[k] for k in core} for r in direct] == [{k: r[k] for k in core} for r in records]
  assert "AIME 1983–2024" in L.describe_source(L.AIME_1983_2024_SOURCE)


def test_missing_datasets_package_says_what_to_install():
  code = ("import sys; sys.modules['datasets'] = None\n"
          "from botjax.data import loaders\n"
          "try:\n  loaders.load_source(loaders.AIME_1983_2024_SOURCE)\n"
          "except ImportError as e:\n  print(e)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1"))
  assert ("'di-zhang-fdu/AIME_1983_2024' needs the datasets package: pip install datasets"
          in out.stdout)


def test_random_80_20_split_is_seeded_disjoint_complete_and_stable(tmp_path):
  records = L.load_records(write_aime_csv(tmp_path / "a.csv", aime_rows(93)),
                           field_map=L.AIME_1983_2024_FIELDS)
  train, evals = L.split_random(records, 0.2, seed=0)
  ids = [r["id"] for r in records]
  train_ids, eval_ids = [r["id"] for r in train], [r["id"] for r in evals]
  assert len(eval_ids) == round(0.2 * 93) == 19 and len(train_ids) == 74
  assert not set(train_ids) & set(eval_ids) and sorted(train_ids + eval_ids) == sorted(ids)
  assert train_ids == [i for i in ids if i in set(train_ids)]   # file order kept on each side
  # stable: again, from shuffled input, and in a fresh interpreter with another hash seed
  assert L.split_random(records, 0.2, seed=0) == (train, evals)
  shuffled = list(records)
  random.Random(5).shuffle(shuffled)
  assert sorted(r["id"] for r in L.split_random(shuffled, 0.2, seed=0)[1]) == sorted(eval_ids)
  code = ("import json, sys\nfrom botjax.data import loaders as L\n"
          f"r = L.load_records({str(tmp_path / 'a.csv')!r}, field_map=L.AIME_1983_2024_FIELDS)\n"
          "print(json.dumps([x['id'] for x in L.split_random(r, 0.2, seed=0)[1]]))\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env=dict(os.environ, PYTHONHASHSEED="123"))
  assert json.loads(out.stdout) == eval_ids
  assert [r["id"] for r in L.split_random(records, 0.2, seed=1)[1]] != eval_ids
