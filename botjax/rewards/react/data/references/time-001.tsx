import { useEffect, useState } from 'react';

function Hand({ angle, length, width, color }: { angle: number; length: number; width: number; color: string }) {
  return (
    <line
      x1="100" y1="100" x2="100" y2={100 - length}
      stroke={color} strokeWidth={width} strokeLinecap="round"
      transform={`rotate(${angle} 100 100)`}
    />
  );
}

export default function App() {
  const [now, setNow] = useState(() => new Date());
  useEffect(() => {
    const id = setInterval(() => setNow(new Date()), 1000);
    return () => clearInterval(id);
  }, []);
  const s = now.getSeconds();
  const m = now.getMinutes() + s / 60;
  const h = (now.getHours() % 12) + m / 60;

  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-6 bg-slate-800">
      <svg viewBox="0 0 200 200" className="h-80 w-80">
        <circle cx="100" cy="100" r="95" fill="#f8fafc" stroke="#334155" strokeWidth="4" />
        {Array.from({ length: 12 }, (_, i) => (
          <line key={i} x1="100" y1="10" x2="100" y2={i % 3 === 0 ? 24 : 18} stroke="#334155" strokeWidth={i % 3 === 0 ? 3 : 1.5}
            transform={`rotate(${i * 30} 100 100)`} />
        ))}
        <Hand angle={h * 30} length={50} width={6} color="#0f172a" />
        <Hand angle={m * 6} length={72} width={4} color="#334155" />
        <Hand angle={s * 6} length={80} width={1.5} color="#dc2626" />
        <circle cx="100" cy="100" r="4" fill="#dc2626" />
      </svg>
      <p className="font-mono text-3xl text-white">{now.toLocaleTimeString('en-GB')}</p>
    </div>
  );
}
