import { useState } from 'react';

const words = (s: string) => s.replace(/([a-z])([A-Z])/g, '$1 $2').split(/[^A-Za-z0-9]+/).filter(Boolean);
const CASES: Record<string, (s: string) => string> = {
  UPPERCASE: (s) => s.toUpperCase(),
  lowercase: (s) => s.toLowerCase(),
  'Title Case': (s) => s.toLowerCase().replace(/\b\w/g, (c) => c.toUpperCase()),
  camelCase: (s) => words(s).map((w, i) => (i === 0 ? w.toLowerCase() : w[0].toUpperCase() + w.slice(1).toLowerCase())).join(''),
  snake_case: (s) => words(s).map((w) => w.toLowerCase()).join('_'),
  'kebab-case': (s) => words(s).map((w) => w.toLowerCase()).join('-'),
};

export default function App() {
  const [text, setText] = useState('the quick brown fox jumps over the lazy dog');
  const [mode, setMode] = useState('Title Case');
  const [copied, setCopied] = useState(false);
  const result = CASES[mode](text);

  return (
    <div className="min-h-screen bg-white p-10">
      <h1 className="text-2xl font-bold">Case converter</h1>
      <textarea value={text} onChange={(e) => setText(e.target.value)} rows={4} className="mt-4 w-full max-w-2xl rounded border border-gray-300 p-3" />
      <div className="mt-3 flex flex-wrap gap-2">
        {Object.keys(CASES).map((name) => (
          <button key={name} onClick={() => setMode(name)}
            className={`rounded px-3 py-1 font-mono text-sm ${name === mode ? 'bg-violet-600 text-white' : 'bg-violet-50 text-violet-800'}`}>
            {name}
          </button>
        ))}
      </div>
      <div className="mt-6 flex max-w-2xl items-start gap-3">
        <pre className="flex-1 whitespace-pre-wrap rounded bg-gray-100 p-3 font-mono">{result}</pre>
        <button
          onClick={() => {
            navigator.clipboard?.writeText(result).catch(() => undefined);
            setCopied(true);
            setTimeout(() => setCopied(false), 1500);
          }}
          className="rounded bg-gray-800 px-3 py-2 text-sm text-white"
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
      </div>
    </div>
  );
}
