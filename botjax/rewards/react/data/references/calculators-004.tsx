import { useState } from 'react';

type Unit = 'C' | 'F' | 'K';
const toC: Record<Unit, (v: number) => number> = { C: (v) => v, F: (v) => ((v - 32) * 5) / 9, K: (v) => v - 273.15 };
const fromC: Record<Unit, (c: number) => number> = { C: (c) => c, F: (c) => (c * 9) / 5 + 32, K: (c) => c + 273.15 };
const LABEL: Record<Unit, string> = { C: 'Celsius', F: 'Fahrenheit', K: 'Kelvin' };

const round = (x: number) => String(Math.round(x * 100) / 100);

export default function App() {
  const [values, setValues] = useState<Record<Unit, string>>({ C: '20', F: '68', K: '293.15' });
  const celsius = toC.C(Number(values.C) || 0);
  const fill = Math.min(100, Math.max(0, ((celsius + 30) / 80) * 100));

  function edit(unit: Unit, text: string) {
    const v = Number(text);
    if (text.trim() === '' || Number.isNaN(v)) {
      setValues({ ...values, [unit]: text });
      return;
    }
    const c = toC[unit](v);
    setValues({ C: round(fromC.C(c)), F: round(fromC.F(c)), K: round(fromC.K(c)), [unit]: text });
  }

  return (
    <div className="flex min-h-screen items-center justify-center gap-10 bg-orange-50">
      <div className="space-y-4">
        {(Object.keys(LABEL) as Unit[]).map((u) => (
          <label key={u} className="block w-64 text-sm font-medium text-gray-700">
            {LABEL[u]}
            <input value={values[u]} onChange={(e) => edit(u, e.target.value)} className="mt-1 w-full rounded border border-gray-300 px-3 py-2 text-lg" />
          </label>
        ))}
      </div>
      <div className="flex flex-col items-center">
        <div className="relative h-64 w-8 overflow-hidden rounded-full border-4 border-gray-300 bg-white">
          <div className="absolute bottom-0 w-full bg-gradient-to-t from-red-600 to-orange-400 transition-all" style={{ height: `${fill}%` }} />
        </div>
        <div className="-mt-2 h-12 w-12 rounded-full border-4 border-gray-300 bg-red-600" />
        <p className="mt-2 text-sm text-gray-600">{round(celsius)} °C</p>
      </div>
    </div>
  );
}
