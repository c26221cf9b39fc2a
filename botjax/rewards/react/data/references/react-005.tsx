import { TrendingDown, TrendingUp } from 'lucide-react';

const KPIS = [
  { label: 'Visitors', value: '48,210', change: 12.4 },
  { label: 'Sign-ups', value: '1,893', change: 8.1 },
  { label: 'Revenue', value: '$24,780', change: -3.2 },
  { label: 'Churn', value: '2.4%', change: -0.6, lowerIsBetter: true },
];

export default function App() {
  return (
    <div className="min-h-screen bg-gray-100 p-8">
      <h1 className="mb-6 text-2xl font-bold text-gray-800">Analytics</h1>
      <div className="grid grid-cols-1 gap-4 sm:grid-cols-2 lg:grid-cols-4">
        {KPIS.map((k) => {
          const good = k.lowerIsBetter ? k.change < 0 : k.change > 0;
          const Icon = k.change > 0 ? TrendingUp : TrendingDown;
          return (
            <div key={k.label} className="rounded-xl bg-white p-5 shadow-sm">
              <p className="text-sm text-gray-500">{k.label}</p>
              <p className="mt-2 text-3xl font-semibold text-gray-900">{k.value}</p>
              <p className={`mt-2 flex items-center gap-1 text-sm ${good ? 'text-green-600' : 'text-red-600'}`}>
                <Icon className="h-4 w-4" />
                {k.change > 0 ? '+' : ''}
                {k.change}% vs last month
              </p>
            </div>
          );
        })}
      </div>
    </div>
  );
}
