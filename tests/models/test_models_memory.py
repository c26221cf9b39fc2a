"""The RL update never holds [B, T, V] logits: XLA's own accounting of the compiled step.

Qwen2.5-3B's real width and vocabulary (hidden 2048, 16 / 2 heads, intermediate 11008,
V = 151,936) with 2 layers, 8 rows of 1,408 tokens, compiled from abstract shapes. Two steps
with the same rows and layers differ only in how many of the 1,408 columns are completion
tokens (T = 1,024 vs 256): the layers, the optimizer and the parameters cost the same in both,
so the difference in temporaries is what the log-probs of the extra 768 columns keep. One
float32 [B, T, V] buffer of those columns is 8 x 768 x 151,936 x 4 B = 3.5 GiB; the chunked,
rematerialised log-probs keep a few [B, D] rows of hidden state per column instead (about 0.03
GiB measured). Log-probs that kept the chunks' logits for the backward pass (a `lax.map`
without `jax.checkpoint`) measured 18.51 GiB of temporaries at T = 1,024 and 15.01 GiB at
T = 256 (grew 3.51 GiB), against 13.88 and 13.85 GiB with `jax.checkpoint` (grew 0.03 GiB;
XLA:CPU, jax 0.10.2).
"""

import dataclasses

import jax.numpy as jnp

import botjax.models as bm
from _update_memory import update_memory

B, L = 8, 1408
GIB = 1 << 30


def test_update_temporaries_hold_no_full_logits_at_qwen_vocabulary():
  cfg = dataclasses.replace(bm.get_config("qwen2.5-3b"), num_layers=2)
  assert cfg.vocab_size == 151936 and cfg.hidden_size == 2048
  long = update_memory(cfg, batch_size=B, prompt_len=L - 1024, completion_len=1024,
                       dtype=jnp.bfloat16)
  short = update_memory(cfg, batch_size=B, prompt_len=L - 256, completion_len=256,
                        dtype=jnp.bfloat16)
  full_logits = B * (1024 - 256) * cfg.vocab_size * 4         # f32 [B, 768, V]: 3.5 GiB
  grew = long.temp_size_in_bytes - short.temp_size_in_bytes
  print(f"temporaries: T=1024 {long.temp_size_in_bytes / GIB:.3f} GiB, T=256 "
        f"{short.temp_size_in_bytes / GIB:.3f} GiB, grew {grew / GIB:.3f} GiB; one f32 "
        f"[B, 768, V] buffer {full_logits / GIB:.3f} GiB")
  assert grew < full_logits / 4, (grew, full_logits)
  # and in absolute terms: the step's temporaries are below what they would be with one full
  # f32 [B, T, V] buffer of all 1,024 completion columns on top of the short step's
  assert long.temp_size_in_bytes < short.temp_size_in_bytes + B * 1024 * cfg.vocab_size * 4 / 4
