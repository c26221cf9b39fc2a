"""Helpers shared by the tests: `from _util import both, run_script` (pytest puts tests/ on
sys.path, next to the root conftest.py)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Sequence

import jax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def both(fn, *static):
  """`fn` eagerly and under `jax.jit` (the `static` keyword arguments named static), so a test
  runs every case through both paths."""
  return [fn, jax.jit(fn, static_argnames=static)]


def run_script(script: str, *args: str, timeout: float = 600,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  """Runs `python <script> <args>` as a user does, from the repository root, and returns the
  finished process (stdout and stderr as text).

  The child runs on CPU with one device (conftest's 8 fake devices are removed from XLA_FLAGS),
  offline from the Hugging Face Hub; `env` adds or overrides variables.

  Args:
    script: path relative to the repository root, e.g. "experiments/aime.py", or absolute.
    args: command-line arguments.
    timeout: seconds before `subprocess.TimeoutExpired`.
    env: extra environment variables.
  """
  full_env = dict(os.environ, JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1", **(env or {}))
  full_env.pop("XLA_FLAGS", None)
  return subprocess.run([sys.executable, os.path.join(ROOT, script), *args], capture_output=True,
                        text=True, env=full_env, timeout=timeout, cwd=ROOT)


def imported(modules: Sequence[str], candidates: Sequence[str]) -> list[str]:
  """Which of `candidates` (e.g. "jax", "matplotlib") a fresh interpreter has imported after
  `import <modules>`, sorted: how the tests keep light modules light."""
  code = (f"import sys\nimport {', '.join(modules)}\n"
          f"print(sorted(m for m in {tuple(candidates)!r} if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       check=True, cwd=ROOT)
  return ast.literal_eval(out.stdout.strip().splitlines()[-1])
