"""Decoder configuration: one frozen dataclass for every supported family.

A `DecoderConfig` is built from a Hugging Face `config.json` dict with
`DecoderConfig.from_hf_config`, which reads both the transformers-5 layout (`rope_parameters`)
and the older one (`rope_theta` + `rope_scaling`). Family quirks (q/k/v bias, fused Phi-3
tensors, SmolLM3's NoPE layers, rope scaling) are fields, so one decoder serves all families.

The config is hashable, so it can be a static argument of `jax.jit`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

# HF `model_type` -> (architecture class name, default rope theta of its transformers config).
FAMILIES: dict[str, tuple[str, float]] = {
    "qwen2": ("Qwen2ForCausalLM", 10_000.0),
    "llama": ("LlamaForCausalLM", 10_000.0),
    "smollm3": ("SmolLM3ForCausalLM", 2_000_000.0),
    "phi3": ("Phi3ForCausalLM", 10_000.0),
}
ROPE_TYPES = ("default", "llama3", "longrope", "linear")
# Attention implementations (see `botjax.models.attention`): "auto" picks one for the devices the
# model runs on; "cpu" is the XLA:CPU-tuned path, "xla" and "cudnn" go through
# `jax.nn.dot_product_attention`.
ATTENTION_IMPLEMENTATIONS = ("auto", "cpu", "xla", "cudnn")


def _ids(value: Any) -> tuple[int, ...] | None:
  if value is None:
    return None
  if isinstance(value, (list, tuple)):
    return tuple(int(v) for v in value)
  return (int(value),)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecoderConfig:
  """Dimensions and family quirks of a decoder-only transformer.

  Shape letters: V vocab, D hidden, N query heads, K kv heads, H head dim, F MLP width.
  """

  model_type: str = "qwen2"            # HF model_type: qwen2, llama, smollm3, phi3
  vocab_size: int                      # V
  hidden_size: int                     # D
  num_layers: int
  num_heads: int                       # N
  num_kv_heads: int                    # K (grouped-query attention: N % K == 0)
  head_dim: int                        # H
  intermediate_size: int               # F (SwiGLU width)
  rms_norm_eps: float = 1e-6
  max_position_embeddings: int = 32768
  tie_word_embeddings: bool = False
  qkv_bias: bool = False               # Qwen2: bias on q/k/v projections
  o_bias: bool = False                 # Llama/SmolLM3 `attention_bias` also biases o_proj
  mlp_bias: bool = False
  fused_qkv: bool = False              # Phi-3: `qkv_proj` and `gate_up_proj` tensors in HF files
  rope_theta: float = 10_000.0
  rope_type: str = "default"           # default | llama3 | longrope | linear
  rope_factor: float = 1.0             # llama3 / linear scaling factor
  rope_low_freq_factor: float = 1.0    # llama3
  rope_high_freq_factor: float = 4.0   # llama3
  original_max_position_embeddings: int | None = None  # llama3 and longrope
  rope_short_factor: tuple[float, ...] | None = None   # longrope, R/2 entries
  rope_long_factor: tuple[float, ...] | None = None    # longrope, R/2 entries
  rope_attention_factor: float | None = None           # longrope cos/sin scale; None: derived
  partial_rotary_factor: float = 1.0   # only the first R = H·factor dims of a head rotate
  no_rope_layers: tuple[int, ...] | None = None         # SmolLM3: 1 = RoPE, 0 = NoPE, per layer
  sliding_window: int | None = None    # key j visible to query i only if i - j < window
  sliding_layers: tuple[int, ...] | None = None         # 1 = windowed layer (None: all layers)
  bos_token_id: int | None = None
  eos_token_id: tuple[int, ...] | None = None
  pad_token_id: int | None = None
  attention: str = "auto"              # one of ATTENTION_IMPLEMENTATIONS (not in config.json)

  def __post_init__(self):
    if self.model_type not in FAMILIES:
      raise ValueError(f"model_type {self.model_type!r} is not supported; "
                       f"valid: {sorted(FAMILIES)}")
    if self.attention not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(f"attention {self.attention!r} is not supported; valid: "
                       f"{ATTENTION_IMPLEMENTATIONS}")
    if self.rope_type not in ROPE_TYPES:
      raise ValueError(f"rope_type {self.rope_type!r} is not supported; valid: {ROPE_TYPES}")
    for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                 "head_dim", "intermediate_size"):
      if getattr(self, name) <= 0:
        raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                       f"({self.num_kv_heads})")
    if self.rotary_dim % 2:
      raise ValueError(f"rotary dim head_dim*partial_rotary_factor = {self.rotary_dim} "
                       "must be even")
    if self.no_rope_layers is not None and len(self.no_rope_layers) < self.num_layers:
      raise ValueError(f"no_rope_layers has {len(self.no_rope_layers)} entries, need at least "
                       f"num_layers = {self.num_layers}")
    if self.sliding_window is not None and self.sliding_window <= 0:
      raise ValueError(f"sliding_window must be positive or None, got {self.sliding_window}")
    if self.sliding_layers is not None and len(self.sliding_layers) < self.num_layers:
      raise ValueError(f"sliding_layers has {len(self.sliding_layers)} entries, need at least "
                       f"num_layers = {self.num_layers}")
    if self.rope_type == "longrope":
      for name in ("rope_short_factor", "rope_long_factor"):
        f = getattr(self, name)
        if f is None or len(f) != self.rotary_dim // 2:
          raise ValueError(f"longrope needs {name} with rotary_dim/2 = {self.rotary_dim // 2} "
                           f"entries, got {None if f is None else len(f)}")
      if self.original_max_position_embeddings is None:
        raise ValueError("longrope needs original_max_position_embeddings")
    if self.rope_type == "llama3" and self.original_max_position_embeddings is None:
      raise ValueError("llama3 rope scaling needs original_max_position_embeddings")

  @property
  def rotary_dim(self) -> int:
    """R: number of rotated dims at the start of each head."""
    return int(self.head_dim * self.partial_rotary_factor)

  def uses_rope(self, layer: int) -> bool:
    """Whether layer `layer` applies RoPE (SmolLM3 skips it on its NoPE layers)."""
    return self.no_rope_layers is None or bool(self.no_rope_layers[layer])

  def window(self, layer: int) -> int | None:
    """The sliding-window size of layer `layer`, or None for full causal attention."""
    if self.sliding_window is None:
      return None
    if self.sliding_layers is not None and not self.sliding_layers[layer]:
      return None
    return self.sliding_window

  @property
  def architecture(self) -> str:
    return FAMILIES[self.model_type][0]

  @classmethod
  def from_hf_config(cls, hf: Mapping[str, Any]) -> "DecoderConfig":
    """Builds a config from a Hugging Face `config.json` dict (either rope layout).

    Args:
      hf: the parsed `config.json`. Its `model_type` must be one of `FAMILIES`.

    Returns:
      The matching frozen `DecoderConfig`.
    """
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
      raise ValueError(f"config.json model_type {model_type!r} is not supported; valid: "
                       f"{sorted(FAMILIES)}")
    default_theta = FAMILIES[model_type][1]
    # transformers 5 writes `rope_parameters`; older files have `rope_theta` + `rope_scaling`.
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    if "rope_theta" in rope and isinstance(rope.get("rope_theta"), Mapping):
      raise ValueError("per-layer-type rope_parameters are not supported")
    theta = float(rope.get("rope_theta", hf.get("rope_theta", default_theta)))
    rope_type = rope.get("rope_type", rope.get("type", "default")) or "default"
    if rope_type in ("su", "yarn") and model_type == "phi3":  # Phi-3's historical names
      rope_type = "longrope"
    partial = float(rope.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)))
    original_max = rope.get("original_max_position_embeddings",
                            hf.get("original_max_position_embeddings"))
    num_heads = int(hf["num_attention_heads"])
    head_dim = hf.get("head_dim") or int(hf["hidden_size"]) // num_heads
    num_layers = int(hf["num_hidden_layers"])
    kwargs: dict[str, Any] = {}
    if model_type == "qwen2":
      kwargs.update(qkv_bias=True)
    elif model_type in ("llama", "smollm3"):
      bias = bool(hf.get("attention_bias", False))
      kwargs.update(qkv_bias=bias, o_bias=bias, mlp_bias=bool(hf.get("mlp_bias", False)))
    elif model_type == "phi3":
      kwargs.update(fused_qkv=True)
    if model_type == "smollm3":
      layers = hf.get("no_rope_layers")
      if layers is None:
        interval = int(hf.get("no_rope_layer_interval", 4))
        layers = [int((i + 1) % interval != 0) for i in range(num_layers)]
      kwargs.update(no_rope_layers=tuple(int(x) for x in layers))
    kwargs.update(_sliding(hf, model_type, num_layers, kwargs.get("no_rope_layers")))
    tie_default = model_type == "smollm3"
    factor = rope.get("factor")
    return cls(
        model_type=model_type,
        vocab_size=int(hf["vocab_size"]),
        hidden_size=int(hf["hidden_size"]),
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
        head_dim=int(head_dim),
        intermediate_size=int(hf["intermediate_size"]),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", tie_default)),
        rope_theta=theta,
        rope_type=rope_type,
        rope_factor=float(factor) if factor is not None else 1.0,
        rope_low_freq_factor=float(rope.get("low_freq_factor", 1.0)),
        rope_high_freq_factor=float(rope.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=None if original_max is None else int(original_max),
        rope_short_factor=_floats(rope.get("short_factor")),
        rope_long_factor=_floats(rope.get("long_factor")),
        rope_attention_factor=(None if rope.get("attention_factor") is None
                               else float(rope["attention_factor"])),
        partial_rotary_factor=partial,
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=_ids(hf.get("eos_token_id")),
        pad_token_id=hf.get("pad_token_id"),
        **kwargs,
    )

  def to_hf_config(self, dtype: str = "float32") -> dict[str, Any]:
    """The transformers-5 `config.json` dict (`rope_parameters` layout) for this config."""
    rope: dict[str, Any] = {"rope_theta": self.rope_theta, "rope_type": self.rope_type}
    if self.rope_type == "llama3":
      rope.update(factor=self.rope_factor, low_freq_factor=self.rope_low_freq_factor,
                  high_freq_factor=self.rope_high_freq_factor,
                  original_max_position_embeddings=self.original_max_position_embeddings)
    elif self.rope_type == "linear":
      rope.update(factor=self.rope_factor)
    elif self.rope_type == "longrope":
      rope.update(short_factor=list(self.rope_short_factor),
                  long_factor=list(self.rope_long_factor))
      if self.rope_attention_factor is not None:
        rope.update(attention_factor=self.rope_attention_factor)
    if self.partial_rotary_factor != 1.0 or self.model_type == "phi3":
      rope["partial_rotary_factor"] = self.partial_rotary_factor
    eos = self.eos_token_id
    hf: dict[str, Any] = {
        "architectures": [self.architecture],
        "model_type": self.model_type,
        "vocab_size": self.vocab_size,
        "hidden_size": self.hidden_size,
        "intermediate_size": self.intermediate_size,
        "num_hidden_layers": self.num_layers,
        "num_attention_heads": self.num_heads,
        "num_key_value_heads": self.num_kv_heads,
        "head_dim": self.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": self.rms_norm_eps,
        "max_position_embeddings": self.max_position_embeddings,
        "tie_word_embeddings": self.tie_word_embeddings,
        "rope_parameters": rope,
        "bos_token_id": self.bos_token_id,
        "eos_token_id": None if eos is None else (eos[0] if len(eos) == 1 else list(eos)),
        "pad_token_id": self.pad_token_id,
        "dtype": dtype,
        "use_cache": True,
    }
    if self.model_type in ("llama", "smollm3"):
      hf.update(attention_bias=self.qkv_bias, mlp_bias=self.mlp_bias)
    if self.model_type in ("qwen2", "smollm3"):
      hf.update(use_sliding_window=self.sliding_window is not None,
                sliding_window=self.sliding_window,
                layer_types=["sliding_attention" if self.window(i) else "full_attention"
                             for i in range(self.num_layers)])
      if self.model_type == "qwen2":
        hf["max_window_layers"] = self.num_layers
    if self.model_type == "phi3":
      hf["sliding_window"] = self.sliding_window
    if self.model_type == "smollm3":
      hf["no_rope_layers"] = list(self.no_rope_layers or [1] * self.num_layers)
    if self.model_type == "phi3" and self.original_max_position_embeddings is not None:
      hf["original_max_position_embeddings"] = self.original_max_position_embeddings
    if self.model_type == "phi3" and self.head_dim * self.num_heads == self.hidden_size:
      hf.pop("head_dim")  # Phi-3 derives it as hidden / heads
    return hf


def _sliding(hf: Mapping[str, Any], model_type: str, num_layers: int,
             no_rope_layers: tuple[int, ...] | None) -> dict[str, Any]:
  """sliding_window / sliding_layers fields, following each family's transformers config."""
  window = hf.get("sliding_window")
  if model_type in ("qwen2", "smollm3") and not hf.get("use_sliding_window", False):
    window = None
  if model_type == "llama" or window is None:
    return {}
  types = hf.get("layer_types")
  if types is not None:
    layers = tuple(int(t == "sliding_attention") for t in types[:num_layers])
  elif model_type == "qwen2":
    first = int(hf.get("max_window_layers", 28))
    layers = tuple(int(i >= first) for i in range(num_layers))
  elif model_type == "smollm3":
    layers = tuple(int(not no_rope_layers[i]) for i in range(num_layers))
  else:  # phi3: every layer
    layers = None
  if layers is not None and not any(layers):
    return {}
  return {"sliding_window": int(window), "sliding_layers": layers}


def _floats(value: Any) -> tuple[float, ...] | None:
  return None if value is None else tuple(float(v) for v in value)
