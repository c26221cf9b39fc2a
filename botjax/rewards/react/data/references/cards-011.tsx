import { useState } from 'react';

const THEMES = {
  Midnight: 'bg-slate-900 text-white',
  Sunrise: 'bg-gradient-to-br from-orange-300 to-rose-400 text-slate-900',
  Mint: 'bg-emerald-100 text-emerald-900',
};
type Theme = keyof typeof THEMES;

export default function App() {
  const [card, setCard] = useState({ name: 'Jordan Lee', title: 'Architect', phone: '+1 555 0142', email: 'jordan@studio.test' });
  const [theme, setTheme] = useState<Theme>('Midnight');
  const fields = Object.keys(card) as (keyof typeof card)[];

  return (
    <div className="flex min-h-screen flex-wrap items-center justify-center gap-10 bg-gray-100 p-8">
      <form className="w-72 space-y-3">
        {fields.map((f) => (
          <label key={f} className="block text-sm capitalize text-gray-700">
            {f}
            <input
              value={card[f]}
              onChange={(e) => setCard({ ...card, [f]: e.target.value })}
              className="mt-1 w-full rounded border border-gray-300 px-2 py-1"
            />
          </label>
        ))}
        <div className="flex gap-2">
          {(Object.keys(THEMES) as Theme[]).map((t) => (
            <button
              key={t}
              type="button"
              onClick={() => setTheme(t)}
              className={`rounded px-3 py-1 text-sm ${t === theme ? 'bg-gray-800 text-white' : 'bg-white'}`}
            >
              {t}
            </button>
          ))}
        </div>
      </form>
      <div className={`flex h-52 w-96 flex-col justify-between rounded-xl p-6 shadow-xl ${THEMES[theme]}`}>
        <div>
          <p className="text-2xl font-bold">{card.name || 'Your name'}</p>
          <p className="opacity-80">{card.title}</p>
        </div>
        <div className="text-sm">
          <p>{card.phone}</p>
          <p>{card.email}</p>
        </div>
      </div>
    </div>
  );
}
