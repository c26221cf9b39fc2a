import { useState } from 'react';

const SAMPLE = '{"name":"botjax","version":1,"tags":["react","tsx"],"nested":{"ok":true,"count":3}}';

export default function App() {
  const [input, setInput] = useState(SAMPLE);
  const [output, setOutput] = useState('');
  const [error, setError] = useState('');

  function run(indent: number | undefined) {
    try {
      setOutput(JSON.stringify(JSON.parse(input), null, indent));
      setError('');
    } catch (e) {
      setOutput('');
      setError(e instanceof Error ? e.message : String(e));
    }
  }

  return (
    <div className="min-h-screen bg-zinc-100 p-8">
      <h1 className="text-2xl font-bold">JSON formatter</h1>
      <textarea
        value={input}
        onChange={(e) => setInput(e.target.value)}
        rows={6}
        spellCheck={false}
        className="mt-4 w-full rounded border border-zinc-300 p-3 font-mono text-sm"
      />
      <div className="mt-2 flex gap-2">
        <button onClick={() => run(2)} className="rounded bg-emerald-600 px-4 py-2 text-white">Format</button>
        <button onClick={() => run(undefined)} className="rounded bg-zinc-700 px-4 py-2 text-white">Minify</button>
      </div>
      {error && <p className="mt-3 rounded bg-red-50 p-3 text-sm text-red-700">Invalid JSON: {error}</p>}
      {output && <pre className="mt-3 overflow-auto rounded bg-zinc-900 p-4 text-sm text-emerald-300">{output}</pre>}
    </div>
  );
}
