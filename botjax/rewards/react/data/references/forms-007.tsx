import { useState } from 'react';
import { Check, X } from 'lucide-react';

const RULES = [
  { label: 'At least 8 characters', test: (p: string) => p.length >= 8 },
  { label: 'Contains a number', test: (p: string) => /\d/.test(p) },
  { label: 'Contains an uppercase letter', test: (p: string) => /[A-Z]/.test(p) },
  { label: 'Contains a symbol', test: (p: string) => /[^A-Za-z0-9]/.test(p) },
];

export default function App() {
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const [confirm, setConfirm] = useState('');
  const [saved, setSaved] = useState(false);
  const allRules = RULES.every((r) => r.test(next));
  const mismatch = confirm.length > 0 && confirm !== next;
  const canSave = current.length > 0 && allRules && confirm === next;

  const input = 'mt-1 w-full rounded-md border border-gray-300 px-3 py-2';
  return (
    <div className="min-h-screen bg-gray-50 p-10">
      <form
        className="mx-auto max-w-md space-y-4 rounded-xl bg-white p-6 shadow"
        onSubmit={(e) => {
          e.preventDefault();
          if (canSave) setSaved(true);
        }}
      >
        <h1 className="text-xl font-bold">Change password</h1>
        <label className="block text-sm">Current password
          <input type="password" className={input} value={current} onChange={(e) => setCurrent(e.target.value)} />
        </label>
        <label className="block text-sm">New password
          <input type="password" className={input} value={next} onChange={(e) => setNext(e.target.value)} />
        </label>
        <ul className="space-y-1 text-sm">
          {RULES.map((r) => {
            const ok = r.test(next);
            return (
              <li key={r.label} className={`flex items-center gap-2 ${ok ? 'text-green-600' : 'text-gray-500'}`}>
                {ok ? <Check className="h-4 w-4" /> : <X className="h-4 w-4" />} {r.label}
              </li>
            );
          })}
        </ul>
        <label className="block text-sm">Confirm new password
          <input type="password" className={input} value={confirm} onChange={(e) => setConfirm(e.target.value)} />
        </label>
        {mismatch && <p className="text-sm text-red-600">The passwords do not match.</p>}
        <button disabled={!canSave} className="w-full rounded-md bg-indigo-600 py-2 text-white disabled:bg-gray-300">
          Update password
        </button>
        {saved && <p className="text-sm text-green-700">Your password was changed.</p>}
      </form>
    </div>
  );
}
