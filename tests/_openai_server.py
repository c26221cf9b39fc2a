"""A loopback HTTP server speaking the OpenAI chat-completions protocol, for the judge tests.

`responder(request_json) -> str | (status, body)` decides each reply: a string is the assistant's
message of a 200 reply; `(status, dict)` sends that JSON (`error(status, message)` builds OpenAI's
error body) and `(status, bytes)` those raw bytes (e.g. a broken body). With `api_key` set, a
request with another key gets OpenAI's 401 `invalid_api_key` error instead. Every request is kept
in `requests` ({"path", "body", "headers", "status"}, headers lower-cased;
`tests/_loopback_server.py`) so tests can check what the judge sent (text parts, image parts, the
Authorization header), and `max_in_flight` is the most requests the server held at once. The
helpers at the end read a request body as `tests/_anthropic_server.py`'s read theirs.
"""
import base64

from _loopback_server import LoopbackServer, content_text, texts, user_text  # noqa: F401


class OpenAIServer(LoopbackServer):

  api = "openai"
  url_suffix = "/v1"

  def answer(self, path, headers, body):
    if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
      out = error(401, "Incorrect API key provided", code="invalid_api_key")
    else:
      out = self.call_responder(body)
    if isinstance(out, tuple):
      return (*out, ())
    return 200, {"id": "chatcmpl-test", "object": "chat.completion", "created": 0,
                 "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": out}}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}, ()


def error(status, message, *, code=None):
  """(status, OpenAI's error body) for the responder to return."""
  kind = {401: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
  return status, {"error": {"message": message, "type": kind, "param": None, "code": code}}


def images(body):
  """The data URLs of every image part of a chat request, in order."""
  return [p["image_url"]["url"] for msg in body["messages"] if not isinstance(msg["content"], str)
          for p in msg["content"] if p["type"] == "image_url"]


def image_bytes(body):
  """The decoded bytes of every image part of a chat request (base64 data URLs), in order."""
  return [base64.b64decode(url.split(",", 1)[1]) for url in images(body)]


def system_text(body):
  """The text of the request's system messages ("" without one)."""
  out = []
  for msg in body["messages"]:
    if msg["role"] == "system":
      out.append(content_text(msg["content"], sep=""))
  return "\n\n".join(out)
