"""A loopback HTTP server speaking the Anthropic Messages protocol, for the judge tests.

`POST /v1/messages` as the API answers it (API version 2026-10-21, what the `anthropic` 2.x
client sends): the request must carry an `anthropic-version` header, a key (`x-api-key`, or
`Authorization: Bearer`, which the 2.x client sends) equal to `api_key` when one is set, and a
body with `model`, `max_tokens` >= 1 and `messages` of user / assistant turns whose content is a
string or text and base64 image blocks; the system prompt is the top-level `system`, never a
message role, and sampling parameters (temperature, top_p, top_k) are refused as in that version.
Violations get the API's error body: `{"type": "error", "error": {"type", "message"},
"request_id"}` with its status (400 invalid_request_error, 401 authentication_error, ...).

`responder(request_json) -> str | (status, body) | (status, body, headers)` decides each valid
request's reply: a string is the assistant's text (a 200 `message`); `(status, dict)` sends that
JSON (`error(status, message)` builds the API's error body), `(status, bytes)` those raw bytes.
Every request is kept in `requests` ({"path", "body", "headers"}, headers lower-cased, `status`
of the reply) and `max_in_flight` is the most requests held at once.
"""
import base64
import binascii
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 504: "timeout_error",
               529: "overloaded_error"}
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_ids = itertools.count()


def error(status, message):
  """(status, the API's error body) for the responder to return."""
  return status, {"type": "error",
                  "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
                  "request_id": f"req_test{next(_ids):06d}"}


def _invalid(body, version):
  """The API's complaint about a request body, or None when it is well formed."""
  if not isinstance(body.get("model"), str) or not body["model"]:
    return "model: Field required"
  if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
    return "max_tokens: Field required (an integer >= 1)"
  if version >= "2026-10-21":
    for name in ("temperature", "top_p", "top_k"):
      if name in body:
        return f"{name}: Extra inputs are not permitted"
  if "system" in body and not isinstance(body["system"], (str, list)):
    return "system: Input should be a valid string or list of text blocks"
  messages = body.get("messages")
  if not isinstance(messages, list) or not messages:
    return "messages: at least one message is required"
  for i, m in enumerate(messages):
    if m.get("role") not in ("user", "assistant"):
      return (f"messages.{i}.role: Unexpected role {m.get('role')!r}. The Messages API accepts a "
              "top-level `system` parameter, not \"system\" as an input message role.")
    content = m.get("content")
    if isinstance(content, str):
      continue
    if not isinstance(content, list) or not content:
      return f"messages.{i}.content: Input should be a valid string or list of content blocks"
    for j, block in enumerate(content):
      where = f"messages.{i}.content.{j}"
      if block.get("type") == "text" and isinstance(block.get("text"), str):
        continue
      if block.get("type") != "image":
        return f"{where}.type: Input tag {block.get('type')!r} does not match any expected tag"
      source = block.get("source") or {}
      if source.get("type") != "base64" or source.get("media_type") not in IMAGE_TYPES:
        return f"{where}.source: expected a base64 source with media_type in {IMAGE_TYPES}"
      try:
        base64.b64decode(source.get("data", ""), validate=True)
      except (binascii.Error, ValueError):
        return f"{where}.source.data: invalid base64 data"
  return None


class AnthropicServer:

  api = "anthropic"

  def __init__(self, responder, *, api_key=None):
    self.responder = responder
    self.api_key = api_key
    self.requests = []
    self.in_flight = self.max_in_flight = 0
    self._lock = threading.Lock()
    server = self

    class Handler(BaseHTTPRequestHandler):

      def log_message(self, *args):
        pass

      def _send(self, status, payload, headers=()):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", f"req_test{next(_ids):06d}")
        for name, value in dict(headers).items():
          self.send_header(name, value)
        self.end_headers()
        try:
          self.wfile.write(data)
        except BrokenPipeError:  # the client gave up (a timeout)
          pass

      def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        headers = {k.lower(): v for k, v in self.headers.items()}
        record = {"path": self.path, "headers": headers, "body": None, "status": None}
        with server._lock:
          server.requests.append(record)
        status, payload, extra = self._answer(raw, headers, record)
        record["status"] = status
        self._send(status, payload, extra)

      def _answer(self, raw, headers, record):
        try:
          body = json.loads(raw)
        except ValueError:
          body = None
        record["body"] = body       # kept for the tests even when the request is refused
        if self.path.split("?")[0] != "/v1/messages":
          return (*error(404, f"Not found: {self.path}"), ())
        version = headers.get("anthropic-version")
        if not version:
          return (*error(400, "anthropic-version: header is required"), ())
        key = headers.get("x-api-key")
        if key is None and headers.get("authorization", "").startswith("Bearer "):
          key = headers["authorization"][len("Bearer "):]
        if not key:
          return (*error(401, "x-api-key header is required"), ())
        if server.api_key is not None and key != server.api_key:
          return (*error(401, "invalid x-api-key"), ())
        if not isinstance(body, dict):
          return (*error(400, "There was an issue with your request body: invalid JSON"), ())
        problem = _invalid(body, version)
        if problem:
          return (*error(400, problem), ())
        with server._lock:
          server.in_flight += 1
          server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
          out = server.responder(body)
        finally:
          with server._lock:
            server.in_flight -= 1
        if isinstance(out, tuple):
          return out if len(out) == 3 else (*out, ())
        return 200, {"id": f"msg_test{next(_ids):06d}", "type": "message", "role": "assistant",
                     "model": body["model"], "content": [{"type": "text", "text": out}],
                     "stop_reason": "end_turn", "stop_sequence": None,
                     "usage": {"input_tokens": 1, "output_tokens": 1}}, ()

    self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.httpd.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
    self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self._thread.start()

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()


def texts(body):
  """All text of a Messages request's turns (string contents and text blocks), not `system`."""
  out = []
  for msg in body["messages"]:
    content = msg["content"]
    if isinstance(content, str):
      out.append(content)
    else:
      out.extend(b["text"] for b in content if b["type"] == "text")
  return "\n".join(out)


def image_bytes(body):
  """The decoded bytes of every image block of a Messages request, in order."""
  return [base64.b64decode(b["source"]["data"]) for msg in body["messages"]
          if not isinstance(msg["content"], str) for b in msg["content"] if b["type"] == "image"]


def system_text(body):
  """The request's system prompt ("" without one)."""
  system = body.get("system", "")
  return system if isinstance(system, str) else "".join(b["text"] for b in system)


def user_text(body):
  """The text of the last user turn."""
  content = body["messages"][-1]["content"]
  return content if isinstance(content, str) else "\n".join(
      b["text"] for b in content if b["type"] == "text")
