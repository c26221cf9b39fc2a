import { useState } from 'react';

const DATA = [42, 48, 45, 53, 61, 58, 66, 72, 69, 78, 84, 91].map((v, i) => ({
  month: ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'][i],
  value: v * 1000,
}));
const W = 720;
const H = 360;
const PAD = 50;
const MAX = 100000;
const x = (i: number) => PAD + (i * (W - 2 * PAD)) / (DATA.length - 1);
const y = (v: number) => H - PAD - (v / MAX) * (H - 2 * PAD);

export default function App() {
  const [hover, setHover] = useState<number | null>(null);
  return (
    <div className="min-h-screen bg-white p-10">
      <h1 className="text-xl font-semibold">Monthly revenue, 2026</h1>
      <svg width={W} height={H} className="mt-4">
        {[0, 25000, 50000, 75000, 100000].map((v) => (
          <g key={v}>
            <line x1={PAD} x2={W - PAD} y1={y(v)} y2={y(v)} stroke="#e5e7eb" />
            <text x={PAD - 8} y={y(v) + 4} textAnchor="end" fontSize="11" fill="#6b7280">${v / 1000}k</text>
          </g>
        ))}
        {DATA.map((d, i) => (
          <text key={d.month} x={x(i)} y={H - PAD + 18} textAnchor="middle" fontSize="11" fill="#6b7280">{d.month}</text>
        ))}
        <polyline fill="none" stroke="#4f46e5" strokeWidth="3" points={DATA.map((d, i) => `${x(i)},${y(d.value)}`).join(' ')} />
        {DATA.map((d, i) => (
          <circle key={d.month} cx={x(i)} cy={y(d.value)} r={hover === i ? 7 : 5} fill="#4f46e5" stroke="white" strokeWidth="2"
            onMouseEnter={() => setHover(i)} onMouseLeave={() => setHover(null)} />
        ))}
        {hover !== null && (
          <g transform={`translate(${x(hover)}, ${y(DATA[hover].value) - 16})`}>
            <rect x="-45" y="-26" width="90" height="24" rx="4" fill="#111827" />
            <text y="-9" textAnchor="middle" fontSize="12" fill="white">
              {DATA[hover].month}: ${DATA[hover].value.toLocaleString('en-US')}
            </text>
          </g>
        )}
      </svg>
    </div>
  );
}
