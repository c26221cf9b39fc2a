"""Compile (esbuild), lint (ESLint 9), type-check (tsc) and CSS (Tailwind) through the Node pool."""
import contextlib
import os
import signal
import threading

import pytest

from botjax.rewards.react import toolchain as tc

GOOD = """import { useState } from 'react';
import { Star } from 'lucide-react';

export default function App() {
  const [n, setN] = useState(0);
  return (
    <div className="p-4 bg-blue-500">
      <Star />
      <button onClick={() => setN(n + 1)}>{n}</button>
    </div>
  );
}"""

# line 4 (0-based) opens a <div> that is never closed: esbuild flags the `}` on line 5
BROKEN = """import { useState } from 'react';

export default function App() {
  const [n] = useState(0);
  return <div>{n}
}"""

# unused import (line 0), unused variable (line 3), a list without keys (line 6)
LINTY = """import { useEffect } from 'react';

export default function App() {
  const unused = 3;
  const items = ['a', 'b'];
  return (
    <ul>{items.map((x) => <li>{x}</li>)}</ul>
  );
}"""


@pytest.fixture(scope="module")
def pool():
  with tc.NodePool(size=2, timeout_s=30) as p:
    yield p


def test_good_component_compiles_bundles_and_gets_css(pool):
  [res] = pool.check([GOOD], bundle=True, css=True)
  assert res.ok and res.diagnostics == () and res.error is None
  assert res.lint == ()
  assert "window.__botjax_modules" in res.bundle and "useState" in res.bundle
  assert res.vendors == ("core",)  # named icons are bundled in; no 880 KB lucide vendor bundle
  assert ".bg-blue-500" in res.css and ".p-4" in res.css and ".bg-red-500" not in res.css
  whole = "import * as L from 'lucide-react';\nexport default function App() {\n  return <L.Star />;\n}"
  missing = "import { NoSuchIcon } from 'lucide-react';\nexport default function App() {\n  return <NoSuchIcon />;\n}"
  [ns, bad] = pool.check([whole, missing], bundle=True)
  assert ns.ok and ns.vendors == ("core", "lucide-react")
  assert "window.__botjax_modules" in pool.vendor("lucide-react")
  assert not bad.ok and bad.diagnostics[0].line == 0 and "NoSuchIcon" in bad.diagnostics[0].message


def test_broken_component_diagnostics_on_the_right_lines(pool):
  [res] = pool.check([BROKEN], bundle=True)
  assert not res.ok and res.bundle is None
  assert {d.line for d in res.diagnostics if d.source == "esbuild"} == {5}
  assert [(m.line, m.severity) for m in res.lint] == [(5, "fatal")]


def test_lint_rules_and_lines(pool):
  [res] = pool.check([LINTY])
  assert res.ok
  got = sorted((m.line, m.severity, m.rule) for m in res.lint)
  assert got == [(0, "error", "@typescript-eslint/no-unused-vars"),
                 (3, "error", "@typescript-eslint/no-unused-vars"),
                 (6, "error", "react/jsx-key")]


def test_disallowed_imports_fail_with_a_clear_diagnostic(pool):
  used = "import axios from 'axios';\nexport default function App() {\n  axios.get('/');\n  return <p/>;\n}"
  unused = "import fs from 'node:fs';\nexport default function App() {\n  return <p/>;\n}"
  dynamic = "export default function App() {\n  import('lodash');\n  return <p/>;\n}"
  for src, line, mod in [(used, 0, "axios"), (unused, 0, "node:fs"), (dynamic, 1, "lodash")]:
    [res] = pool.check([src], bundle=True)
    assert not res.ok and res.bundle is None
    msgs = [d for d in res.diagnostics if d.source == "import"]
    assert msgs and msgs[0].line == line
    assert f'import of "{mod}" is not allowed' in msgs[0].message
    assert "lucide-react" in msgs[0].message  # names what is allowed


def test_typecheck_reports_type_errors(pool):
  src = "export default function App() {\n  const n: number = 'seven';\n  return <p>{n}</p>;\n}"
  [plain, typed] = [pool.check([src])[0], pool.check([src], typecheck=True)[0]]
  assert plain.ok and plain.diagnostics == ()
  assert typed.ok  # type errors are line penalties, not a compile failure
  assert [(d.line, d.source) for d in typed.diagnostics] == [(1, "tsc")]
  assert "TS2322" in typed.diagnostics[0].message


