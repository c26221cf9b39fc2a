import { BarChart3, Bell, Cloud, Lock, Rocket, Users } from 'lucide-react';

const FEATURES = [
  { icon: Rocket, title: 'Fast setup', text: 'Go from sign-up to your first report in five minutes.' },
  { icon: BarChart3, title: 'Live analytics', text: 'Dashboards that refresh as your data changes.' },
  { icon: Users, title: 'Team spaces', text: 'Share views and comments with your whole team.' },
  { icon: Lock, title: 'Secure', text: 'SSO, audit logs and encryption at rest.' },
  { icon: Bell, title: 'Smart alerts', text: 'Get told when a metric moves, not every minute.' },
  { icon: Cloud, title: 'Cloud native', text: 'Runs anywhere, scales without a ticket.' },
];

export default function App() {
  return (
    <div className="min-h-screen bg-white text-slate-800">
      <nav className="flex items-center justify-between px-8 py-4 shadow-sm">
        <span className="text-xl font-bold text-indigo-600">Metricly</span>
        <div className="flex gap-6 text-sm">
          <a href="#features">Features</a>
          <a href="#pricing">Pricing</a>
          <a href="#about">About</a>
        </div>
        <button className="rounded-md bg-indigo-600 px-4 py-2 text-sm text-white">Sign in</button>
      </nav>
      <header className="px-8 py-20 text-center">
        <h1 className="text-5xl font-extrabold">Know your numbers, every morning</h1>
        <p className="mx-auto mt-4 max-w-2xl text-lg text-slate-500">
          Metricly turns the data you already have into clear answers for the whole company.
        </p>
        <button className="mt-8 rounded-lg bg-indigo-600 px-6 py-3 font-semibold text-white hover:bg-indigo-700">
          Start free trial
        </button>
      </header>
      <section id="features" className="mx-auto grid max-w-5xl gap-6 px-8 md:grid-cols-3">
        {FEATURES.map(({ icon: Icon, title, text }) => (
          <div key={title} className="rounded-xl border border-slate-200 p-6">
            <Icon className="h-8 w-8 text-indigo-600" />
            <h3 className="mt-4 font-semibold">{title}</h3>
            <p className="mt-1 text-sm text-slate-500">{text}</p>
          </div>
        ))}
      </section>
      <blockquote className="mx-auto my-16 max-w-2xl rounded-xl bg-indigo-50 p-8 text-center">
        <p className="text-lg italic">
          “We replaced three tools with Metricly and our Monday meeting got twice as short.”
        </p>
        <footer className="mt-4 text-sm font-medium text-indigo-700">Dana Ruiz, COO at Fieldwork</footer>
      </blockquote>
    </div>
  );
}
