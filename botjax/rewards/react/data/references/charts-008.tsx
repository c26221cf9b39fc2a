import { useState } from 'react';

const GOALS = [
  { name: 'Reading', unit: 'pages', goal: 30, step: 5, color: '#8b5cf6' },
  { name: 'Exercise', unit: 'min', goal: 45, step: 5, color: '#ef4444' },
  { name: 'Sleep', unit: 'h', goal: 8, step: 0.5, color: '#3b82f6' },
  { name: 'Water', unit: 'glasses', goal: 8, step: 1, color: '#06b6d4' },
];
const R = 44;
const C = 2 * Math.PI * R;

export default function App() {
  const [values, setValues] = useState([12, 30, 6.5, 3]);
  function change(i: number, delta: number) {
    setValues(values.map((v, j) => (j === i ? Math.max(0, v + delta) : v)));
  }
  return (
    <div className="grid min-h-screen grid-cols-2 place-content-center gap-10 bg-slate-50 p-10 md:grid-cols-4">
      {GOALS.map((g, i) => {
        const pct = Math.min(100, Math.round((values[i] / g.goal) * 100));
        return (
          <div key={g.name} className="flex flex-col items-center gap-2 rounded-2xl bg-white p-6 shadow-sm">
            <svg width="120" height="120" viewBox="0 0 120 120">
              <circle cx="60" cy="60" r={R} stroke="#e2e8f0" strokeWidth="12" fill="none" />
              <circle cx="60" cy="60" r={R} stroke={g.color} strokeWidth="12" fill="none" strokeLinecap="round"
                strokeDasharray={C} strokeDashoffset={C * (1 - pct / 100)} transform="rotate(-90 60 60)" />
              <text x="60" y="66" textAnchor="middle" fontSize="20" fontWeight="bold" fill="#0f172a">{pct}%</text>
            </svg>
            <p className="font-semibold">{g.name}</p>
            <p className="text-sm text-slate-500">{values[i]} / {g.goal} {g.unit}</p>
            <div className="flex gap-2">
              <button aria-label={`Less ${g.name}`} onClick={() => change(i, -g.step)} className="h-8 w-8 rounded-full bg-slate-100">−</button>
              <button aria-label={`More ${g.name}`} onClick={() => change(i, g.step)} className="h-8 w-8 rounded-full bg-slate-100">+</button>
            </div>
          </div>
        );
      })}
    </div>
  );
}
