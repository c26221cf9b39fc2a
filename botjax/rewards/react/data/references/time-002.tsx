import { useEffect, useRef, useState } from 'react';

function format(ms: number) {
  const m = Math.floor(ms / 60000);
  const s = Math.floor((ms % 60000) / 1000);
  const cs = Math.floor((ms % 1000) / 10);
  return `${String(m).padStart(2, '0')}:${String(s).padStart(2, '0')}.${String(cs).padStart(2, '0')}`;
}

export default function App() {
  const [elapsed, setElapsed] = useState(0);
  const [running, setRunning] = useState(false);
  const [laps, setLaps] = useState<number[]>([]);
  const offset = useRef(0);

  useEffect(() => {
    if (!running) return;
    const start = performance.now() - offset.current;
    const id = setInterval(() => {
      offset.current = performance.now() - start;
      setElapsed(offset.current);
    }, 31);
    return () => clearInterval(id);
  }, [running]);

  const lapTimes = laps.map((t, i) => t - (i > 0 ? laps[i - 1] : 0));
  const fastest = lapTimes.length > 1 ? Math.min(...lapTimes) : -1;
  const slowest = lapTimes.length > 1 ? Math.max(...lapTimes) : -1;

  return (
    <div className="flex min-h-screen flex-col items-center bg-black pt-20 text-white">
      <p className="font-mono text-7xl tabular-nums">{format(elapsed)}</p>
      <div className="mt-8 flex gap-4">
        <button
          onClick={() => {
            if (running) {
              setLaps([...laps, elapsed]);
            } else {
              offset.current = 0;
              setElapsed(0);
              setLaps([]);
            }
          }}
          className="h-20 w-20 rounded-full bg-neutral-700"
        >
          {running ? 'Lap' : 'Reset'}
        </button>
        <button
          onClick={() => setRunning(!running)}
          className={`h-20 w-20 rounded-full ${running ? 'bg-red-700' : 'bg-green-700'}`}
        >
          {running ? 'Stop' : 'Start'}
        </button>
      </div>
      <ol className="mt-8 w-72 divide-y divide-neutral-800">
        {lapTimes.map((t, i) => (
          <li
            key={i}
            className={`flex justify-between py-2 font-mono ${t === fastest ? 'text-green-400' : t === slowest ? 'text-red-400' : ''}`}
          >
            <span>Lap {i + 1}</span>
            <span>{format(t)}</span>
          </li>
        )).reverse()}
      </ol>
    </div>
  );
}
