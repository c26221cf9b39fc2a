import { useState } from 'react';
import { GitFork, Star } from 'lucide-react';

const REPOS = [
  { name: 'tiny-router', text: 'A 2 kB router for single-page apps.', lang: 'TypeScript', color: 'bg-blue-500', stars: 1842, forks: 97 },
  { name: 'pixel-forge', text: 'Sprite editor that runs in the terminal.', lang: 'Rust', color: 'bg-orange-600', stars: 640, forks: 31 },
  { name: 'datewise', text: 'Human-friendly date parsing and formatting.', lang: 'Python', color: 'bg-yellow-500', stars: 2210, forks: 188 },
  { name: 'quietlog', text: 'Structured logging with zero allocations.', lang: 'Go', color: 'bg-cyan-500', stars: 415, forks: 22 },
];

export default function App() {
  const [starred, setStarred] = useState<Set<string>>(new Set());
  function toggle(name: string) {
    const next = new Set(starred);
    if (next.has(name)) next.delete(name);
    else next.add(name);
    setStarred(next);
  }
  return (
    <div className="grid min-h-screen content-start gap-4 bg-gray-50 p-8 md:grid-cols-2">
      {REPOS.map((r) => {
        const on = starred.has(r.name);
        return (
          <div key={r.name} className="rounded-lg border border-gray-200 bg-white p-5">
            <div className="flex items-start justify-between">
              <h2 className="font-semibold text-blue-700">{r.name}</h2>
              <button
                onClick={() => toggle(r.name)}
                className={`flex items-center gap-1 rounded border px-2 py-1 text-sm ${on ? 'border-amber-400 bg-amber-50' : 'border-gray-300'}`}
              >
                <Star className={`h-4 w-4 ${on ? 'fill-amber-400 text-amber-500' : ''}`} /> {on ? 'Starred' : 'Star'}
              </button>
            </div>
            <p className="mt-2 text-sm text-gray-600">{r.text}</p>
            <div className="mt-4 flex gap-4 text-sm text-gray-500">
              <span className="flex items-center gap-1"><span className={`h-3 w-3 rounded-full ${r.color}`} />{r.lang}</span>
              <span className="flex items-center gap-1"><Star className="h-4 w-4" />{r.stars + (on ? 1 : 0)}</span>
              <span className="flex items-center gap-1"><GitFork className="h-4 w-4" />{r.forks}</span>
            </div>
          </div>
        );
      })}
    </div>
  );
}
