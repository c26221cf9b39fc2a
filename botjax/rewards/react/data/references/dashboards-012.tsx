const STAGES = [
  { name: 'Applied', count: 840 },
  { name: 'Screened', count: 312 },
  { name: 'Interviewed', count: 96 },
  { name: 'Offered', count: 18 },
  { name: 'Hired', count: 14 },
];

export default function App() {
  const top = STAGES[0].count;
  return (
    <div className="min-h-screen bg-white p-10">
      <h1 className="text-2xl font-bold text-gray-900">Hiring pipeline</h1>
      <p className="text-gray-500">Engineering roles, last quarter</p>
      <div className="mx-auto mt-8 max-w-2xl space-y-1">
        {STAGES.map((stage, i) => (
          <div key={stage.name}>
            {i > 0 && (
              <p className="py-1 text-center text-xs text-gray-500">
                ↓ {((stage.count / STAGES[i - 1].count) * 100).toFixed(1)}% converted
              </p>
            )}
            <div
              className="mx-auto flex h-12 items-center justify-between rounded-md bg-violet-600 px-4 text-white"
              style={{ width: `${Math.max(20, (stage.count / top) * 100)}%`, opacity: 1 - i * 0.12 }}
            >
              <span className="font-medium">{stage.name}</span>
              <span className="font-semibold">{stage.count}</span>
            </div>
          </div>
        ))}
      </div>
      <p className="mt-8 text-center text-sm text-gray-600">
        Overall: {((STAGES[STAGES.length - 1].count / top) * 100).toFixed(2)}% of applicants hired
      </p>
    </div>
  );
}
