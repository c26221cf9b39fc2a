"""Files in the real layout of the AIME 1983–2024 set (AIME_Dataset_1983_2024.csv on the Hugging
Face Hub as di-zhang-fdu/AIME_1983_2024), as a CSV and as the `datasets` cache an online load
leaves, so that tests load them offline through the user's code path."""

import csv
import glob
import os
import shutil

AIME_HEADER = ["ID", "Year", "Problem Number", "Question", "Answer", "Part"]


def aime_rows(n):
  """n rows in the layout of AIME_Dataset_1983_2024.csv (Part empty before 2000, as there)."""
  rows = []
  for i in range(n):
    year, number = 1983 + i // 15, 1 + i % 15
    part = "" if year < 2000 else ("I" if i % 2 else "II")
    rid = f"{year}-{number}" if not part else f"{year}-{part}-{number}"
    rows.append([rid, year, number, f"Problem {i}: find ${i}^2$, given \"x\", y.", i * i % 1000,
                 part])
  return rows


def write_aime_csv(path, rows):
  with open(path, "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(AIME_HEADER)
    writer.writerows(rows)
  return path


def fill_hf_datasets_cache(cache_dir, csv_path, repo="di-zhang-fdu/AIME_1983_2024"):
  """Writes what `datasets.load_dataset(repo)` leaves in its cache for a one-CSV Hub dataset:
  <namespace>___<name>/default/0.0.0/<commit>/{dataset_info.json, <name>-train.arrow}, built
  from `csv_path` by datasets' own CSV builder."""
  from datasets.packaged_modules.csv.csv import Csv
  namespace, name = repo.split("/")
  name = name.lower()   # datasets' snake_case of "AIME_1983_2024"
  commit = "0" * 40
  build = os.path.join(str(cache_dir), "_build")
  Csv(cache_dir=build, dataset_name=name, data_files={"train": str(csv_path)},
      config_name="default", hash=commit).download_and_prepare()
  [built] = glob.glob(os.path.join(build, name, "*", "0.0.0", commit))
  shutil.copytree(built, os.path.join(str(cache_dir), f"{namespace}___{name}", "default", "0.0.0",
                                      commit))
  shutil.rmtree(build)