def test_missing_default_export_gets_one_appended(pool):
  src = "function Card() {\n  return <p>card</p>;\n}\nfunction App() {\n  return <Card />;\n}"
  [res] = pool.check([src], bundle=True)
  assert res.ok and res.bundle


@contextlib.contextmanager
def _stopped(proc, resume_after_s: float = 20.0):
  """Stops a worker's process group, so it cannot reply and its time limit must fire.

  A stopped worker does not reply however loaded the machine is (a tiny limit alone raced a warm
  worker that replied before the reply queue was read). It is resumed after `resume_after_s` if
  still there, so a time limit that never fires fails the test instead of hanging it.
  """
  def resume():
    with contextlib.suppress(ProcessLookupError):
      os.killpg(proc.pid, signal.SIGCONT)

  os.killpg(proc.pid, signal.SIGSTOP)
  timer = threading.Timer(resume_after_s, resume)
  timer.start()
  try:
    yield
  finally:
    timer.cancel()


def test_worker_timeout_and_crash_are_failures_and_workers_come_back(pool):
  worker = pool._workers[0]
  worker.request({"op": "modules"}, timeout_s=60)
  old_dir = worker.tmpdir
  assert os.path.isdir(old_dir)
  with _stopped(worker.proc), pytest.raises(TimeoutError, match="time limit"):
    worker.request({"source": GOOD, "lint": True}, timeout_s=0.5)
  assert worker.proc is None and not os.path.exists(old_dir)  # its temporary directory is gone
  worker.request({"source": GOOD}, timeout_s=60)  # restarted on demand
  os.killpg(worker.proc.pid, signal.SIGKILL)
  worker.proc.wait()
  results = pool.check([GOOD, BROKEN, GOOD, GOOD])
  assert [r.ok for r in results] == [True, False, True, True]
  assert pool.restarts >= 2

  with tc.NodePool(size=1, timeout_s=0.5) as tiny:
    tiny._workers[0].request({"op": "modules"}, timeout_s=60)  # started, then stopped
    with _stopped(tiny._workers[0].proc):
      [res] = tiny.check([GOOD])
    assert not res.ok and "time limit" in res.error and tiny.failures == 1
    assert res.diagnostics[0].source == "toolchain"


def test_bad_arguments_and_oversized_source(pool, monkeypatch):
  with pytest.raises(ValueError, match="no local bundle"):
    tc.NodePool(allowed_modules=("react", "three"))
  with pytest.raises(ValueError, match="size"):
    tc.NodePool(size=0)
  with pytest.raises(tc.ToolchainError, match="Node.js"):
    tc.find_node("/nonexistent/node")
  monkeypatch.delenv("BOTJAX_CHROMIUM", raising=False)
  monkeypatch.setattr(tc.shutil, "which", lambda name: None)  # as on a machine without Chromium
  with pytest.raises(tc.ToolchainError, match="apt-get install chromium"):
    tc.find_chromium("/nonexistent/chromium")
  monkeypatch.undo()
  [res] = pool.check(["x" * (pool.max_source_chars + 1)])
  assert not res.ok and "over the limit" in res.error


def test_check_toolchain_reports_pinned_versions():
  versions = tc.check_toolchain()
  assert versions["esbuild"] == "0.28.2" and versions["typescript"] == "6.0.3"
  assert versions["eslint"] == "9.39.5" and os.path.exists(versions["chromium"])
  assert versions["playwright"].startswith("1.65")


def test_toolchain_dir_from_the_environment(tmp_path, monkeypatch):
  assert tc.toolchain_dir() == tc.NODE_DIR or tc.TOOLCHAIN_ENV in os.environ
  monkeypatch.setenv(tc.TOOLCHAIN_ENV, str(tmp_path))
  assert tc.toolchain_dir() == tmp_path.resolve()
  with pytest.raises(tc.ToolchainError, match="worker script .*worker.mjs is missing"):
    tc.find_node()
  (tmp_path / "worker.mjs").write_bytes((tc.NODE_DIR / "worker.mjs").read_bytes())
  with pytest.raises(tc.ToolchainError, match="npm package 'esbuild' .* is missing from") as e:
    tc.find_node()
  assert "npm ci" in str(e.value) and str(tmp_path) in str(e.value)
  monkeypatch.delenv(tc.TOOLCHAIN_ENV)
  assert tc.toolchain_dir() == tc.NODE_DIR and tc.find_node()
