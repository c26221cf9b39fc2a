"""The vLLM rollout engine against botjax's own, on a tiny random Qwen2 checkpoint built with
`transformers` and loaded by both: the interface contract, weight syncs through vLLM's RL
weight-transfer API (colocated and over HTTP from a real `vllm serve` on loopback), the probe
check that turns a stale engine into an error, and the mismatch metrics and the TIS
correction on vLLM's rollouts.

Needs vLLM (scripts/setup_vllm.sh builds its environment; .ci/run runs these there); skipped
with the reason elsewhere. Each vLLM start takes about a minute on the 2-core test machine, so
the engines are module fixtures.
"""

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import botjax.models as bm
from botjax import algorithms, losses, metrics
from botjax.sampling import FINISH_LENGTH, FINISH_STOP, SamplingConfig, make_engine
from botjax.sampling import sample_logprobs
from botjax.train import step as step_lib

from _util import ROOT

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed here: scripts/setup_vllm.sh "
                       "creates its environment, and .ci/run runs these tests in it"),
    pytest.mark.xdist_group("vllm"),
]

EOS, STOP = 2, 3
PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16, 17]]
KV = 64 << 20          # colocated KV cache on CPU: 64 MiB
MAX_LEN = 160


def write_checkpoint(path, *, tie: bool, seed: int, std: float = 0.15):
  """A random Qwen2 (head_dim 32, as vLLM's CPU attention needs) saved with safetensors."""
  import torch
  from transformers import Qwen2Config, Qwen2ForCausalLM
  cfg = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                    max_position_embeddings=512, tie_word_embeddings=tie, bos_token_id=1,
                    eos_token_id=EOS, pad_token_id=0, rope_theta=10000.0)
  torch.manual_seed(seed)
  model = Qwen2ForCausalLM(cfg)
  with torch.no_grad():
    for p in model.parameters():
      p.normal_(0.0, std)
  model.save_pretrained(path, safe_serialization=True)
  return str(path)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  return write_checkpoint(tmp_path_factory.mktemp("qwen2") / "ckpt", tie=False, seed=0)


@pytest.fixture(scope="module")
def model(ckpt):
  return bm.load_pretrained(ckpt)


GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=12, eos_token_ids=(EOS,),
                        stop_token_ids=(STOP,))
SAMPLED = SamplingConfig(temperature=1.0, max_new_tokens=20, eos_token_ids=(EOS,))


@pytest.fixture(scope="module")
def engine(model):
  eng = make_engine("vllm", model, GREEDY, kv_cache_bytes=KV, max_model_len=MAX_LEN)
  yield eng
  eng.close()


def arrays(out):
  return {f: np.asarray(getattr(out, f)) for f in ("prompt_ids", "prompt_mask", "tokens", "mask",
                                                    "logp", "lengths", "finish_reason",
                                                    "group_ids")}


