"""The HTTP side of ``rlvr judge serve``: an OpenAI-compatible ``POST /v1/chat/completions`` (plus ``GET /v1/models``
and ``GET /health``) over a :class:`rlvr.serving.chat_model.ChatModel`.

Read from a request: ``messages``, ``max_tokens`` (or ``max_completion_tokens``), ``temperature``, ``logprobs`` and
``top_logprobs`` (at most 20), ``n`` (1 only); other fields are ignored. With an ``api_key`` set, requests must send
``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import hmac
import json
import sys
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlvr.serving.chat_model import MAX_TOP_LOGPROBS, ChatModel, ChatRequest, completion_body

MAX_BODY_BYTES = 8 << 20
REQUEST_TIMEOUT_S = 600.0


class ChatServer(ThreadingHTTPServer):
    """Serves ``model`` under the name ``served_name`` at ``(host, port)`` (port 0: a free one; see
    ``server_address``). Raises OSError when the address cannot be bound."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, host: str, port: int, model: ChatModel, served_name: str, api_key: str | None = None) -> None:
        self.model, self.served_name, self.api_key = model, served_name, api_key
        super().__init__((host, port), _Handler)


def read_request(body: Any) -> ChatRequest:
    """The :class:`ChatRequest` of an OpenAI chat-completion body. Raises ValueError naming the bad field."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise ValueError("'messages' must be a non-empty list of {\"role\": str, \"content\": str}")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 256))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"'max_tokens' must be a positive integer, got {max_tokens!r}")
    temperature = body.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise ValueError(f"'temperature' must be a number in [0, 2], got {temperature!r}")
    if body.get("n", 1) != 1:
        raise ValueError("'n' must be 1 here")
    top = body.get("top_logprobs") or 0
    if body.get("logprobs") and not top:
        top = 1
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise ValueError(f"'top_logprobs' must be an integer in [0, {MAX_TOP_LOGPROBS}], got {top!r}")
    return ChatRequest(messages=[{"role": m["role"], "content": m["content"]} for m in messages],
                       max_tokens=max_tokens, temperature=float(temperature), top_logprobs=top)


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would flood a training log

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error", "code": int(status)}})

    def _authorized(self) -> bool:
        if self.server.api_key is None:
            return True
        given = self.headers.get("Authorization", "").encode("utf-8", "replace")
        if hmac.compare_digest(given, f"Bearer {self.server.api_key}".encode()):
            return True
        self._error(HTTPStatus.UNAUTHORIZED, "a valid API key is required")
        return False

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        if self.path == "/health":
            self._send(HTTPStatus.OK, {"status": "ok"})
        elif self.path == "/v1/models" and self._authorized():
            self._send(HTTPStatus.OK, {"object": "list", "data": [
                {"id": self.server.served_name, "object": "model", "owned_by": "rlvr"}]})
        elif self.path != "/v1/models":
            self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        if self.path != "/v1/chat/completions":
            self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: POST {self.path}")
            return
        if not self._authorized():
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BODY_BYTES} bytes")
            return
        try:
            body = json.loads(self.rfile.read(length))
            request = read_request(body)
            if body.get("model") not in (None, self.server.served_name):
                self._error(HTTPStatus.NOT_FOUND, f"model {body.get('model')!r} is not served here; it serves "
                                                  f"{self.server.served_name!r}")
                return
        except ValueError as e:
            self._error(HTTPStatus.BAD_REQUEST, str(e))
            return
        try:
            result = self.server.model.submit(request).result(timeout=REQUEST_TIMEOUT_S)
        except ValueError as e:  # a prompt too long for the model, a template that refuses the messages
            self._error(HTTPStatus.BAD_REQUEST, str(e))
            return
        except Exception as e:  # noqa: BLE001 - the model failed: the client may retry
            print(f"rlvr judge serve: a request failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}")
            return
        self._send(HTTPStatus.OK, completion_body(result, self.server.served_name, int(time.time()),
                                                  f"chatcmpl-{uuid.uuid4().hex}"))
