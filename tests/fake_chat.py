"""A scripted OpenAI-compatible chat server on loopback for tests: each request's answer comes from a Python function
of the request (a verdict, a delay, an HTTP error, garbage, or the server's death), and every request is recorded.

    with FakeChatServer(lambda req: Reply(text="Score: 7")) as server:
        server.url        # "http://127.0.0.1:PORT/v1"
        server.requests   # the JSON bodies received, in order
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the server answers: a chat completion with ``text`` (and first-token ``top`` logprobs when given), or
    ``status`` with ``raw`` as the body; ``delay_s`` first; ``die``: close the connection without answering and stop
    the server (every later request is refused)."""

    text: str = ""
    top: dict[str, float] | None = None
    status: int = 200
    raw: str | None = None
    delay_s: float = 0.0
    die: bool = False
    finish_reason: str = "stop"
    refusal: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def completion_body(reply: Reply, model: str) -> dict[str, Any]:
    """An OpenAI chat-completion body for ``reply``."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": reply.finish_reason,
                              "message": {"role": "assistant", "content": reply.text, "refusal": reply.refusal}}
    if reply.top is not None:
        first = max(reply.top, key=reply.top.get)
        choice["logprobs"] = {"content": [{"token": first, "logprob": reply.top[first], "top_logprobs": [
            {"token": t, "logprob": lp} for t, lp in reply.top.items()]}]}
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": model, "choices": [choice]}


def user_text(request: dict) -> str:
    """The last user message of a chat request."""
    return [m["content"] for m in request["messages"] if m["role"] == "user"][-1]


class FakeChatServer:
    """A chat server answering with ``script(request) -> Reply`` (see the module docstring)."""

    def __init__(self, script: Callable[[dict], Reply]) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                reply = outer.script(body)
                time.sleep(reply.delay_s)
                if reply.die:
                    threading.Thread(target=outer.stop, daemon=True).start()
                    self.close_connection = True
                    self.connection.close()
                    return
                data = (reply.raw if reply.raw is not None
                        else json.dumps(completion_body(reply, body.get("model", "")))).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (its timeout) first
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.stopped = False

    def stop(self) -> None:
        """Stop serving and close the port (idempotent)."""
        if not self.stopped:
            self.stopped = True
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self) -> FakeChatServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
