"""Run configuration: frozen dataclasses, presets, and `--set key=value` overrides.

Every field has the default a user would reach for first; experiments build their own defaults
on top; the whole config is saved in the run directory (config.json) and with each checkpoint,
and printed at the start with `verbose`.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Mapping, Sequence


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimConfig:
  """AdamW with linear warm-up and global-norm gradient clipping (optax)."""
  learning_rate: float = 1e-6          # DeepSeekMath §4.2 / DAPO §4.1 use 1e-6; BoT-GRPO AIME 5e-7
                                       # (the experiments' defaults and sources: docs/defaults.md)
  warmup_steps: int = 0                # DAPO: linear warm-up over 20 rollout steps
  schedule: str = "constant"           # "constant" | "cosine" (decays to 10% over `steps`)
  weight_decay: float = 0.0
  b1: float = 0.9
  b2: float = 0.999
  adam_eps: float = 1e-8
  max_grad_norm: float = 1.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutConfig:
  """How completions are sampled for one RL step."""
  prompts_per_step: int = 8            # BoT-GRPO: 8 prompts x 8 rollouts = 64 per step
  group_size: int = 8
  max_prompt_tokens: int = 256
  max_new_tokens: int = 256
  temperature: float = 1.0             # botjax's choice (the paper gives none): docs/defaults.md
  top_k: int = 0                       # 0 = off
  top_p: float = 1.0
  engine: str = "auto"                 # rollout engine: a name of botjax.sampling.ENGINES:
                                       # "jax" (lockstep decoding), "slots" (continuous
                                       # batching: faster when completion lengths spread, the
                                       # same samples; docs/scaling.md), "vllm", or "auto":
                                       # "slots" where it was measured faster (one device of a
                                       # small CPU host, one process, budget >= 256), else "jax"
                                       # (`sampling.auto_engine`; `resolve_engine`)
  # keyword arguments of that engine's factory (`make_engine(engine, ..., **options)`), as
  # (name, value) pairs: e.g. vLLM's url (a `vllm serve` server instead of a colocated engine),
  # gpu_memory_utilization, sleep_level, kv_cache_bytes, dtype. On the command line:
  # --set=rollout.engine_options.url=http://HOST:8000 (values parsed as JSON, else a string).
  engine_options: tuple[tuple[str, Any], ...] = ()
  # DAPO dynamic sampling on an engine with a queue (`SlotEngine.generate_groups`): a group of
  # constant accuracy queues the next prompt while the slots keep decoding (the same kept groups
  # as extra rounds, fewer prompts sampled; `RolloutCollector._collect_in_queue`); False: rounds.
  resample_in_queue: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class RewardConfig:
  """Host-side reward execution."""
  workers: int = 4
  timeout_s: float = 30.0
  fallback_reward: float = 0.0
  kind: str = "thread"                 # "thread" | "process"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
  """One RL run. `recipe` names an entry of `botjax.algorithms.RECIPES` (built-in or added with
  `register_recipe`), or is an `algorithms.Recipe` (used as given, then `recipe_overrides`)."""
  recipe: Any = "bot_grpo"             # str | algorithms.Recipe
  recipe_overrides: tuple[tuple[str, Any], ...] = ()   # e.g. (("kl_coef", 0.001),)
  optim: OptimConfig = OptimConfig()
  rollout: RolloutConfig = RolloutConfig()
  reward: RewardConfig = RewardConfig()
  steps: int = 100
  ppo_epochs: int = 1                  # passes over each rollout batch
  mini_batches: int = 1                # optimizer updates per pass (later ones are off-policy)
  micro_batch_size: int = 0            # rows per gradient-accumulation slice; 0 = whole mini-batch
  logprob_chunk: int = 128             # tokens per chunk of the chunked log-prob computation
  remat: bool | None = None            # recompute each decoder block in the backward pass
                                       # (less memory, ~1/3 more compute); None = the model's own
  scan_layers: bool | None = None      # the model's layers stacked and run as one lax.scan
                                       # (much shorter compiles); set when it is built or loaded
                                       # (load_pretrained(scan_layers=)); None = the model's own
  share_prompts: bool = True           # a group's rows share one forward pass of their prompt
  host_threads: int = 0                # threads for sampling and update (0 = 2 on small CPU hosts)
  seed: int = 0
  workdir: str = "runs/default"
  log_every: int = 1
  eval_every: int = 0                  # 0 = never during training
  checkpoint_every: int = 50           # 0 = never (not even at the end)
  keep_checkpoints: int = 2            # the newest N checkpoints are kept, older ones deleted
  max_skipped_updates: int = 20        # consecutive non-finite updates before the run stops
  tensorboard: bool = True
  wandb_project: str = ""              # empty = off
  progress: bool = True                # one start line, a progress bar, one summary line
  verbose: bool = False                # also print the recipe and the full config at the start


# Fields that may change between a run and its resumption without changing what it computes.
RESUMABLE_FIELDS = frozenset({
    "steps", "workdir", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
    "tensorboard", "wandb_project", "progress", "verbose", "reward.workers", "reward.timeout_s",
    "max_skipped_updates",
})


# Fields added to the config since runs were first saved, with the value that reproduces those
# runs: a saved config without the field is the same as one holding this value.
ADDED_FIELDS: dict[str, Any] = {"rollout.engine": "jax", "rollout.resample_in_queue": True}


def saved_engine(saved: Mapping) -> str | None:
  """The rollout engine a saved run config (`to_dict`, alone or as the "train" entry of a run
  config) names; `ADDED_FIELDS`' value for a run saved before the field existed; None when it
  holds no train config."""
  flat = _flatten(saved)
  for prefix in ("", "train."):
    if prefix + "rollout.engine" in flat:
      return flat[prefix + "rollout.engine"]
  if any(k.startswith(("rollout.", "train.rollout.")) for k in flat):
    return ADDED_FIELDS["rollout.engine"]
  return None


def resolve_engine(cfg, *, saved: Mapping | None = None, where: Any = None):
  """`cfg` with `rollout.engine="auto"` replaced by the engine the run uses.

  A run resumed from a saved one keeps the engine it was saved with (`saved_engine`), so that
  "auto" never changes a run's engine between its start and its resumption; a new run takes
  `botjax.sampling.auto_engine`'s choice for its budget and `where` it runs. A named engine is
  kept as it is.

  Args:
    cfg: a TrainConfig.
    saved: the config saved with the run's latest checkpoint, or None (a new run).
    where: the model's parameters or the mesh the engine runs on (`xla_cpu.platform_of`).
  """
  from botjax.sampling.engine import AUTO, auto_engine   # local: config stays a leaf
  if cfg.rollout.engine != AUTO:
    return cfg
  name = saved_engine(saved) if saved else None
  if name is None or name == AUTO:
    name = auto_engine(cfg.rollout.max_new_tokens, where)
  return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, engine=name))


def with_engine(run_config: Mapping, engine: str) -> dict:
  """`run_config` (`to_dict` of a TrainConfig, alone or as its "train" entry) with an "auto"
  rollout engine replaced by `engine`, the one the run uses (so the saved config names it)."""
  out = json.loads(json.dumps(dict(run_config)))
  for holder in (out, out.get("train")):
    rollout = holder.get("rollout") if isinstance(holder, dict) else None
    if isinstance(rollout, dict) and rollout.get("engine") == "auto":
      rollout["engine"] = engine
  return out


def to_dict(cfg) -> dict:
  """A JSON-ready nested dict of a (possibly nested) config dataclass."""
  return json_ready(dataclasses.asdict(cfg))


def json_ready(config: Mapping) -> dict:
  """`config` as it reads back from JSON (tuples as lists, other objects as their str), so that
  a config compares equal to the one saved with a checkpoint."""
  return json.loads(json.dumps(dict(config), default=str))


def _flatten(d: Mapping, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    key = f"{prefix}{k}"
    if isinstance(v, Mapping):
      out.update(_flatten(v, key + "."))
    else:
      out[key] = v
  return out


def config_diff(saved: Mapping, current: Mapping, ignore: frozenset = RESUMABLE_FIELDS) -> list[str]:
  """Dotted names of fields that differ between two `to_dict` configs (ignored ones excluded).

  A field the saved config lacks (added to the config since) counts as the same when it is None
  now, its "unset" value, or the value of `ADDED_FIELDS` that reproduces the older runs, so runs
  saved before it existed still resume."""
  a, b = _flatten(saved), _flatten(current)
  names = sorted(set(a) | set(b))
  diffs = []
  for n in names:
    if n in ignore or n.split(".", 1)[-1] in ignore and n.startswith("train."):
      continue
    bare = n.split(".", 1)[-1] if n.startswith("train.") else n
    if n not in a and (b[n] is None or bare in ADDED_FIELDS and b[n] == ADDED_FIELDS[bare]):
      continue          # a field added since the run was saved, at its "unset" default
    if a.get(n, "<absent>") != b.get(n, "<absent>"):
      diffs.append(f"{n}: saved={a.get(n, '<absent>')!r} now={b.get(n, '<absent>')!r}")
  return diffs


def _parse_value(text: str, typ: Any, field_name: str):
  origin = typing.get_origin(typ)
  if typ is bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
      return True
    if low in ("0", "false", "no", "off"):
      return False
    raise ValueError(f"--set {field_name}={text!r}: expected a boolean (true/false)")
  if typ is Any:                       # TrainConfig.recipe: a recipe name on the command line
    return text
  if typ in (int, float, str):
    try:
      return typ(text)
    except ValueError:
      raise ValueError(f"--set {field_name}={text!r}: expected {typ.__name__}") from None
  if origin in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(typ) if a is not type(None)]
    if text.lower() in ("none", "null") and len(args) < len(typing.get_args(typ)):
      return None
    return _parse_value(text, args[0], field_name)
  # tuples and anything else: JSON
  try:
    value = json.loads(text)
  except json.JSONDecodeError:
    raise ValueError(f"--set {field_name}={text!r}: expected JSON for type {typ}") from None
  if origin is tuple:
    return tuple(tuple(v) if isinstance(v, list) else v for v in value)
  return value


def apply_overrides(cfg, overrides: Sequence[str]):
  """Returns `cfg` with `key=value` overrides applied; dotted keys reach nested configs.

  `recipe.NAME=VALUE` appends to `recipe_overrides` when the config has that field (a recipe
  field such as `recipe.kl_coef=0.001`).

  Raises:
    ValueError: naming the unknown field (and listing the valid ones) or the unparsable value.
  """
  for item in overrides:
    if "=" not in item:
      raise ValueError(f"--set expects key=value, got {item!r}")
    key, text = item.split("=", 1)
    cfg = _set(cfg, key.strip().split("."), text.strip(), key.strip())
  return cfg


def _set(cfg, path: list[str], text: str, full: str):
  fields = {f.name: f for f in dataclasses.fields(cfg)}
  head = path[0]
  if head == "recipe" and len(path) == 2 and "recipe_overrides" in fields:
    value = _parse_recipe_value(path[1], text)
    kept = tuple((k, v) for k, v in cfg.recipe_overrides if k != path[1])
    return dataclasses.replace(cfg, recipe_overrides=kept + ((path[1], value),))
  if head == "engine_options" and len(path) == 2 and "engine_options" in fields:
    value = _parse_option(text)
    kept = tuple((k, v) for k, v in cfg.engine_options if k != path[1])
    return dataclasses.replace(cfg, engine_options=kept + ((path[1], value),))
  if head not in fields:
    raise ValueError(f"--set {full}: unknown field {head!r} of {type(cfg).__name__}; valid: "
                     f"{', '.join(sorted(fields))}")
  hints = typing.get_type_hints(type(cfg))
  if len(path) == 1:
    return dataclasses.replace(cfg, **{head: _parse_value(text, hints[head], full)})
  sub = getattr(cfg, head)
  if not dataclasses.is_dataclass(sub):
    raise ValueError(f"--set {full}: {head!r} is not a nested config")
  return dataclasses.replace(cfg, **{head: _set(sub, path[1:], text, full)})


def _parse_option(text: str):
  """An engine option's value: JSON (numbers, true/false, null), else the text itself."""
  try:
    return json.loads(text)
  except json.JSONDecodeError:
    return text


