import { useEffect, useState } from 'react';

const R = 90;
const C = 2 * Math.PI * R;

export default function App() {
  const [minutes, setMinutes] = useState(1);
  const [seconds, setSeconds] = useState(30);
  const [total, setTotal] = useState(90);
  const [left, setLeft] = useState(90);
  const [running, setRunning] = useState(false);

  useEffect(() => {
    if (!running) return;
    const id = setInterval(() => {
      setLeft((l) => {
        if (l <= 1) {
          setRunning(false);
          return 0;
        }
        return l - 1;
      });
    }, 1000);
    return () => clearInterval(id);
  }, [running]);

  function reset() {
    const t = minutes * 60 + seconds;
    setRunning(false);
    setTotal(t);
    setLeft(t);
  }

  const fraction = total > 0 ? left / total : 0;
  const mm = String(Math.floor(left / 60)).padStart(2, '0');
  const ss = String(left % 60).padStart(2, '0');
  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-6 bg-indigo-950 text-white">
      <svg width="220" height="220" className="-rotate-90">
        <circle cx="110" cy="110" r={R} stroke="#312e81" strokeWidth="12" fill="none" />
        <circle cx="110" cy="110" r={R} stroke="#a5b4fc" strokeWidth="12" fill="none" strokeLinecap="round"
          strokeDasharray={C} strokeDashoffset={C * (1 - fraction)} className="transition-all duration-1000" />
      </svg>
      <p className="-mt-40 mb-24 font-mono text-5xl">{mm}:{ss}</p>
      <div className="flex items-center gap-2">
        <input type="number" min={0} max={99} value={minutes} disabled={running}
          onChange={(e) => setMinutes(Math.max(0, Number(e.target.value)))} aria-label="Minutes"
          className="w-16 rounded bg-indigo-900 px-2 py-1 text-center" />
        <span>min</span>
        <input type="number" min={0} max={59} value={seconds} disabled={running}
          onChange={(e) => setSeconds(Math.min(59, Math.max(0, Number(e.target.value))))} aria-label="Seconds"
          className="w-16 rounded bg-indigo-900 px-2 py-1 text-center" />
        <span>sec</span>
      </div>
      <div className="flex gap-3">
        <button onClick={() => left > 0 && setRunning(true)} className="rounded bg-indigo-500 px-4 py-2">Start</button>
        <button onClick={() => setRunning(false)} className="rounded bg-indigo-800 px-4 py-2">Pause</button>
        <button onClick={reset} className="rounded bg-indigo-800 px-4 py-2">Reset</button>
      </div>
      {left === 0 && <p className="text-lg text-amber-300">Time is up!</p>}
    </div>
  );
}
