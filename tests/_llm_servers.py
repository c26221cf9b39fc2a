"""Both loopback chat servers behind one name, so a judge test runs unchanged over either API.

  srv = start("anthropic", responder, api_key="k")   # an AnthropicServer or an OpenAIServer
  srv.api, srv.url                                    # "anthropic", its base URL
  user_text(srv, body), system_text(srv, body), image_bytes(srv, body)
  error(srv, 429, "slow down")                        # the API's own error reply
"""
import _anthropic_server
import _openai_server

APIS = ("openai", "anthropic")
_MODULES = {"openai": _openai_server, "anthropic": _anthropic_server}
_SERVERS = {"openai": _openai_server.OpenAIServer, "anthropic": _anthropic_server.AnthropicServer}


def start(api, responder, **kwargs):
  return _SERVERS[api](responder, **kwargs)


def error(srv, status, message):
  return _MODULES[srv.api].error(status, message)


def user_text(srv, body):
  return _MODULES[srv.api].user_text(body)


def system_text(srv, body):
  return _MODULES[srv.api].system_text(body)


def image_bytes(srv, body):
  return _MODULES[srv.api].image_bytes(body)


def all_text(srv, body):
  """All text of a request: the system prompt and every turn's."""
  turns = _MODULES[srv.api].texts(body)   # OpenAI's include its system messages
  return turns if srv.api == "openai" else system_text(srv, body) + "\n" + turns


def broken_body(srv):
  """A 200 reply whose JSON is cut short."""
  return 200, (b'{"choices": [' if srv.api == "openai" else b'{"type": "message", "content": [')
