import { useState } from 'react';

const OPTIONS = [
  { key: 'motion', label: 'Reduce motion' },
  { key: 'contrast', label: 'High contrast' },
  { key: 'large', label: 'Larger text' },
  { key: 'underline', label: 'Underline links' },
] as const;
type Key = (typeof OPTIONS)[number]['key'];

export default function App() {
  const [on, setOn] = useState<Record<Key, boolean>>({ motion: false, contrast: false, large: false, underline: false });
  const sample = [
    on.contrast ? 'bg-black text-yellow-300' : 'bg-white text-gray-700',
    on.large ? 'text-xl' : 'text-base',
  ].join(' ');

  return (
    <div className="grid min-h-screen gap-8 bg-gray-100 p-10 md:grid-cols-2">
      <section className="rounded-xl bg-white p-6 shadow-sm">
        <h1 className="text-xl font-bold">Accessibility</h1>
        <ul className="mt-4 space-y-4">
          {OPTIONS.map((o) => (
            <li key={o.key} className="flex items-center justify-between">
              <span>{o.label}</span>
              <button
                role="switch"
                aria-checked={on[o.key]}
                aria-label={o.label}
                onClick={() => setOn({ ...on, [o.key]: !on[o.key] })}
                className={`relative h-6 w-11 rounded-full ${on[o.key] ? 'bg-emerald-600' : 'bg-gray-300'}`}
              >
                <span className={`absolute top-0.5 h-5 w-5 rounded-full bg-white ${on.motion ? '' : 'transition-all'} ${on[o.key] ? 'left-5' : 'left-0.5'}`} />
              </button>
            </li>
          ))}
        </ul>
      </section>
      <section className={`rounded-xl p-6 shadow-sm ${sample}`}>
        <h2 className="font-semibold">Preview</h2>
        <p className="mt-2">
          Our library is open every day from 9 to 18. Read the{' '}
          <a href="#" className={`${on.underline ? 'underline' : 'no-underline'} ${on.contrast ? 'text-cyan-300' : 'text-blue-600'}`}>
            borrowing rules
          </a>{' '}
          before your first visit.
        </p>
        <button className={`mt-4 rounded px-4 py-2 ${on.contrast ? 'bg-yellow-300 text-black' : 'bg-blue-600 text-white'} ${on.motion ? '' : 'transition hover:scale-105'}`}>
          Book a desk
        </button>
      </section>
    </div>
  );
}
