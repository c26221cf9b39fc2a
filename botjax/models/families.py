"""Hugging Face tensor names <-> botjax parameters, one table per family, written as data.

Each `WeightRule` maps one HF tensor (a name template with `{i}` for the layer) to one or more
NNX parameter paths, with the transform both ways. Torch `Linear` weights are `[out, in]`;
botjax kernels are `[in, out]` with heads split out (q kernel `[D, N, H]`, o kernel `[N, H, D]`).
Phi-3's fused `qkv_proj` (rows q, k, v) and `gate_up_proj` (rows gate, up) split into the shared
parameters on load and are concatenated again on save.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import numpy as np

from botjax.models.config import DecoderConfig

Split = Callable[[np.ndarray, DecoderConfig], tuple[np.ndarray, ...]]
Join = Callable[[tuple[np.ndarray, ...], DecoderConfig], np.ndarray]


def _always(cfg: DecoderConfig) -> bool:
  del cfg
  return True


@dataclasses.dataclass(frozen=True)
class WeightRule:
  """One HF tensor <-> NNX parameter(s) mapping.

  Attributes:
    hf: HF name template, `{i}` standing for the layer index.
    nnx: NNX path templates (dot-separated), `{i}` for the layer index.
    split: HF array -> NNX arrays (one per `nnx` path).
    join: NNX arrays -> HF array (inverse of `split`).
    when: whether the config has this tensor (biases, untied head).
  """

  hf: str
  nnx: tuple[str, ...]
  split: Split
  join: Join
  when: Callable[[DecoderConfig], bool] = _always

  @property
  def pattern(self) -> re.Pattern:
    return re.compile(re.escape(self.hf).replace(re.escape("{i}"), r"(\d+)") + "$")

  @property
  def per_layer(self) -> bool:
    return "{i}" in self.hf


# --- transforms -------------------------------------------------------------------------------
def _same(w, cfg):
  del cfg
  return (w,)


def _same_join(ws, cfg):
  del cfg
  return ws[0]


def _t(w, cfg):  # [out, in] -> [in, out]
  del cfg
  return (w.T,)


def _t_join(ws, cfg):
  del cfg
  return ws[0].T


def _heads_in(n_attr: str) -> tuple[Split, Join]:
  """[heads·H, D] -> [D, heads, H] (q/k/v projections) and back."""

  def split(w, cfg):
    n = getattr(cfg, n_attr)
    return (w.T.reshape(cfg.hidden_size, n, cfg.head_dim),)

  def join(ws, cfg):
    return ws[0].reshape(cfg.hidden_size, -1).T

  return split, join


def _heads_bias(n_attr: str) -> tuple[Split, Join]:
  def split(w, cfg):
    return (w.reshape(getattr(cfg, n_attr), cfg.head_dim),)

  def join(ws, cfg):
    del cfg
    return ws[0].reshape(-1)

  return split, join


def _o_split(w, cfg):  # [D, N·H] -> [N, H, D]
  return (w.T.reshape(cfg.num_heads, cfg.head_dim, cfg.hidden_size),)


def _o_join(ws, cfg):
  return ws[0].reshape(-1, cfg.hidden_size).T


def _qkv_split(w, cfg):  # fused rows q | k | v, [(N+2K)·H, D]
  nq = cfg.num_heads * cfg.head_dim
  nk = cfg.num_kv_heads * cfg.head_dim
  q, k, v = w[:nq], w[nq:nq + nk], w[nq + nk:]
  return (_heads_in("num_heads")[0](q, cfg)[0], _heads_in("num_kv_heads")[0](k, cfg)[0],
          _heads_in("num_kv_heads")[0](v, cfg)[0])


def _qkv_join(ws, cfg):
  return np.concatenate([w.reshape(cfg.hidden_size, -1).T for w in ws], axis=0)


def _gate_up_split(w, cfg):  # fused rows gate | up, [2F, D]
  f = cfg.intermediate_size
  return (w[:f].T, w[f:].T)


def _gate_up_join(ws, cfg):
  del cfg
  return np.concatenate([ws[0].T, ws[1].T], axis=0)


_Q, _KV = _heads_in("num_heads"), _heads_in("num_kv_heads")
_QB, _KVB = _heads_bias("num_heads"), _heads_bias("num_kv_heads")
_L = "model.layers.{i}."

_COMMON = (
    WeightRule("model.embed_tokens.weight", ("embed",), _same, _same_join),
    WeightRule("model.norm.weight", ("final_norm.scale",), _same, _same_join),
    WeightRule("lm_head.weight", ("lm_head",), _t, _t_join,
               when=lambda c: not c.tie_word_embeddings),
    WeightRule(_L + "input_layernorm.weight", ("layers.{i}.input_norm.scale",), _same,
               _same_join),
    WeightRule(_L + "post_attention_layernorm.weight", ("layers.{i}.post_norm.scale",), _same,
               _same_join),
    WeightRule(_L + "self_attn.o_proj.weight", ("layers.{i}.attn.o_kernel",), _o_split, _o_join),
    WeightRule(_L + "self_attn.o_proj.bias", ("layers.{i}.attn.o_bias",), _same, _same_join,
               when=lambda c: c.o_bias),
    WeightRule(_L + "mlp.down_proj.weight", ("layers.{i}.mlp.down",), _t, _t_join),
)

# Qwen2/2.5, Llama 3.x and SmolLM3 share the separate-projection layout.
LLAMA_LIKE = _COMMON + (
    WeightRule(_L + "self_attn.q_proj.weight", ("layers.{i}.attn.q_kernel",), *_Q),
    WeightRule(_L + "self_attn.k_proj.weight", ("layers.{i}.attn.k_kernel",), *_KV),
    WeightRule(_L + "self_attn.v_proj.weight", ("layers.{i}.attn.v_kernel",), *_KV),
    WeightRule(_L + "self_attn.q_proj.bias", ("layers.{i}.attn.q_bias",), *_QB,
               when=lambda c: c.qkv_bias),
    WeightRule(_L + "self_attn.k_proj.bias", ("layers.{i}.attn.k_bias",), *_KVB,
               when=lambda c: c.qkv_bias),
    WeightRule(_L + "self_attn.v_proj.bias", ("layers.{i}.attn.v_bias",), *_KVB,
               when=lambda c: c.qkv_bias),
    WeightRule(_L + "mlp.gate_proj.weight", ("layers.{i}.mlp.gate",), _t, _t_join),
    WeightRule(_L + "mlp.up_proj.weight", ("layers.{i}.mlp.up",), _t, _t_join),
    WeightRule(_L + "mlp.gate_proj.bias", ("layers.{i}.mlp.gate_bias",), _same, _same_join,
               when=lambda c: c.mlp_bias),
    WeightRule(_L + "mlp.up_proj.bias", ("layers.{i}.mlp.up_bias",), _same, _same_join,
               when=lambda c: c.mlp_bias),
    WeightRule(_L + "mlp.down_proj.bias", ("layers.{i}.mlp.down_bias",), _same, _same_join,
               when=lambda c: c.mlp_bias),
)

# Phi-3 / Phi-4-mini: fused qkv_proj and gate_up_proj.
PHI3 = _COMMON + (
    WeightRule(_L + "self_attn.qkv_proj.weight",
               ("layers.{i}.attn.q_kernel", "layers.{i}.attn.k_kernel",
                "layers.{i}.attn.v_kernel"), _qkv_split, _qkv_join),
    WeightRule(_L + "mlp.gate_up_proj.weight", ("layers.{i}.mlp.gate", "layers.{i}.mlp.up"),
               _gate_up_split, _gate_up_join),
)

WEIGHT_TABLES: dict[str, tuple[WeightRule, ...]] = {
    "qwen2": LLAMA_LIKE,
    "llama": LLAMA_LIKE,
    "smollm3": LLAMA_LIKE,
    "phi3": PHI3,
}

# Tensors some checkpoints carry that are not parameters (recomputed from the config).
IGNORED = (re.compile(r".*rotary_emb\.inv_freq$"),)


def rules_for(cfg: DecoderConfig) -> tuple[WeightRule, ...]:
  """The rules of `cfg`'s family that apply to this config."""
  return tuple(r for r in WEIGHT_TABLES[cfg.model_type] if r.when(cfg))


def expand(rule: WeightRule, layer: int | None) -> tuple[str, tuple[str, ...]]:
  """(HF name, NNX paths) of a rule for one layer (or for a non-layer rule, layer=None)."""
  sub = {} if layer is None else {"i": layer}
  return rule.hf.format(**sub), tuple(p.format(**sub) for p in rule.nnx)


def all_names(cfg: DecoderConfig) -> list[tuple[WeightRule, str, tuple[str, ...]]]:
  """Every (rule, HF name, NNX paths) a checkpoint of this config holds."""
  out = []
  for rule in rules_for(cfg):
    layers = range(cfg.num_layers) if rule.per_layer else [None]
    for i in layers:
      out.append((rule, *expand(rule, i)))
  return out
