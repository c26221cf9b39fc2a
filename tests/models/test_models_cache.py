"""The KV cache and its interface (botjax.models.cache): slot writes in either layout against
NumPy, the layouts' shapes and names, and each attention implementation reading a cache view
against a NumPy loop over the same keys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import botjax.models as bm
from botjax.models import attention, cache as cache_lib

CFG = bm.DecoderConfig(model_type="qwen2", vocab_size=32, hidden_size=16, num_layers=3,
                       num_heads=4, num_kv_heads=2, head_dim=4, intermediate_size=24)


@pytest.mark.parametrize("layout,kv_layout", [("BSKH", "BSKH"), ("BKHS", "BKSH"),
                                              ("BKHS", "BKHS"), ("BSKH", "BKSH")])
@pytest.mark.parametrize("jit", [False, True])
def test_write_slots_matches_numpy(layout, kv_layout, jit):
  rng = np.random.default_rng(0)
  b, s, kh, h, l, layer, index = 2, 7, 2, 3, 3, 1, 4
  sizes = {"B": b, "S": s, "K": kh, "H": h}
  k_all = rng.normal(size=(3,) + tuple(sizes[a] for a in layout)).astype(np.float32)
  v_all = rng.normal(size=k_all.shape).astype(np.float32)
  new = {**sizes, "S": l}
  k = rng.normal(size=tuple(new[a] for a in kv_layout)).astype(np.float32)
  v = rng.normal(size=k.shape).astype(np.float32)

  def write(k_all, v_all, k, v, index):
    return cache_lib.write_slots(k_all, v_all, layer, index, k, v, layout, kv_layout)

  fn = jax.jit(write) if jit else write
  got_k, got_v = fn(k_all, v_all, k, v, jnp.int32(index))
  for got, old, x in ((got_k, k_all, k), (got_v, v_all, v)):
    want = old.copy()
    # x as [B, S, K, H], then into the cache's axis order at slots index .. index + l - 1
    x_bskh = np.transpose(x, [kv_layout.index(a) for a in "BSKH"])
    view = np.moveaxis(want[layer], [layout.index(a) for a in "BSKH"], range(4))
    view[:, index:index + l] = x_bskh
    np.testing.assert_array_equal(np.asarray(got), want)


def test_layouts_shapes_and_names():
  for layout, shape, slot_axis in (("BSKH", (3, 2, 9, 2, 4), 2), ("BKHS", (3, 2, 2, 4, 9), 4)):
    c = bm.KVCache.init(CFG, batch_size=2, max_len=9, layout=layout)
    assert c.k.shape == c.v.shape == shape and c.slot_axis == slot_axis and c.max_len == 9
    assert c.valid.shape == (2, 9) and not c.valid.any()
    assert c.logical_axes[c.slot_axis] == "cache_length" and c.logical_axes[0] == "layers"
  with pytest.raises(ValueError, match=r"cache layout 'BHKS' is not supported; valid: "
                                       r"\('BSKH', 'BKHS'\)"):
    bm.KVCache.init(CFG, batch_size=2, max_len=9, layout="BHKS")
  c = bm.KVCache.init(CFG, batch_size=2, max_len=4)
  with pytest.raises(ValueError, match="3 rows of 2 new tokens do not fit a cache of 2 rows"):
    c.begin(jnp.ones((3, 2), bool), 0, kv_layout="BSKH")
  with pytest.raises(ValueError, match="a cached forward needs cache_index"):
    c.begin(jnp.ones((2, 2), bool), None, kv_layout="BSKH")


def _np_attention(q, keys, vals, allowed):
  """q [B, L, N, H], keys/vals [B, S, K, H], allowed [B, L, S]: a loop over rows and heads."""
  b, l, n, h = q.shape
  g = n // keys.shape[2]
  out = np.zeros(q.shape, np.float64)
  for r in range(b):
    for head in range(n):
      for i in range(l):
        s = keys[r, :, head // g] @ q[r, i, head] / np.sqrt(h)
        s = np.where(allowed[r, i], s, -np.inf)
        w = np.exp(s - s.max())
        out[r, i, head] = (w / w.sum()) @ vals[r, :, head // g]
  return out


@pytest.mark.parametrize("impl", ["cpu", "xla"])
def test_each_attention_reads_a_cache_view(impl):
  """Two new tokens at slot 5 of 8 attend over the valid earlier slots and each other."""
  fn = attention.ATTENTION_FNS[impl]
  rng = np.random.default_rng(1)
  b, s, n, kh, h, l, index, layer = 2, 8, 4, 2, 4, 2, 5, 1
  past_k = rng.normal(size=(b, s, kh, h)).astype(np.float32)     # [B, S, K, H]
  past_v = rng.normal(size=(b, s, kh, h)).astype(np.float32)
  q = rng.normal(size=(b, l, n, h)).astype(np.float32)
  k = rng.normal(size=(b, l, kh, h)).astype(np.float32)
  v = rng.normal(size=(b, l, kh, h)).astype(np.float32)
  valid = np.ones((b, s), bool)
  valid[1, :2] = False                                            # row 1: left padding
  earlier = np.broadcast_to((valid & (np.arange(s) < index))[:, None], (b, l, s))
  own = np.tril(np.ones((l, l), bool))[None].repeat(b, 0)

  def cache_of(x):   # [B, S, K, H] of one layer -> [layers, *layout]
    stacked = np.stack([np.zeros_like(x), x, np.zeros_like(x)])
    return jnp.asarray(np.transpose(stacked, [0] + [1 + "BSKH".index(a)
                                                    for a in fn.cache_layout]))

  @jax.jit
  def run(q, k, v):
    view = cache_lib.CachedLayer(cache_of(past_k), cache_of(past_v), layer, jnp.int32(index),
                                 jnp.asarray(earlier), fn.cache_layout)
    return fn.attend(q, k, v, jnp.asarray(own), view, None)

  out, (k_all, v_all) = run(q, k, v)
  keys, vals = past_k.copy(), past_v.copy()
  keys[:, index:index + l], vals[:, index:index + l] = k, v
  seen = earlier.copy()
  seen[:, :, index:index + l] = own
  want = _np_attention(q, keys, vals, seen).reshape(b, l, n * h)
  np.testing.assert_allclose(np.asarray(out), want, rtol=2e-5, atol=2e-5)
  np.testing.assert_array_equal(np.asarray(k_all), np.asarray(cache_of(keys)))
  np.testing.assert_array_equal(np.asarray(v_all), np.asarray(cache_of(vals)))
