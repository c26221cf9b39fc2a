import { useEffect, useState } from 'react';

const ITEMS = ['Quarterly report.pdf', 'Team photo.png', 'Budget 2027.xlsx', 'Notes.txt', 'Roadmap.key'];

export default function App() {
  const [items, setItems] = useState(ITEMS);
  const [removed, setRemoved] = useState<{ name: string; index: number } | null>(null);

  useEffect(() => {
    if (!removed) return;
    const timer = setTimeout(() => setRemoved(null), 5000);
    return () => clearTimeout(timer);
  }, [removed]);

  function remove(index: number) {
    setRemoved({ name: items[index], index });
    setItems(items.filter((_, i) => i !== index));
  }

  function undo() {
    if (!removed) return;
    const next = [...items];
    next.splice(removed.index, 0, removed.name);
    setItems(next);
    setRemoved(null);
  }

  return (
    <div className="min-h-screen bg-white p-10">
      <h1 className="mb-4 text-xl font-semibold">Files</h1>
      <ul className="max-w-md divide-y divide-gray-200 rounded border border-gray-200">
        {items.map((name, i) => (
          <li key={name} className="flex items-center justify-between p-3">
            {name}
            <button onClick={() => remove(i)} className="text-sm text-red-600">Delete</button>
          </li>
        ))}
      </ul>
      {removed && (
        <div className="fixed bottom-6 left-1/2 flex -translate-x-1/2 items-center gap-6 rounded-md bg-gray-900 px-4 py-3 text-white shadow-lg">
          <span>{removed.name} deleted</span>
          <button onClick={undo} className="font-semibold text-amber-300">Undo</button>
        </div>
      )}
    </div>
  );
}
