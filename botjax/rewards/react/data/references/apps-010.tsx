import { useState } from 'react';

const QUESTION = 'Where should the team offsite be?';
const OPTIONS = ['Mountains', 'Seaside', 'City break', 'Stay home'];
const START = [12, 18, 7, 3];

export default function App() {
  const [votes, setVotes] = useState(START);
  const [choice, setChoice] = useState<number | null>(null);
  const total = votes.reduce((a, b) => a + b, 0);

  return (
    <div className="flex min-h-screen items-center justify-center bg-lime-50">
      <div className="w-[28rem] rounded-2xl bg-white p-6 shadow">
        <h1 className="text-xl font-bold">{QUESTION}</h1>
        <div className="mt-4 space-y-2">
          {OPTIONS.map((option, i) =>
            choice === null ? (
              <button
                key={option}
                onClick={() => {
                  setVotes(votes.map((v, j) => (j === i ? v + 1 : v)));
                  setChoice(i);
                }}
                className="w-full rounded-lg border border-lime-300 px-4 py-2 text-left hover:bg-lime-50"
              >
                {option}
              </button>
            ) : (
              <div key={option} className="relative overflow-hidden rounded-lg border border-lime-200 px-4 py-2">
                <div className="absolute inset-y-0 left-0 bg-lime-200" style={{ width: `${(votes[i] / total) * 100}%` }} />
                <div className="relative flex justify-between">
                  <span className={i === choice ? 'font-semibold' : ''}>{option}{i === choice ? ' ✓' : ''}</span>
                  <span>{Math.round((votes[i] / total) * 100)}% ({votes[i]})</span>
                </div>
              </div>
            ))}
        </div>
        <p className="mt-4 text-sm text-gray-500">{total} votes</p>
        {choice !== null && (
          <button
            onClick={() => {
              setVotes(START);
              setChoice(null);
            }}
            className="mt-2 text-sm text-lime-700 underline"
          >
            Reset and vote again
          </button>
        )}
      </div>
    </div>
  );
}
