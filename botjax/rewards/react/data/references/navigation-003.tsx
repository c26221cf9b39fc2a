import { useState } from 'react';
import { ChevronRight } from 'lucide-react';

const PATH = ['Home', 'Projects', 'Website redesign', 'Design', 'Components', 'Buttons'];

export default function App() {
  const [expanded, setExpanded] = useState(false);
  const [current, setCurrent] = useState(PATH.length - 1);
  const path = PATH.slice(0, current + 1);
  const folded = !expanded && path.length > 3;
  const shown = folded ? [path[0], null, ...path.slice(-2)] : path;

  return (
    <div className="min-h-screen bg-white p-10">
      <nav aria-label="Breadcrumb" className="flex items-center text-sm">
        {shown.map((name, i) => (
          <span key={name ?? 'ellipsis'} className="flex items-center">
            {i > 0 && <ChevronRight className="mx-1 h-4 w-4 text-gray-400" />}
            {name === null ? (
              <button onClick={() => setExpanded(true)} className="rounded px-1 hover:bg-gray-100" aria-label="Show all levels">
                …
              </button>
            ) : (
              <button
                onClick={() => {
                  setCurrent(PATH.indexOf(name));
                  setExpanded(false);
                }}
                className={PATH.indexOf(name) === current ? 'font-semibold text-gray-900' : 'text-blue-600 hover:underline'}
              >
                {name}
              </button>
            )}
          </span>
        ))}
      </nav>
      <h1 className="mt-8 text-3xl font-bold">{PATH[current]}</h1>
      <p className="mt-2 text-gray-500">Level {current + 1} of {PATH.length}</p>
    </div>
  );
}
