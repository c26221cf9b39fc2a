"""Small data files bundled with botjax (read with `importlib.resources`).

- `aime_sample.jsonl`: fifteen AIME-style problems written for botjax, with integer answers,
  worked step solutions and a `year` label; see `botjax.data.loaders.builtin_aime_sample`.
"""
