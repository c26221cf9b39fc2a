"""Shape letters and array aliases used in every botjax docstring.

Shape letters:

  P  prompts in a batch.
  G  completions per prompt (the size of one group; groups may be ragged).
  B  completion rows in a batch (B = Σ_g G_g).
  T  completion tokens per row (padded width).
  L  prompt + completion tokens per row.
  S  steps per row (step-level rewards), or cache slots in the sampler.
  V  vocabulary size.
  D  model width.
  N  query heads;  K  key/value heads;  H  head dimension;  F  MLP width.
  R  packed rows;  M  tokens in a flat stream.

Data conventions (the public contract of botjax.advantages / losses / metrics):

| name | shape | meaning |
| --- | --- | --- |
| `logp` | `[B, T]` f32 | log-probs of the sampled tokens under the current policy |
| `old_logp`, `ref_logp` | `[B, T]` f32 | behaviour and reference policies |
| `mask` | `[B, T]` bool | True on scored completion tokens |
| `rewards` | `[B]` f32 | sequence (global) reward of each row |
| `token_rewards` | `[B, T]` f32 | per-token reward |
| `step_rewards`, `step_mask` | `[B, S]` f32, bool | per-step reward and its validity |
| `token_step` | `[B, T]` int32 | step of each token, -1 for none |
| `group_ids` | `[B]` int32 | group (prompt) of each row, in `[0, num_groups)` |
| `advantages` | `[B]` or `[B, T]` f32 | per sequence or per token |

Groups are given by `group_ids` plus a static Python int `num_groups`; they may be ragged and
non-contiguous, and group statistics are segment sums over rows.
"""

from __future__ import annotations

import jax

Array = jax.Array
"""A `jax.Array`; docstrings give its shape in the letters above."""

ArrayLike = jax.typing.ArrayLike
"""Anything `jnp.asarray` accepts (arrays, numpy arrays, Python scalars)."""

SHAPE_LETTERS: dict[str, str] = {
    "P": "prompts in a batch",
    "G": "completions per prompt (group size; may be ragged)",
    "B": "completion rows in a batch",
    "T": "completion tokens per row (padded width)",
    "L": "prompt + completion tokens per row",
    "S": "steps per row, or cache slots",
    "V": "vocabulary size",
    "D": "model width",
    "N": "query heads",
    "K": "key/value heads",
    "H": "head dimension",
    "F": "MLP width",
    "R": "packed rows",
    "M": "tokens in a flat stream",
}
"""The shape-letter glossary as data (e.g. for generated documentation)."""

__all__ = ["Array", "ArrayLike", "SHAPE_LETTERS"]
