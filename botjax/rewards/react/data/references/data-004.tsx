import { useState } from 'react';

const INITIAL = Array.from({ length: 10 }, (_, i) => ({
  id: 1001 + i,
  customer: ['Lina', 'Marco', 'Priya', 'Tom', 'Yuki', 'Omar', 'Sara', 'Jon', 'Eva', 'Raj'][i],
  total: 20 + ((i * 37) % 180),
  status: ['Paid', 'Pending', 'Shipped'][i % 3],
}));

export default function App() {
  const [orders, setOrders] = useState(INITIAL);
  const [selected, setSelected] = useState<Set<number>>(new Set());
  const allSelected = orders.length > 0 && selected.size === orders.length;

  function toggle(id: number) {
    const next = new Set(selected);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setSelected(next);
  }

  return (
    <div className="min-h-screen bg-gray-50 p-8">
      <div className="mb-3 flex items-center gap-4">
        <span className="text-sm text-gray-600">{selected.size} selected</span>
        <button
          disabled={selected.size === 0}
          onClick={() => {
            setOrders(orders.filter((o) => !selected.has(o.id)));
            setSelected(new Set());
          }}
          className="rounded bg-red-600 px-3 py-1 text-sm text-white disabled:opacity-40"
        >
          Delete selected
        </button>
      </div>
      <table className="w-full max-w-3xl bg-white text-left shadow-sm">
        <thead className="bg-gray-100 text-sm">
          <tr>
            <th className="p-3">
              <input
                type="checkbox"
                aria-label="Select all"
                checked={allSelected}
                onChange={() => setSelected(allSelected ? new Set() : new Set(orders.map((o) => o.id)))}
              />
            </th>
            <th className="p-3">Order</th>
            <th className="p-3">Customer</th>
            <th className="p-3">Total</th>
            <th className="p-3">Status</th>
          </tr>
        </thead>
        <tbody>
          {orders.map((o) => (
            <tr key={o.id} className={`border-t border-gray-200 ${selected.has(o.id) ? 'bg-blue-50' : ''}`}>
              <td className="p-3">
                <input type="checkbox" aria-label={`Select order ${o.id}`} checked={selected.has(o.id)} onChange={() => toggle(o.id)} />
              </td>
              <td className="p-3">#{o.id}</td>
              <td className="p-3">{o.customer}</td>
              <td className="p-3">${o.total.toFixed(2)}</td>
              <td className="p-3">{o.status}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {orders.length === 0 && <p className="mt-4 text-gray-500">No orders left.</p>}
    </div>
  );
}
