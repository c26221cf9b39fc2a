import { useState } from 'react';

const ITEMS = Array.from({ length: 100 }, (_, i) => ({
  id: i + 1,
  title: `Item ${i + 1}: ${['Alpine', 'Boreal', 'Coastal', 'Desert', 'Everglade'][i % 5]} report`,
}));
const PAGE = 20;

export default function App() {
  const [shown, setShown] = useState(PAGE);
  const done = shown >= ITEMS.length;
  return (
    <div className="min-h-screen bg-neutral-50 p-8">
      <div className="mx-auto max-w-xl">
        <p className="sticky top-0 bg-neutral-50 py-2 text-sm text-neutral-600">
          Showing {shown} of {ITEMS.length}
        </p>
        <ul className="space-y-2">
          {ITEMS.slice(0, shown).map((item) => (
            <li key={item.id} className="rounded-md bg-white p-3 shadow-sm">{item.title}</li>
          ))}
        </ul>
        {done ? (
          <p className="my-6 text-center text-neutral-500">You have reached the end.</p>
        ) : (
          <button
            onClick={() => setShown(Math.min(shown + PAGE, ITEMS.length))}
            className="my-6 w-full rounded-md bg-neutral-800 py-2 text-white"
          >
            Load more
          </button>
        )}
      </div>
    </div>
  );
}
