import { ArrowDown, ArrowUp, DollarSign, Receipt, RotateCcw, ShoppingCart } from 'lucide-react';

const CARDS = [
  { label: 'Revenue', value: '$82,450', change: 9.5, icon: DollarSign, trend: [5, 7, 6, 9, 8, 11, 12] },
  { label: 'Orders', value: '1,204', change: 4.2, icon: ShoppingCart, trend: [8, 9, 7, 10, 9, 10, 11] },
  { label: 'Avg. order value', value: '$68.48', change: 5.1, icon: Receipt, trend: [6, 6, 7, 7, 8, 8, 9] },
  { label: 'Refunds', value: '37', change: -12.0, icon: RotateCcw, trend: [9, 8, 9, 7, 6, 6, 5] },
];

function Sparkline({ points, color }: { points: number[]; color: string }) {
  const max = Math.max(...points);
  const min = Math.min(...points);
  const path = points
    .map((p, i) => `${(i / (points.length - 1)) * 100},${30 - ((p - min) / (max - min || 1)) * 28}`)
    .join(' ');
  return (
    <svg viewBox="0 0 100 32" className="h-8 w-24">
      <polyline points={path} fill="none" stroke={color} strokeWidth="2" />
    </svg>
  );
}

export default function App() {
  return (
    <div className="grid min-h-screen grid-cols-1 content-start gap-4 bg-slate-50 p-8 md:grid-cols-4">
      {CARDS.map(({ label, value, change, icon: Icon, trend }) => {
        const up = change >= 0;
        return (
          <div key={label} className="rounded-xl border border-slate-200 bg-white p-5">
            <div className="flex items-center justify-between">
              <span className="text-sm text-slate-500">{label}</span>
              <Icon className="h-5 w-5 text-slate-400" />
            </div>
            <div className="mt-3 text-2xl font-bold text-slate-900">{value}</div>
            <div className="mt-2 flex items-end justify-between">
              <span className={`flex items-center text-sm ${up ? 'text-emerald-600' : 'text-rose-600'}`}>
                {up ? <ArrowUp className="h-4 w-4" /> : <ArrowDown className="h-4 w-4" />}
                {Math.abs(change).toFixed(1)}%
              </span>
              <Sparkline points={trend} color={up ? '#059669' : '#e11d48'} />
            </div>
          </div>
        );
      })}
    </div>
  );
}
