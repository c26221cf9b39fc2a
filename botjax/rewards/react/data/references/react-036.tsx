import { useState } from 'react';
import { ChevronDown } from 'lucide-react';

const FAQ = [
  { q: 'How long does shipping take?', a: 'Orders ship within one business day and arrive in 3-5 days.' },
  { q: 'Can I return an item?', a: 'Yes, within 30 days of delivery, as long as it is unused.' },
  { q: 'Do you ship abroad?', a: 'We ship to 42 countries. Duties are shown at checkout.' },
  { q: 'How do I track my order?', a: 'You get a tracking link by email as soon as the parcel leaves.' },
  { q: 'Which payment methods do you take?', a: 'All major cards, bank transfer and gift cards.' },
  { q: 'How can I reach support?', a: 'Use the chat in the corner or write to our support team any day.' },
];

export default function App() {
  const [open, setOpen] = useState<number | null>(0);
  return (
    <div className="min-h-screen bg-neutral-100 p-10">
      <h1 className="mb-6 text-center text-3xl font-bold">Frequently asked questions</h1>
      <div className="mx-auto max-w-2xl divide-y divide-neutral-200 rounded-xl bg-white shadow-sm">
        {FAQ.map((item, i) => (
          <div key={item.q}>
            <button
              aria-expanded={open === i}
              onClick={() => setOpen(open === i ? null : i)}
              className="flex w-full items-center justify-between px-5 py-4 text-left font-medium"
            >
              {item.q}
              <ChevronDown className={`h-5 w-5 transition-transform ${open === i ? 'rotate-180' : ''}`} />
            </button>
            {open === i && <p className="px-5 pb-4 text-neutral-600">{item.a}</p>}
          </div>
        ))}
      </div>
    </div>
  );
}
