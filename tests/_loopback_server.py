"""The loopback JSON-over-HTTP server that the protocol servers of the judge tests share.

`LoopbackServer(responder, api_key=None)` listens on 127.0.0.1 (a free port) in a daemon thread.
A subclass names its protocol in `answer(path, headers, raw)`, which returns `(status, payload,
extra_headers)`; this class keeps every request in `requests` ({"path", "body", "headers",
"status"}, headers lower-cased; `body` is the parsed JSON or None), counts `max_in_flight` (the
most requests inside the responder at once, through `call_responder`), and sends the payload
(a dict as JSON, bytes as they are).
"""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:

  api = ""
  url_suffix = ""           # appended to http://127.0.0.1:PORT for `url`
  reply_headers = ()        # (name, value-or-callable) sent with every reply

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
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
          body = json.loads(raw)
        except ValueError:
          body = None
        record = {"path": self.path, "headers": headers, "body": body, "status": None}
        with server._lock:
          server.requests.append(record)
        status, payload, extra = server.answer(self.path, headers, body)
        record["status"] = status
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (*server.reply_headers, *dict(extra).items()):
          self.send_header(name, value() if callable(value) else value)
        self.end_headers()
        try:
          self.wfile.write(data)
        except BrokenPipeError:  # the client gave up (a timeout)
          pass

    self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.httpd.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}{self.url_suffix}"
    self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self._thread.start()

  def answer(self, path, headers, body):
    """(status, payload dict or bytes, extra headers) for one request; the protocol's part."""
    raise NotImplementedError

  def call_responder(self, body):
    """The responder's reply to a valid request, counted in `in_flight` while it runs."""
    with self._lock:
      self.in_flight += 1
      self.max_in_flight = max(self.max_in_flight, self.in_flight)
    try:
      return self.responder(body)
    finally:
      with self._lock:
        self.in_flight -= 1

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()


def content_text(content, sep="\n"):
  """The text of one message's content: a string, or the text parts of a list of parts."""
  if isinstance(content, str):
    return content
  return sep.join(p["text"] for p in content if p["type"] == "text")


def texts(body):
  """All text of a request's messages (string contents and text parts), not a top-level system."""
  return "\n".join(content_text(m["content"]) for m in body["messages"]
                   if isinstance(m["content"], str)
                   or any(p["type"] == "text" for p in m["content"]))


def user_text(body):
  """The text of the last message (a user turn)."""
  return content_text(body["messages"][-1]["content"])
