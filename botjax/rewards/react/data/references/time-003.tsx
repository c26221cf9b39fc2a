import { useEffect, useState } from 'react';
import { Moon, Sun } from 'lucide-react';

const CITIES = [
  { name: 'San Francisco', offset: -8 },
  { name: 'New York', offset: -5 },
  { name: 'London', offset: 0 },
  { name: 'Dubai', offset: 4 },
  { name: 'Tokyo', offset: 9 },
];

export default function App() {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const id = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(id);
  }, []);

  return (
    <div className="min-h-screen bg-zinc-900 p-10 text-white">
      <h1 className="mb-6 text-2xl font-semibold">World clock</h1>
      <div className="grid gap-4 sm:grid-cols-2 lg:grid-cols-5">
        {CITIES.map((c) => {
          const local = new Date(now + c.offset * 3600 * 1000);
          const hour = local.getUTCHours();
          const day = hour >= 6 && hour < 18;
          const time = [hour, local.getUTCMinutes(), local.getUTCSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
          return (
            <div key={c.name} className={`rounded-xl p-5 ${day ? 'bg-sky-700' : 'bg-zinc-800'}`}>
              <div className="flex items-center justify-between">
                <span className="font-medium">{c.name}</span>
                {day ? <Sun className="h-5 w-5 text-yellow-300" /> : <Moon className="h-5 w-5 text-indigo-300" />}
              </div>
              <p className="mt-3 font-mono text-3xl">{time}</p>
              <p className="text-sm opacity-70">UTC{c.offset >= 0 ? '+' : ''}{c.offset}</p>
            </div>
          );
        })}
      </div>
    </div>
  );
}
