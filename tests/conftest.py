"""Test configuration: 8 fake CPU devices, XLA:CPU code generation at -O0, strict shapes,
reproducible hypothesis, one compilation cache per run.

`XLA_FLAGS` must be set before jax is imported anywhere, so this happens at the top of the
module pytest imports first.
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = ["--xla_force_host_platform_device_count=8"]
# XLA:CPU's LLVM back end at -O0: the suite's programs are tiny and compiled once or a few times
# each, so code generation, not execution, dominates; on the 2-core machine this halved the
# update tests (123 -> 55 CPU-s) and the sampler tests (153 -> 77 CPU-s). Fusions are emitted by
# XLA:CPU's elemental IR emitter instead of its MLIR fusion emitters, which compile slower: four
# micro-batched updates of the tiny test model compiled in 6.3-8.0 s against 12.1-12.5 s.
# The memory analyses the tests read differ by bytes (a micro-batched update's temporaries:
# 885,552 against 885,424 bytes); float rounding of the generated kernels may differ.
# BOTJAX_TESTS_XLA_OPT=1 keeps XLA's defaults.
if os.environ.get("BOTJAX_TESTS_XLA_OPT", "0") != "1":
  _flags += ["--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"]
for _flag in _flags:
  if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

# One persistent XLA compilation cache per test run, shared by the xdist workers and every
# subprocess they start (the CLI, notebook and benchmark tests compile the same tiny programs
# many times: a warm cache cuts a two-step quick-start from about 60 to 20 s of CPU). It starts
# empty on each run, so every program is still compiled at least once.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  import tempfile
  _run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(tempfile.gettempdir(),
                                                         f"botjax-tests-jax-cache-{_run_id}")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.hookimpl(tryfirst=True)   # before `-m` selects: `-m 'not slow'` leaves e2e tests out
def pytest_collection_modifyitems(items):
  """An `e2e` test (an experiment, notebook, guide or benchmark run end to end) is also `slow`."""
  for item in items:
    if item.get_closest_marker("e2e") is not None:
      item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session):
  """Freezes the test run's objects out of the garbage collector before pytest's cleanup.

  An xdist worker ends holding about 1.6 M Python objects; pytest's unraisable-exception cleanup
  then runs five full collections (1.6-1.8 s each), longer than the 5 s execnet waits before it
  interrupts a finishing worker, which printed a KeyboardInterrupt after the last test. Frozen
  objects are not scanned, so those collections see only what is created afterwards.
  """
  import gc
  gc.freeze()
