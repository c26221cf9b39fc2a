"""A CPU-sized React testbed: a tiny model warm-started to write (flawed) TSX components.

`experiments/react.py --model=tiny` runs the React pipeline end to end on CPU with this: a tiny
Qwen2-architecture model and a tokenizer built here, given a short supervised warm start on
template components written for the built-in prompts, a fraction of them with the mistakes
models make (an unused variable, a list without keys, `var`, a missing closing brace, a module
outside the allowed set). Its samples are not good apps; the point is that every reward component
(compile, lint, render, judges), the sandbox and the line -> token mapping run for real on its
outputs. The warm start is cached under `<workdir>/react-warmstart-<hash>` and loaded through the
Hugging Face path a user's checkpoint takes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import time
from collections.abc import Sequence

from botjax import data as data_lib
from botjax.rewards.react import prompts as prompts_lib
from botjax.testbeds import arith

FLAWS = ("unused_variable", "missing_key", "var", "missing_brace", "bad_import")
GENERATOR_VERSION = 3          # part of the cache key: bump when the warm-start data changes


@dataclasses.dataclass(frozen=True, kw_only=True)
class TinyReactSetup(arith.TinyModelSetup):
  """Tokenizer, tiny model and warm start of the React testbed (all part of the cache key)."""
  vocab_size: int = 1024
  examples_per_prompt: int = 6
  flaw_rate: float = 0.5            # fraction of warm-start components with one flaw
  warm_steps: int = 150
  warm_batch: int = 16
  test_fraction: float = 0.2

  def digest(self) -> str:
    return arith.setup_digest(self, generator=GENERATOR_VERSION)


def title_of(request: str) -> str:
  """A short heading from a request: its first words, without characters JSX would parse."""
  words = re.sub(r"[^A-Za-z0-9 ,.-]", " ", request).split()
  return " ".join(words[:5]).rstrip(",.") or "My App"


def component(request: str, rng: random.Random, flaw: str | None = None) -> str:
  """A single-file TSX component for `request` from one of three layouts, with one optional flaw.

  Args:
    request: the user request (only its first words are used, as the heading).
    rng: source of the layout, colours and items.
    flaw: None or one of FLAWS.

  Returns:
    The component source (no fences).
  """
  if flaw is not None and flaw not in FLAWS:
    raise ValueError(f"flaw must be None or one of {FLAWS}, got {flaw!r}")
  title = title_of(request)
  color = rng.choice(["blue", "green", "indigo", "rose", "amber"])
  items = rng.sample(["Alpha", "Beta", "Gamma", "Delta", "Omega", "Sigma"], 3)
  imports = 'import { useState } from "react";'
  if flaw == "bad_import":
    imports += '\nimport axios from "axios";'
  decl = "var" if flaw == "var" else "const"
  layout = rng.randrange(3)
  lines = [imports, ""]
  lines.append("export default function App() {")
  if layout == 0:
    lines.append(f"  {decl} [count, setCount] = useState(0);")
  elif layout == 1:
    lines.append(f"  {decl} [items] = useState({json.dumps(items)});")
  else:
    lines.append(f'  {decl} [text, setText] = useState("");')
  if flaw == "unused_variable":
    lines.append("  const unused = 42;")
  lines.append("  return (")
  lines.append('    <div className="min-h-screen bg-gray-50 p-8">')
  lines.append(f'      <h1 className="text-2xl font-bold text-{color}-700">{title}</h1>')
  if layout == 0:
    lines.append(f'      <button className="mt-4 rounded bg-{color}-600 px-4 py-2 text-white" '
                 "onClick={() => setCount(count + 1)}>")
    lines.append("        Clicked {count} times")
    lines.append("      </button>")
  elif layout == 1:
    lines.append('      <ul className="mt-4 space-y-2">')
    key = "" if flaw == "missing_key" else " key={item}"
    lines.append(f'        {{items.map((item) => <li{key} className="rounded bg-white p-2 shadow">'
                 "{item}</li>)}")
    lines.append("      </ul>")
  else:
    lines.append(f'      <input className="mt-4 rounded border p-2" value={{text}} '
                 "onChange={(e) => setText(e.target.value)} />")
    lines.append(f'      <p className="mt-2 text-{color}-600">You typed: {{text}}</p>')
  lines.append("    </div>")
  lines.append("  );")
  if flaw != "missing_brace":
    lines.append("}")
  return "\n".join(lines)


def completion(code: str) -> str:
  """The answer format the warm start teaches: one sentence, then one ```tsx block."""
  return f"Here is the component.\n```tsx\n{code}\n```"


def prompt_messages(record) -> list[dict[str, str]]:
  """Chat messages of a React prompt record {id, prompt, ...} (system instructions + request)."""
  return prompts_lib.chat_messages(record["prompt"])


def warm_start_corpus(prompts: Sequence[prompts_lib.ReactPrompt], train: Sequence[dict],
                      setup: TinyReactSetup) -> tuple[list[tuple[dict, str]], list[str]]:
  """The warm start's (record, completion) pairs for the `train` records, and the tokenizer's
  training texts: the system prompt once per request (every chat sends it), every request, and
  the completions."""
  rng = random.Random(setup.seed)
  pairs = []
  for rec in train:
    for _ in range(setup.examples_per_prompt):
      flaw = rng.choice(FLAWS) if rng.random() < setup.flaw_rate else None
      pairs.append((rec, completion(component(rec["prompt"], rng, flaw))))
  corpus = ([prompts_lib.SYSTEM_PROMPT] * len(prompts) + [p.prompt for p in prompts]
            + [c for _, c in pairs])
  return pairs, corpus


def prepare(workdir: str, setup: TinyReactSetup = TinyReactSetup(), *,
            prompts: Sequence[prompts_lib.ReactPrompt] | None = None,
            verbose: bool = True) -> arith.Prepared:
  """Builds or reuses the tokenizer + warm-started tiny model of the React testbed.

  Args:
    workdir: where `react-warmstart-<hash>/` is cached.
    setup: sizes and warm-start settings.
    prompts: the prompt set (default: the built-in one), split 80/20 by
      `prompts.split_prompts`.
    verbose: print progress of the warm start.

  Returns:
    arith.Prepared with the checkpoint dir and the train / held-out prompt records.
  """
  t0 = time.perf_counter()
  prompts = list(prompts_lib.builtin_prompts() if prompts is None else prompts)
  train_p, test_p = prompts_lib.split_prompts(prompts, test_fraction=setup.test_fraction)
  train, held_out = [p.to_record() for p in train_p], [p.to_record() for p in test_p]
  ckpt = os.path.join(workdir, f"react-warmstart-{setup.digest()}")
  if os.path.exists(os.path.join(ckpt, "config.json")):
    return arith.Prepared(ckpt, train, held_out, setup, time.perf_counter() - t0, cached=True)
  pairs, corpus = warm_start_corpus(prompts, train, setup)
  tmp = ckpt + ".partial"
  tok = data_lib.build_tokenizer(tmp, corpus, vocab_size=setup.vocab_size)
  model, eos = arith.tiny_model(tok, setup, max_position_embeddings=1024)
  prompt_ids, completion_ids = [], []
  for rec, text in pairs:
    prompt_ids.append(tok.apply_chat_template(prompt_messages(rec), add_generation_prompt=True,
                                              tokenize=True, return_dict=False))
    completion_ids.append(tok(text, add_special_tokens=False)["input_ids"] + [eos])
  if verbose:
    print(f"react warm start: {len(pairs)} components ({setup.flaw_rate:.0%} flawed) for "
          f"{len(train)} prompts, {setup.warm_steps} SFT steps on a {arith.num_params(model) / 1e6:.2f}M-parameter "
          f"model; prompts {max(map(len, prompt_ids))} and completions "
          f"{max(map(len, completion_ids))} tokens at most", flush=True)
  arith.warm_start(model, tok, prompt_ids, completion_ids, setup, tmp, ckpt,
                   log_every=50 if verbose else 0)
  return arith.Prepared(ckpt, train, held_out, setup, time.perf_counter() - t0, cached=False)
