"""The parts of the vLLM engine that run without vLLM: the registry entry and its lazy import,
botjax parameters as Hugging Face tensors, the packing of a weight update, the transport choice
and the errors a user meets first."""

import importlib.util
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from flax import nnx

import botjax.models as bm
from botjax.sampling import ENGINES, SamplingConfig, make_engine
from botjax.sampling import vllm as vllm_engine

from _util import ROOT

pytestmark = pytest.mark.vllm       # also run by .ci/run in the vLLM environment

SC = SamplingConfig(temperature=0.0, max_new_tokens=8, eos_token_ids=(2,))


def tiny(tie=False, head_dim=32):
  import dataclasses
  cfg = dataclasses.replace(bm.get_config("tiny"), vocab_size=96, hidden_size=64, num_heads=2,
                            num_kv_heads=1, head_dim=head_dim, num_layers=2,
                            intermediate_size=96, tie_word_embeddings=tie)
  return bm.Decoder(cfg, rngs=nnx.Rngs(0))


def test_vllm_is_registered_and_importing_botjax_imports_no_vllm():
  assert "vllm" in ENGINES
  code = ("import sys, botjax.sampling, botjax.sampling.vllm, botjax.train; "
          "print('vllm' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "False"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                    reason="vLLM is installed here: the colocated engine starts")
def test_colocated_engine_without_vllm_says_how_to_get_it():
  with pytest.raises(ImportError, match="scripts/setup_vllm.sh"):
    make_engine("vllm", tiny(), SC)


def test_a_missing_server_is_named():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]          # nothing listens there once the socket closes
  with pytest.raises(ConnectionError, match=f"no vLLM server answers at http://127.0.0.1:{port}"):
    make_engine("vllm", tiny(), SC, url=f"http://127.0.0.1:{port}")


def test_bad_options_are_refused():
  with pytest.raises(ValueError, match="transport 'udp'"):
    make_engine("vllm", tiny(), SC, transport="udp")
  with pytest.raises(ValueError, match="sleep_level"):
    make_engine("vllm", tiny(), SC, sleep_level=3)
  with pytest.raises(TypeError, match="botjax Decoder"):
    make_engine("vllm", object(), SC)


def test_cpu_head_sizes_are_checked_before_vllm_starts():
  if vllm_engine._has_cuda():
    pytest.skip("CUDA host: vLLM's GPU attention has other head sizes")
  with pytest.raises(ValueError, match="head_dim is 24"):
    make_engine("vllm", tiny(head_dim=24), SC)


@pytest.mark.parametrize("tie", [False, True])
def test_hf_tensors_equal_the_saved_checkpoint(tmp_path, tie):
  from safetensors.numpy import load_file
  model = tiny(tie=tie)
  bm.save_pretrained(model, str(tmp_path))
  want = load_file(os.path.join(tmp_path, "model.safetensors"))
  got = dict(vllm_engine.hf_tensors(model))
  assert set(got) == set(want)
  assert ("lm_head.weight" in got) == (not tie)
  for name, a in want.items():
    np.testing.assert_array_equal(got[name], a, err_msg=name)
  assert {str(a.dtype) for _, a in vllm_engine.hf_tensors(model, dtype="bfloat16")} == {"bfloat16"}


def test_pack_update_places_every_tensor_at_an_aligned_offset():
  import ml_dtypes
  rng = np.random.default_rng(0)
  tensors = [("a", rng.normal(size=(3, 5)).astype(np.float32)),
             ("b", rng.normal(size=(7,)).astype(ml_dtypes.bfloat16)),
             ("c", np.float32(rng.normal(size=())).reshape(()))]
  info, size = vllm_engine.pack_update(tensors)
  buf = bytearray(size)
  vllm_engine.write_buffer(tensors, info["offsets"], memoryview(buf))
  assert info["names"] == ["a", "b", "c"] and info["dtype_names"] == ["float32", "bfloat16",
                                                                       "float32"]
  assert all(o % 64 == 0 for o in info["offsets"]) and size >= info["offsets"][-1] + 4
  for (name, a), off, shape in zip(tensors, info["offsets"], info["shapes"]):
    back = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=off).reshape(shape)
    np.testing.assert_array_equal(back, a, err_msg=name)
  with pytest.raises(ValueError, match="int32"):
    vllm_engine.pack_update([("x", np.zeros(3, np.int32))])


def test_transport_follows_the_server_host():
  assert vllm_engine._host_transport("http://127.0.0.1:8000") == "shm"
  assert vllm_engine._host_transport("http://localhost:8000/") == "shm"
  assert vllm_engine._host_transport("http://[::1]:8000") == "shm"
  assert vllm_engine._host_transport("http://192.0.2.7:8000") == "inline"   # TEST-NET-1


def test_serve_args_name_the_backend_and_the_worker_extension():
  args = vllm_engine.vllm_serve_args("/ckpt", port=9000, python="/venv/bin/python")
  assert args[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                      "/ckpt"]
  joined = " ".join(args)
  for flag in ('--weight-transfer-config {"backend": "botjax_host"}',
               "--worker-extension-cls botjax.sampling.vllm_worker.WorkerExtension",
               "--logprobs-mode processed_logprobs", "--generation-config vllm", "--port 9000"):
    assert flag in joined
  assert vllm_engine.vllm_serve_args("/ckpt")[:3] == ["vllm", "serve", "/ckpt"]
