"""`Decoder(scan_layers=True)`: the layers stacked and scanned give the unrolled decoder's results.

The same `rngs` build the same weights either way (the scanned decoder stacks the blocks it
builds one by one), so each test compares the two on identical parameters: logits and gradients
of the plain forward (remat on and off), the cached prefill and decode steps, `shared_prefix`,
for a Qwen2 config with sliding-window layers and a SmolLM3-like one with NoPE layers; and a
scanned `load_pretrained` against `transformers`, round-tripping through `save_pretrained`.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P
from safetensors.numpy import load_file

import botjax.models as bm
from botjax.models import sharding as sh
from conftest import hf_logits, left_padded_batch

TINY = dataclasses.replace(bm.get_config("tiny"), num_layers=3)
CONFIGS = {
    # Qwen2 use_sliding_window: layers 0 and 2 windowed (3 tokens), layer 1 full attention
    "qwen2_window": dataclasses.replace(TINY, sliding_window=3, sliding_layers=(1, 0, 1)),
    # SmolLM3-like: layer 2 NoPE, tied embeddings
    "smollm3_nope": dataclasses.replace(TINY, model_type="smollm3", no_rope_layers=(1, 1, 0)),
}
ATOL = 1e-5


def _pair(cfg, **kw):
  """(unrolled, scanned) decoders of `cfg` with the same weights."""
  return (bm.Decoder(cfg, rngs=nnx.Rngs(0), **kw),
          bm.Decoder(cfg, rngs=nnx.Rngs(0), scan_layers=True, **kw))


def _flat(state, num_layers: int) -> dict[str, np.ndarray]:
  """Parameters by per-layer path, a scanned state's stacked ones split into their layers."""
  out = {}
  for path, var in nnx.to_flat_state(state):
    name, value = ".".join(map(str, path)), np.asarray(var.get_value())
    if name.startswith("layers.") and not name.split(".")[1].isdigit():
      for i in range(num_layers):
        out[f"layers.{i}.{name[len('layers.'):]}"] = value[i]
    else:
      out[name] = value
  return out


def _assert_same_params(a, b, num_layers, atol=0.0, rtol=0.0):
  fa, fb = _flat(a, num_layers), _flat(b, num_layers)
  assert sorted(fa) == sorted(fb)
  for k in fa:
    scale = max(float(np.abs(fa[k]).max()), 1.0)
    np.testing.assert_allclose(fb[k], fa[k], atol=atol * scale, rtol=rtol, err_msg=k)


def test_scanned_parameters_are_the_stacked_layers():
  cfg = CONFIGS["smollm3_nope"]
  unrolled, scanned = _pair(cfg)
  q = scanned.layers.attn.q_kernel
  assert q.shape == (3, cfg.hidden_size, cfg.num_heads, cfg.head_dim)
  assert q.get_metadata()["logical_axes"] == ("layers", "embed", "q_heads", "head_dim")
  assert scanned.layers.use_rope   # layers 0, 1 rotate; layer 2 is told not to at call time
  _assert_same_params(nnx.state(unrolled), nnx.state(scanned), cfg.num_layers)


