import { useState } from 'react';

const TOTAL = 50;

function pages(current: number): (number | '...')[] {
  const out: (number | '...')[] = [];
  for (let p = 1; p <= TOTAL; p++) {
    if (p === 1 || p === TOTAL || Math.abs(p - current) <= 1) out.push(p);
    else if (out[out.length - 1] !== '...') out.push('...');
  }
  return out;
}

export default function App() {
  const [page, setPage] = useState(1);
  const [size, setSize] = useState(10);
  const btn = 'min-w-9 rounded border border-gray-300 px-2 py-1 text-sm disabled:opacity-40';
  return (
    <div className="min-h-screen bg-white p-10">
      <p className="mb-4 text-gray-700">
        Showing items {(page - 1) * size + 1}-{page * size} (page {page} of {TOTAL})
      </p>
      <nav className="flex flex-wrap items-center gap-1" aria-label="Pagination">
        <button className={btn} disabled={page === 1} onClick={() => setPage(1)}>«</button>
        <button className={btn} disabled={page === 1} onClick={() => setPage(page - 1)}>‹</button>
        {pages(page).map((p, i) =>
          p === '...' ? (
            <span key={`gap-${i}`} className="px-2 text-gray-400">…</span>
          ) : (
            <button
              key={p}
              onClick={() => setPage(p)}
              aria-current={p === page ? 'page' : undefined}
              className={`${btn} ${p === page ? 'border-blue-600 bg-blue-600 text-white' : ''}`}
            >
              {p}
            </button>
          ))}
        <button className={btn} disabled={page === TOTAL} onClick={() => setPage(page + 1)}>›</button>
        <button className={btn} disabled={page === TOTAL} onClick={() => setPage(TOTAL)}>»</button>
        <select
          value={size}
          onChange={(e) => setSize(Number(e.target.value))}
          className="ml-4 rounded border border-gray-300 px-2 py-1 text-sm"
        >
          {[10, 20, 50].map((n) => (
            <option key={n} value={n}>{n} per page</option>
          ))}
        </select>
      </nav>
    </div>
  );
}
