import { useState } from 'react';

type Todo = { id: number; text: string; done: boolean };
type Filter = 'all' | 'active' | 'completed';

export default function App() {
  const [todos, setTodos] = useState<Todo[]>([
    { id: 1, text: 'Buy oat milk', done: false },
    { id: 2, text: 'Reply to Sam', done: true },
    { id: 3, text: 'Book dentist', done: false },
  ]);
  const [text, setText] = useState('');
  const [filter, setFilter] = useState<Filter>('all');
  const shown = todos.filter((t) => (filter === 'all' ? true : filter === 'active' ? !t.done : t.done));
  const left = todos.filter((t) => !t.done).length;

  return (
    <div className="min-h-screen bg-rose-50 p-10">
      <div className="mx-auto max-w-md rounded-xl bg-white p-6 shadow">
        <h1 className="text-2xl font-bold text-rose-600">Todos</h1>
        <form
          className="mt-4 flex gap-2"
          onSubmit={(e) => {
            e.preventDefault();
            if (!text.trim()) return;
            setTodos([...todos, { id: Date.now(), text: text.trim(), done: false }]);
            setText('');
          }}
        >
          <input value={text} onChange={(e) => setText(e.target.value)} placeholder="What needs doing?" className="flex-1 rounded border border-gray-300 px-3 py-2" />
          <button className="rounded bg-rose-600 px-4 text-white">Add</button>
        </form>
        <ul className="mt-4 divide-y divide-gray-100">
          {shown.map((t) => (
            <li key={t.id} className="flex items-center gap-3 py-2">
              <input type="checkbox" checked={t.done} aria-label={`Complete ${t.text}`}
                onChange={() => setTodos(todos.map((x) => (x.id === t.id ? { ...x, done: !x.done } : x)))} />
              <span className={`flex-1 ${t.done ? 'text-gray-400 line-through' : ''}`}>{t.text}</span>
              <button onClick={() => setTodos(todos.filter((x) => x.id !== t.id))} className="text-sm text-gray-400 hover:text-red-600">Delete</button>
            </li>
          ))}
        </ul>
        <div className="mt-4 flex items-center justify-between text-sm text-gray-500">
          <span>{left} item{left === 1 ? '' : 's'} left</span>
          <div className="flex gap-1">
            {(['all', 'active', 'completed'] as Filter[]).map((f) => (
              <button key={f} onClick={() => setFilter(f)} className={`rounded px-2 py-1 capitalize ${filter === f ? 'bg-rose-100 text-rose-700' : ''}`}>{f}</button>
            ))}
          </div>
        </div>
      </div>
    </div>
  );
}
