import { useRef, useState } from 'react';

const LENGTH = 6;

export default function App() {
  const [digits, setDigits] = useState<string[]>(Array(LENGTH).fill(''));
  const refs = useRef<(HTMLInputElement | null)[]>([]);
  const code = digits.join('');

  function change(i: number, value: string) {
    const d = value.replace(/\D/g, '').slice(-1);
    const next = [...digits];
    next[i] = d;
    setDigits(next);
    if (d && i < LENGTH - 1) refs.current[i + 1]?.focus();
  }

  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-6 bg-slate-100">
      <h1 className="text-2xl font-bold text-slate-800">Enter your verification code</h1>
      <p className="text-slate-500">We sent a 6-digit code to your phone (hint: 123456).</p>
      <div className="flex gap-2">
        {digits.map((d, i) => (
          <input
            key={i}
            ref={(el) => {
              refs.current[i] = el;
            }}
            value={d}
            inputMode="numeric"
            maxLength={1}
            aria-label={`Digit ${i + 1}`}
            onChange={(e) => change(i, e.target.value)}
            onKeyDown={(e) => {
              if (e.key === 'Backspace' && !digits[i] && i > 0) refs.current[i - 1]?.focus();
            }}
            className="h-14 w-12 rounded-lg border-2 border-slate-300 text-center text-2xl font-semibold focus:border-indigo-500 focus:outline-none"
          />
        ))}
      </div>
      {code.length === LENGTH &&
        (code === '123456' ? (
          <p className="font-semibold text-green-600">Code verified. You are signed in.</p>
        ) : (
          <p className="font-semibold text-red-600">That code is not right. Try again.</p>
        ))}
    </div>
  );
}
