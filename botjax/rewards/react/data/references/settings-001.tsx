import { useState } from 'react';

const COLORS = ['bg-rose-500', 'bg-amber-500', 'bg-emerald-500', 'bg-sky-500', 'bg-violet-500'];
const INITIAL = { name: 'Noor Haddad', username: 'noorh', bio: 'Frontend developer. Coffee, cycling and clean CSS.', color: 0 };

export default function App() {
  const [saved, setSaved] = useState(INITIAL);
  const [form, setForm] = useState(INITIAL);
  const [message, setMessage] = useState('');
  const changed = JSON.stringify(form) !== JSON.stringify(saved);
  const initials = form.name.split(' ').map((w) => w[0] ?? '').join('').slice(0, 2).toUpperCase();

  return (
    <div className="min-h-screen bg-slate-50 p-10">
      <form
        className="mx-auto max-w-lg space-y-4 rounded-xl bg-white p-6 shadow-sm"
        onSubmit={(e) => {
          e.preventDefault();
          setSaved(form);
          setMessage('Profile saved.');
        }}
      >
        <h1 className="text-xl font-bold">Profile</h1>
        <div className="flex items-center gap-4">
          <div className={`flex h-16 w-16 items-center justify-center rounded-full text-xl font-bold text-white ${COLORS[form.color]}`}>
            {initials}
          </div>
          <button type="button" onClick={() => setForm({ ...form, color: (form.color + 1) % COLORS.length })}
            className="rounded border border-slate-300 px-3 py-1 text-sm">
            Change colour
          </button>
        </div>
        <label className="block text-sm">Name
          <input value={form.name} onChange={(e) => setForm({ ...form, name: e.target.value })} className="mt-1 w-full rounded border border-slate-300 px-3 py-2" />
        </label>
        <label className="block text-sm">Username
          <input value={form.username} onChange={(e) => setForm({ ...form, username: e.target.value.replace(/\s/g, '') })} className="mt-1 w-full rounded border border-slate-300 px-3 py-2" />
        </label>
        <label className="block text-sm">Bio
          <textarea value={form.bio} maxLength={160} rows={3} onChange={(e) => setForm({ ...form, bio: e.target.value })} className="mt-1 w-full rounded border border-slate-300 px-3 py-2" />
          <span className={`block text-right text-xs ${form.bio.length >= 150 ? 'text-amber-600' : 'text-slate-400'}`}>{form.bio.length}/160</span>
        </label>
        <button disabled={!changed} className="rounded bg-slate-900 px-4 py-2 text-white disabled:opacity-40">Save</button>
        {message && !changed && <p className="text-sm text-green-700">{message}</p>}
      </form>
    </div>
  );
}
