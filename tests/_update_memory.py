"""XLA's memory accounting of the real RL update, compiled from abstract shapes (no weights).

`update_memory(cfg, ...)` builds the decoder with `nnx.eval_shape`, the TrainState and RLBatch
as `jax.ShapeDtypeStruct`s, and returns `jax.jit(update).lower(...).compile().memory_analysis()`
of `botjax.train.step.update` on one device: nothing of the size of the model is allocated.
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from botjax import algorithms
from botjax.models import Decoder
from botjax.train import step as step_lib
from botjax.train.config import OptimConfig


def update_memory(cfg, *, batch_size: int, prompt_len: int, completion_len: int,
                  dtype=jnp.float32, remat: bool = False, num_micro: int = 1,
                  chunk: int = 128, recipe: str = "bot_grpo", scan_layers: bool = False):
  """`memory_analysis()` of one compiled `update` (params f32, AdamW, donated state).

  Args:
    cfg: a `DecoderConfig`.
    batch_size: B rows; prompt_len: P; completion_len: T (L = P + T).
    dtype: computation dtype of the decoder.
    remat: `Decoder(remat=)`.
    num_micro: gradient-accumulation slices.
    chunk: completion positions per log-prob chunk.
    recipe: a recipe of `botjax.algorithms.RECIPES`.
    scan_layers: `Decoder(scan_layers=)`.

  Returns:
    The compiled executable's `CompiledMemoryStats` (bytes: argument_size_in_bytes,
    temp_size_in_bytes, output_size_in_bytes, alias_size_in_bytes, ...).
  """
  abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0), dtype=dtype,
                                            param_dtype=jnp.float32, remat=remat,
                                            scan_layers=scan_layers))
  graphdef, params, rest = step_lib.split_model(abstract)
  optimizer = step_lib.make_optimizer(OptimConfig(), 10)
  state = jax.eval_shape(lambda p: step_lib.init_state(p, optimizer, 0), params)
  batch = step_lib.RLBatch.abstract(batch_size, prompt_len, completion_len)
  fn = functools.partial(step_lib.update, graphdef=graphdef, rest=rest,
                         recipe=algorithms.get_recipe(recipe), optimizer=optimizer,
                         num_micro=num_micro, chunk=chunk)
  return jax.jit(fn, donate_argnums=0).lower(state, batch).compile().memory_analysis()


def peak_bytes(mem) -> int:
  """Arguments + temporaries + outputs that do not reuse a donated argument's buffer."""
  return (mem.argument_size_in_bytes + mem.temp_size_in_bytes + mem.output_size_in_bytes
          - mem.alias_size_in_bytes)
