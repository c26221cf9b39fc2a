import { useState } from 'react';

const pick = () => 1 + Math.floor(Math.random() * 100);

export default function App() {
  const [target, setTarget] = useState(pick);
  const [guess, setGuess] = useState('');
  const [attempts, setAttempts] = useState(0);
  const [hint, setHint] = useState('I am thinking of a number from 1 to 100.');
  const [won, setWon] = useState(false);

  function submit() {
    const n = Number(guess);
    if (!Number.isInteger(n) || n < 1 || n > 100) {
      setHint('Please enter a whole number from 1 to 100.');
      return;
    }
    setAttempts(attempts + 1);
    if (n === target) {
      setWon(true);
      setHint(`Yes! It was ${target}.`);
    } else {
      setHint(n < target ? `Higher than ${n}.` : `Lower than ${n}.`);
    }
    setGuess('');
  }

  return (
    <div className="flex min-h-screen items-center justify-center bg-amber-50">
      <div className="w-96 rounded-2xl bg-white p-8 text-center shadow">
        <h1 className="text-2xl font-bold">Guess the number</h1>
        <p className="mt-4 text-lg">{hint}</p>
        <p className="text-sm text-gray-500">Attempts: {attempts}</p>
        {won ? (
          <button
            onClick={() => {
              setTarget(pick());
              setAttempts(0);
              setWon(false);
              setHint('New number! From 1 to 100.');
            }}
            className="mt-6 rounded bg-amber-500 px-4 py-2 text-white"
          >
            Play again
          </button>
        ) : (
          <form className="mt-6 flex gap-2" onSubmit={(e) => { e.preventDefault(); submit(); }}>
            <input
              type="number"
              value={guess}
              onChange={(e) => setGuess(e.target.value)}
              className="flex-1 rounded border border-gray-300 px-3 py-2"
              aria-label="Your guess"
            />
            <button className="rounded bg-amber-500 px-4 py-2 text-white">Guess</button>
          </form>
        )}
      </div>
    </div>
  );
}
