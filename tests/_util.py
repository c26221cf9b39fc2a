"""Helpers shared by the tests: `from _util import both, run_script` (pytest puts tests/ on
sys.path, next to the root conftest.py)."""
from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def both(fn, *static):
  """`fn` eagerly and under `jax.jit` (the `static` keyword arguments named static), so a test
  runs every case through both paths."""
  return [fn, jax.jit(fn, static_argnames=static)]


def load_experiment(name: str):
  """experiments/<name>.py imported as a module (`botjax_experiments_<name>`, once per process),
  with experiments/ on sys.path for its `_cli` imports; its flags are defined, not parsed."""
  import importlib.util
  module_name = f"botjax_experiments_{name}"
  if module_name not in sys.modules:
    sys.path.insert(0, os.path.join(ROOT, "experiments"))
    spec = importlib.util.spec_from_file_location(
        module_name, os.path.join(ROOT, "experiments", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[module_name] = module
  return sys.modules[module_name]


def tiny_arith(root, task, *, num_train: int = 40, num_eval: int = 4):
  """A tiny trainer set-up on an arithmetic task: (tokenizer, a 2-layer Qwen2-style ModelConfig
  of width 32 over that tokenizer, the training records). The tokenizer is built under `root`."""
  import dataclasses
  from botjax import data, models
  tok = data.build_tokenizer(str(root / "tok"), task, vocab_size=300, num_problems=300)
  eos = tok.convert_tokens_to_ids("<|im_end|>")
  cfg = dataclasses.replace(models.get_config("tiny"), vocab_size=len(tok), hidden_size=32,
                            num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16,
                            intermediate_size=64, eos_token_id=(eos,),
                            pad_token_id=tok.pad_token_id, bos_token_id=0)
  train, _ = data.make_splits(task, num_train, num_eval)
  return tok, cfg, train


def one_device_xla_flags() -> str:
  """conftest's XLA_FLAGS without its 8 fake host devices: what a child process (a CLI, a notebook
  kernel) gets, so it sees one CPU device as a user's would, compiled as the suite compiles."""
  return " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                  if not f.startswith("--xla_force_host_platform_device_count"))


def run_script(script: str, *args: str, timeout: float = 600,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  """Runs `python <script> <args>` as a user does, from the repository root, and returns the
  finished process (stdout and stderr as text).

  The child runs on CPU with one device (conftest's 8 fake devices are removed from XLA_FLAGS; its
  other flags, such as -O0 code generation, are kept), offline from the Hugging Face Hub; `env`
  adds or overrides variables.

  Args:
    script: path relative to the repository root, e.g. "experiments/aime.py", or absolute.
    args: command-line arguments.
    timeout: seconds before `subprocess.TimeoutExpired`.
    env: extra environment variables.
  """
  return _python([os.path.join(ROOT, script), *args], timeout, env)


def _python(argv, timeout, env):
  """`python <argv>` from the repository root in run_script's environment."""
  full_env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1",
              "XLA_FLAGS": one_device_xla_flags(), **(env or {})}
  return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=full_env,
                        timeout=timeout, cwd=ROOT)


_CASES_DRIVER = r"""
import contextlib, io, json, os, runpy, sys
from absl import flags
script, cases = sys.argv[1], json.loads(sys.argv[2])
here = os.path.dirname(script)
sys.path.insert(0, here)                        # as `python <script>` does
results = []
for args in cases:
  out, err = io.StringIO(), io.StringIO()
  sys.argv = [script, *args]
  flags.FLAGS.unparse_flags()          # every flag back to its default, as in a fresh process
  for name, mod in list(sys.modules.items()):    # the script's own helper modules run afresh too
    if os.path.dirname(getattr(mod, "__file__", None) or "") == here:
      del sys.modules[name]
  code = 0
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
      import traceback
      traceback.print_exc()
      code = 1
  results.append([code, out.getvalue(), err.getvalue()])
sys.__stdout__.write("\n@@cases@@" + json.dumps(results))
"""


def run_script_cases(script: str, cases: Sequence[Sequence[str]], *, timeout: float = 600,
                     env: dict[str, str] | None = None) -> list[subprocess.CompletedProcess]:
  """`run_script(script, *case)` for each case, in one interpreter: for short cases (user errors,
  dry runs, plots), whose time is mostly the interpreter's start-up and imports.

  Each case runs the script as `__main__` through its own entry point, with sys.argv set and
  every absl flag reset to its default first, so its exit code, stdout and stderr are those of a
  separate run, except that output written straight to the file descriptors (by child processes)
  is not captured and a warning Python shows once per process appears in the first case only.
  Same environment as `run_script`.

  Returns:
    One CompletedProcess per case, in order.
  """
  driver = _python(["-c", _CASES_DRIVER, os.path.join(ROOT, script),
                    json.dumps([list(c) for c in cases])], timeout, env)
  _, sep, tail = driver.stdout.rpartition("\n@@cases@@")
  if not sep:
    raise RuntimeError(f"the case driver failed:\n{driver.stdout[-2000:]}\n{driver.stderr[-3000:]}")
  return [subprocess.CompletedProcess([script, *case], code, out, err)
          for case, (code, out, err) in zip(cases, json.loads(tail))]


def imported(modules: Sequence[str], candidates: Sequence[str]) -> list[str]:
  """Which of `candidates` (e.g. "jax", "matplotlib") a fresh interpreter has imported after
  `import <modules>`, sorted: how the tests keep light modules light."""
  code = (f"import sys\nimport {', '.join(modules)}\n"
          f"print(sorted(m for m in {tuple(candidates)!r} if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       check=True, cwd=ROOT)
  return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def pure_credit_loop(x, step_mask, token_step, mask, temp=0.1):
  """PURE's min-form credit of a token signal over steps, written out (arXiv 2504.15275): per
  row, each valid step's value is the mean of x over its scored tokens (steps without any take
  no part); a softmax of -value/temp over those steps weighs the values, and a token of step k
  gets the weighted values summed over steps k, k+1, ...; tokens of no step get 0.
  x, mask, token_step: [B, T]; step_mask: [B, S]."""
  out = np.zeros(x.shape)
  B, T = x.shape
  for i in range(B):
    values = {}
    for k in range(step_mask.shape[1]):
      toks = [t for t in range(T) if mask[i, t] and token_step[i, t] == k]
      if step_mask[i, k] and toks:
        values[k] = sum(float(x[i, t]) for t in toks) / len(toks)
    if not values:
      continue
    lo = min(-v / temp for v in values.values())
    e = {k: math.exp(-v / temp - lo) for k, v in values.items()}
    total = sum(e.values())
    for t in range(T):
      k = int(token_step[i, t])
      if mask[i, t] and k in values:
        out[i, t] = sum(e[j] / total * values[j] for j in values if j >= k)
  return out
