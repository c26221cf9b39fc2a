import { useState } from 'react';

const ITEMS = [
  { name: 'Linen shirt', qty: 1, price: 48 },
  { name: 'Canvas tote', qty: 2, price: 18 },
  { name: 'Wool socks', qty: 3, price: 9 },
];
const SHIPPING = [
  { id: 'standard', label: 'Standard (5-7 days)', cost: 4.99 },
  { id: 'express', label: 'Express (2 days)', cost: 12.99 },
  { id: 'pickup', label: 'Store pickup', cost: 0 },
];
const money = (n: number) => `$${n.toFixed(2)}`;

export default function App() {
  const [shipping, setShipping] = useState('standard');
  const [code, setCode] = useState('');
  const [applied, setApplied] = useState(false);
  const [error, setError] = useState('');

  const subtotal = ITEMS.reduce((s, i) => s + i.qty * i.price, 0);
  const discount = applied ? subtotal * 0.1 : 0;
  const ship = SHIPPING.find((s) => s.id === shipping)?.cost ?? 0;
  const tax = (subtotal - discount) * 0.08;
  const total = subtotal - discount + ship + tax;

  return (
    <div className="min-h-screen bg-stone-100 p-8">
      <div className="mx-auto max-w-md rounded-xl bg-white p-6 shadow">
        <h1 className="text-xl font-semibold">Order summary</h1>
        <ul className="mt-4 space-y-2">
          {ITEMS.map((i) => (
            <li key={i.name} className="flex justify-between text-sm">
              <span>{i.name} × {i.qty}</span>
              <span>{money(i.qty * i.price)}</span>
            </li>
          ))}
        </ul>
        <fieldset className="mt-6 space-y-2">
          <legend className="mb-2 text-sm font-medium">Shipping</legend>
          {SHIPPING.map((s) => (
            <label key={s.id} className="flex items-center justify-between text-sm">
              <span className="flex items-center gap-2">
                <input type="radio" name="shipping" checked={shipping === s.id} onChange={() => setShipping(s.id)} />
                {s.label}
              </span>
              <span>{s.cost ? money(s.cost) : 'Free'}</span>
            </label>
          ))}
        </fieldset>
        <div className="mt-6 flex gap-2">
          <input value={code} onChange={(e) => setCode(e.target.value)} placeholder="Promo code" className="flex-1 rounded border border-stone-300 px-3 py-2 text-sm" />
          <button
            onClick={() => {
              const ok = code.trim().toUpperCase() === 'SAVE10';
              setApplied(ok);
              setError(ok ? '' : 'That code is not valid.');
            }}
            className="rounded bg-stone-800 px-4 text-sm text-white"
          >
            Apply
          </button>
        </div>
        {error && <p className="mt-1 text-sm text-red-600">{error}</p>}
        <dl className="mt-6 space-y-1 border-t border-stone-200 pt-4 text-sm">
          <div className="flex justify-between"><dt>Subtotal</dt><dd>{money(subtotal)}</dd></div>
          {applied && <div className="flex justify-between text-green-700"><dt>SAVE10</dt><dd>-{money(discount)}</dd></div>}
          <div className="flex justify-between"><dt>Shipping</dt><dd>{money(ship)}</dd></div>
          <div className="flex justify-between"><dt>Tax (8%)</dt><dd>{money(tax)}</dd></div>
          <div className="flex justify-between pt-2 text-base font-semibold"><dt>Total</dt><dd>{money(total)}</dd></div>
        </dl>
      </div>
    </div>
  );
}
