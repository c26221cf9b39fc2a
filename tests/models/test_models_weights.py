"""HF weights in and out: round trip through `transformers`, sharded files, bf16, errors."""

import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

import botjax.models as bm
from botjax.models import weights
from conftest import hf_logits, left_padded_batch, make_hf_model, torch, transformers

ATOL = 1e-4


def _forward(model, ids, mask, pos):
  out, _ = nnx.jit(lambda m, i, p, k: m(i, p, attention_mask=k))(
      model, jnp.asarray(ids), jnp.asarray(pos), jnp.asarray(mask))
  return np.asarray(out)


@pytest.mark.parametrize("name", ["qwen2_bias_untied", "phi3_longrope", "smollm3_nope",
                                  "llama_tied_bias", "qwen2_sliding_window"])
def test_round_trip_through_transformers(name, hf_checkpoint, tmp_path):
  """HF -> botjax -> save_pretrained (sharded) -> transformers gives the same logits."""
  path, hf = hf_checkpoint(name)
  model = bm.load_pretrained(path)
  out_dir = tmp_path / "saved"
  bm.save_pretrained(model, str(out_dir), max_shard_bytes=40_000)
  files = os.listdir(out_dir)
  assert "model.safetensors.index.json" in files
  assert sum(f.endswith(".safetensors") for f in files) > 1
  with open(out_dir / "config.json") as f:
    assert "rope_parameters" in json.load(f)
  reloaded_hf = transformers.AutoModelForCausalLM.from_pretrained(out_dir).eval()
  assert type(reloaded_hf) is type(hf)
  ids, mask, pos = left_padded_batch(2, 9, hf.config.vocab_size, seed=5)
  ref = hf_logits(hf, ids, mask, pos)
  np.testing.assert_allclose(hf_logits(reloaded_hf, ids, mask, pos)[mask], ref[mask], atol=ATOL)
  # botjax also reads its own sharded checkpoint back
  again = bm.load_pretrained(str(out_dir))
  np.testing.assert_allclose(_forward(again, ids, mask, pos)[mask], ref[mask], atol=ATOL)
  # tensor-for-tensor identical to the original HF file set
  orig = load_file(os.path.join(path, "model.safetensors"))
  saved = {}
  for f in files:
    if f.endswith(".safetensors"):
      saved.update(load_file(out_dir / f))
  assert sorted(saved) == sorted(orig)
  for k in orig:
    np.testing.assert_array_equal(saved[k], orig[k], err_msg=k)


def test_bfloat16_checkpoint_loads(tmp_path):
  hf = make_hf_model("qwen2_tied_kv1", seed=3).to(torch.bfloat16)
  hf.save_pretrained(tmp_path)
  model16 = bm.load_pretrained(str(tmp_path), param_dtype=jnp.bfloat16)
  assert model16.embed[...].dtype == jnp.bfloat16
  model32 = bm.load_pretrained(str(tmp_path))  # upcast on load
  # a fresh float32 load: `hf.float()` would keep RoPE buffers rounded through bf16
  hf32 = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
  ids, mask, pos = left_padded_batch(2, 8, hf.config.vocab_size, seed=6)
  ref = hf_logits(hf32, ids, mask, pos)
  np.testing.assert_allclose(_forward(model32, ids, mask, pos)[mask], ref[mask], atol=ATOL)
  np.testing.assert_array_equal(np.asarray(model16.embed[...].astype(jnp.float32)),
                                np.asarray(model32.embed[...]))
  # and back out in bf16: transformers reads the same bf16 weights
  bm.save_pretrained(model32, str(tmp_path / "out"), dtype=jnp.bfloat16)
  back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
  w = back.model.layers[0].self_attn.q_proj.weight
  assert w.dtype == torch.bfloat16
  assert torch.equal(w, hf.model.layers[0].self_attn.q_proj.weight)


def _copy_with(src, dst, edit):
  shutil.copytree(src, dst)
  tensors = load_file(os.path.join(dst, "model.safetensors"))
  edit(tensors)
  save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
  return str(dst)


