import { useState } from 'react';
import { Globe, Mail, MapPin, MessageCircle } from 'lucide-react';

export default function App() {
  const [following, setFollowing] = useState(false);
  const followers = 1284 + (following ? 1 : 0);
  const stats = [
    { label: 'Posts', value: 86 },
    { label: 'Followers', value: followers },
    { label: 'Following', value: 312 },
  ];
  return (
    <div className="flex min-h-screen items-center justify-center bg-gradient-to-br from-sky-100 to-indigo-100">
      <div className="w-80 rounded-2xl bg-white p-6 text-center shadow-lg">
        <div className="mx-auto flex h-20 w-20 items-center justify-center rounded-full bg-indigo-500 text-2xl font-bold text-white">
          MK
        </div>
        <h1 className="mt-4 text-xl font-semibold">Maya Kowalski</h1>
        <p className="text-sm text-gray-500">Product designer</p>
        <p className="mt-1 flex items-center justify-center gap-1 text-sm text-gray-500">
          <MapPin className="h-4 w-4" /> Lisbon, Portugal
        </p>
        <div className="mt-4 grid grid-cols-3 gap-2">
          {stats.map((s) => (
            <div key={s.label}>
              <div className="font-semibold">{s.value.toLocaleString('en-US')}</div>
              <div className="text-xs text-gray-500">{s.label}</div>
            </div>
          ))}
        </div>
        <button
          onClick={() => setFollowing(!following)}
          className={`mt-5 w-full rounded-full py-2 font-medium ${following ? 'border border-indigo-500 text-indigo-600' : 'bg-indigo-600 text-white'}`}
        >
          {following ? 'Following' : 'Follow'}
        </button>
        <div className="mt-4 flex justify-center gap-4 text-gray-400">
          <Globe className="h-5 w-5" />
          <Mail className="h-5 w-5" />
          <MessageCircle className="h-5 w-5" />
        </div>
      </div>
    </div>
  );
}
