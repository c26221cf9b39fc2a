"""SFT: packing, and its loss is the completion tokens' mean negative log-likelihood."""

import dataclasses

import jax.numpy as jnp
import numpy as np
from flax import nnx

from botjax import models
from botjax.train.sft import SFTConfig, pack_examples, sft

PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12]]
COMPLETIONS = [[13, 14], [15, 16, 17, 18], [19]]


def test_pack_examples_left_pads_prompts_and_right_pads_completions():
  ids, pos, attn, loss_mask, t = pack_examples(PROMPTS, COMPLETIONS, pad_id=0)
  assert t == 4 and ids.shape == (3, 8)
  for i, (p, c) in enumerate(zip(PROMPTS, COMPLETIONS)):
    row = [0] * (4 - len(p)) + p + c + [0] * (4 - len(c))
    np.testing.assert_array_equal(ids[i], row)
    real = [False] * (4 - len(p)) + [True] * (len(p) + len(c)) + [False] * (4 - len(c))
    np.testing.assert_array_equal(attn[i], real)
    np.testing.assert_array_equal(pos[i][attn[i]], np.arange(len(p) + len(c)))
    np.testing.assert_array_equal(loss_mask[i], [True] * len(c) + [False] * (4 - len(c)))


def test_first_loss_is_the_numpy_nll_and_training_lowers_it():
  cfg = dataclasses.replace(models.get_config("tiny"), vocab_size=32, num_layers=1,
                            hidden_size=32, head_dim=8, intermediate_size=64)
  model = models.Decoder(cfg, rngs=nnx.Rngs(0))
  nll, count = 0.0, 0
  for p, c in zip(PROMPTS, COMPLETIONS):       # each row alone, unpadded, through the model
    seq = np.array(p + c, np.int32)[None]
    logits, _ = model(jnp.asarray(seq), jnp.arange(seq.shape[1], dtype=jnp.int32)[None])
    z = np.asarray(logits[0], np.float64)
    logsm = z - z.max(-1, keepdims=True)
    logsm = logsm - np.log(np.exp(logsm).sum(-1, keepdims=True))
    for j, tok in enumerate(c):
      nll -= logsm[len(p) + j - 1, tok]
      count += 1
  _, losses = sft(model, PROMPTS, COMPLETIONS,
                  SFTConfig(steps=30, batch_size=3, learning_rate=1e-2, warmup_steps=1))
  np.testing.assert_allclose(losses[0], nll / count, rtol=1e-5)
  assert losses[-1] < 0.5 * losses[0]