def check_contract(out, cfg, prompts, n, stops):
  """SampleOutput's conventions, whichever engine produced it."""
  a = arrays(out)
  b = len(prompts) * n
  assert a["tokens"].shape[0] == b and out.num_groups == len(prompts)
  np.testing.assert_array_equal(a["group_ids"], np.arange(b) // n)
  np.testing.assert_array_equal(a["lengths"], a["mask"].sum(-1))
  assert np.all(a["mask"] == (np.arange(a["tokens"].shape[1])[None] < a["lengths"][:, None]))
  assert np.all(a["tokens"][~a["mask"]] == cfg.pad_token_id)
  assert np.all(a["logp"][~a["mask"]] == 0.0) and np.all(a["logp"][a["mask"]] <= 0.0)
  for r in range(b):
    p = r // n
    k = a["lengths"][r]
    row = a["tokens"][r, :k].tolist()
    stop_set = set(cfg.all_stop_ids) | set(stops[p])
    assert not stop_set & set(row[:-1])               # nothing past the first stop token
    if a["finish_reason"][r] == FINISH_STOP:
      assert row[-1] in stop_set                      # the stop token is kept
    else:
      assert a["finish_reason"][r] == FINISH_LENGTH and k == cfg.max_new_tokens
    plen = len(prompts[p])
    assert a["prompt_ids"][r, -plen:].tolist() == prompts[p] and a["prompt_mask"][r].sum() == plen


def test_greedy_contract_equals_botjax_engine(model, engine):
  jx = make_engine("jax", model, GREEDY)
  plain = jx.generate(PROMPTS, jax.random.key(0), n=2)
  # an extra stop id per prompt that its greedy completion reaches: both finish reasons occur
  first = np.asarray(plain.tokens)[0][:min(4, int(plain.lengths[0]))]
  stops = [[int(first[-1])], [], [int(first[-1])]]
  ours = jx.generate(PROMPTS, jax.random.key(0), n=2, stop_token_ids=stops)
  theirs = engine.generate(PROMPTS, jax.random.key(0), n=2, stop_token_ids=stops)
  check_contract(ours, GREEDY, PROMPTS, 2, stops)
  check_contract(theirs, GREEDY, PROMPTS, 2, stops)
  a, b = arrays(ours), arrays(theirs)
  for f in ("prompt_ids", "prompt_mask", "tokens", "mask", "lengths", "finish_reason"):
    np.testing.assert_array_equal(b[f], a[f], err_msg=f)
  assert {FINISH_STOP, FINISH_LENGTH} <= set(a["finish_reason"].tolist())
  np.testing.assert_allclose(b["logp"], a["logp"], atol=1e-4)
  assert engine.exact_logp is False and jx.exact_logp is True


def test_sampled_contract_seeds_and_logprobs_match_the_trainer(model, engine):
  engine.config = SAMPLED
  try:
    out = engine.generate(PROMPTS, jax.random.key(7), n=4, stop_token_ids=[[4], [], []])
    again = engine.generate(PROMPTS, jax.random.key(7), n=4, stop_token_ids=[[4], [], []])
    other = engine.generate(PROMPTS, jax.random.key(8), n=4, stop_token_ids=[[4], [], []])
  finally:
    engine.config = GREEDY
  check_contract(out, SAMPLED, PROMPTS, 4, [[4], [], []])
  jx = make_engine("jax", model, SAMPLED).generate(PROMPTS, jax.random.key(7), n=4)
  assert np.asarray(out.tokens).shape == np.asarray(jx.tokens).shape        # same buckets
  np.testing.assert_array_equal(np.asarray(again.tokens), np.asarray(out.tokens))   # same key
  assert not np.array_equal(np.asarray(other.tokens), np.asarray(out.tokens))
  # vLLM's log-probs of its sampled tokens are the trainer's (float32, same weights)
  train, _ = sample_logprobs(model, out, temperature=SAMPLED.logp_temperature)
  m = metrics.logp_mismatch(train, out.logp, out.mask)
  assert float(m["max_abs_diff"]) < 1e-4 and float(m["outside_frac"]) == 0.0
  assert float(m["tokens"]) == float(np.asarray(out.mask).sum()) > 20


def one_update(model, out, lr):
  """A real RL update on vLLM's rollouts: old log-probs recomputed by the trainer, vLLM's as the
  behaviour log-probs, GRPO-style advantages of a made-up reward (the share of even token ids),
  one Adam step (every parameter moves by about lr)."""
  tf = out.teacher_forcing()
  graphdef, params, rest = step_lib.split_model(model)
  t = out.tokens.shape[1]
  old, _ = step_lib.split_logprobs(graphdef, params, rest, tf.input_ids, tf.positions,
                                        tf.attention_mask, completion_len=t)
  mask = out.mask
  even = jnp.where(mask, out.tokens % 2 == 0, False).sum(-1)
  reward = even / jnp.maximum(out.lengths, 1)
  assert float(jnp.std(reward)) > 0.0
  adv = jnp.where(mask, (reward - reward.mean())[:, None], 0.0)
  batch = step_lib.RLBatch(input_ids=tf.input_ids, positions=tf.positions,
                           attention_mask=tf.attention_mask, old_logp=jnp.where(mask, old, 0.0),
                           ref_logp=jnp.zeros_like(old), advantages=adv, loss_mask=mask,
                           seq_weights=jnp.ones((mask.shape[0],)), behaviour_logp=out.logp)
  recipe = algorithms.get_recipe("dapo", tis_cap=2.0)
  opt = optax.adam(lr)
  res = step_lib.make_update_fn(graphdef, rest, recipe, opt, donate=False)(
      step_lib.init_state(params, opt, 0), batch)
  return res.state.params, res.metrics, batch


def test_sync_after_an_update_changes_output_and_matches_the_trainer(model, engine):
  before = engine.generate(PROMPTS, jax.random.key(0), n=1)        # prompts now in the cache
  engine.config = SAMPLED
  try:
    rollouts = engine.generate(PROMPTS, jax.random.key(1), n=4)
  finally:
    engine.config = GREEDY
  new_params, step_metrics, _ = one_update(model, rollouts, lr=0.05)
  assert float(step_metrics["tis_weight"]) == pytest.approx(1.0, abs=1e-3)   # f32: no gap
  report = engine.set_params(new_params)
  n_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  assert report.bytes >= 4 * n_params and report.seconds > 0.0
  assert report.probe_mean_abs_diff <= report.probe_max_abs_diff < 1e-5
  assert set(report.metrics()) == {"sync_seconds", "sync_transfer_seconds", "probe_mean_abs_diff"}
  after = engine.generate(PROMPTS, jax.random.key(0), n=1)
  assert not np.array_equal(np.asarray(after.tokens), np.asarray(before.tokens))
  # the same prompts again (prefix cache reset): log-probs are the updated trainer's
  graphdef, _, rest = step_lib.split_model(model)
  updated = nnx.merge(graphdef, new_params, rest)
  train, _ = sample_logprobs(updated, after, temperature=1.0)
  np.testing.assert_allclose(np.asarray(after.logp), np.asarray(train), atol=1e-4)
  jx = make_engine("jax", updated, GREEDY).generate(PROMPTS, jax.random.key(0), n=1)
  np.testing.assert_array_equal(np.asarray(after.tokens), np.asarray(jx.tokens))
  # back to the original weights for the other tests
  engine.set_params(nnx.state(model, nnx.Param))
  np.testing.assert_array_equal(
      np.asarray(engine.generate(PROMPTS, jax.random.key(0), n=1).tokens),
      np.asarray(before.tokens))


def test_a_stale_engine_raises(model, engine):
  from botjax.sampling.vllm import StaleEngineError
  state = nnx.state(model, nnx.Param)
  moved = jax.tree.map(lambda x: x + 0.02 * jax.random.normal(jax.random.key(3), x.shape), state)
  # the trainer moved on, vLLM still holds the weights of the last sync
  with pytest.raises(StaleEngineError, match=r"differ from the trainer's by [0-9.e-]+ on average "
                                             r".*above the tolerance 0.0001 for float32"):
    engine.check_weights(moved)
  with pytest.raises(StaleEngineError, match="weight version"):
    engine.check_weights(version="botjax-elsewhere-1")
  assert engine.check_weights() <= engine.probe_atol        # the synced weights pass


def test_the_trainer_model_is_not_changed_by_syncs(model, engine):
  before = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
  state = nnx.state(model, nnx.Param)
  engine.set_params(jax.tree.map(lambda x: x * 1.01, state))
  engine.set_params(state)
  jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, nnx.state(model, nnx.Param)),
               before)


