import { useState } from 'react';

type Theme = 'light' | 'dark' | 'system';
const NOTIFICATIONS = [
  { key: 'email', label: 'Email notifications', hint: 'Weekly digest and account alerts' },
  { key: 'push', label: 'Push notifications', hint: 'Mentions and direct messages' },
  { key: 'sms', label: 'SMS notifications', hint: 'Security codes only' },
];

export default function App() {
  const [enabled, setEnabled] = useState<Record<string, boolean>>({ email: true, push: false, sms: false });
  const [theme, setTheme] = useState<Theme>('system');
  const [toast, setToast] = useState(false);

  function save() {
    setToast(true);
    setTimeout(() => setToast(false), 2500);
  }

  return (
    <div className="min-h-screen bg-gray-50 p-10">
      <div className="mx-auto max-w-xl rounded-xl bg-white p-6 shadow-sm">
        <h1 className="text-2xl font-bold">Settings</h1>
        <h2 className="mt-6 font-semibold">Notifications</h2>
        <ul className="mt-2 divide-y divide-gray-100">
          {NOTIFICATIONS.map((n) => (
            <li key={n.key} className="flex items-center justify-between py-3">
              <div>
                <p className="font-medium">{n.label}</p>
                <p className="text-sm text-gray-500">{n.hint}</p>
              </div>
              <button
                role="switch"
                aria-checked={enabled[n.key]}
                aria-label={n.label}
                onClick={() => setEnabled({ ...enabled, [n.key]: !enabled[n.key] })}
                className={`relative h-6 w-11 rounded-full transition ${enabled[n.key] ? 'bg-blue-600' : 'bg-gray-300'}`}
              >
                <span className={`absolute top-0.5 h-5 w-5 rounded-full bg-white shadow transition-all ${enabled[n.key] ? 'left-5' : 'left-0.5'}`} />
              </button>
            </li>
          ))}
        </ul>
        <h2 className="mt-6 font-semibold">Theme</h2>
        <div className="mt-2 grid grid-cols-3 gap-2">
          {(['light', 'dark', 'system'] as Theme[]).map((t) => (
            <button key={t} onClick={() => setTheme(t)}
              className={`rounded-lg border-2 py-3 capitalize ${theme === t ? 'border-blue-600 text-blue-700' : 'border-gray-200'}`}>
              {t}
            </button>
          ))}
        </div>
        <button onClick={save} className="mt-8 w-full rounded-lg bg-blue-600 py-2 font-semibold text-white">Save</button>
      </div>
      {toast && (
        <div role="status" className="fixed bottom-6 right-6 rounded-lg bg-gray-900 px-4 py-3 text-white shadow-lg">
          Settings saved
        </div>
      )}
    </div>
  );
}
