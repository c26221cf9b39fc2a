"""The math modules import nothing heavy: no flax, transformers or torch."""

import json
import subprocess
import sys

HEAVY = ("flax", "transformers", "torch")


def test_math_modules_import_no_heavy_dependencies():
  modules = ("botjax.types", "botjax.ops", "botjax.advantages", "botjax.losses",
             "botjax.metrics", "botjax.algorithms")
  code = (f"import sys\nimport {', '.join(modules)}\n"
          f"import json\nprint(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       check=True)
  assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_math_modules_never_jit_at_definition():
  # Math modules stay pure: no jit decorator or module-level jitted alias (callers jit).
  import inspect
  import re

  from botjax import advantages, algorithms, losses, metrics, ops
  pattern = re.compile(r"^\s*@.*jit|^\w+\s*=\s*(jax\.)?jit\(", re.MULTILINE)
  for mod in (advantages, losses, algorithms, metrics, ops):
    assert not pattern.search(inspect.getsource(mod)), mod.__name__