def test_errors_name_the_offending_tensor(hf_checkpoint, tmp_path):
  path, _ = hf_checkpoint("qwen2_bias_untied")
  name = "model.layers.1.self_attn.k_proj.weight"

  def extra(t):
    t["model.layers.0.self_attn.rogue.weight"] = np.zeros((2, 2), np.float32)

  def wrong_shape(t):
    t[name] = t[name][:-1]

  def missing(t):
    del t[name]

  with pytest.raises(ValueError, match=r"'model\.layers\.0\.self_attn\.rogue\.weight'"):
    bm.load_pretrained(_copy_with(path, tmp_path / "a", extra))
  with pytest.raises(ValueError, match=rf"'{name}' has shape \(31, 64\).*k_kernel \(64, 2, 16\)"):
    bm.load_pretrained(_copy_with(path, tmp_path / "b", wrong_shape))
  with pytest.raises(ValueError, match=rf"lacks 1 tensors, e\.g\. '{name}'"):
    bm.load_pretrained(_copy_with(path, tmp_path / "c", missing))


def test_missing_checkpoint_says_where_it_looked(tmp_path):
  with pytest.raises(FileNotFoundError, match=rf"'nobody/no-such-model'.*{tmp_path}"):
    bm.load_pretrained("nobody/no-such-model", local_files_only=True, cache_dir=str(tmp_path))


@pytest.mark.parametrize("path", ["/nonexistent/qwen", "./no-such-ckpt", "../no-such-ckpt",
                                  "~/no-such-botjax-ckpt", "runs/aime/hf_final"])
def test_missing_local_path_says_no_such_directory(path, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(FileNotFoundError, match=rf"^no such directory: {path}\b"):
    bm.load_pretrained(path, cache_dir=str(tmp_path))   # offline or not: never the Hub
  assert weights.looks_like_path(path)
  for repo in ("Qwen/Qwen2.5-3B", "gpt2", "HuggingFaceTB/SmolLM3-3B"):
    assert not weights.looks_like_path(repo)


def test_repo_not_in_the_cache_offline_says_how_to_fix(tmp_path, monkeypatch):
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # read at call time: no local_files_only needed
  with pytest.raises(FileNotFoundError) as e:
    bm.load_pretrained("acme/not-cached", cache_dir=str(tmp_path))
  msg = str(e.value)
  assert f"the HF cache at {tmp_path} has no snapshot" in msg and "HF_HUB_OFFLINE=1" in msg
  assert "hf download acme/not-cached" in msg and "not downloaded" in msg


class _LoopbackHub:
  """The Hugging Face Hub's model API for one repo, served from a directory on 127.0.0.1: repo
  info, tree listing, and HEAD/GET of `/{repo}/resolve/{commit}/{file}`."""

  def __init__(self, repo, directory):
    import hashlib
    import http.server
    import threading
    import urllib.parse
    self.requests = []
    sha = hashlib.sha1(repo.encode()).hexdigest()
    files = sorted(os.listdir(directory))
    hub = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
          self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
          self.wfile.write(body)

      def do_HEAD(self):
        self.do_GET()

      def do_GET(self):
        path = urllib.parse.urlparse(self.path).path
        hub.requests.append((self.command, path))
        as_json = [("Content-Type", "application/json")]
        if path == f"/api/models/{repo}/revision/main":
          info = {"id": repo, "sha": sha, "siblings": [{"rfilename": f} for f in files]}
          return self.send(200, json.dumps(info).encode(), as_json)
        if path.startswith(f"/api/models/{repo}/tree/"):
          tree = [{"type": "file", "path": f, "oid": sha,
                   "size": os.path.getsize(os.path.join(directory, f))} for f in files]
          return self.send(200, json.dumps(tree).encode(), as_json)
        prefix = f"/{repo}/resolve/{sha}/"
        if path.startswith(prefix) and path[len(prefix):] in files:
          with open(os.path.join(directory, path[len(prefix):]), "rb") as f:
            body = f.read()
          etag = hashlib.sha1(body).hexdigest()
          return self.send(200, body, [("X-Repo-Commit", sha), ("ETag", f'"{etag}"')])
        self.send(404, b"", [("X-Error-Code", "EntryNotFound")])

    self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
    threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_repo_missing_from_the_cache_is_downloaded_when_online(hf_checkpoint, tmp_path,
                                                               monkeypatch, capsys):
  """Online (a Hub on loopback): the repo is fetched into the cache, with a message and only the
  model's files; afterwards it loads offline from there."""
  from huggingface_hub import constants
  path, hf = hf_checkpoint("qwen2_tied_kv1")
  src = tmp_path / "repo"
  shutil.copytree(path, src)
  (src / "README.md").write_text("not a model file")
  (src / "pytorch_model.bin").write_bytes(b"not fetched either")
  hub = _LoopbackHub("acme/online", str(src))
  monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
  monkeypatch.setattr(constants, "ENDPOINT", hub.url)
  monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                      hub.url + "/{repo_id}/resolve/{revision}/{filename}")
  cache = tmp_path / "hub"
  model = bm.load_pretrained("acme/online", cache_dir=str(cache))
  err = capsys.readouterr().err
  assert (f"checkpoint 'acme/online': the HF cache at {cache} has no snapshot of it; downloading "
          f"it from the Hugging Face Hub ({hub.url})") in err
  fetched = {p for m, p in hub.requests if m == "GET" and "/resolve/" in p}
  assert {os.path.basename(p) for p in fetched} == {"config.json", "generation_config.json",
                                                    "model.safetensors"} & set(os.listdir(src))
  ids, mask, pos = left_padded_batch(2, 8, hf.config.vocab_size, seed=8)
  np.testing.assert_allclose(_forward(model, ids, mask, pos)[mask],
                             hf_logits(hf, ids, mask, pos)[mask], atol=ATOL)
  hub.server.shutdown()   # now from the cache alone
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  assert weights.resolve_checkpoint("acme/online", cache_dir=str(cache)).startswith(str(cache))


