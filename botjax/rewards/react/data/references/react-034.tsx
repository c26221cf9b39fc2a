import { useState } from 'react';
import { Check } from 'lucide-react';

const PLANS = [
  { name: 'Free', monthly: 0, features: ['1 project', '100 MB storage', 'Community support'] },
  { name: 'Pro', monthly: 19, features: ['Unlimited projects', '50 GB storage', 'Email support', 'Custom domains'] },
  { name: 'Enterprise', monthly: 79, features: ['Everything in Pro', 'SSO and audit logs', 'Dedicated manager', '99.99% SLA'] },
];

export default function App() {
  const [yearly, setYearly] = useState(false);
  return (
    <div className="min-h-screen bg-gray-50 px-6 py-16">
      <h1 className="text-center text-4xl font-bold">Simple pricing</h1>
      <div className="mt-6 flex items-center justify-center gap-3">
        <span className={yearly ? 'text-gray-500' : 'font-semibold'}>Monthly</span>
        <button
          role="switch"
          aria-checked={yearly}
          aria-label="Bill yearly"
          onClick={() => setYearly(!yearly)}
          className={`relative h-7 w-12 rounded-full transition ${yearly ? 'bg-indigo-600' : 'bg-gray-300'}`}
        >
          <span className={`absolute top-1 h-5 w-5 rounded-full bg-white transition-all ${yearly ? 'left-6' : 'left-1'}`} />
        </button>
        <span className={yearly ? 'font-semibold' : 'text-gray-500'}>Yearly (save 20%)</span>
      </div>
      <div className="mx-auto mt-10 grid max-w-5xl gap-6 md:grid-cols-3">
        {PLANS.map((plan) => {
          const price = yearly ? Math.round(plan.monthly * 12 * 0.8) : plan.monthly;
          const featured = plan.name === 'Pro';
          return (
            <div key={plan.name} className={`rounded-2xl bg-white p-8 shadow ${featured ? 'ring-2 ring-indigo-600' : ''}`}>
              <h2 className="text-xl font-semibold">{plan.name}</h2>
              <p className="mt-4">
                <span className="text-4xl font-bold">${price}</span>
                <span className="text-gray-500">/{yearly ? 'year' : 'month'}</span>
              </p>
              <ul className="mt-6 space-y-2">
                {plan.features.map((f) => (
                  <li key={f} className="flex items-center gap-2 text-sm">
                    <Check className="h-4 w-4 text-indigo-600" /> {f}
                  </li>
                ))}
              </ul>
              <button className={`mt-8 w-full rounded-lg py-2 font-medium ${featured ? 'bg-indigo-600 text-white' : 'border border-gray-300'}`}>
                Choose {plan.name}
              </button>
            </div>
          );
        })}
      </div>
    </div>
  );
}
