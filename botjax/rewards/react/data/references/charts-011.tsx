import { useState } from 'react';

const FRUITS = [
  { name: 'Apple', emoji: '🍎', color: '#ef4444' },
  { name: 'Banana', emoji: '🍌', color: '#facc15' },
  { name: 'Grape', emoji: '🍇', color: '#8b5cf6' },
  { name: 'Orange', emoji: '🍊', color: '#f97316' },
  { name: 'Kiwi', emoji: '🥝', color: '#84cc16' },
];

export default function App() {
  const [counts, setCounts] = useState([14, 9, 6, 11, 4]);
  const total = counts.reduce((a, b) => a + b, 0);
  let at = 0;
  const stops = FRUITS.map((f, i) => {
    const from = at;
    at += total > 0 ? (counts[i] / total) * 360 : 0;
    return `${f.color} ${from}deg ${at}deg`;
  });
  return (
    <div className="flex min-h-screen items-center justify-center gap-12 bg-white">
      <div
        className="h-72 w-72 rounded-full shadow-inner"
        style={{ background: total > 0 ? `conic-gradient(${stops.join(', ')})` : '#e5e7eb' }}
        role="img"
        aria-label="Favourite fruits pie chart"
      />
      <ul className="space-y-3">
        {FRUITS.map((f, i) => (
          <li key={f.name} className="flex items-center gap-3">
            <span className="h-4 w-4 rounded-sm" style={{ background: f.color }} />
            <span className="w-24">{f.emoji} {f.name}</span>
            <input
              type="number" min={0} value={counts[i]} aria-label={`${f.name} votes`}
              onChange={(e) => setCounts(counts.map((c, j) => (j === i ? Math.max(0, Number(e.target.value) || 0) : c)))}
              className="w-20 rounded border border-gray-300 px-2 py-1"
            />
            <span className="w-14 text-right text-sm text-gray-500">{total > 0 ? Math.round((counts[i] / total) * 100) : 0}%</span>
          </li>
        ))}
      </ul>
    </div>
  );
}