@pytest.mark.parametrize("remat", [False, True])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_forward_and_gradients_equal_unrolled(name, remat):
  cfg = CONFIGS[name]
  ids, mask, pos = map(jnp.asarray, left_padded_batch(3, 10, cfg.vocab_size, seed=1))
  w = jax.random.normal(jax.random.key(2), (3, 10, cfg.vocab_size))
  results = []
  for model in _pair(cfg, remat=remat):
    graphdef, state = nnx.split(model)

    @jax.jit
    def loss(state):
      logits = nnx.merge(graphdef, state)(ids, pos, attention_mask=mask)[0]
      return jnp.sum(jnp.where(mask[..., None], w * logits, 0.0)), logits

    (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(state)
    results.append((np.asarray(logits), grads))
  (la, ga), (lb, gb) = results
  m = np.asarray(mask)
  assert np.abs(la[m]).max() > 0.1
  np.testing.assert_allclose(lb[m], la[m], atol=ATOL)
  _assert_same_params(ga, gb, cfg.num_layers, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attention", ["cpu", "xla"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_prefill_and_decode_equal_unrolled(name, attention):
  """A static-0 prefill, then decode steps at traced slots, through either cache layout."""
  cfg = dataclasses.replace(CONFIGS[name], attention=attention)
  ids, mask, pos = map(jnp.asarray, left_padded_batch(3, 10, cfg.vocab_size, seed=3))

  def run(model):
    graphdef, state = nnx.split(model)
    cache = bm.KVCache.init(cfg, batch_size=3, max_len=12)
    logits, cache = model(ids[:, :6], pos[:, :6], attention_mask=mask[:, :6], cache=cache,
                          cache_index=0)
    step = jax.jit(lambda state, i, p, m, c, t: nnx.merge(graphdef, state)(
        i, p, attention_mask=m, cache=c, cache_index=t))
    steps = [logits]
    for t in range(6, 10):
      out, cache = step(state, ids[:, t:t + 1], pos[:, t:t + 1], mask[:, t:t + 1], cache,
                        jnp.int32(t))
      steps.append(out)
    return np.asarray(jnp.concatenate(steps, axis=1)), cache

  (la, ca), (lb, cb) = map(run, _pair(cfg))
  m = np.asarray(mask)
  np.testing.assert_allclose(lb[m], la[m], atol=ATOL)
  assert ca.layout == cb.layout and cb.k.shape == ca.k.shape
  np.testing.assert_allclose(np.asarray(cb.k), np.asarray(ca.k), atol=ATOL)
  np.testing.assert_allclose(np.asarray(cb.v), np.asarray(ca.v), atol=ATOL)
  np.testing.assert_array_equal(np.asarray(cb.valid), np.asarray(ca.valid))


@pytest.mark.parametrize("remat", [False, True])
def test_shared_prefix_equals_unrolled(remat):
  """Windowed NoPE layer 0, windowed RoPE layer 2: prefix and row hidden states, gradients."""
  cfg = dataclasses.replace(CONFIGS["qwen2_window"], no_rope_layers=(0, 1, 1))
  rng = np.random.RandomState(5)
  p_ids = jnp.asarray(rng.randint(3, cfg.vocab_size, (2, 6)), jnp.int32)
  p_mask = jnp.asarray(np.arange(6)[None, :] >= np.array([0, 2])[:, None])
  p_pos = jnp.maximum(jnp.cumsum(p_mask, axis=1) - 1, 0).astype(jnp.int32)
  rows = jnp.asarray([1, 0, 1], jnp.int32)
  ids = jnp.asarray(rng.randint(3, cfg.vocab_size, (3, 4)), jnp.int32)
  mask = jnp.asarray(np.arange(4)[None, :] < np.array([4, 2, 3])[:, None])
  pos = (p_mask.sum(1)[rows][:, None] + jnp.arange(4)[None, :]).astype(jnp.int32)
  results = []
  for model in _pair(cfg, remat=remat):
    graphdef, state = nnx.split(model)

    def loss(state):
      ph, h = nnx.merge(graphdef, state).shared_prefix(p_ids, p_pos, p_mask, rows, ids, pos,
                                                       mask)
      total = (jnp.sum(jnp.where(p_mask[..., None], ph, 0.0) ** 2)
               + jnp.sum(jnp.where(mask[..., None], h, 0.0) ** 2))
      return total, (ph, h)

    (_, (ph, h)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(state)
    results.append((np.asarray(ph), np.asarray(h), grads))
  (pa, ha, ga), (pb, hb, gb) = results
  np.testing.assert_allclose(pb[np.asarray(p_mask)], pa[np.asarray(p_mask)], atol=ATOL)
  np.testing.assert_allclose(hb[np.asarray(mask)], ha[np.asarray(mask)], atol=ATOL)
  _assert_same_params(ga, gb, cfg.num_layers, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", ["qwen2_sliding_window", "smollm3_nope"])
def test_load_pretrained_scanned_matches_transformers_and_round_trips(family, hf_checkpoint,
                                                                      tmp_path):
  path, hf = hf_checkpoint(family)
  model = bm.load_pretrained(path, scan_layers=True)
  assert model.scan_layers and model.layers.attn.q_kernel.shape[0] == hf.config.num_hidden_layers
  ids, mask, pos = left_padded_batch(3, 12, hf.config.vocab_size, seed=1)
  ref = hf_logits(hf, ids, mask, pos)
  out, _ = model(jnp.asarray(ids), jnp.asarray(pos), attention_mask=jnp.asarray(mask))
  assert np.abs(np.asarray(out) - ref)[mask].max() <= 1e-4
  _assert_same_params(nnx.state(bm.load_pretrained(path)), nnx.state(model),
                      hf.config.num_hidden_layers)
  bm.save_pretrained(model, str(tmp_path))
  want, got = load_file(f"{path}/model.safetensors"), load_file(f"{tmp_path}/model.safetensors")
  assert sorted(got) == sorted(want)
  for name in want:
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_scanned_parameters_shard_on_the_mesh(hf_checkpoint):
  """The stacked axis stays whole; fsdp and tensor shard the rest as for one layer."""
  path, hf = hf_checkpoint("qwen2_bias_untied")
  mesh = sh.make_mesh("fsdp:4,tensor:2")
  model = bm.load_pretrained(path, mesh=mesh, scan_layers=True)
  q = model.layers.attn.q_kernel[...]
  assert q.sharding.spec == P(None, "fsdp", "tensor", None)
  assert q.addressable_shards[0].data.shape == (2, 64 // 4, 4 // 2, 16)
  single = bm.load_pretrained(path)
  np.testing.assert_array_equal(np.asarray(q[1]), np.asarray(single.layers[1].attn.q_kernel[...]))
  # shard_model places a randomly built scanned model the same way
  built = sh.shard_model(bm.Decoder(model.config, rngs=nnx.Rngs(0), scan_layers=True), mesh)
  assert built.layers.mlp.down[...].sharding.spec == P(None, "tensor", "fsdp")
  ids, mask, pos = left_padded_batch(8, 6, hf.config.vocab_size, seed=0)
  with jax.set_mesh(mesh):
    out = nnx.jit(lambda m, i, p, k: m(i, p, attention_mask=k)[0])(
        model, *(jax.device_put(jnp.asarray(a), sh.batch_sharding(mesh))
                 for a in (ids, pos, mask)))
  np.testing.assert_allclose(np.asarray(out)[mask], hf_logits(hf, ids, mask, pos)[mask],
                             atol=1e-4)
