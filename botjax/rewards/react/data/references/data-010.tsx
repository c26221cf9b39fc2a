import { useState } from 'react';

type Level = 'info' | 'warn' | 'error';
const LEVELS: Level[] = ['info', 'warn', 'error'];
const MESSAGES = ['request served', 'cache miss', 'retrying upstream', 'disk at 85%', 'timeout calling billing', 'user signed in'];
const LOGS = Array.from({ length: 30 }, (_, i) => {
  const level: Level = i % 7 === 3 ? 'error' : i % 4 === 1 ? 'warn' : 'info';
  const seconds = String(i * 7 % 60).padStart(2, '0');
  return { id: i, time: `12:${String(10 + Math.floor(i / 2)).padStart(2, '0')}:${seconds}`, level, message: MESSAGES[i % MESSAGES.length] };
});
const COLOR: Record<Level, string> = {
  info: 'text-sky-300',
  warn: 'bg-yellow-900/40 text-yellow-300',
  error: 'bg-red-900/40 text-red-300',
};

export default function App() {
  const [active, setActive] = useState<Set<Level>>(new Set(LEVELS));
  const [query, setQuery] = useState('');
  const visible = LOGS.filter((l) => active.has(l.level) && l.message.includes(query.toLowerCase()));

  return (
    <div className="min-h-screen bg-gray-950 p-6 text-gray-100">
      <div className="mb-4 flex flex-wrap gap-2">
        {LEVELS.map((level) => (
          <button
            key={level}
            onClick={() => {
              const next = new Set(active);
              if (next.has(level)) next.delete(level);
              else next.add(level);
              setActive(next);
            }}
            className={`rounded px-3 py-1 text-sm uppercase ${active.has(level) ? 'bg-gray-200 text-gray-900' : 'bg-gray-800 text-gray-400'}`}
          >
            {level} ({LOGS.filter((l) => l.level === level).length})
          </button>
        ))}
        <input
          value={query}
          onChange={(e) => setQuery(e.target.value)}
          placeholder="Search messages"
          className="ml-auto rounded bg-gray-800 px-3 py-1 text-sm"
        />
      </div>
      <div className="font-mono text-sm">
        {visible.map((l) => (
          <div key={l.id} className={`flex gap-4 px-2 py-0.5 ${COLOR[l.level]}`}>
            <span className="text-gray-500">{l.time}</span>
            <span className="w-12 uppercase">{l.level}</span>
            <span>{l.message}</span>
          </div>
        ))}
        {visible.length === 0 && <p className="text-gray-500">No matching lines.</p>}
      </div>
    </div>
  );
}
