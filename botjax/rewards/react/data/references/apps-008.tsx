import { useState } from 'react';

const GOAL = 2000;
const GLASS = 250;

export default function App() {
  const [entries, setEntries] = useState<string[]>([]);
  const total = entries.length * GLASS;
  const pct = Math.min(100, (total / GOAL) * 100);

  return (
    <div className="flex min-h-screen flex-col items-center gap-6 bg-sky-50 pt-12">
      <h1 className="text-2xl font-bold text-sky-900">Water today</h1>
      <div className="relative h-64 w-40 overflow-hidden rounded-b-3xl border-4 border-t-0 border-sky-300 bg-white">
        <div className="absolute bottom-0 w-full bg-sky-400 transition-all duration-500" style={{ height: `${pct}%` }} />
        <p className="absolute inset-0 flex items-center justify-center text-xl font-bold text-sky-900">{total} ml</p>
      </div>
      <p className="text-sky-800">{total >= GOAL ? 'Goal reached! 🎉' : `${GOAL - total} ml to go`}</p>
      <div className="flex gap-3">
        <button
          onClick={() => setEntries([...entries, new Date().toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit' })])}
          className="rounded-full bg-sky-600 px-5 py-2 font-medium text-white"
        >
          + 250 ml
        </button>
        <button onClick={() => setEntries([])} className="rounded-full border border-sky-600 px-5 py-2 text-sky-700">Reset</button>
      </div>
      <ul className="w-64 space-y-1 text-sm text-sky-900">
        {entries.map((time, i) => (
          <li key={i} className="flex justify-between rounded bg-white px-3 py-1">
            <span>Glass {i + 1}</span>
            <span>{time}</span>
          </li>
        ))}
      </ul>
    </div>
  );
}
