import { useState } from 'react';

const PRESETS = [10, 15, 20];

export default function App() {
  const [bill, setBill] = useState('84.50');
  const [percent, setPercent] = useState(15);
  const [custom, setCustom] = useState('');
  const [people, setPeople] = useState(2);

  const amount = Math.max(0, Number(bill) || 0);
  const rate = custom !== '' ? Math.max(0, Number(custom) || 0) : percent;
  const tip = (amount * rate) / 100;
  const n = Math.max(1, people);

  return (
    <div className="flex min-h-screen items-center justify-center bg-teal-50">
      <div className="grid w-[44rem] gap-6 rounded-2xl bg-white p-8 shadow md:grid-cols-2">
        <div className="space-y-4">
          <label className="block text-sm font-medium">Bill
            <input type="number" value={bill} onChange={(e) => setBill(e.target.value)} className="mt-1 w-full rounded bg-teal-50 px-3 py-2 text-right text-lg" />
          </label>
          <div>
            <p className="text-sm font-medium">Tip</p>
            <div className="mt-1 grid grid-cols-4 gap-2">
              {PRESETS.map((p) => (
                <button
                  key={p}
                  onClick={() => {
                    setPercent(p);
                    setCustom('');
                  }}
                  className={`rounded py-2 font-semibold ${custom === '' && percent === p ? 'bg-teal-400 text-teal-950' : 'bg-teal-900 text-white'}`}
                >
                  {p}%
                </button>
              ))}
              <input type="number" placeholder="Custom" value={custom} onChange={(e) => setCustom(e.target.value)} aria-label="Custom tip percent" className="rounded bg-teal-50 px-2 text-right" />
            </div>
          </div>
          <label className="block text-sm font-medium">Number of people
            <input type="number" min={1} value={people} onChange={(e) => setPeople(Number(e.target.value))} className="mt-1 w-full rounded bg-teal-50 px-3 py-2 text-right text-lg" />
          </label>
        </div>
        <div className="flex flex-col justify-center gap-6 rounded-xl bg-teal-900 p-6 text-white">
          <div className="flex justify-between"><span>Tip / person</span><span className="text-3xl font-bold text-teal-300">${(tip / n).toFixed(2)}</span></div>
          <div className="flex justify-between"><span>Total / person</span><span className="text-3xl font-bold text-teal-300">${((amount + tip) / n).toFixed(2)}</span></div>
        </div>
      </div>
    </div>
  );
}
