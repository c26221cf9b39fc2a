import { useMemo, useState } from 'react';

type Employee = { name: string; role: string; department: string; salary: number };
type Key = keyof Employee;

const EMPLOYEES: Employee[] = [
  { name: 'Ava Patel', role: 'Engineer', department: 'Platform', salary: 128000 },
  { name: 'Ben Okafor', role: 'Designer', department: 'Product', salary: 104000 },
  { name: 'Chloe Kim', role: 'Manager', department: 'Platform', salary: 151000 },
  { name: 'Diego Alvarez', role: 'Analyst', department: 'Finance', salary: 88000 },
  { name: 'Emma Novak', role: 'Engineer', department: 'Mobile', salary: 119000 },
  { name: 'Farah Haddad', role: 'Recruiter', department: 'People', salary: 76000 },
  { name: 'George Liu', role: 'Engineer', department: 'Data', salary: 133000 },
  { name: 'Hana Sato', role: 'Writer', department: 'Marketing', salary: 82000 },
  { name: 'Ivan Petrov', role: 'SRE', department: 'Platform', salary: 141000 },
  { name: 'Julia Costa', role: 'Sales lead', department: 'Sales', salary: 97000 },
];
const COLUMNS: Key[] = ['name', 'role', 'department', 'salary'];

export default function App() {
  const [query, setQuery] = useState('');
  const [sort, setSort] = useState<{ key: Key; asc: boolean }>({ key: 'name', asc: true });

  const rows = useMemo(() => {
    const q = query.toLowerCase();
    const filtered = EMPLOYEES.filter((e) =>
      [e.name, e.role, e.department].some((v) => v.toLowerCase().includes(q)));
    return [...filtered].sort((a, b) => {
      const x = a[sort.key];
      const y = b[sort.key];
      const cmp = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return sort.asc ? cmp : -cmp;
    });
  }, [query, sort]);

  return (
    <div className="min-h-screen bg-white p-8">
      <input
        value={query}
        onChange={(e) => setQuery(e.target.value)}
        placeholder="Search employees"
        className="mb-4 w-72 rounded-md border border-gray-300 px-3 py-2"
      />
      <table className="w-full max-w-4xl text-left">
        <thead className="bg-gray-100">
          <tr>
            {COLUMNS.map((key) => (
              <th key={key} className="px-4 py-2">
                <button
                  className="font-semibold capitalize"
                  onClick={() => setSort({ key, asc: sort.key === key ? !sort.asc : true })}
                >
                  {key} {sort.key === key ? (sort.asc ? '▲' : '▼') : ''}
                </button>
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((e) => (
            <tr key={e.name} className="border-b border-gray-200">
              <td className="px-4 py-2">{e.name}</td>
              <td className="px-4 py-2">{e.role}</td>
              <td className="px-4 py-2">{e.department}</td>
              <td className="px-4 py-2">${e.salary.toLocaleString('en-US')}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {rows.length === 0 && <p className="mt-4 text-gray-500">No employees match.</p>}
    </div>
  );
}
