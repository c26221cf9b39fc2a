import { Check } from 'lucide-react';

const STEPS = ['Ordered', 'Packed', 'Shipped', 'Out for delivery', 'Delivered'];
const CURRENT = 2;
const ITEMS = [
  { name: 'Ceramic mug', emoji: '☕', qty: 2, price: 14 },
  { name: 'Pour-over kettle', emoji: '🫖', qty: 1, price: 56 },
  { name: 'Coffee beans 1 kg', emoji: '🫘', qty: 1, price: 32 },
];

export default function App() {
  return (
    <div className="min-h-screen bg-gray-50 p-10">
      <div className="mx-auto max-w-3xl rounded-xl bg-white p-8 shadow-sm">
        <h1 className="text-2xl font-bold">Order #48213</h1>
        <p className="text-gray-500">Estimated delivery: Thursday, 10 December</p>
        <ol className="mt-8 flex">
          {STEPS.map((step, i) => (
            <li key={step} className="relative flex flex-1 flex-col items-center text-center">
              {i > 0 && (
                <span className={`absolute right-1/2 top-4 h-1 w-full ${i <= CURRENT ? 'bg-emerald-500' : 'bg-gray-200'}`} />
              )}
              <span
                className={`relative z-10 flex h-9 w-9 items-center justify-center rounded-full text-sm font-semibold ${
                  i < CURRENT ? 'bg-emerald-500 text-white' : i === CURRENT ? 'bg-emerald-500 text-white ring-4 ring-emerald-200' : 'bg-gray-200 text-gray-500'
                }`}
              >
                {i < CURRENT ? <Check className="h-5 w-5" /> : i + 1}
              </span>
              <span className={`mt-2 text-sm ${i <= CURRENT ? 'font-medium text-gray-900' : 'text-gray-400'}`}>{step}</span>
            </li>
          ))}
        </ol>
        <ul className="mt-10 divide-y divide-gray-200">
          {ITEMS.map((item) => (
            <li key={item.name} className="flex items-center gap-4 py-3">
              <span className="flex h-12 w-12 items-center justify-center rounded-lg bg-amber-50 text-2xl">{item.emoji}</span>
              <span className="flex-1">{item.name} <span className="text-gray-400">× {item.qty}</span></span>
              <span className="font-medium">${(item.qty * item.price).toFixed(2)}</span>
            </li>
          ))}
        </ul>
      </div>
    </div>
  );
}
