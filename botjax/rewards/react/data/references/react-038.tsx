import { useEffect, useState } from 'react';

export default function App() {
  const [open, setOpen] = useState(false);
  const [result, setResult] = useState('');

  useEffect(() => {
    if (!open) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') setOpen(false);
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [open]);

  function close(answer: string) {
    setResult(answer);
    setOpen(false);
  }

  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-4 bg-gray-100">
      <button onClick={() => setOpen(true)} className="rounded-lg bg-indigo-600 px-5 py-2 font-medium text-white">
        Publish post
      </button>
      {result && <p className="text-gray-700">You chose: {result}</p>}
      {open && (
        <div className="fixed inset-0 flex items-center justify-center bg-black/50" onClick={() => setOpen(false)}>
          <div
            role="dialog"
            aria-modal="true"
            aria-labelledby="dialog-title"
            className="w-full max-w-md rounded-xl bg-white p-6 shadow-xl"
            onClick={(e) => e.stopPropagation()}
          >
            <h2 id="dialog-title" className="text-lg font-semibold">Publish this post?</h2>
            <p className="mt-2 text-gray-600">It will be visible to all 1,240 subscribers right away.</p>
            <div className="mt-6 flex justify-end gap-2">
              <button onClick={() => close('Cancel')} className="rounded-md border border-gray-300 px-4 py-2">Cancel</button>
              <button onClick={() => close('Confirm')} className="rounded-md bg-indigo-600 px-4 py-2 text-white">Confirm</button>
            </div>
          </div>
        </div>
      )}
    </div>
  );
}
