import { useState } from 'react';

const TABS = [
  { id: 'profile', label: 'Profile', body: 'Your name, photo and bio are visible to everyone in your workspace.' },
  { id: 'account', label: 'Account', body: 'Change your email address, password and sign-in methods here.' },
  { id: 'notifications', label: 'Notifications', body: 'Choose which updates reach you by email and on your phone.' },
];

export default function App() {
  const [active, setActive] = useState(TABS[0].id);
  const tab = TABS.find((t) => t.id === active) ?? TABS[0];
  return (
    <div className="min-h-screen bg-white p-10">
      <div role="tablist" className="flex gap-1 border-b border-gray-200">
        {TABS.map((t) => (
          <button
            key={t.id}
            role="tab"
            aria-selected={t.id === active}
            onClick={() => setActive(t.id)}
            className={`-mb-px border-b-2 px-4 py-2 font-medium ${
              t.id === active ? 'border-blue-600 text-blue-600' : 'border-transparent text-gray-500 hover:text-gray-800'
            }`}
          >
            {t.label}
          </button>
        ))}
      </div>
      <div role="tabpanel" className="py-6">
        <h2 className="text-xl font-semibold">{tab.label}</h2>
        <p className="mt-2 text-gray-600">{tab.body}</p>
      </div>
    </div>
  );
}
