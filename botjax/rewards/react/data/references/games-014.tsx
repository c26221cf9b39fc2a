import { useState } from 'react';

const N = 5;

function press(board: boolean[], i: number): boolean[] {
  const next = [...board];
  const r = Math.floor(i / N);
  const c = i % N;
  for (const [dr, dc] of [[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]]) {
    const rr = r + dr;
    const cc = c + dc;
    if (rr >= 0 && rr < N && cc >= 0 && cc < N) next[rr * N + cc] = !next[rr * N + cc];
  }
  return next;
}

function randomBoard(): boolean[] {
  // Pressing random cells from the solved board keeps the puzzle solvable.
  let board: boolean[] = Array(N * N).fill(false);
  for (let k = 0; k < 12; k++) board = press(board, Math.floor(Math.random() * N * N));
  return board.some(Boolean) ? board : press(board, 12);
}

export default function App() {
  const [board, setBoard] = useState(randomBoard);
  const [moves, setMoves] = useState(0);
  const won = board.every((on) => !on);

  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-5 bg-gray-900 text-white">
      <h1 className="text-3xl font-bold">Lights Out</h1>
      <p>Moves: {moves}</p>
      <div className="grid grid-cols-5 gap-2">
        {board.map((on, i) => (
          <button
            key={i}
            disabled={won}
            aria-label={`Light ${i + 1} ${on ? 'on' : 'off'}`}
            onClick={() => {
              setBoard(press(board, i));
              setMoves(moves + 1);
            }}
            className={`h-14 w-14 rounded-md transition ${on ? 'bg-yellow-300 shadow-[0_0_15px_#fde047]' : 'bg-gray-700'}`}
          />
        ))}
      </div>
      {won && <p className="text-xl text-green-400">All lights are out in {moves} moves!</p>}
      <button
        onClick={() => {
          setBoard(randomBoard());
          setMoves(0);
        }}
        className="rounded bg-gray-700 px-4 py-2"
      >
        New game
      </button>
    </div>
  );
}