def _parse_recipe_value(name: str, text: str):
  from botjax import algorithms  # local: config stays importable without jax
  fields = {f.name: f for f in dataclasses.fields(algorithms.Recipe)}
  if name not in fields:
    raise ValueError(f"--set recipe.{name}: unknown recipe field; valid: {', '.join(sorted(fields))}")
  hints = typing.get_type_hints(algorithms.Recipe)
  return _parse_value(text, hints[name], f"recipe.{name}")


# The truncated importance-sampling cap C (`Recipe.tis_cap`) a run gets when its rollout engine's
# log-probs are not the trainer's own (vLLM) and its recipe sets none: token-level truncation at
# C = 2, as verl's rollout correction (`algorithm.rollout_correction.rollout_is: token`,
# `rollout_is_threshold: 2.0`, docs/algo/rollout_corr.md) and TRL's GRPOConfig when it added the
# correction (`vllm_importance_sampling_correction=True`, `vllm_importance_sampling_cap=2.0`;
# later TRL releases default to a sequence-level mask at C = 3), both after Yao et al., "Your
# Efficient RL Framework Secretly Brings You Off-Policy RL Training" (2025),
# https://fengyao.notion.site/off-policy-rl.
ENGINE_TIS_CAP = 2.0

# Built-in engines whose `exact_logp` is False (their log-probs come from other kernels).
INEXACT_ENGINES = frozenset({"vllm"})


