import { useState } from 'react';
import { AlertTriangle, CheckCircle2, Info, X, XCircle } from 'lucide-react';

type Kind = 'success' | 'error' | 'info' | 'warning';
type Toast = { id: number; kind: Kind; text: string };

const STYLE = {
  success: { icon: CheckCircle2, cls: 'border-green-500 text-green-700', text: 'Changes saved.' },
  error: { icon: XCircle, cls: 'border-red-500 text-red-700', text: 'Could not save changes.' },
  info: { icon: Info, cls: 'border-blue-500 text-blue-700', text: 'A new version is available.' },
  warning: { icon: AlertTriangle, cls: 'border-amber-500 text-amber-700', text: 'Your trial ends in 3 days.' },
};

let nextId = 1;

export default function App() {
  const [toasts, setToasts] = useState<Toast[]>([]);

  function dismiss(id: number) {
    setToasts((all) => all.filter((t) => t.id !== id));
  }

  function show(kind: Kind) {
    const id = nextId++;
    setToasts((all) => [...all, { id, kind, text: STYLE[kind].text }]);
    setTimeout(() => dismiss(id), 3000);
  }

  return (
    <div className="min-h-screen bg-gray-50 p-10">
      <h1 className="mb-4 text-2xl font-bold">Notifications</h1>
      <div className="flex gap-2">
        {(Object.keys(STYLE) as Kind[]).map((kind) => (
          <button key={kind} onClick={() => show(kind)} className="rounded-md bg-gray-800 px-4 py-2 capitalize text-white">
            {kind}
          </button>
        ))}
      </div>
      <div className="fixed bottom-4 right-4 flex w-80 flex-col gap-2">
        {toasts.map((t) => {
          const Icon = STYLE[t.kind].icon;
          return (
            <div key={t.id} role="status" className={`flex items-center gap-3 rounded-lg border-l-4 bg-white p-3 shadow-lg ${STYLE[t.kind].cls}`}>
              <Icon className="h-5 w-5 shrink-0" />
              <span className="flex-1 text-sm text-gray-800">{t.text}</span>
              <button aria-label="Dismiss" onClick={() => dismiss(t.id)}>
                <X className="h-4 w-4 text-gray-400" />
              </button>
            </div>
          );
        })}
      </div>
    </div>
  );
}
