import { useState } from 'react';

const OPTIONS = ['Day', 'Week', 'Month', 'Year'];
const TEXT: Record<string, string> = {
  Day: '8 tasks due today, 3 meetings.',
  Week: '31 tasks this week, busiest on Wednesday.',
  Month: '112 tasks in December, 4 milestones.',
  Year: '1,204 tasks completed in 2026.',
};

export default function App() {
  const [index, setIndex] = useState(1);
  return (
    <div className="flex min-h-screen flex-col items-center gap-8 bg-slate-100 pt-24">
      <div className="relative grid w-96 grid-cols-4 rounded-xl bg-slate-200 p-1">
        <span
          className="absolute bottom-1 top-1 rounded-lg bg-white shadow transition-all duration-300"
          style={{ left: `calc(${index * 25}% + 4px)`, width: 'calc(25% - 8px)' }}
        />
        {OPTIONS.map((option, i) => (
          <button
            key={option}
            onClick={() => setIndex(i)}
            className={`relative z-10 py-2 text-sm font-medium ${i === index ? 'text-slate-900' : 'text-slate-500'}`}
          >
            {option}
          </button>
        ))}
      </div>
      <p className="text-lg text-slate-700">{TEXT[OPTIONS[index]]}</p>
    </div>
  );
}