def recipe_for_run(cfg: TrainConfig, spec, *, exact_logp: bool | None = None):
  """The run's recipe: `cfg.recipe` adapted to the reward's spec, then `cfg.recipe_overrides`.

  A recipe name is looked up with `algorithms.get_recipe`; DAPO's overlong lengths and Dr.
  GRPO's L_norm then follow the run's generation budget (`Recipe.for_budget`) unless the
  overrides set them. A `Recipe` object is used as given (build it with `get_recipe(...,
  max_new_tokens=N)` for lengths that follow the budget). Then `algorithms.recipe_for_reward`
  (a weighted reward is read with w_global = w_local = 1) and the overrides.

  With a rollout engine whose log-probs are not the trainer's (`exact_logp` False: vLLM), a
  recipe without a `tis_cap` gets `ENGINE_TIS_CAP` (the truncated importance-sampling
  correction, `losses.tis_weights`); an explicit `recipe.tis_cap` override wins, `None` included
  (`--set recipe.tis_cap=none` trains without the correction). botjax's own engines leave it off.

  Args:
    cfg: the TrainConfig.
    spec: the reward's `botjax.rewards.RewardSpec` (or the reward function).
    exact_logp: the rollout engine's `exact_logp`; None: from the name `cfg.rollout.engine`
      (False for the names in `INEXACT_ENGINES`).

  Raises:
    ValueError: unknown recipe or field; the reward lacks a signal the recipe reads; or an
      override of w_global / w_local would weigh an already weighted reward twice.
  """
  from botjax import algorithms  # local: config stays importable without jax
  overrides = dict(cfg.recipe_overrides)
  if isinstance(cfg.recipe, algorithms.Recipe):
    fields = {f.name for f in dataclasses.fields(algorithms.Recipe)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
      raise ValueError(f"unknown Recipe field(s) {', '.join(unknown)} in recipe_overrides; "
                       f"valid: {', '.join(sorted(fields))}")
    base = cfg.recipe
  elif isinstance(cfg.recipe, str):
    algorithms.get_recipe(cfg.recipe, **overrides)         # unknown names fail here, by name
    base = algorithms.get_recipe(cfg.recipe, max_new_tokens=cfg.rollout.max_new_tokens)
  else:
    raise ValueError(f"TrainConfig.recipe must be a recipe name or an algorithms.Recipe, got "
                     f"{cfg.recipe!r}")
  recipe = algorithms.recipe_for_reward(base, spec)
  if exact_logp is None:
    exact_logp = cfg.rollout.engine not in INEXACT_ENGINES
  if not exact_logp and "tis_cap" not in overrides and recipe.tis_cap is None:
    recipe = dataclasses.replace(recipe, tis_cap=ENGINE_TIS_CAP)
  recipe = dataclasses.replace(recipe, **overrides)
  algorithms.check_reward_inputs(recipe, spec)
  return recipe
