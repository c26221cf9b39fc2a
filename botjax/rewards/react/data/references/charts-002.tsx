import { useState } from 'react';

const SLICES = [
  { label: 'Housing', value: 1450, color: '#6366f1' },
  { label: 'Food', value: 620, color: '#f59e0b' },
  { label: 'Transport', value: 280, color: '#10b981' },
  { label: 'Leisure', value: 350, color: '#ec4899' },
  { label: 'Savings', value: 800, color: '#0ea5e9' },
];
const TOTAL = SLICES.reduce((s, x) => s + x.value, 0);
const R = 80;
const C = 2 * Math.PI * R;

export default function App() {
  const [active, setActive] = useState<number | null>(null);
  const starts = SLICES.map((_, i) => SLICES.slice(0, i).reduce((s, x) => s + x.value, 0));
  const shown = active === null ? null : SLICES[active];
  return (
    <div className="flex min-h-screen items-center justify-center gap-12 bg-gray-50">
      <svg viewBox="0 0 200 200" className="h-80 w-80 -rotate-90">
        {SLICES.map((s, i) => (
          <circle
            key={s.label}
            cx="100" cy="100" r={R} fill="none" stroke={s.color}
            strokeWidth={active === i ? 34 : 26}
            strokeDasharray={`${(s.value / TOTAL) * C} ${C}`}
            strokeDashoffset={-(starts[i] / TOTAL) * C}
            opacity={active === null || active === i ? 1 : 0.35}
            onMouseEnter={() => setActive(i)} onMouseLeave={() => setActive(null)}
          />
        ))}
        <text x="100" y="-100" transform="rotate(90)" textAnchor="middle" dominantBaseline="middle" fontSize="18" fontWeight="bold" fill="#111827">
          {shown ? `${((shown.value / TOTAL) * 100).toFixed(1)}%` : `$${TOTAL}`}
        </text>
      </svg>
      <ul className="space-y-2">
        {SLICES.map((s, i) => (
          <li key={s.label} onMouseEnter={() => setActive(i)} onMouseLeave={() => setActive(null)}
            className={`flex cursor-default items-center gap-3 rounded px-3 py-1 ${active === i ? 'bg-white shadow' : ''}`}>
            <span className="h-4 w-4 rounded" style={{ background: s.color }} />
            <span className="w-24">{s.label}</span>
            <span className="text-gray-500">${s.value}</span>
          </li>
        ))}
      </ul>
    </div>
  );
}
