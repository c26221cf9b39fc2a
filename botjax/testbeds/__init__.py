"""CPU testbeds: tiny models with a warm start, their tasks and their presets.

  from botjax.testbeds import arith, react_tiny
  prepared = arith.prepare(workdir)                       # step-verified arithmetic task
  trainer = arith.make_trainer(prepared, arith.quickstart_config("bot_grpo", workdir=workdir))
  react = react_tiny.prepare(workdir)                     # tiny React (TSX) warm start

Both build (once, then reuse) a tokenizer and a tiny Qwen2-architecture model, warm-start it by
supervised fine-tuning and save it as a Hugging Face checkpoint, so that RL runs load it through
the same path as a user's checkpoint. They are examples and test fixtures, not part of the
trainer (`botjax.train`).
"""
