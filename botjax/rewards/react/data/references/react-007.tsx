const SERVICES = [
  { name: 'API Gateway', status: 'operational', uptime: 99.99, incident: '12 days ago' },
  { name: 'Auth Service', status: 'operational', uptime: 99.95, incident: '3 days ago' },
  { name: 'Database', status: 'degraded', uptime: 99.7, incident: '2 hours ago' },
  { name: 'Search', status: 'operational', uptime: 99.92, incident: '8 days ago' },
  { name: 'Notifications', status: 'outage', uptime: 98.4, incident: '15 minutes ago' },
  { name: 'File Storage', status: 'operational', uptime: 100, incident: 'none in 90 days' },
];
const DOT: Record<string, string> = {
  operational: 'bg-green-500',
  degraded: 'bg-yellow-400',
  outage: 'bg-red-500',
};

export default function App() {
  const allGood = SERVICES.every((s) => s.status === 'operational');
  return (
    <div className="min-h-screen bg-slate-50 p-8">
      <div className="mx-auto max-w-3xl">
        <h1 className="text-2xl font-bold">System status</h1>
        <div className={`mt-4 rounded-lg p-4 text-white ${allGood ? 'bg-green-600' : 'bg-amber-500'}`}>
          {allGood ? 'All systems operational' : 'Some systems are having problems'}
        </div>
        <ul className="mt-6 divide-y divide-slate-200 rounded-lg border border-slate-200 bg-white">
          {SERVICES.map((s) => (
            <li key={s.name} className="flex items-center justify-between p-4">
              <div className="flex items-center gap-3">
                <span className={`h-3 w-3 rounded-full ${DOT[s.status]}`} />
                <span className="font-medium">{s.name}</span>
                <span className="text-sm capitalize text-slate-500">{s.status}</span>
              </div>
              <div className="text-right text-sm">
                <div className="font-semibold">{s.uptime.toFixed(2)}% uptime</div>
                <div className="text-slate-500">Last incident: {s.incident}</div>
              </div>
            </li>
          ))}
        </ul>
      </div>
    </div>
  );
}
