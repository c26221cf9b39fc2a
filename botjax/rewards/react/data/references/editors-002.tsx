import { useState } from 'react';

const SAMPLE = `Writing is thinking. To write well is to think clearly.

That is why it is so hard. Keep sentences short, and cut every word that does no work.`;

export default function App() {
  const [text, setText] = useState(SAMPLE);
  const words = text.trim() ? text.trim().split(/\s+/).length : 0;
  const stats = [
    { label: 'Words', value: words },
    { label: 'Characters', value: text.length },
    { label: 'Without spaces', value: text.replace(/\s/g, '').length },
    { label: 'Sentences', value: (text.match(/[^.!?]+[.!?]+/g) ?? []).length },
    { label: 'Paragraphs', value: text.split(/\n\s*\n/).filter((p) => p.trim()).length },
    { label: 'Reading time', value: `${Math.max(words > 0 ? 1 : 0, Math.round(words / 200))} min` },
  ];
  return (
    <div className="min-h-screen bg-stone-50 p-10">
      <h1 className="mb-4 text-2xl font-bold">Word counter</h1>
      <div className="mb-4 grid grid-cols-3 gap-3 md:grid-cols-6">
        {stats.map((s) => (
          <div key={s.label} className="rounded-lg bg-white p-3 text-center shadow-sm">
            <div className="text-2xl font-semibold">{s.value}</div>
            <div className="text-xs text-stone-500">{s.label}</div>
          </div>
        ))}
      </div>
      <textarea
        value={text}
        onChange={(e) => setText(e.target.value)}
        rows={12}
        className="w-full rounded-lg border border-stone-300 p-4 font-serif text-lg"
      />
    </div>
  );
}
