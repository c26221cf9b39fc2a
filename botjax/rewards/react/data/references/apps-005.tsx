import { useState } from 'react';

const CARDS = [
  ['el perro', 'the dog'], ['la casa', 'the house'], ['el libro', 'the book'], ['la manzana', 'the apple'],
  ['el agua', 'the water'], ['la ciudad', 'the city'], ['el tiempo', 'the weather'], ['la playa', 'the beach'],
  ['el trabajo', 'the work'], ['la noche', 'the night'], ['el amigo', 'the friend'], ['la calle', 'the street'],
];

export default function App() {
  const [index, setIndex] = useState(0);
  const [flipped, setFlipped] = useState(false);
  const [known, setKnown] = useState(0);
  const done = index >= CARDS.length;

  function answer(knew: boolean) {
    if (knew) setKnown(known + 1);
    setFlipped(false);
    setIndex(index + 1);
  }

  if (done) {
    return (
      <div className="flex min-h-screen flex-col items-center justify-center gap-4 bg-orange-50">
        <p className="text-3xl font-bold">You knew {known} of {CARDS.length} words!</p>
        <button onClick={() => { setIndex(0); setKnown(0); }} className="rounded bg-orange-500 px-4 py-2 text-white">Start over</button>
      </div>
    );
  }
  const [es, en] = CARDS[index];
  return (
    <div className="flex min-h-screen flex-col items-center justify-center gap-6 bg-orange-50">
      <p className="text-sm text-gray-500">Card {index + 1} of {CARDS.length} · known {known}</p>
      <button
        onClick={() => setFlipped(!flipped)}
        className={`flex h-56 w-96 items-center justify-center rounded-2xl text-3xl font-semibold shadow-lg transition ${flipped ? 'bg-orange-500 text-white' : 'bg-white'}`}
      >
        {flipped ? en : es}
      </button>
      <p className="text-sm text-gray-500">Click the card to flip it</p>
      <div className="flex gap-3">
        <button onClick={() => answer(false)} className="rounded-lg border border-orange-500 px-5 py-2 text-orange-600">Again</button>
        <button onClick={() => answer(true)} className="rounded-lg bg-orange-500 px-5 py-2 text-white">I knew it</button>
      </div>
    </div>
  );
}
