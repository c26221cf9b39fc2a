import { useState } from 'react';

const LINES = [
  { item: 'Website design', qty: 1, unit: 2400 },
  { item: 'Illustrations', qty: 6, unit: 150 },
  { item: 'Hosting (months)', qty: 12, unit: 25 },
  { item: 'Support hours', qty: 8, unit: 90 },
];
const TAX = 0.2;
const eur = (n: number) => n.toLocaleString('en-GB', { style: 'currency', currency: 'EUR' });

export default function App() {
  const [paid, setPaid] = useState(false);
  const subtotal = LINES.reduce((s, l) => s + l.qty * l.unit, 0);
  return (
    <div className="min-h-screen bg-gray-200 p-8">
      <div className="mx-auto max-w-3xl bg-white p-10 shadow">
        <div className="flex items-start justify-between">
          <div>
            <h1 className="text-3xl font-bold">Invoice</h1>
            <p className="text-gray-500">INV-2026-0142 · issued 1 December 2026</p>
          </div>
          <button
            onClick={() => setPaid(!paid)}
            className={`rounded-full px-4 py-1 text-sm font-semibold ${paid ? 'bg-green-100 text-green-700' : 'bg-red-100 text-red-700'}`}
          >
            {paid ? 'Paid' : 'Unpaid'}
          </button>
        </div>
        <div className="mt-8 grid grid-cols-2 gap-8 text-sm">
          <div>
            <p className="font-semibold">From</p>
            <p>Studio Nord</p>
            <p>12 Harbour Street, Bergen</p>
          </div>
          <div>
            <p className="font-semibold">Bill to</p>
            <p>Kite &amp; Co.</p>
            <p>88 Rue Lafayette, Paris</p>
          </div>
        </div>
        <table className="mt-8 w-full text-sm">
          <thead className="border-b-2 border-gray-800 text-left">
            <tr>
              <th className="py-2">Item</th>
              <th className="py-2 text-right">Qty</th>
              <th className="py-2 text-right">Unit price</th>
              <th className="py-2 text-right">Amount</th>
            </tr>
          </thead>
          <tbody>
            {LINES.map((l) => (
              <tr key={l.item} className="border-b border-gray-200">
                <td className="py-2">{l.item}</td>
                <td className="py-2 text-right">{l.qty}</td>
                <td className="py-2 text-right">{eur(l.unit)}</td>
                <td className="py-2 text-right">{eur(l.qty * l.unit)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        <dl className="ml-auto mt-6 w-64 space-y-1 text-sm">
          <div className="flex justify-between"><dt>Subtotal</dt><dd>{eur(subtotal)}</dd></div>
          <div className="flex justify-between"><dt>VAT (20%)</dt><dd>{eur(subtotal * TAX)}</dd></div>
          <div className="flex justify-between border-t border-gray-800 pt-1 text-base font-bold"><dt>Total</dt><dd>{eur(subtotal * (1 + TAX))}</dd></div>
        </dl>
      </div>
    </div>
  );
}
