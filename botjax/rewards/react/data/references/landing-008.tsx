import { useState } from 'react';
import { CreditCard, Package, Search, Truck } from 'lucide-react';

const STEPS = [
  { icon: Search, title: 'Browse', short: 'Find what you need.',
    long: 'Search our catalogue of 10,000 products, filter by price and read honest reviews.' },
  { icon: CreditCard, title: 'Pay', short: 'Check out securely.',
    long: 'Pay by card or wallet. Your details are never stored on our servers.' },
  { icon: Package, title: 'Pack', short: 'We prepare it.',
    long: 'Orders placed before 2 pm are packed the same day in recyclable boxes.' },
  { icon: Truck, title: 'Deliver', short: 'At your door.',
    long: 'Track the courier live and change the delivery slot up to an hour before.' },
];

export default function App() {
  const [active, setActive] = useState(0);
  return (
    <section className="min-h-screen bg-slate-50 px-8 py-16">
      <h2 className="text-center text-3xl font-bold text-slate-900">How it works</h2>
      <div className="relative mx-auto mt-12 grid max-w-4xl grid-cols-4 gap-4">
        <div className="absolute left-[12%] right-[12%] top-7 h-0.5 bg-slate-300" />
        {STEPS.map(({ icon: Icon, title, short }, i) => (
          <button
            key={title}
            onClick={() => setActive(i)}
            className="relative flex flex-col items-center text-center"
          >
            <span
              className={`flex h-14 w-14 items-center justify-center rounded-full border-2 ${
                i === active ? 'border-teal-600 bg-teal-600 text-white' : 'border-slate-300 bg-white text-slate-500'
              }`}
            >
              <Icon className="h-6 w-6" />
            </span>
            <span className="mt-3 text-sm font-semibold text-slate-500">Step {i + 1}</span>
            <span className="font-semibold text-slate-900">{title}</span>
            <span className="text-sm text-slate-500">{short}</span>
          </button>
        ))}
      </div>
      <p className="mx-auto mt-10 max-w-xl rounded-lg bg-white p-6 text-center text-slate-700 shadow">
        {STEPS[active].long}
      </p>
    </section>
  );
}
