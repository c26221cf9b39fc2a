"""Attention implementations: each against a NumPy loop, and all of them against each other.

The decoder has a `"cpu"` attention (XLA:CPU-tuned, hand-written backward, slots-last cache)
and `"xla"` / `"cudnn"` ones through `jax.nn.dot_product_attention` (cache [L, B, S, K, H]).
On CPU `"cpu"` and `"xla"` run; they must give the same logits and gradients for grouped
heads, left padding, sliding windows, NoPE layers and shared-prefix rows. `"cudnn"` runs only
on an NVIDIA GPU (its test is skipped elsewhere).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import botjax.models as bm
from botjax import xla_cpu
from botjax.models import attention, attention_cpu

BASE = bm.DecoderConfig(model_type="qwen2", vocab_size=64, hidden_size=32, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=48,
                        qkv_bias=True, rope_theta=1e4)
CONFIGS = {
    "gqa": BASE,
    "window": dataclasses.replace(BASE, sliding_window=3, sliding_layers=(1, 0)),
    "nope": dataclasses.replace(BASE, model_type="smollm3", qkv_bias=False, num_kv_heads=1,
                                no_rope_layers=(1, 0), tie_word_embeddings=True),
}


def _np_attention(q, k, v, allowed):
  """Loop over rows, heads and queries: softmax(q·k/√H + mask) v; no visible key -> uniform."""
  b, l, n, h = q.shape
  kh = k.shape[2]
  out = np.zeros((b, l, n, h), np.float64)
  for r in range(b):
    for head in range(n):
      j = head // (n // kh)
      for i in range(l):
        s = np.array([q[r, i, head] @ k[r, t, j] / np.sqrt(h) for t in range(k.shape[1])])
        s = np.where(allowed[r, i], s, -1e30)
        w = np.exp(s - s.max())
        out[r, i, head] = (w / w.sum()) @ v[r, :, j]
  return out


def _inputs(seed, b=2, l=5, s=7, n=4, kh=2, h=8):
  rng = np.random.RandomState(seed)
  q = rng.normal(size=(b, l, n, h)).astype(np.float32)
  k = rng.normal(size=(b, s, kh, h)).astype(np.float32)
  v = rng.normal(size=(b, s, kh, h)).astype(np.float32)
  allowed = rng.rand(b, l, s) < 0.6
  allowed[0, 0] = False                      # a query that sees nothing: uniform weights
  return q, k, v, allowed


@pytest.mark.parametrize("seed", [0, 1])
def test_each_attention_matches_a_numpy_loop(seed):
  q, k, v, allowed = _inputs(seed)
  want = _np_attention(q, k, v, allowed)
  got = attention.dot_product_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                     jnp.asarray(allowed), implementation="xla")
  np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)
  # the "cpu" path's kernel: head-major queries pre-scaled, grouped as [B, K, G·L, H]
  b, l, n, h = q.shape
  kh = k.shape[2]
  qh = (q.reshape(b, l, kh, n // kh, h).transpose(0, 2, 3, 1, 4).reshape(b, kh, -1, h)
        / np.sqrt(h))
  bias = np.where(allowed, 0.0, attention_cpu.MASK_VALUE).astype(np.float32)
  out = attention_cpu.attend(jnp.asarray(qh), jnp.asarray(k.transpose(0, 2, 1, 3)),
                      jnp.asarray(v.transpose(0, 2, 1, 3)), jnp.asarray(bias))
  out = np.asarray(out).reshape(b, kh, n // kh, l, h).transpose(0, 3, 1, 2, 4).reshape(q.shape)
  np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


def test_attention_kernels_have_the_same_gradient():
  q, k, v, allowed = (jnp.asarray(a) for a in _inputs(2))
  w = np.random.RandomState(9).normal(size=q.shape).astype(np.float32)
  # A query that sees no key has uniform weights whatever q is: its output carries no
  # gradient in the decoder (only padding positions have such rows), and the kernels
  # differentiate it differently (0 vs the gradient of softmax(q·k + bias)).
  w = jnp.asarray(np.where(np.asarray(allowed).any(-1)[..., None, None], w, 0.0))

  def xla(q, k, v):
    return jnp.sum(attention.dot_product_attention(q, k, v, allowed, implementation="xla") * w)

  def cpu(q, k, v):
    b, l, n, h = q.shape
    kh = k.shape[2]
    qh = q.reshape(b, l, kh, n // kh, h).transpose(0, 2, 3, 1, 4).reshape(b, kh, -1, h)
    bias = jnp.where(allowed, 0.0, attention_cpu.MASK_VALUE)
    out = attention_cpu.attend(qh * h ** -0.5, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3),
                               bias)
    out = out.reshape(b, kh, n // kh, l, h).transpose(0, 3, 1, 2, 4).reshape(q.shape)
    return jnp.sum(out * w)

  for a, b in zip(jax.jit(jax.grad(xla, argnums=(0, 1, 2)))(q, k, v),
                  jax.jit(jax.grad(cpu, argnums=(0, 1, 2)))(q, k, v)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def _models(cfg):
  """The same weights under each attention implementation that runs here."""
  out = {}
  for impl in ("cpu", "xla"):
    out[impl] = bm.Decoder(dataclasses.replace(cfg, attention=impl), rngs=nnx.Rngs(0))
  return out


def _batch(vocab, b=3, l=9, seed=0):
  rng = np.random.RandomState(seed)
  ids = rng.randint(3, vocab, (b, l)).astype(np.int32)
  mask = np.ones((b, l), bool)
  mask[1, :3] = False                        # left padding
  mask[2, :6] = False
  pos = np.maximum(np.cumsum(mask, 1) - 1, 0).astype(np.int32)
  return jnp.asarray(ids), jnp.asarray(pos), jnp.asarray(mask)


def _assert_same_grads(ga, gb):
  """Same gradients up to float32 summation order: 1e-3 of each tensor's largest entry."""
  for a, b in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * np.abs(b).max() + 1e-7)


