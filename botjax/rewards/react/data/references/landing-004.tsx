import { useState } from 'react';
import { Globe, Mail, MessageCircle, Rss } from 'lucide-react';

const COLUMNS: Record<string, string[]> = {
  Product: ['Features', 'Pricing', 'Integrations', 'Changelog'],
  Company: ['About', 'Careers', 'Press', 'Contact'],
  Resources: ['Blog', 'Guides', 'Help center', 'Community'],
  Legal: ['Privacy', 'Terms', 'Cookies', 'Licenses'],
};
const SOCIAL = [Globe, Mail, MessageCircle, Rss];

export default function App() {
  const [email, setEmail] = useState('');
  const [done, setDone] = useState(false);
  return (
    <div className="flex min-h-screen flex-col justify-end bg-slate-100">
      <footer className="bg-slate-900 px-8 py-12 text-slate-300">
        <div className="mx-auto grid max-w-6xl gap-8 md:grid-cols-6">
          {Object.entries(COLUMNS).map(([title, links]) => (
            <div key={title}>
              <h3 className="mb-3 font-semibold text-white">{title}</h3>
              <ul className="space-y-2 text-sm">
                {links.map((link) => (
                  <li key={link}>
                    <a href="#" className="hover:text-white">{link}</a>
                  </li>
                ))}
              </ul>
            </div>
          ))}
          <div className="md:col-span-2">
            <h3 className="mb-3 font-semibold text-white">Stay in the loop</h3>
            {done ? (
              <p className="text-sm text-emerald-400">Subscribed. See you in your inbox!</p>
            ) : (
              <form
                className="flex gap-2"
                onSubmit={(e) => {
                  e.preventDefault();
                  if (email.includes('@')) setDone(true);
                }}
              >
                <input
                  value={email}
                  onChange={(e) => setEmail(e.target.value)}
                  placeholder="Email address"
                  className="min-w-0 flex-1 rounded bg-slate-800 px-3 py-2 text-sm text-white"
                />
                <button className="rounded bg-indigo-500 px-3 py-2 text-sm font-medium text-white">
                  Subscribe
                </button>
              </form>
            )}
          </div>
        </div>
        <div className="mx-auto mt-10 flex max-w-6xl items-center justify-between border-t border-slate-700 pt-6 text-sm">
          <span>© {new Date().getFullYear()} Acme Inc. All rights reserved.</span>
          <div className="flex gap-4">
            {SOCIAL.map((Icon, i) => (
              <Icon key={i} className="h-5 w-5 hover:text-white" />
            ))}
          </div>
        </div>
      </footer>
    </div>
  );
}
