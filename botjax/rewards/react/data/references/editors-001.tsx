import { useState, type ReactNode } from 'react';

const SAMPLE = `# Release notes

Version **2.0** brings a *faster* editor.

## What is new
- Live preview
- Inline \`code\` spans
- **Bold** and *italic* text

1. Write markdown
2. See it rendered`;

function inline(text: string): ReactNode[] {
  const parts = text.split(/(\*\*[^*]+\*\*|\*[^*]+\*|`[^`]+`)/g).filter(Boolean);
  return parts.map((p, i) => {
    if (p.startsWith('**')) return <strong key={i}>{p.slice(2, -2)}</strong>;
    if (p.startsWith('`')) return <code key={i} className="rounded bg-gray-200 px-1 font-mono text-sm">{p.slice(1, -1)}</code>;
    if (p.startsWith('*')) return <em key={i}>{p.slice(1, -1)}</em>;
    return p;
  });
}

function render(md: string): ReactNode[] {
  const out: ReactNode[] = [];
  const lines = md.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const list = line.match(/^(-|\d+\.) /);
    if (list) {
      const ordered = list[1] !== '-';
      const items: string[] = [];
      while (i < lines.length && /^(-|\d+\.) /.test(lines[i])) items.push(lines[i++].replace(/^(-|\d+\.) /, ''));
      i--;
      const children = items.map((it, j) => <li key={j}>{inline(it)}</li>);
      out.push(ordered ? <ol key={i} className="list-decimal pl-6">{children}</ol> : <ul key={i} className="list-disc pl-6">{children}</ul>);
    } else if (line.startsWith('## ')) {
      out.push(<h2 key={i} className="mt-4 text-xl font-semibold">{inline(line.slice(3))}</h2>);
    } else if (line.startsWith('# ')) {
      out.push(<h1 key={i} className="text-3xl font-bold">{inline(line.slice(2))}</h1>);
    } else if (line.trim()) {
      out.push(<p key={i} className="my-2">{inline(line)}</p>);
    }
  }
  return out;
}

export default function App() {
  const [md, setMd] = useState(SAMPLE);
  return (
    <div className="grid min-h-screen grid-cols-2">
      <textarea value={md} onChange={(e) => setMd(e.target.value)} spellCheck={false}
        className="border-r border-gray-300 bg-gray-50 p-6 font-mono text-sm outline-none" />
      <article className="p-6">{render(md)}</article>
    </div>
  );
}
