"""Throughput of the React reward's sandbox: compile+lint and render, items per second.

Each stage is timed twice in the same run:
  persistent: the long-lived pools botjax uses (Node workers reading JSON lines; one Chromium with
              a fresh context per item);
  reference:  a fresh process per item (a new Node worker per compile+lint; a new browser per
              render), i.e. what a naive subprocess-per-item sandbox costs.
and the ratio is printed. Timings on a shared machine are noisy.

  python benchmarks/react_rewards.py --items 32 --workers 2 --pages 2
"""
from __future__ import annotations

import argparse
import os
import platform
import time

from botjax.rewards.react.render import Renderer
from botjax.rewards.react.toolchain import ALLOWED_MODULES, NodePool, NodeWorker, find_node

COMPONENTS = [
    """import { useState } from 'react';
import { Plus, Minus } from 'lucide-react';

export default function App() {
  const [n, setN] = useState(0);
  return (
    <div className="min-h-screen flex items-center justify-center bg-slate-100">
      <div className="rounded-xl bg-white p-8 shadow">
        <h1 className="text-2xl font-bold">Counter</h1>
        <p className="text-5xl my-4">{n}</p>
        <button className="p-2" onClick={() => setN(n - 1)}><Minus /></button>
        <button className="p-2" onClick={() => setN(n + 1)}><Plus /></button>
      </div>
    </div>
  );
}""",
    """import { useState } from 'react';

export default function App() {
  const [todos, setTodos] = useState<string[]>(['Write tests', 'Ship it']);
  const [text, setText] = useState('');
  const unused = 1;
  return (
    <div className="max-w-md mx-auto p-6">
      <h1 className="text-xl font-semibold mb-4">Todos</h1>
      <input className="border p-2 w-full" value={text} onChange={(e) => setText(e.target.value)} />
      <button className="mt-2 bg-blue-600 text-white px-4 py-2 rounded"
        onClick={() => { setTodos([...todos, text]); setText(''); }}>Add</button>
      <ul className="mt-4">{todos.map((t) => <li className="py-1">{t}</li>)}</ul>
    </div>
  );
}""",
    """export default function App() {
  const plans = [['Free', 0], ['Pro', 12], ['Team', 40]];
  return (
    <div className="grid grid-cols-3 gap-4 p-10 bg-gray-50">
      {plans.map(([name, price]) => (
        <div key={name} className="rounded-lg border bg-white p-6">
          <h2 className="text-lg font-bold">{name}</h2>
          <p className="text-3xl">${price}<span className="text-sm">/mo</span></p>
        </div>
      ))}
    </div>
  );
}""",
]


def machine() -> str:
  model = platform.processor() or "unknown CPU"
  try:
    with open("/proc/cpuinfo") as f:
      model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration):
    pass
  return f"{model}; {os.cpu_count()} cores visible; load avg {os.getloadavg()[0]:.1f}"


def bench_compile(n_items: int, workers: int, n_ref: int) -> None:
  sources = [COMPONENTS[i % len(COMPONENTS)] for i in range(n_items)]
  with NodePool(size=workers) as pool:
    pool.check(sources[:workers])  # start the workers outside the timing
    t = time.perf_counter()
    results = pool.check(sources)
    persistent = time.perf_counter() - t
  assert all(r.ok for r in results)
  node = find_node()
  t = time.perf_counter()
  for i in range(n_ref):
    w = NodeWorker(node)
    w.request({"source": sources[i], "lint": True, "allowed": list(ALLOWED_MODULES)}, 120)
    w.kill()
  reference = (time.perf_counter() - t) / n_ref
  ips = n_items / persistent
  print(f"compile+lint  persistent pool ({workers} workers): {n_items} items in {persistent:.2f} s "
        f"= {ips:.1f} items/s ({1e3 * persistent / n_items:.0f} ms/item)")
  print(f"compile+lint  reference (fresh Node process per item, 1 at a time): "
        f"{1e3 * reference:.0f} ms/item = {1 / reference:.2f} items/s")
  print(f"compile+lint  speed-up: {ips * reference:.1f}x")


def bench_render(n_items: int, workers: int, pages: int, n_ref: int) -> None:
  sources = [COMPONENTS[i % len(COMPONENTS)] for i in range(n_items)]
  with NodePool(size=workers) as pool:
    compiled = pool.check(sources, bundle=True, css=True, lint=False)
    vendors = {v: pool.vendor(v) for c in compiled for v in c.vendors}
  with Renderer(concurrency=pages) as r:
    htmls = [r.page(c.bundle, c.css, [vendors[v] for v in c.vendors]) for c in compiled]
    r.render(htmls[:pages])  # launch the browser outside the timing
    t = time.perf_counter()
    out = r.render(htmls)
    persistent = time.perf_counter() - t
  assert all(o.ok for o in out), [o.error for o in out if not o.ok]
  t = time.perf_counter()
  for i in range(n_ref):
    with Renderer(concurrency=1) as fresh:
      assert fresh.render([htmls[i]])[0].ok
  reference = (time.perf_counter() - t) / n_ref
  ips = n_items / persistent
  print(f"render        persistent browser ({pages} pages at once, fresh context per item): "
        f"{n_items} items in {persistent:.2f} s = {ips:.2f} items/s")
  print(f"render        reference (fresh browser per item, 1 at a time): "
        f"{reference:.2f} s/item = {1 / reference:.2f} items/s")
  print(f"render        speed-up: {ips * reference:.1f}x")


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--items", type=int, default=32)
  ap.add_argument("--workers", type=int, default=2, help="Node workers")
  ap.add_argument("--pages", type=int, default=2, help="pages rendered at once")
  ap.add_argument("--ref-items", type=int, default=3, help="items timed for the references")
  args = ap.parse_args()
  print(f"machine: {machine()}")
  bench_compile(args.items, args.workers, args.ref_items)
  bench_render(args.items, args.workers, args.pages, args.ref_items)


if __name__ == "__main__":
  main()
