import { useState } from 'react';

const CATEGORIES = [
  { max: 18.5, label: 'Underweight', color: 'text-sky-600 bg-sky-50' },
  { max: 25, label: 'Normal weight', color: 'text-green-700 bg-green-50' },
  { max: 30, label: 'Overweight', color: 'text-amber-700 bg-amber-50' },
  { max: Infinity, label: 'Obesity', color: 'text-red-700 bg-red-50' },
];

export default function App() {
  const [height, setHeight] = useState(175);
  const [weight, setWeight] = useState(70);
  const bmi = height > 0 ? weight / (height / 100) ** 2 : 0;
  const category = CATEGORIES.find((c) => bmi < c.max) ?? CATEGORIES[3];

  return (
    <div className="flex min-h-screen items-center justify-center bg-gray-100">
      <div className="w-96 rounded-xl bg-white p-8 shadow">
        <h1 className="text-2xl font-bold">BMI calculator</h1>
        <label className="mt-6 block text-sm">Height (cm)
          <input type="number" value={height} onChange={(e) => setHeight(Number(e.target.value))} className="mt-1 w-full rounded border border-gray-300 px-3 py-2" />
        </label>
        <label className="mt-4 block text-sm">Weight (kg)
          <input type="number" value={weight} onChange={(e) => setWeight(Number(e.target.value))} className="mt-1 w-full rounded border border-gray-300 px-3 py-2" />
        </label>
        <div className={`mt-6 rounded-lg p-4 text-center ${category.color}`}>
          <p className="text-4xl font-bold">{bmi > 0 && Number.isFinite(bmi) ? bmi.toFixed(1) : '--'}</p>
          <p className="font-medium">{category.label}</p>
        </div>
      </div>
    </div>
  );
}