# --- bfloat16: the probe tolerance and the correction on a real gap ----------------------------


@pytest.fixture(scope="module")
def bf16(tmp_path_factory):
  path = write_checkpoint(tmp_path_factory.mktemp("qwen2-tied") / "ckpt", tie=True, seed=1)
  m = bm.load_pretrained(path)
  eng = make_engine("vllm", m, SAMPLED, dtype="bfloat16", kv_cache_bytes=KV,
                    max_model_len=MAX_LEN)
  yield m, eng
  eng.close()


def test_bfloat16_engine_gap_metrics_and_correction(bf16, tmp_path):
  from botjax.sampling.vllm import PROBE_ATOL, StaleEngineError
  m, eng = bf16
  gap = eng.probe_gap()
  assert 1e-6 < gap.mean() <= PROBE_ATOL["bfloat16"]          # a real gap, within tolerance
  out = eng.generate(PROMPTS, jax.random.key(2), n=8)
  train, _ = sample_logprobs(m, out, temperature=1.0)
  mm = {k: float(v) for k, v in metrics.logp_mismatch(train, out.logp, out.mask).items()}
  assert 1e-6 < mm["mean_abs_diff"] <= mm["max_abs_diff"] < 0.1 and mm["outside_frac"] == 0.0
  w = np.asarray(losses.tis_weights(train, out.logp, out.mask, cap=2.0))
  mask = np.asarray(out.mask)
  assert np.all(w[mask] > 0.0) and np.all(w[mask] <= 2.0) and np.any(w[mask] != 1.0)
  _, step_metrics, _ = one_update(m, out, lr=0.01)
  np.testing.assert_allclose(float(step_metrics["tis_weight"]), w[mask].mean(), rtol=1e-5)
  # a misloaded engine (the weights of another model) is caught at bfloat16's tolerance
  other = bm.load_pretrained(write_checkpoint(tmp_path / "other", tie=True, seed=9))
  with pytest.raises(StaleEngineError, match="for bfloat16"):
    eng.check_weights(nnx.state(other, nnx.Param))


