"""The house rules of DESIGN.md, read from the source of botjax/ and experiments/ (ast, nothing
imported): the imports form no cycle and run only down the floors, no module reaches into a
private module of another package, and CPU branches live in the CPU modules only.

Imports are every `import` / `from ... import` statement of a module, also those inside
functions (a lazy import still ties the two modules together). `from P import x` is an edge to
the module `P.x` when there is one, else to `P` (its `__init__`); `import _cli` in experiments/
(its own directory is on sys.path) is an edge to `experiments._cli`.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# DESIGN.md's layout as floors: a module imports only modules of lower floors, or of its own
# unit (the package or module named here). Units of one floor do not import each other.
FLOORS = {
    "botjax.types": 0,
    "botjax.ops": 1,
    "botjax.xla_cpu": 2, "botjax.advantages": 2, "botjax.losses": 2, "botjax.metrics": 2,
    "botjax.algorithms": 3, "botjax.data": 3,
    "botjax.models": 4,
    "botjax.sampling": 5,
    # the multi-process runtime (joining, rows per process, gathers): reads models.sharding's
    # mesh specs; the collector, the evaluation and the experiments call it
    "botjax.distributed": 5,
    "botjax.rewards": 6,
    "botjax.train": 7,
    "botjax.testbeds": 8,
    "botjax.plotting": 8,     # draws only; reads a run's files through train.rundir.RunDir
    "botjax": 9,
    "experiments": 10,
}
# Known imports against the floors, each with its reason; the test fails when one disappears,
# so that this list only shrinks.
KNOWN_UPWARD = {
    # a recipe checks that a reward provides the signal it needs (RewardSpec, numpy only)
    ("botjax.algorithms", "botjax.rewards.base"),
}
# Known import cycles, each with its reason (shrink-only, as KNOWN_UPWARD).
KNOWN_CYCLES: list[list[str]] = []
# The modules that may branch on the CPU platform (DESIGN.md: "xla_cpu.py (+ CPU kernels)").
CPU_MODULES = {"botjax.xla_cpu", "botjax.models.attention_cpu"}
# Known CPU branches elsewhere, (module, line text), each with its reason (shrink-only).
KNOWN_CPU_BRANCHES = {
    # the memory planner: a CPU host has no device memory limit to plan against (a query of
    # the hardware, not an XLA:CPU measure; `memory_stats()` is None there as well)
    ("botjax.models.plan", 'if dev.platform == "cpu":'),
}
CPU_LAYOUT = "BKHS"       # the KV-cache layout only the XLA:CPU attention reads


def _modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
  mods = {}
  for top in ("botjax", "experiments"):
    for path in sorted((root / top).rglob("*.py")):
      if "node_modules" in path.parts:
        continue
      parts = list(path.relative_to(root).with_suffix("").parts)
      if parts[-1] == "__init__":
        parts = parts[:-1]
      mods[".".join(parts)] = path
  return mods


def _imports(name: str, tree: ast.AST, mods: dict) -> list[tuple[str, int]]:
  """(imported module of botjax/ or experiments/, line) of every import statement."""
  out = []
  package = name if mods[name].name == "__init__.py" else name.rpartition(".")[0]
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        for target in (alias.name, "experiments." + alias.name):
          if target in mods:
            out.append((target, node.lineno))
            break
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      if base not in mods and "experiments." + base in mods:
        base = "experiments." + base
      if base not in mods:
        continue
      for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append((sub if sub in mods else base, node.lineno))
  return out


def _unit(module: str) -> str:
  return next(u for u in sorted(FLOORS, key=len, reverse=True)
              if module == u or module.startswith(u + "."))


def _private(module: str) -> bool:
  last = module.rpartition(".")[2]
  return last.startswith("_") and not last.startswith("__")


def _graph(root: pathlib.Path):
  mods = _modules(root)
  trees = {m: ast.parse(p.read_text(), str(p)) for m, p in mods.items()}
  edges = {m: _imports(m, trees[m], mods) for m in mods}
  return mods, trees, edges


def _cycles(edges) -> list[list[str]]:
  """The strongly connected components with more than one module (or a self-import)."""
  index, low, stack, on, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w, _ in edges.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1 or any(w == v for w, _ in edges.get(v, ())):
        out.append(sorted(comp))

  for v in sorted(edges):
    if v not in index:
      visit(v)
  return out


def _cpu_branches(tree: ast.AST) -> list[tuple[int, str]]:
  """Where a module branches on the CPU platform, as (line, what):

  * a comparison (`==`, `!=`, `in`, `not in`) with the string "cpu", also as an element of a
    tuple, list or set operand (`platform == "cpu"`, `implementation != "cpu"`);
  * a call with a `cpu=` keyword (the CPU branch of `jax.lax.platform_dependent`), or a call
    of `platform_dependent` or `on_cpu` (`botjax.xla_cpu`'s two-branch helper);
  * a parameter default that is the CPU choice: the string "cpu" (the CPU attention) or
    "BKHS" (its KV-cache layout), also through `dataclasses.field` / `struct.field(default=)`.
  """
  hits = []

  def is_cpu(node, values=("cpu",)):
    if isinstance(node, ast.Constant):
      return node.value in values
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
      return any(is_cpu(e, values) for e in node.elts)
    return False

  for node in ast.walk(tree):
    if isinstance(node, ast.Compare):
      if any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops) and (
          any(is_cpu(x) for x in [node.left, *node.comparators])):
        hits.append((node.lineno, "comparison with 'cpu'"))
    elif isinstance(node, ast.Call):
      fn = node.func
      called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
      if called in ("platform_dependent", "on_cpu"):
        hits.append((node.lineno, f"call of {called}"))
      for kw in node.keywords:
        if kw.arg == "cpu":
          hits.append((node.lineno, "cpu= keyword"))
        if kw.arg == "default" and is_cpu(kw.value, ("cpu", CPU_LAYOUT)):
          hits.append((node.lineno, f"field default {kw.value.value!r}"))
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      for default in [*node.args.defaults, *node.args.kw_defaults]:
        if default is not None and is_cpu(default, ("cpu", CPU_LAYOUT)):
          hits.append((default.lineno, f"parameter default {default.value!r}"))
    elif isinstance(node, (ast.AnnAssign, ast.Assign)) and isinstance(
        getattr(node, "value", None), ast.Constant) and node.value.value == CPU_LAYOUT:
      hits.append((node.lineno, f"assignment of {CPU_LAYOUT!r}"))
  return hits


@pytest.fixture(scope="module")
def graph():
  return _graph(ROOT)


def test_every_module_is_on_a_floor(graph):
  mods, _, _ = graph
  assert all(_unit(m) in FLOORS for m in mods)
  assert "botjax.xla_cpu" in mods and "botjax.models.attention_cpu" in mods


def test_no_import_cycle(graph):
  _, _, edges = graph
  assert _cycles(edges) == KNOWN_CYCLES


def test_imports_run_down_the_floors(graph):
  mods, _, edges = graph
  bad, seen = [], set()
  for m, targets in edges.items():
    for t, line in targets:
      u, v = _unit(m), _unit(t)
      if u == v:
        continue
      if FLOORS[v] >= FLOORS[u]:
        if (u, t) in KNOWN_UPWARD:
          seen.add((u, t))
        else:
          bad.append(f"{mods[m].relative_to(ROOT)}:{line} imports {t} (floor {FLOORS[v]} "
                     f"from floor {FLOORS[u]})")
  assert bad == [], "\n".join(bad)
  assert seen == KNOWN_UPWARD, f"no longer imported, remove from KNOWN_UPWARD: " \
                               f"{KNOWN_UPWARD - seen}"


def test_the_cpu_leaf_imports_nothing_above_ops(graph):
  _, _, edges = graph
  assert {t for t, _ in edges["botjax.xla_cpu"]} <= {"botjax.types", "botjax.ops"}


def test_no_private_module_of_another_package(graph):
  mods, _, edges = graph
  bad = [f"{mods[m].relative_to(ROOT)}:{line} imports {t}"
         for m, targets in edges.items() for t, line in targets
         if _private(t) and t.rpartition(".")[0] != (
             m if mods[m].name == "__init__.py" else m.rpartition(".")[0])]
  assert bad == [], "\n".join(bad)


def test_cpu_branches_only_in_the_cpu_modules(graph):
  mods, trees, _ = graph
  bad, seen = [], set()
  for m in sorted(set(mods) - CPU_MODULES):
    lines = mods[m].read_text().splitlines()
    for line, what in _cpu_branches(trees[m]):
      if (m, lines[line - 1].strip()) in KNOWN_CPU_BRANCHES:
        seen.add((m, lines[line - 1].strip()))
      else:
        bad.append(f"{mods[m].relative_to(ROOT)}:{line}: {what}")
  assert bad == [], "\n".join(bad)
  assert seen == KNOWN_CPU_BRANCHES
  # the detector finds the branches that belong in the CPU modules
  assert _cpu_branches(trees["botjax.xla_cpu"]) and _cpu_branches(
      trees["botjax.models.attention_cpu"])


def test_the_checks_catch_what_they_look_for():
  """Each rule on a small example: a lazy import circle, an upward import, a private module
  of another package, and each kind of CPU branch."""
  edges = {"botjax.a": [("botjax.b", 1)], "botjax.b": [("botjax.a", 3)], "botjax.c": []}
  assert _cycles(edges) == [["botjax.a", "botjax.b"]]
  code = ("def f(x, impl='cpu'):\n"
          "  from botjax.train import step\n"
          "  if x.platform in ('gpu', 'cpu'):\n"
          "    return jax.lax.platform_dependent(x, cpu=g, default=h)\n"
          "  return on_cpu(g, h, x)\n"
          "layout: str = struct.field(pytree_node=False, default='BKHS')\n")
  tree = ast.parse(code)
  assert sorted(line for line, _ in _cpu_branches(tree)) == [1, 3, 4, 4, 5, 6]
  mods = {"botjax.xla_cpu": pathlib.Path("xla_cpu.py"),
          "botjax.train.step": pathlib.Path("step.py"), "botjax.train": pathlib.Path(
              "__init__.py")}
  assert _imports("botjax.xla_cpu", tree, mods) == [("botjax.train.step", 2)]
  assert _private("botjax._xla_cpu") and not _private("botjax.models.__init__")
