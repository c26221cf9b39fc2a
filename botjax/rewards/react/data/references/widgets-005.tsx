import { useState } from 'react';

const SWITCHES = [
  { label: 'Wi-Fi', size: 'sm', color: 'bg-blue-600', disabled: false },
  { label: 'Bluetooth', size: 'md', color: 'bg-indigo-600', disabled: false },
  { label: 'Airplane mode', size: 'lg', color: 'bg-orange-500', disabled: false },
  { label: 'Location', size: 'md', color: 'bg-emerald-600', disabled: false },
  { label: 'Developer mode', size: 'md', color: 'bg-gray-600', disabled: true },
];
const SIZES: Record<string, { track: string; knob: string; on: string }> = {
  sm: { track: 'h-5 w-9', knob: 'h-4 w-4', on: 'left-[18px]' },
  md: { track: 'h-6 w-11', knob: 'h-5 w-5', on: 'left-[22px]' },
  lg: { track: 'h-8 w-14', knob: 'h-7 w-7', on: 'left-[26px]' },
};

export default function App() {
  const [state, setState] = useState([true, false, false, true, false]);
  return (
    <div className="flex min-h-screen items-center justify-center bg-gray-50">
      <ul className="w-80 space-y-4 rounded-xl bg-white p-6 shadow">
        {SWITCHES.map((s, i) => {
          const size = SIZES[s.size];
          return (
            <li key={s.label} className={`flex items-center justify-between ${s.disabled ? 'opacity-50' : ''}`}>
              <span>{s.label}</span>
              <span className="flex items-center gap-3">
                <span className="w-8 text-right text-sm text-gray-500">{state[i] ? 'On' : 'Off'}</span>
                <button
                  role="switch"
                  aria-checked={state[i]}
                  aria-label={s.label}
                  disabled={s.disabled}
                  onClick={() => setState(state.map((v, j) => (j === i ? !v : v)))}
                  className={`relative rounded-full transition-colors ${size.track} ${state[i] ? s.color : 'bg-gray-300'} disabled:cursor-not-allowed`}
                >
                  <span className={`absolute top-0.5 rounded-full bg-white shadow transition-all ${size.knob} ${state[i] ? size.on : 'left-0.5'}`} />
                </button>
              </span>
            </li>
          );
        })}
      </ul>
    </div>
  );
}
