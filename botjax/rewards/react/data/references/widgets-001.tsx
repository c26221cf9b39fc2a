import { useState } from 'react';
import { Star } from 'lucide-react';

function Stars({ value, size, onHover, onPick }: {
  value: number; size: string; onHover?: (v: number) => void; onPick?: (v: number) => void;
}) {
  return (
    <div className="flex" onMouseLeave={() => onHover?.(0)}>
      {[1, 2, 3, 4, 5].map((n) => (
        <button
          key={n}
          type="button"
          disabled={!onPick}
          aria-label={`${n} star${n > 1 ? 's' : ''}`}
          onMouseEnter={() => onHover?.(n)}
          onClick={() => onPick?.(n)}
          className="disabled:cursor-default"
        >
          <Star className={`${size} ${n <= value ? 'fill-amber-400 text-amber-400' : 'text-gray-300'}`} />
        </button>
      ))}
    </div>
  );
}

export default function App() {
  const [rating, setRating] = useState(3);
  const [hover, setHover] = useState(0);
  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-4 bg-white">
      <h1 className="text-xl font-semibold">Rate your stay</h1>
      <Stars value={hover || rating} size="h-10 w-10" onHover={setHover} onPick={setRating} />
      <p className="text-gray-600">You rated it {rating} out of 5</p>
      <div className="flex items-center gap-2 text-sm text-gray-500">
        <Stars value={rating} size="h-4 w-4" /> read-only copy
      </div>
    </div>
  );
}