def test_incomplete_cached_snapshot_offline_names_the_missing_files(hf_checkpoint, tmp_path,
                                                                   monkeypatch):
  """A snapshot holding only config.json (as a config-only lookup leaves it) is not a checkpoint."""
  path, _ = hf_checkpoint("qwen2_tied_kv1")
  commit = "1" * 40
  snap = tmp_path / "models--acme--partial" / "snapshots" / commit
  snap.mkdir(parents=True)
  shutil.copy(os.path.join(path, "config.json"), snap / "config.json")
  (tmp_path / "models--acme--partial" / "refs").mkdir()
  (tmp_path / "models--acme--partial" / "refs" / "main").write_text(commit)
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  with pytest.raises(FileNotFoundError, match=r"snapshot in the HF cache at .* lacks "
                     r"model\.safetensors or model\.safetensors\.index\.json.*not downloaded"):
    weights.resolve_checkpoint("acme/partial", cache_dir=str(tmp_path))


def test_loads_from_the_hf_cache_layout(hf_checkpoint, tmp_path):
  """A repo id resolves to its snapshot in an HF cache (offline, local_files_only)."""
  path, hf = hf_checkpoint("qwen2_tied_kv1")
  repo = tmp_path / "models--acme--tiny"
  commit = "0" * 40
  shutil.copytree(path, repo / "snapshots" / commit)
  (repo / "refs").mkdir()
  (repo / "refs" / "main").write_text(commit)
  model = bm.load_pretrained("acme/tiny", local_files_only=True, cache_dir=str(tmp_path))
  ids, mask, pos = left_padded_batch(2, 8, hf.config.vocab_size, seed=7)
  np.testing.assert_allclose(_forward(model, ids, mask, pos)[mask],
                             hf_logits(hf, ids, mask, pos)[mask], atol=ATOL)


def test_tokenizer_loads_with_chat_template(tmp_path):
  from tokenizers import Tokenizer, models, pre_tokenizers
  vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "hello": 4, "world": 5, "user": 6,
           ":": 7}
  tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
  tok.pre_tokenizer = pre_tokenizers.Whitespace()
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                              eos_token="</s>", pad_token="<pad>",
                                              unk_token="<unk>")
  fast.chat_template = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
  fast.save_pretrained(tmp_path)
  make_hf_model("llama_tied_bias").config.save_pretrained(tmp_path)
  loaded = bm.load_tokenizer(str(tmp_path))
  assert loaded("hello world")["input_ids"] == [4, 5]
  ids = loaded.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=True,
                                   return_dict=False)
  assert list(ids) == [6, 7, 4]


def test_transformers_sharded_checkpoint_loads(tmp_path):
  hf = make_hf_model("llama3_scaling", seed=4)
  hf.save_pretrained(tmp_path, max_shard_size="40KB")
  files = [f for f in os.listdir(tmp_path) if f.endswith(".safetensors")]
  assert len(files) > 1 and (tmp_path / "model.safetensors.index.json").exists()
  model = bm.load_pretrained(str(tmp_path))
  ids, mask, pos = left_padded_batch(2, 20, hf.config.vocab_size, seed=8)  # beyond original 16
  np.testing.assert_allclose(_forward(model, ids, mask, pos)[mask],
                             hf_logits(hf, ids, mask, pos)[mask], atol=ATOL)
