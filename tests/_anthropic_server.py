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

from _loopback_server import LoopbackServer, content_text, texts, user_text  # noqa: F401

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


class AnthropicServer(LoopbackServer):

  api = "anthropic"
  reply_headers = (("request-id", lambda: f"req_test{next(_ids):06d}"),)

  def answer(self, path, headers, body):
    if path.split("?")[0] != "/v1/messages":
      return (*error(404, f"Not found: {path}"), ())
    version = headers.get("anthropic-version")
    if not version:
      return (*error(400, "anthropic-version: header is required"), ())
    key = headers.get("x-api-key")
    if key is None and headers.get("authorization", "").startswith("Bearer "):
      key = headers["authorization"][len("Bearer "):]
    if not key:
      return (*error(401, "x-api-key header is required"), ())
    if self.api_key is not None and key != self.api_key:
      return (*error(401, "invalid x-api-key"), ())
    if not isinstance(body, dict):
      return (*error(400, "There was an issue with your request body: invalid JSON"), ())
    problem = _invalid(body, version)
    if problem:
      return (*error(400, problem), ())
    out = self.call_responder(body)
    if isinstance(out, tuple):
      return out if len(out) == 3 else (*out, ())
    return 200, {"id": f"msg_test{next(_ids):06d}", "type": "message", "role": "assistant",
                 "model": body["model"], "content": [{"type": "text", "text": out}],
                 "stop_reason": "end_turn", "stop_sequence": None,
                 "usage": {"input_tokens": 1, "output_tokens": 1}}, ()


def image_bytes(body):
  """The decoded bytes of every image block of a Messages request, in order."""
  return [base64.b64decode(b["source"]["data"]) for msg in body["messages"]
          if not isinstance(msg["content"], str) for b in msg["content"] if b["type"] == "image"]


def system_text(body):
  """The request's system prompt ("" without one)."""
  return content_text(body.get("system", ""), sep="")
