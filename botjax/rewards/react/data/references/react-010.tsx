import { useState } from 'react';

const LINES = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]];
type Cell = 'X' | 'O' | null;

function winner(board: Cell[]): { player: Cell; line: number[] } | null {
  for (const line of LINES) {
    const [a, b, c] = line;
    if (board[a] && board[a] === board[b] && board[a] === board[c]) return { player: board[a], line };
  }
  return null;
}

export default function App() {
  const [board, setBoard] = useState<Cell[]>(Array(9).fill(null));
  const [xNext, setXNext] = useState(true);
  const win = winner(board);
  const draw = !win && board.every(Boolean);
  const status = win ? `${win.player} wins!` : draw ? 'It is a draw.' : `Next player: ${xNext ? 'X' : 'O'}`;

  function play(i: number) {
    if (board[i] || win) return;
    const next = [...board];
    next[i] = xNext ? 'X' : 'O';
    setBoard(next);
    setXNext(!xNext);
  }

  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-6 bg-slate-100">
      <p className="text-2xl font-semibold">{status}</p>
      <div className="grid grid-cols-3 gap-2">
        {board.map((cell, i) => (
          <button
            key={i}
            onClick={() => play(i)}
            className={`h-24 w-24 rounded-lg text-5xl font-bold shadow ${win?.line.includes(i) ? 'bg-green-300' : 'bg-white'} ${cell === 'X' ? 'text-blue-600' : 'text-rose-600'}`}
          >
            {cell}
          </button>
        ))}
      </div>
      <button
        onClick={() => {
          setBoard(Array(9).fill(null));
          setXNext(true);
        }}
        className="rounded-md bg-slate-800 px-5 py-2 text-white"
      >
        Restart
      </button>
    </div>
  );
}