# --- server mode: a real `vllm serve` on loopback --------------------------------------------


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(ckpt, tmp_path_factory):
  from botjax.sampling.vllm import vllm_serve_args
  port = free_port()
  args = vllm_serve_args(ckpt, port=port, max_model_len=MAX_LEN, python=sys.executable,
                         extra=["--kv-cache-memory-bytes", str(KV), "--enforce-eager",
                                "--skip-tokenizer-init"])
  env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_LOGGING_LEVEL": "WARNING",
         "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  log_path = tmp_path_factory.mktemp("serve") / "serve.log"
  with open(log_path, "w") as log:
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
  url = f"http://127.0.0.1:{port}"
  try:
    deadline = time.monotonic() + 600
    while True:
      try:
        with urllib.request.urlopen(url + "/health", timeout=5):
          break
      except OSError:
        if proc.poll() is not None or time.monotonic() > deadline:
          raise RuntimeError(f"vllm serve did not start:\n{open(log_path).read()[-4000:]}")
        time.sleep(2)
    yield url
  finally:
    proc.terminate()
    try:
      proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()


@pytest.mark.parametrize("transport", ["shm", "inline"])
def test_server_mode_contract_sync_and_stale_check(model, engine, server, transport):
  from botjax.sampling.vllm import StaleEngineError
  remote = make_engine("vllm", model, GREEDY, url=server, transport=transport)
  try:
    assert remote.mode == "server" and remote._vllm.transport == transport
    stops = [[4], [], [4]]
    a = remote.generate(PROMPTS, jax.random.key(0), n=2, stop_token_ids=stops)
    check_contract(a, GREEDY, PROMPTS, 2, stops)
    b = engine.generate(PROMPTS, jax.random.key(0), n=2, stop_token_ids=stops)
    for f in ("tokens", "mask", "lengths", "finish_reason"):
      np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)))
    np.testing.assert_allclose(np.asarray(a.logp), np.asarray(b.logp), atol=1e-5)
    state = nnx.state(model, nnx.Param)
    moved = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.key(4), x.shape),
                         state)
    report = remote.set_params(moved)
    assert report.probe_mean_abs_diff <= report.probe_atol
    assert not np.array_equal(np.asarray(remote.generate(PROMPTS, jax.random.key(0)).tokens),
                              np.asarray(engine.generate(PROMPTS, jax.random.key(0)).tokens))
    with pytest.raises(StaleEngineError, match="above the tolerance"):
      remote.check_weights(state)
    remote.set_params(state)
  finally:
    remote.close()

