import { useState } from 'react';

const TYPES = ['Comments', 'Mentions', 'Product updates', 'Marketing'];
const CHANNELS = ['Email', 'Push', 'SMS'];

export default function App() {
  const [grid, setGrid] = useState<boolean[][]>([
    [true, true, false],
    [true, true, true],
    [true, false, false],
    [false, false, false],
  ]);

  function toggle(r: number, c: number) {
    setGrid(grid.map((row, i) => row.map((v, j) => (i === r && j === c ? !v : v))));
  }

  function setColumn(c: number, value: boolean) {
    setGrid(grid.map((row) => row.map((v, j) => (j === c ? value : v))));
  }

  return (
    <div className="min-h-screen bg-white p-10">
      <h1 className="text-2xl font-bold">Notification preferences</h1>
      <table className="mt-6 w-full max-w-2xl text-left">
        <thead>
          <tr className="border-b border-gray-200">
            <th className="py-3">Notify me about</th>
            {CHANNELS.map((ch, c) => {
              const all = grid.every((row) => row[c]);
              return (
                <th key={ch} className="py-3 text-center">
                  <div>{ch}</div>
                  <label className="text-xs font-normal text-gray-500">
                    <input type="checkbox" checked={all} onChange={() => setColumn(c, !all)} className="mr-1" />
                    all
                  </label>
                </th>
              );
            })}
          </tr>
        </thead>
        <tbody>
          {TYPES.map((type, r) => (
            <tr key={type} className="border-b border-gray-100">
              <td className="py-3">{type}</td>
              {CHANNELS.map((ch, c) => (
                <td key={ch} className="py-3 text-center">
                  <input type="checkbox" aria-label={`${type} by ${ch}`} checked={grid[r][c]} onChange={() => toggle(r, c)} className="h-4 w-4 accent-emerald-600" />
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
