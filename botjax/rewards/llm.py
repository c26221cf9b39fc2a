"""The LLM clients of the judges: one interface over two chat APIs, and prompt templates.

  OpenAIChat     `POST {base_url}/chat/completions` of any OpenAI-compatible server (OpenAI,
                 vLLM, SGLang, a hosted gateway), through the `openai` package
  AnthropicChat  `POST {base_url}/v1/messages` of the Anthropic Messages API (Claude), through the
                 `anthropic` package
  make_client(api, model, ...) builds either from a name ("openai" or "anthropic", `APIS`).

Both implement `LLMClient`: `chat(messages, *, max_tokens=None) -> str` (the reply's text),
`map(fn, items)` (at most `concurrency` calls in flight), `check_reachable()` (one short request;
the start-up check of every judge) and `close()`. Messages are written once, in one neutral form
that each client converts to its API:

  {"role": "system" | "user" | "assistant", "content": str | [part, ...]}
  part: {"type": "text", "text": str}                                   (`text_part`)
        {"type": "image", "data": bytes, "media_type": "image/png"}     (`image_part`)

OpenAI receives images as `image_url` parts holding a base64 data URL and system messages as
they are; Anthropic receives images as base64 `image` blocks and the (leading) system messages
as the top-level `system` prompt. Timeouts and retries live here: each request has `timeout_s`,
and transport errors, timeouts, HTTP 408/409/429/5xx (Anthropic's 529 "overloaded" included) are
retried `max_retries` times with exponential backoff by the official client packages. A client
pickles without its connection and thread pool (process pools); they are rebuilt on first use.

Prompt templates (`load_prompt`): every judge takes its prompts as text or from a file
(`os.PathLike`), with `{name}` placeholders checked when the judge is built.
"""
from __future__ import annotations

import abc
import base64
import concurrent.futures
import os
import string
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

APIS = ("openai", "anthropic")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
ANTHROPIC_URL = "https://api.anthropic.com"
# The start-up request (`check_reachable`): the cheapest that proves the endpoint answers with
# this model and key.
PING_TEXT = "Reply with the single word OK."


class ReplyError(Exception):
  """The server answered, but the reply holds no text (no choices, no text block)."""


class Unreachable(ConnectionError):
  """`check_reachable` failed: the message names the API, the model, the URL and the cause."""


def text_part(text: str) -> dict[str, Any]:
  """A neutral text part of a message's content."""
  return {"type": "text", "text": text}


