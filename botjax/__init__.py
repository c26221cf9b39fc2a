"""botjax: Pure-JAX RL for language models with token-level rewards.

Import the parts you need; importing `botjax` itself is cheap and pulls in nothing heavy:

  import botjax.advantages   # jax, chex, numpy only
  import botjax.losses       # jax, chex, numpy only
  import botjax.models       # flax.nnx ports of the target decoders
"""

import importlib as _importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "types", "ops", "advantages", "losses", "algorithms", "metrics",
    "models", "sampling", "rewards", "data", "train", "testbeds", "plotting", "distributed",
)


def __getattr__(name):  # lazy submodules: `botjax.advantages` without importing flax
  if name in _SUBMODULES:
    return _importlib.import_module(f"botjax.{name}")
  raise AttributeError(f"module 'botjax' has no attribute {name!r}")


__all__ = list(_SUBMODULES)
