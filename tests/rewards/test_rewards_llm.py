"""botjax.rewards.llm: the neutral messages as each API receives them (over loopback servers
speaking the real protocols), the clients' checks and settings, and prompt templates."""
import pickle

import pytest

from botjax.rewards import llm
import _llm_servers as S

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


@pytest.fixture(params=S.APIS)
def server(request):
  srv = S.start(request.param, lambda body: "fine")
  yield srv
  srv.close()


def _client(srv, **kw):
  kw.setdefault("max_retries", 0)
  return llm.make_client(srv.api, "m", base_url=srv.url, api_key="k", **kw)


def test_neutral_messages_as_each_api_receives_them(server):
  client = _client(server, max_tokens=77)
  messages = [{"role": "system", "content": "Be terse."},
              {"role": "user", "content": [llm.text_part("Which is red?"), llm.image_part(PNG),
                                           llm.image_part(b"GIF89a", "image/gif")]}]
  assert client.chat(messages) == "fine"
  body = server.requests[-1]["body"]
  assert S.system_text(server, body) == "Be terse."
  assert S.user_text(server, body) == "Which is red?"
  assert S.image_bytes(server, body) == [PNG, b"GIF89a"]
  assert body["max_tokens"] == 77 and body["model"] == "m"
  if server.api == "openai":
    assert body["temperature"] == 0.0
    assert body["messages"][1]["content"][1]["image_url"]["url"].startswith(
        "data:image/png;base64,")
  else:
    assert "temperature" not in body and [m["role"] for m in body["messages"]] == ["user"]
    assert body["messages"][0]["content"][2]["source"]["media_type"] == "image/gif"
    headers = server.requests[-1]["headers"]
    assert headers["anthropic-version"] and headers["authorization"] == "Bearer k"
  client.chat([{"role": "user", "content": "again"}], max_tokens=5)
  assert server.requests[-1]["body"]["max_tokens"] == 5
  client.close()


def test_map_bounds_concurrency_and_keeps_order(server):
  import threading
  import time
  active, most, lock = [0], [0], threading.Lock()

  def work(i):
    with lock:
      active[0] += 1
      most[0] = max(most[0], active[0])
    time.sleep(0.05)
    with lock:
      active[0] -= 1
    return i * i

  client = _client(server, concurrency=3)
  assert client.map(work, range(10)) == [i * i for i in range(10)] and most[0] == 3
  client.close()


def test_reply_without_text_is_a_reply_error(server):
  empty = ({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
           if server.api == "openai" else
           {"id": "msg_x", "type": "message", "role": "assistant", "model": "m", "content": [],
            "stop_reason": "max_tokens", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 0}})
  server.responder = lambda body: (200, empty)
  with pytest.raises(llm.ReplyError, match="reply without"):
    _client(server).chat([{"role": "user", "content": "x"}])


def test_client_pickles_without_its_connection(server):
  client = _client(server)
  client.chat([{"role": "user", "content": "x"}])
  assert client._client is not None
  copy = pickle.loads(pickle.dumps(client))
  assert copy._client is None and copy.api_key == "k"
  assert copy.chat([{"role": "user", "content": "y"}]) == "fine"
  assert copy.map(str, [1, 2]) == ["1", "2"]


@pytest.mark.parametrize("messages,message", [
    ([], "at least one user message"),
    ([{"role": "tool", "content": "x"}], "role must be system, user or assistant"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
     "text_part.*image_part"),
    ([{"role": "user", "content": [{"type": "image", "data": "not bytes",
                                    "media_type": "image/png"}]}], "image_part"),
])
def test_malformed_messages_are_refused(server, messages, message):
  with pytest.raises(ValueError, match=message):
    _client(server).chat(messages)
  assert server.requests == []


def test_anthropic_system_prompt_must_come_first():
  with pytest.raises(ValueError, match="system messages must come before"):
    llm.AnthropicChat.convert([{"role": "user", "content": "x"},
                               {"role": "system", "content": "late"}])
  system, messages = llm.AnthropicChat.convert([{"role": "system", "content": "a"},
                                                {"role": "system", "content": "b"},
                                                {"role": "user", "content": "x"}])
  assert system == "a\n\nb" and messages == [{"role": "user", "content": "x"}]


def test_settings_are_checked():
  with pytest.raises(ValueError, match=r"api must be one of \('openai', 'anthropic'\)"):
    llm.make_client("gemini", "m")
  with pytest.raises(ValueError, match="not an http\\(s\\) URL"):
    llm.make_client("openai", "m", base_url="localhost:8000")
  with pytest.raises(ValueError, match="model must name"):
    llm.make_client("openai", "")
  with pytest.raises(ValueError, match="timeout_s > 0"):
    llm.make_client("openai", "m", timeout_s=0)
  with pytest.raises(ValueError, match="takes no temperature"):
    llm.make_client("anthropic", "m", api_key="k", temperature=0.0)
  with pytest.raises(ValueError, match="media_type must be one of"):
    llm.image_part(b"x", "image/bmp")
  # Anthropic's base URL is the host: a trailing /v1 (as OpenAI-style URLs end) is dropped
  client = llm.make_client("anthropic", "m", base_url="https://example.test/v1/", api_key="k")
  assert client.base_url == "https://example.test"
  assert llm.make_client("openai", "m", temperature=0.5).temperature == 0.5


def test_unreachable_names_api_model_and_url():
  for api, url in (("openai", "http://127.0.0.1:9/v1"), ("anthropic", "http://127.0.0.1:9")):
    client = llm.make_client(api, "m", base_url=url, api_key="k", max_retries=0, timeout_s=2)
    with pytest.raises(llm.Unreachable, match=f"{api} model 'm' at {url} is not reachable"):
      client.check_reachable()


def test_load_prompt(tmp_path):
  path = tmp_path / "p.txt"
  path.write_text("Request: {prompt}\nCode:\n{code}\nJSON: {{\"a\": 1}}\n")
  text = llm.load_prompt(path, what="p", required=("prompt", "code"))
  assert text.format(prompt="x", code="y") == 'Request: x\nCode:\ny\nJSON: {"a": 1}\n'
  assert llm.placeholders("{a} {b.c} {d[0]} {{e}}") == {"a", "b", "d"}
  assert llm.load_prompt("raw {braces", what="s", template=False) == "raw {braces"
  with pytest.raises(ValueError, match=r"p \(text\) lacks the required placeholder \{code\}"):
    llm.load_prompt("{prompt}", what="p", required=("prompt", "code"))
  with pytest.raises(ValueError, match=r"unknown placeholder \{score\}.*\{prompt\}, \{code\}"):
    llm.load_prompt("{prompt} {code} {score}", what="p", required=("prompt", "code"))
  with pytest.raises(ValueError, match="text \\(str\\) or a file"):
    llm.load_prompt(3, what="p")