def _loss_and_grads(model, ids, pos, mask):
  graphdef, state = nnx.split(model)
  w = jnp.asarray(np.random.RandomState(5).normal(size=ids.shape + (model.config.vocab_size,)),
                  jnp.float32)

  def loss(state):
    logits, _ = nnx.merge(graphdef, state)(ids, pos, attention_mask=mask)
    return jnp.sum(jnp.where(mask[..., None], logits * w, 0.0)), logits

  (value, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(state)
  return logits, grads


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_implementations_agree_forward_and_gradient(name):
  models = _models(CONFIGS[name])
  ids, pos, mask = _batch(CONFIGS[name].vocab_size)
  (la, ga), (lb, gb) = (_loss_and_grads(models[i], ids, pos, mask) for i in ("cpu", "xla"))
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(la)[m], np.asarray(lb)[m], rtol=1e-4, atol=1e-4)
  _assert_same_grads(ga, gb)


@pytest.mark.parametrize("name", ["window", "nope"])
def test_implementations_agree_on_shared_prefix_rows(name):
  cfg = CONFIGS[name]
  models = _models(cfg)
  rng = np.random.RandomState(1)
  p, l = 4, 5
  prefix_ids = jnp.asarray(rng.randint(3, cfg.vocab_size, (2, p)), jnp.int32)
  prefix_mask = jnp.asarray(np.array([[True] * p, [False, True, True, True]]))
  prefix_pos = jnp.maximum(jnp.cumsum(prefix_mask, 1) - 1, 0).astype(jnp.int32)
  rows = jnp.asarray([0, 0, 1], jnp.int32)
  ids = jnp.asarray(rng.randint(3, cfg.vocab_size, (3, l)), jnp.int32)
  mask = jnp.asarray(np.array([[True] * l, [True] * 3 + [False] * 2, [True] * l]))
  pos = prefix_pos[rows, -1:] + 1 + jnp.arange(l, dtype=jnp.int32)[None]

  def run(model):
    graphdef, state = nnx.split(model)

    def loss(state):
      hp, h = nnx.merge(graphdef, state).shared_prefix(prefix_ids, prefix_pos, prefix_mask,
                                                       rows, ids, pos, mask)
      return jnp.sum(jnp.where(mask[..., None], h, 0.0) ** 2) + jnp.sum(
          jnp.where(prefix_mask[..., None], hp, 0.0)), h

    return jax.jit(jax.value_and_grad(loss, has_aux=True))(state)

  (_, ha), ga = run(models["cpu"])
  (_, hb), gb = run(models["xla"])
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(ha)[m], np.asarray(hb)[m], rtol=1e-4, atol=1e-4)
  _assert_same_grads(ga, gb)
  # and the rows equal the plain forward over prefix + own tokens
  full_ids = jnp.concatenate([prefix_ids[rows], ids], 1)
  full_mask = jnp.concatenate([prefix_mask[rows], mask], 1)
  full_pos = jnp.concatenate([prefix_pos[rows], pos], 1)
  h_full, _ = jax.jit(lambda s: nnx.merge(*nnx.split(models["xla"])[:1], s)(
      full_ids, full_pos, attention_mask=full_mask, return_hidden=True))(
          nnx.state(models["xla"]))
  np.testing.assert_allclose(np.asarray(h_full)[:, p:][m], np.asarray(hb)[m], rtol=1e-4,
                             atol=1e-4)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_decode_agrees_across_implementations(name):
  """Prefill + 3 decode steps through each implementation's own cache layout."""
  cfg = CONFIGS[name]
  models = _models(cfg)
  ids, pos, mask = _batch(cfg.vocab_size, l=9)
  lp, steps = 6, 3
  outs = {}
  for impl, model in models.items():
    layout = attention.cache_layout(impl)
    graphdef, state = nnx.split(model)

    @jax.jit
    def run(state):
      m = nnx.merge(graphdef, state)
      cache = bm.KVCache.init(m.config, batch_size=3, max_len=lp + steps, layout=layout)
      logits, cache = m(ids[:, :lp], pos[:, :lp], attention_mask=mask[:, :lp], cache=cache,
                        cache_index=0)
      out = [logits]
      for t in range(steps):
        c = lp + t
        logits, cache = m(ids[:, c:c + 1], pos[:, c:c + 1], attention_mask=mask[:, c:c + 1],
                          cache=cache, cache_index=jnp.int32(c))
        out.append(logits)
      return jnp.concatenate(out, 1), cache

    logits, cache = run(state)
    assert cache.layout == layout
    assert cache.k.shape[cache.slot_axis] == lp + steps
    outs[impl] = np.asarray(logits)
  full, _ = jax.jit(lambda s: nnx.merge(nnx.graphdef(models["xla"]), s)(
      ids[:, :lp + steps], pos[:, :lp + steps], attention_mask=mask[:, :lp + steps]))(
          nnx.state(models["xla"]))
  m = np.asarray(mask[:, :lp + steps])
  np.testing.assert_allclose(outs["cpu"][m], outs["xla"][m], rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(outs["xla"][m], np.asarray(full)[m], rtol=1e-4, atol=1e-4)


def test_a_cache_of_the_other_layout_is_refused():
  model = bm.Decoder(dataclasses.replace(BASE, attention="xla"), rngs=nnx.Rngs(0))
  cache = bm.KVCache.init(model.config, batch_size=1, max_len=4, layout="BKHS")
  with pytest.raises(ValueError, match="attention 'xla' reads a KV cache of layout 'BSKH'"):
    model(jnp.ones((1, 2), jnp.int32), jnp.zeros((1, 2), jnp.int32), cache=cache,
          cache_index=0)


def test_auto_resolves_from_the_devices_and_the_switch(monkeypatch):
  monkeypatch.delenv(xla_cpu.ENV_VAR, raising=False)
  assert attention.attention_implementation("auto") == "cpu"
  assert attention.attention_implementation("xla") == "xla"
  tpu = jax.sharding.AbstractMesh((8,), ("fsdp",), abstract_device=jax._src.mesh.AbstractDevice(
      device_kind="TPU v5 lite", num_cores=None, platform="tpu"))
  assert xla_cpu.platform_of(tpu) == "tpu"
  assert attention.attention_implementation("auto", tpu) == "xla"
  mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(jax.sharding.AxisType.Auto,))
  assert attention.attention_implementation("auto", mesh) == "cpu"
  params = nnx.state(bm.Decoder(BASE, rngs=nnx.Rngs(0)))
  assert xla_cpu.platform_of(params) == "cpu"
  monkeypatch.setenv(xla_cpu.ENV_VAR, "0")
  assert attention.attention_implementation("auto") == "xla"
  with pytest.raises(ValueError, match="attention implementation 'flash'.*'cudnn'"):
    attention.attention_implementation("flash")
  with pytest.raises(ValueError, match="attention 'flash' is not supported"):
    dataclasses.replace(BASE, attention="flash")


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN attention needs an NVIDIA GPU")
def test_cudnn_matches_xla_on_gpu():
  q, k, v, allowed = (jnp.asarray(a) for a in _inputs(3, l=128, s=128, h=64))
  allowed = allowed | jnp.eye(128, dtype=bool)[None]
  allowed = allowed & jnp.tril(jnp.ones((128, 128), bool))[None]
  q, k, v = (x.astype(jnp.bfloat16) for x in (q, k, v))
  a = attention.dot_product_attention(q, k, v, allowed, implementation="cudnn", causal=True)
  b = attention.dot_product_attention(q, k, v, allowed, implementation="xla")
  np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=2e-2)
