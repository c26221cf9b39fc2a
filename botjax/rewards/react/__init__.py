"""React code-generation rewards (BoT-GRPO §4): compile, lint, render, LLM/VLM judges."""
