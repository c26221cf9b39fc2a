import { useState } from 'react';

type Field = 'name' | 'email' | 'password';

function validate(values: Record<Field, string>): Record<Field, string> {
  return {
    name: values.name.trim().length >= 2 ? '' : 'Enter at least 2 characters.',
    email: /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(values.email) ? '' : 'Enter a valid email address.',
    password: values.password.length >= 8 ? '' : 'Use at least 8 characters.',
  };
}

export default function App() {
  const [values, setValues] = useState<Record<Field, string>>({ name: '', email: '', password: '' });
  const [touched, setTouched] = useState<Record<Field, boolean>>({ name: false, email: false, password: false });
  const [done, setDone] = useState(false);
  const errors = validate(values);
  const valid = Object.values(errors).every((e) => e === '');
  const fields: { key: Field; label: string; type: string }[] = [
    { key: 'name', label: 'Name', type: 'text' },
    { key: 'email', label: 'Email', type: 'email' },
    { key: 'password', label: 'Password', type: 'password' },
  ];

  if (done) {
    return (
      <div className="flex min-h-screen items-center justify-center bg-green-50">
        <p className="text-2xl font-semibold text-green-700">Welcome aboard, {values.name}!</p>
      </div>
    );
  }
  return (
    <div className="flex min-h-screen items-center justify-center bg-gray-100">
      <form
        className="w-full max-w-sm space-y-4 rounded-xl bg-white p-8 shadow"
        onSubmit={(e) => {
          e.preventDefault();
          if (valid) setDone(true);
        }}
      >
        <h1 className="text-2xl font-bold">Create your account</h1>
        {fields.map(({ key, label, type }) => (
          <label key={key} className="block">
            <span className="text-sm font-medium text-gray-700">{label}</span>
            <input
              type={type}
              value={values[key]}
              onChange={(e) => setValues({ ...values, [key]: e.target.value })}
              onBlur={() => setTouched({ ...touched, [key]: true })}
              className="mt-1 w-full rounded-md border border-gray-300 px-3 py-2"
            />
            {touched[key] && errors[key] && <span className="text-sm text-red-600">{errors[key]}</span>}
          </label>
        ))}
        <button
          type="submit"
          disabled={!valid}
          className="w-full rounded-md bg-blue-600 py-2 font-semibold text-white disabled:cursor-not-allowed disabled:bg-gray-300"
        >
          Sign up
        </button>
      </form>
    </div>
  );
}
