import { useState } from 'react';

type Move = 'rock' | 'paper' | 'scissors';
const MOVES: Move[] = ['rock', 'paper', 'scissors'];
const EMOJI: Record<Move, string> = { rock: '✊', paper: '✋', scissors: '✌️' };
const BEATS: Record<Move, Move> = { rock: 'scissors', paper: 'rock', scissors: 'paper' };
type Round = { id: number; you: Move; cpu: Move; result: 'win' | 'lose' | 'draw' };

export default function App() {
  const [score, setScore] = useState({ you: 0, cpu: 0 });
  const [history, setHistory] = useState<Round[]>([]);

  function play(you: Move) {
    const cpu = MOVES[Math.floor(Math.random() * 3)];
    const result: Round['result'] = you === cpu ? 'draw' : BEATS[you] === cpu ? 'win' : 'lose';
    setScore({ you: score.you + (result === 'win' ? 1 : 0), cpu: score.cpu + (result === 'lose' ? 1 : 0) });
    setHistory([{ id: (history[0]?.id ?? 0) + 1, you, cpu, result }, ...history].slice(0, 5));
  }

  return (
    <div className="flex min-h-screen flex-col items-center gap-6 bg-gradient-to-b from-fuchsia-100 to-white pt-16">
      <h1 className="text-3xl font-bold">Rock, paper, scissors</h1>
      <p className="text-xl">You {score.you} : {score.cpu} Computer</p>
      <div className="flex gap-4">
        {MOVES.map((m) => (
          <button key={m} onClick={() => play(m)} aria-label={m} className="h-24 w-24 rounded-full bg-white text-5xl shadow hover:scale-105">
            {EMOJI[m]}
          </button>
        ))}
      </div>
      <ul className="w-80 space-y-2">
        {history.map((r) => (
          <li key={r.id} className="flex justify-between rounded bg-white px-4 py-2 shadow-sm">
            <span>{EMOJI[r.you]} vs {EMOJI[r.cpu]}</span>
            <span className={r.result === 'win' ? 'text-green-600' : r.result === 'lose' ? 'text-red-600' : 'text-gray-500'}>
              {r.result}
            </span>
          </li>
        ))}
      </ul>
    </div>
  );
}