def image_part(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
  """A neutral image part of a message's content: the encoded image bytes (PNG by default)."""
  if media_type not in IMAGE_TYPES:
    raise ValueError(f"media_type must be one of {IMAGE_TYPES}, got {media_type!r}")
  return {"type": "image", "data": bytes(data), "media_type": media_type}


def _b64(data: bytes) -> str:
  return base64.b64encode(data).decode("ascii")


def _parts(content: str | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
  """The parts of a neutral content (a string is one text part), checked."""
  if isinstance(content, str):
    return [text_part(content)]
  parts = list(content)
  for p in parts:
    if p.get("type") == "text" and isinstance(p.get("text"), str):
      continue
    if p.get("type") == "image" and isinstance(p.get("data"), (bytes, bytearray)) and \
        p.get("media_type") in IMAGE_TYPES:
      continue
    raise ValueError(f"a message part must be text_part(str) or image_part(bytes, media_type in "
                     f"{IMAGE_TYPES}), got {_short(p)}")
  return parts


def _short(part: Mapping[str, Any]) -> str:
  return repr({k: (f"<{len(v)} bytes>" if isinstance(v, (bytes, bytearray)) else v)
               for k, v in part.items()})[:200]


def _check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
  if not messages:
    raise ValueError("messages is empty; a chat needs at least one user message")
  for m in messages:
    if m.get("role") not in ("system", "user", "assistant"):
      raise ValueError(f"message role must be system, user or assistant, got {m.get('role')!r}")
    _parts(m.get("content", ""))


def check_base_url(base_url: str | None) -> str | None:
  """`base_url` stripped of surrounding space, or a ValueError unless it is an http(s) URL."""
  if base_url is None:
    return None
  url = base_url.strip()
  parts = urllib.parse.urlparse(url)
  if parts.scheme not in ("http", "https") or not parts.hostname:
    raise ValueError(f"base_url {base_url!r} is not an http(s) URL such as "
                     "http://127.0.0.1:8000/v1")
  return url


def resolve_api_key(api: str, api_key: str | None) -> str:
  """The key sent to the API.

  openai: `api_key` when given, else $OPENAI_API_KEY when set, else "EMPTY" (local servers such
    as vLLM and SGLang accept any key).
  anthropic: `api_key` when given, else $ANTHROPIC_API_KEY; neither is a ValueError (an
    Anthropic-compatible local server takes any key: set ANTHROPIC_API_KEY=EMPTY).
  """
  if api == "openai":
    return api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
  if api == "anthropic":
    key = api_key or os.environ.get("ANTHROPIC_API_KEY")
    if not key:
      raise ValueError("the anthropic API needs a key: set $ANTHROPIC_API_KEY or pass api_key")
    return key
  raise ValueError(f"api must be one of {APIS}, got {api!r}")


class LLMClient(abc.ABC):
  """One chat endpoint of one model: the interface every LLM and VLM judge talks through.

  Args:
    model: the model name sent with each request.
    base_url: the API root (see the subclass); None uses the vendor's hosted API.
    api_key: see `resolve_api_key`.
    timeout_s: per-request timeout in seconds, > 0.
    max_retries: retries per request of the client package, >= 0.
    temperature: sampling temperature, or None for the API's default (see the subclass).
    max_tokens: the reply's token limit when `chat` is not given one, >= 1.
    concurrency: calls of `map` in flight at once, >= 1.
  """

  api: str = ""

  def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
               timeout_s: float = 60.0, max_retries: int = 2, temperature: float | None = None,
               max_tokens: int = 256, concurrency: int = 8):
    if not model or not isinstance(model, str):
      raise ValueError(f"model must name the judge model, got {model!r}")
    if not timeout_s > 0 or int(max_retries) < 0 or int(max_tokens) < 1 or int(concurrency) < 1:
      raise ValueError(f"need timeout_s > 0, max_retries >= 0, max_tokens >= 1 and concurrency "
                       f">= 1; got timeout_s={timeout_s}, max_retries={max_retries}, max_tokens="
                       f"{max_tokens}, concurrency={concurrency}")
    self.model, self.base_url = model, check_base_url(base_url)
    self.api_key = resolve_api_key(self.api, api_key)
    self.timeout_s, self.max_retries = float(timeout_s), int(max_retries)
    self.temperature, self.max_tokens = temperature, int(max_tokens)
    self.concurrency = int(concurrency)
    self._client = self._executor = None
    self._lock = threading.Lock()

  @abc.abstractmethod  # each API builds its own client package object
  def _make_client(self):
    """The vendor client (openai.OpenAI, anthropic.Anthropic) with this object's settings."""

  @abc.abstractmethod  # each API converts the neutral messages and reads its own reply
  def _complete(self, client, messages: Sequence[Mapping[str, Any]], max_tokens: int) -> str:
    """One request; returns the reply's text."""

  @property
  def client(self):
    """The vendor client, built on first use (a missing package fails here, naming it)."""
    with self._lock:
      if self._client is None:
        self._client = self._make_client()
      return self._client

  def chat(self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None) -> str:
    """The text of the reply to `messages` (neutral form, see the module docstring).

    Raises:
      ValueError: for malformed messages.
      ReplyError: for a reply without text.
      The client package's errors (openai.APIError, anthropic.APIError: connection, timeout,
      HTTP status) once its retries are spent.
    """
    _check_messages(messages)
    return self._complete(self.client, messages, int(max_tokens or self.max_tokens))

  def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """`fn` over `items`, at most `concurrency` at a time, results in order."""
    with self._lock:
      if self._executor is None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            self.concurrency, thread_name_prefix=f"botjax-{self.api}")
      executor = self._executor
    return list(executor.map(fn, items))

  def check_reachable(self) -> None:
    """One short request (8 tokens).

    Raises:
      Unreachable: naming the API, model and URL, the cause, and for HTTP 401/403 the key to set.
    """
    try:
      self.chat([{"role": "user", "content": PING_TEXT}], max_tokens=8)
    except Exception as e:  # any failure of the start-up request means the judge cannot be used
      status = getattr(e, "status_code", None)
      hint = ""
      if status in (401, 403):
        env = "ANTHROPIC_API_KEY" if self.api == "anthropic" else "OPENAI_API_KEY"
        hint = f" (HTTP {status}: the key was refused; set ${env} or pass api_key)"
      raise Unreachable(f"{self.describe()} is not reachable{hint}: {type(e).__name__}: "
                        f"{e}"[:1000]) from e

  def describe(self) -> str:
    """"<api> model '<model>' at <url>", for messages."""
    return f"{self.api} model {self.model!r} at {self.base_url or self._default_url()}"

  def _default_url(self) -> str:
    return "the hosted API"

  def close(self) -> None:
    """Closes the connection and the thread pool (both are rebuilt if used again)."""
    with self._lock:
      client, executor, self._client, self._executor = self._client, self._executor, None, None
    if executor is not None:
      executor.shutdown(wait=True)
    if client is not None:
      client.close()

  def __getstate__(self):  # the connection, pool and lock stay behind (process pools)
    state = self.__dict__.copy()
    state["_client"] = state["_executor"] = state["_lock"] = None
    return state

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._lock = threading.Lock()

  def __repr__(self):
    return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"


