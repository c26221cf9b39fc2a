import { useState } from 'react';
import { Lock, ShieldCheck, Zap } from 'lucide-react';

const BADGES = [
  { icon: ShieldCheck, label: 'End-to-end encrypted' },
  { icon: Zap, label: 'Syncs in milliseconds' },
  { icon: Lock, label: 'Private by default' },
];

export default function App() {
  const [email, setEmail] = useState('');
  const [joined, setJoined] = useState(false);
  const valid = /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email);

  return (
    <main className="min-h-screen bg-gradient-to-b from-amber-50 to-white px-6 py-24 text-center">
      <h1 className="mx-auto max-w-3xl text-5xl font-extrabold tracking-tight text-slate-900">
        Notes that think with you
      </h1>
      <p className="mx-auto mt-4 max-w-xl text-lg text-slate-600">
        Capture ideas, link them together and find anything in a second. Jot is the note app for
        people with too many tabs open.
      </p>
      {joined ? (
        <p className="mt-8 text-lg font-medium text-emerald-700">
          Thanks! We will write to {email} when your invite is ready.
        </p>
      ) : (
        <form
          className="mx-auto mt-8 flex max-w-md gap-2"
          onSubmit={(e) => {
            e.preventDefault();
            if (valid) setJoined(true);
          }}
        >
          <input
            type="email"
            value={email}
            onChange={(e) => setEmail(e.target.value)}
            placeholder="you@example.com"
            className="flex-1 rounded-lg border border-slate-300 px-4 py-3 outline-none focus:border-amber-500"
          />
          <button
            type="submit"
            disabled={!valid}
            className="rounded-lg bg-amber-500 px-5 py-3 font-semibold text-white disabled:opacity-50"
          >
            Get early access
          </button>
        </form>
      )}
      <ul className="mt-12 flex flex-wrap justify-center gap-6">
        {BADGES.map(({ icon: Icon, label }) => (
          <li key={label} className="flex items-center gap-2 text-sm text-slate-600">
            <Icon className="h-5 w-5 text-amber-600" />
            {label}
          </li>
        ))}
      </ul>
    </main>
  );
}
