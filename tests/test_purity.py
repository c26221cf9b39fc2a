"""The math modules import nothing heavy: no flax, transformers or torch."""

from _util import imported

HEAVY = ("flax", "transformers", "torch")


def test_math_modules_import_no_heavy_dependencies():
  modules = ("botjax.types", "botjax.ops", "botjax.advantages", "botjax.losses",
             "botjax.metrics", "botjax.algorithms")
  assert imported(modules, HEAVY) == []


def test_math_modules_never_jit_at_definition():
  # Math modules stay pure: no jit decorator or module-level jitted alias (callers jit).
  import inspect
  import re

  from botjax import advantages, algorithms, losses, metrics, ops
  pattern = re.compile(r"^\s*@.*jit|^\w+\s*=\s*(jax\.)?jit\(", re.MULTILINE)
  for mod in (advantages, losses, algorithms, metrics, ops):
    assert not pattern.search(inspect.getsource(mod)), mod.__name__