class OpenAIChat(LLMClient):
  """An OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, vLLM, SGLang, a local server).

  `base_url` is the API root ending in `/v1`, e.g. "http://127.0.0.1:8000/v1" (None: OpenAI's);
  `temperature` None sends 0.0 (a deterministic judge). See `LLMClient` for the other arguments.
  """

  api = "openai"

  def _make_client(self):
    try:
      import openai  # a runtime dependency, imported only when a judge first talks
    except ImportError as e:
      raise ImportError("the OpenAI-compatible judges need the openai client: "
                        "pip install 'openai>=1.50'") from e
    return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s,
                         max_retries=self.max_retries)

  def _default_url(self):
    return "api.openai.com"

  @staticmethod
  def convert(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Neutral messages -> chat-completions messages (images as base64 data URLs)."""
    out = []
    for m in messages:
      content = m["content"]
      if not isinstance(content, str):
        content = [{"type": "text", "text": p["text"]} if p["type"] == "text" else
                   {"type": "image_url", "image_url": {
                       "url": f"data:{p['media_type']};base64,{_b64(p['data'])}"}}
                   for p in _parts(content)]
      out.append({"role": m["role"], "content": content})
    return out

  def _complete(self, client, messages, max_tokens):
    response = client.chat.completions.create(
        model=self.model, messages=self.convert(messages), max_tokens=max_tokens,
        temperature=0.0 if self.temperature is None else self.temperature)
    if not getattr(response, "choices", None):
      raise ReplyError(f"reply without choices: {str(response)[:120]}")
    return response.choices[0].message.content or ""


class AnthropicChat(LLMClient):
  """The Anthropic Messages API (`POST {base_url}/v1/messages`), through the `anthropic` package.

  `base_url` is the API root without `/v1` (a trailing `/v1` is dropped), e.g.
  "https://api.anthropic.com" (None: $ANTHROPIC_BASE_URL when set, else that); the key is
  `api_key` or $ANTHROPIC_API_KEY (`resolve_api_key`). The `anthropic` 2.x package speaks API
  version 2026-10-21 (header `anthropic-version`), which has no sampling parameters:
  `temperature` must stay None (the model's own sampling), and a value is refused here rather
  than by the API mid-run. See `LLMClient` for the other arguments.
  """

  api = "anthropic"

  def __init__(self, model: str, *, base_url: str | None = None, **kwargs):
    if kwargs.get("temperature") is not None:
      raise ValueError(f"temperature={kwargs['temperature']!r}: the Anthropic Messages API "
                       "(version 2026-10-21, sent by anthropic>=2) takes no temperature; leave "
                       "it None")
    url = check_base_url(base_url)
    if url is not None:
      url = url.rstrip("/")
      url = url[:-len("/v1")] if url.endswith("/v1") else url
    super().__init__(model, base_url=url, **kwargs)

  def _make_client(self):
    try:
      import anthropic  # a runtime dependency, imported only when a judge first talks
    except ImportError as e:
      raise ImportError("the Anthropic judges need the anthropic client: "
                        "pip install 'anthropic>=2.17,<3'") from e
    return anthropic.Anthropic(api_key=self.api_key, base_url=self.base_url,
                               timeout=self.timeout_s, max_retries=self.max_retries)

  def _default_url(self):
    return os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL

  @staticmethod
  def convert(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Neutral messages -> (system prompt or None, Messages-API messages with base64 image
    blocks). System messages must come before the others; their texts are joined by a blank
    line."""
    system, out = [], []
    for m in messages:
      parts = _parts(m["content"])
      if m["role"] == "system":
        if out:
          raise ValueError("the Anthropic Messages API takes the system prompt apart: system "
                           "messages must come before every user and assistant message")
        if any(p["type"] != "text" for p in parts):
          raise ValueError("a system message holds text only")
        system.append("".join(p["text"] for p in parts))
        continue
      if isinstance(m["content"], str):
        out.append({"role": m["role"], "content": m["content"]})
        continue
      out.append({"role": m["role"], "content": [
          {"type": "text", "text": p["text"]} if p["type"] == "text" else
          {"type": "image", "source": {"type": "base64", "media_type": p["media_type"],
                                       "data": _b64(p["data"])}}
          for p in parts]})
    return ("\n\n".join(system) if system else None), out

  def _complete(self, client, messages, max_tokens):
    system, converted = self.convert(messages)
    kwargs = {"system": system} if system is not None else {}
    response = client.messages.create(model=self.model, max_tokens=max_tokens,
                                      messages=converted, **kwargs)
    texts = [b.text for b in (getattr(response, "content", None) or [])
             if getattr(b, "type", None) == "text"]
    if not texts:
      raise ReplyError(f"reply without a text block (stop_reason="
                       f"{getattr(response, 'stop_reason', None)!r}): {str(response)[:120]}")
    return "".join(texts)


_CLIENTS = {"openai": OpenAIChat, "anthropic": AnthropicChat}


def make_client(api: str, model: str, *, base_url: str | None = None, api_key: str | None = None,
                **kwargs) -> LLMClient:
  """The client of `api` ("openai" or "anthropic") for `model`.

  Args:
    api: one of `APIS`.
    model: the model name.
    base_url: the API root: ending in /v1 for OpenAI-compatible servers, the host for Anthropic;
      None: the vendor's hosted API.
    api_key: see `resolve_api_key`.
    **kwargs: timeout_s, max_retries, temperature, max_tokens, concurrency (`LLMClient`).
  """
  if api not in _CLIENTS:
    raise ValueError(f"api must be one of {APIS}, got {api!r}")
  return _CLIENTS[api](model, base_url=base_url, api_key=api_key, **kwargs)


# ---- prompt templates ----------------------------------------------------------------------------

def placeholders(template: str) -> set[str]:
  """The `{name}` fields of a str.format template (`{{` and `}}` are literal braces).

  Raises:
    ValueError: for a malformed template (an unmatched brace) or a positional field `{}` / `{0}`.
  """
  try:
    fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
  except ValueError as e:
    raise ValueError(f"{e} (write a literal brace as {{{{ or }}}})") from None
  names = set()
  for field in fields:
    name = field.split(".")[0].split("[")[0]
    if not name.isidentifier():
      raise ValueError(f"placeholder {{{field}}} is positional or not a name; use named "
                       "placeholders such as {prompt}")
    names.add(name)
  return names


def load_prompt(value: str | os.PathLike, *, what: str, required: Sequence[str] = (),
                optional: Sequence[str] = (), template: bool = True) -> str:
  """The text of a prompt given as text (a `str`) or as a file to read (an `os.PathLike`).

  A template (`template=True`) is a str.format string: it must use every `required` placeholder,
  may use the `optional` ones, and nothing else (`{{` / `}}` are literal braces). A system prompt
  (`template=False`) is sent as it is, braces included.

  Args:
    value: the prompt's text, or a pathlib.Path (any os.PathLike) of a UTF-8 file holding it.
    what: what the prompt is, for messages (e.g. "the code judge's prompt").
    required, optional: the placeholders.
    template: whether the text is formatted.

  Raises:
    ValueError: naming the prompt and its source, for a missing required or an unknown
      placeholder, a malformed template, or a str that is the path of an existing file (pass it
      as pathlib.Path to read it).
    FileNotFoundError: for a path that does not exist.
  """
  if isinstance(value, os.PathLike):
    path = os.fspath(value)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"{what}: no such file {path!r}")
    with open(path, encoding="utf-8") as f:
      text, source = f.read(), f"file {path!r}"
  elif isinstance(value, str):
    if "\n" not in value and len(value) < 4096 and os.path.isfile(value):
      raise ValueError(f"{what} is the text {value!r}, which is the path of a file: pass "
                       f"pathlib.Path({value!r}) to read the prompt from it")
    text, source = value, "text"
  else:
    raise ValueError(f"{what} must be its text (str) or a file (pathlib.Path), got "
                     f"{type(value).__name__}")
  if not text.strip():
    raise ValueError(f"{what} ({source}) is empty")
  if not template:
    return text
  try:
    names = placeholders(text)
  except ValueError as e:
    raise ValueError(f"{what} ({source}) is not a valid template: {e}") from None
  allowed = ", ".join("{" + n + "}" for n in (*required, *optional))
  for name in required:
    if name not in names:
      raise ValueError(f"{what} ({source}) lacks the required placeholder {{{name}}}; its "
                       f"placeholders are {allowed} (required: "
                       f"{', '.join('{' + n + '}' for n in required)})")
  unknown = sorted(names - set(required) - set(optional))
  if unknown:
    raise ValueError(f"{what} ({source}) has the unknown placeholder {{{unknown[0]}}}; its "
                     f"placeholders are {allowed} (write a literal brace as {{{{ or }}}})")
  return text
