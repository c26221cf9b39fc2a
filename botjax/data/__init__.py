"""Prompt datasets: the arithmetic task, the AIME 1983–2024 set, problem files, templates, tokenizer.

Plain Python and numpy; `transformers`/`tokenizers` are imported only by `build_tokenizer`, and
the optional readers (`pyarrow`, `datasets`, `tensorflow_datasets`) only by their loaders.
"""

from botjax.data.arithmetic import (
    DEFAULT_ERROR_WEIGHTS,
    ERROR_KINDS,
    ArithmeticTask,
    WorkedSolution,
    apply_op,
    evaluate_expression,
    final_accuracy_of_mix,
    format_solution,
    imperfect_solution,
    imperfect_worked_solution,
    make_splits,
    record_from_operands,
    reference_solution,
    warm_start_examples,
)
from botjax.data.dataset import PromptDataset
from botjax.data.loaders import (
    AIME_1983_2024,
    AIME_1983_2024_FIELDS,
    AIME_1983_2024_SOURCE,
    builtin_aime_sample,
    describe_source,
    load_hf_dataset,
    load_source,
    load_tfds,
    prepare_tfds,
    split_by_year,
    split_random,
)
from botjax.data.records import (
    DataFormatError,
    load_csv,
    load_json,
    load_jsonl,
    load_parquet,
    load_records,
    validate_record,
    validate_records,
)
from botjax.data.templates import (
    ARITHMETIC_TEMPLATE,
    MATH_TEMPLATE,
    TEMPLATES,
    chat_messages,
    format_prompt,
)
from botjax.data.tokenizer import CHAT_TEMPLATE, build_tokenizer, chatml, task_corpus

__all__ = [
    "AIME_1983_2024", "AIME_1983_2024_FIELDS", "AIME_1983_2024_SOURCE", "DataFormatError",
    "describe_source", "PromptDataset", "builtin_aime_sample",
    "load_csv", "load_hf_dataset", "load_json", "load_jsonl", "load_parquet", "load_records", "load_source",
    "load_tfds", "prepare_tfds", "split_by_year", "split_random", "validate_record",
    "validate_records",
    "ARITHMETIC_TEMPLATE", "ArithmeticTask", "CHAT_TEMPLATE", "build_tokenizer", "chatml",
    "task_corpus", "DEFAULT_ERROR_WEIGHTS", "ERROR_KINDS",
    "MATH_TEMPLATE", "TEMPLATES", "WorkedSolution", "apply_op", "chat_messages",
    "evaluate_expression", "format_prompt", "format_solution", "imperfect_solution",
    "imperfect_worked_solution", "make_splits", "record_from_operands", "reference_solution",
    "final_accuracy_of_mix", "warm_start_examples",
]
