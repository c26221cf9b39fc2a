import { useState } from 'react';
import { Trash2 } from 'lucide-react';

const PROJECT = 'apollo-landing';

export default function App() {
  const [exists, setExists] = useState(true);
  const [open, setOpen] = useState(false);
  const [typed, setTyped] = useState('');

  return (
    <div className="min-h-screen bg-slate-50 p-10">
      {exists ? (
        <div className="flex max-w-md items-center justify-between rounded-lg border border-slate-200 bg-white p-4">
          <div>
            <p className="font-semibold">{PROJECT}</p>
            <p className="text-sm text-slate-500">Updated 2 days ago</p>
          </div>
          <button onClick={() => setOpen(true)} className="flex items-center gap-1 text-sm text-red-600">
            <Trash2 className="h-4 w-4" /> Delete
          </button>
        </div>
      ) : (
        <p className="text-slate-600">The project {PROJECT} was deleted.</p>
      )}
      {open && (
        <div className="fixed inset-0 flex items-center justify-center bg-black/40">
          <div role="dialog" aria-modal="true" className="w-full max-w-md rounded-lg bg-white p-6">
            <h2 className="text-lg font-semibold">Delete project</h2>
            <p className="mt-2 text-sm text-slate-600">
              This cannot be undone. Type <span className="font-mono font-semibold">{PROJECT}</span> to confirm.
            </p>
            <input
              value={typed}
              onChange={(e) => setTyped(e.target.value)}
              className="mt-4 w-full rounded border border-slate-300 px-3 py-2"
            />
            <div className="mt-4 flex justify-end gap-2">
              <button onClick={() => setOpen(false)} className="rounded border border-slate-300 px-4 py-2">Cancel</button>
              <button
                disabled={typed !== PROJECT}
                onClick={() => {
                  setExists(false);
                  setOpen(false);
                }}
                className="rounded bg-red-600 px-4 py-2 text-white disabled:opacity-40"
              >
                Delete
              </button>
            </div>
          </div>
        </div>
      )}
    </div>
  );
}
