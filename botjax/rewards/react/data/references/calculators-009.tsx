import { useState } from 'react';

const BASES = [
  { name: 'Binary', radix: 2, digits: /^[01]*$/ },
  { name: 'Octal', radix: 8, digits: /^[0-7]*$/ },
  { name: 'Decimal', radix: 10, digits: /^[0-9]*$/ },
  { name: 'Hexadecimal', radix: 16, digits: /^[0-9a-fA-F]*$/ },
];

export default function App() {
  const [value, setValue] = useState(255);
  const [editing, setEditing] = useState<{ radix: number; text: string } | null>(null);
  const [error, setError] = useState<{ radix: number; message: string } | null>(null);

  function edit(radix: number, digits: RegExp, name: string, text: string) {
    setEditing({ radix, text });
    if (!digits.test(text)) {
      setError({ radix, message: `"${text}" has a digit that is not valid in ${name.toLowerCase()}.` });
      return;
    }
    setError(null);
    setValue(text === '' ? 0 : parseInt(text, radix));
  }

  return (
    <div className="min-h-screen bg-slate-900 p-10 text-slate-100">
      <h1 className="mb-6 text-2xl font-bold">Number base converter</h1>
      <div className="grid max-w-xl gap-4">
        {BASES.map(({ name, radix, digits }) => (
          <label key={radix} className="block">
            <span className="text-sm text-slate-400">{name} (base {radix})</span>
            <input
              value={editing?.radix === radix ? editing.text : value.toString(radix).toUpperCase()}
              onChange={(e) => edit(radix, digits, name, e.target.value)}
              onBlur={() => setEditing(null)}
              className={`mt-1 w-full rounded bg-slate-800 px-3 py-2 font-mono text-lg ${error?.radix === radix ? 'ring-2 ring-red-500' : ''}`}
            />
            {error?.radix === radix && <span className="text-sm text-red-400">{error.message}</span>}
          </label>
        ))}
      </div>
    </div>
  );
}
