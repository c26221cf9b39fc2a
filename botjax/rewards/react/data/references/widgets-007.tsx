import { useEffect, useRef, useState } from 'react';

const MIN = 0;
const MAX = 10;

export default function App() {
  const [value, setValue] = useState(3);
  const timer = useRef<ReturnType<typeof setInterval> | null>(null);

  function stop() {
    if (timer.current) clearInterval(timer.current);
    timer.current = null;
  }

  function start(delta: number) {
    const step = () => setValue((v) => Math.min(MAX, Math.max(MIN, v + delta)));
    step();
    stop();
    timer.current = setInterval(step, 150);
  }

  useEffect(() => stop, []);

  const btn = 'h-12 w-12 rounded-full bg-gray-900 text-2xl text-white disabled:bg-gray-300';
  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-4 bg-white">
      <p className="text-gray-600">Tickets (hold a button to repeat)</p>
      <div className="flex items-center gap-6">
        <button className={btn} aria-label="Decrease" disabled={value <= MIN}
          onPointerDown={() => start(-1)} onPointerUp={stop} onPointerLeave={stop}>−</button>
        <span className="w-12 text-center text-4xl font-bold tabular-nums">{value}</span>
        <button className={btn} aria-label="Increase" disabled={value >= MAX}
          onPointerDown={() => start(1)} onPointerUp={stop} onPointerLeave={stop}>+</button>
      </div>
      <p className="text-sm text-gray-400">Between {MIN} and {MAX}</p>
    </div>
  );
}
