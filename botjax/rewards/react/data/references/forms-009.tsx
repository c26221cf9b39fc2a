import { useState, type KeyboardEvent } from 'react';
import { X } from 'lucide-react';

export default function App() {
  const [tags, setTags] = useState<string[]>(['react', 'design']);
  const [text, setText] = useState('');
  const [message, setMessage] = useState('');

  function add(raw: string) {
    const tag = raw.trim().toLowerCase();
    if (!tag) return;
    if (tags.includes(tag)) {
      setMessage(`"${tag}" is already added.`);
      return;
    }
    setTags([...tags, tag]);
    setText('');
    setMessage('');
  }

  function onKeyDown(e: KeyboardEvent<HTMLInputElement>) {
    if (e.key === 'Enter' || e.key === ',') {
      e.preventDefault();
      add(text);
    } else if (e.key === 'Backspace' && text === '' && tags.length > 0) {
      setTags(tags.slice(0, -1));
    }
  }

  return (
    <div className="min-h-screen bg-white p-10">
      <label className="mb-2 block font-medium text-gray-700">Tags</label>
      <div className="flex max-w-xl flex-wrap items-center gap-2 rounded-lg border border-gray-300 p-2">
        {tags.map((tag) => (
          <span key={tag} className="flex items-center gap-1 rounded-full bg-sky-100 px-3 py-1 text-sm text-sky-800">
            {tag}
            <button aria-label={`Remove ${tag}`} onClick={() => setTags(tags.filter((t) => t !== tag))}>
              <X className="h-3 w-3" />
            </button>
          </span>
        ))}
        <input
          value={text}
          onChange={(e) => setText(e.target.value.replace(',', ''))}
          onKeyDown={onKeyDown}
          placeholder="Add a tag and press Enter"
          className="min-w-[10rem] flex-1 p-1 outline-none"
        />
      </div>
      {message && <p className="mt-2 text-sm text-amber-700">{message}</p>}
      <p className="mt-4 text-sm text-gray-500">{tags.length} tags</p>
    </div>
  );
}
