"""A loopback HTTP server speaking the OpenAI chat-completions protocol, for the judge tests.

`responder(request_json) -> str | (status, body)` decides each reply: a string is the assistant's
message of a 200 reply; `(status, dict)` sends that JSON (`error(status, message)` builds OpenAI's
error body) and `(status, bytes)` those raw bytes (e.g. a broken body). With `api_key` set, a
request with another key gets OpenAI's 401 `invalid_api_key` error instead. Every request is kept in `requests` ({"path", "body", "auth", "headers"},
headers lower-cased) so tests can check what the judge sent (text parts, image parts, the
Authorization header), and `max_in_flight` is the most requests the server held at once. The
helpers at the end read a request body as `tests/_anthropic_server.py`'s read theirs.
"""
import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OpenAIServer:

  api = "openai"

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

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server._lock:
          server.requests.append({"path": self.path, "body": body,
                                  "auth": self.headers.get("Authorization"),
                                  "headers": {k.lower(): v for k, v in self.headers.items()}})
          server.in_flight += 1
          server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
          auth = self.headers.get("Authorization")
          if server.api_key is not None and auth != f"Bearer {server.api_key}":
            out = error(401, "Incorrect API key provided", code="invalid_api_key")
          else:
            out = server.responder(body)
        finally:
          with server._lock:
            server.in_flight -= 1
        status, payload = (out if isinstance(out, tuple) else (200, None))
        if payload is None:
          payload = {"id": "chatcmpl-test", "object": "chat.completion", "created": 0,
                     "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": out}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
          self.wfile.write(data)
        except BrokenPipeError:  # the client gave up (a timeout)
          pass

    self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.httpd.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
    self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self._thread.start()

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()


def error(status, message, *, code=None):
  """(status, OpenAI's error body) for the responder to return."""
  kind = {401: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
  return status, {"error": {"message": message, "type": kind, "param": None, "code": code}}


def texts(body):
  """All text of a chat request (string contents and text parts)."""
  out = []
  for msg in body["messages"]:
    content = msg["content"]
    if isinstance(content, str):
      out.append(content)
    else:
      out.extend(p["text"] for p in content if p["type"] == "text")
  return "\n".join(out)


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
      content = msg["content"]
      out.append(content if isinstance(content, str) else
                 "".join(p["text"] for p in content if p["type"] == "text"))
  return "\n\n".join(out)


def user_text(body):
  """The text of the last user message."""
  content = body["messages"][-1]["content"]
  return content if isinstance(content, str) else "\n".join(
      p["text"] for p in content if p["type"] == "text")
