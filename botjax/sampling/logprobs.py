"""Completion log-probs of a `SampleOutput` under a model: the importance-ratio numerator.

  out = sampler.generate(prompts, key, n=8)                       # SampleOutput, B = P·n rows
  def loss(params):
    model = nnx.merge(graphdef, params)
    logp, _ = sample_logprobs(model, out, temperature=sampler.config.logp_temperature)
    ...                                  # logp [B, T] vs out.logp [B, T], mask out.mask
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from botjax.models import logprobs as logprobs_lib
from botjax.sampling.output import SampleOutput


def sample_logprobs(model, out: SampleOutput, *, temperature: float,
                        chunk_size: int = 128, share_prompts: bool = True
                        ) -> tuple[jax.Array, jax.Array]:
  """Log-probs and entropies of a sample's completion tokens under `model`, jit-able.

  logp[b, t] = log softmax(logits(prompt_b, tokens_b[:t]) / τ)[tokens_b[t]] (cut to the
  sampler's top-k / top-p support and renormalised when `out.support_logp` is set), the
  quantity `SampleOutput.logp` holds for the sampling parameters: with the sampler's own parameters
  the two agree where `out.mask` is True (up to float rounding); with the parameters being
  trained it is the `logp` of the PPO / GRPO ratio exp(logp − old_logp) (DeepSeekMath,
  arXiv 2402.03300, eq. 3). The logits are computed a chunk of `chunk_size` positions at a
  time and recomputed in the backward pass, so the gradient never holds [B, T, V] logits.

  Args:
    model: a `botjax.models.Decoder` (inside `jit`, e.g. `nnx.merge(graphdef, params)`).
    out: a `SampleOutput` with B rows, Lp prompt columns and T completion columns.
    temperature: τ > 0 the tokens were scored at: `sampler.config.logp_temperature` (the
      sampling temperature, or 1 for greedy decoding).
    chunk_size: completion positions per chunk of logits.
    share_prompts: the n rows of each prompt share one forward pass of the prompt
      (`Decoder.shared_prefix`) when `out.num_groups` is at most half the rows.

  Returns:
    (logp, entropy): float32 [B, T] each, 0 where `out.mask` is False.
  """
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0 (the sampler's logp_temperature), got "
                     f"{temperature}")
  tf = out.teacher_forcing()
  b, t = out.tokens.shape
  num_prompts = out.num_groups if share_prompts and 2 * out.num_groups <= b else 0
  logp, ent = logprobs_lib.completion_logprobs(
      model, tf.input_ids, tf.positions, tf.attention_mask, completion_len=t,
      temperature=temperature, chunk_size=chunk_size, num_prompts=num_prompts,
      support=out.support_logp)
  return jnp.where(out.mask, logp, 0.0), jnp.where(out.mask, ent, 0.0)
