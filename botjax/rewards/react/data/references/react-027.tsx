const FORECAST = [
  { day: 'Mon', icon: '☀️', high: 24, low: 15, text: 'Sunny' },
  { day: 'Tue', icon: '⛅', high: 22, low: 14, text: 'Partly cloudy' },
  { day: 'Wed', icon: '🌧️', high: 18, low: 12, text: 'Rain' },
  { day: 'Thu', icon: '⛈️', high: 17, low: 11, text: 'Storms' },
  { day: 'Fri', icon: '🌤️', high: 21, low: 13, text: 'Mostly sunny' },
];

export default function App() {
  const today = FORECAST[0];
  return (
    <div className="flex min-h-screen items-center justify-center bg-sky-200">
      <div className="w-[28rem] rounded-3xl bg-gradient-to-br from-sky-500 to-blue-700 p-6 text-white shadow-xl">
        <p className="text-sm opacity-80">Lyon, France</p>
        <div className="mt-2 flex items-center justify-between">
          <div>
            <p className="text-6xl font-light">{today.high}°</p>
            <p>{today.text}</p>
          </div>
          <span className="text-7xl">{today.icon}</span>
        </div>
        <div className="mt-6 grid grid-cols-5 gap-2">
          {FORECAST.map((d, i) => (
            <div key={d.day} className={`rounded-xl p-2 text-center ${i === 0 ? 'bg-white/25 ring-2 ring-white' : 'bg-white/10'}`}>
              <p className="text-sm">{d.day}</p>
              <p className="text-2xl">{d.icon}</p>
              <p className="text-sm font-semibold">{d.high}°</p>
              <p className="text-xs opacity-70">{d.low}°</p>
            </div>
          ))}
        </div>
      </div>
    </div>
  );
}
