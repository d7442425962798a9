"""A stand-in for ``rlvr serve`` with vLLM's routes and no model, for the server engine's fast tests.

``/inference/v1/generate`` answers each request with samples made from the request itself, so a test can compute
what it must get back: sample ``j`` of a prompt is ``[len(prompt), seed % 1000, j]`` and then

- with ``stop`` strings: ``stop_reason`` = the first stop string (``finish_reason`` ``stop``);
- else for even ``j``: the first stop token id appended (an eos; ``finish_reason`` ``stop``, ``stop_reason`` that id);
- else: padded to ``max_tokens`` with the token 7 (``finish_reason`` ``length``).

Each token's log-prob is ``-(position + 1) / 10``; the weight version spans name :attr:`FakeServer.version`. The
weight-transfer routes (``/pause``, ``/init_weight_transfer_engine``, ...) answer 200 and are recorded in
:attr:`FakeServer.calls`. Run alone (``python -m tests.rollout.fake_vllm_server --port P``) it serves until killed.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-model"
MAX_MODEL_LEN = 64


def fake_samples(token_ids: list[int], params: dict[str, Any], version: str) -> list[dict[str, Any]]:
    """The choices the fake server returns for one request (see the module)."""
    choices = []
    for j in range(int(params.get("n", 1))):
        ids = [len(token_ids), int(params.get("seed") or 0) % 1000, j]
        finish, stop_reason = "length", None
        if params.get("stop"):
            finish, stop_reason = "stop", params["stop"][0]
        elif j % 2 == 0:
            ids.append(int(params["stop_token_ids"][0]))
            finish, stop_reason = "stop", ids[-1]
        else:
            ids += [7] * (int(params["max_tokens"]) - len(ids))
        content = [{"token_id": t, "logprob": -(k + 1) / 10, "rank": 1, "top_logprobs": []} for k, t in enumerate(ids)]
        choices.append({"index": j, "token_ids": ids, "finish_reason": finish, "stop_reason": stop_reason,
                        "logprobs": {"content": content},
                        "weight_versions": [{"version": version, "start": 0, "end": len(ids)}]})
    return choices


class FakeServer(ThreadingHTTPServer):
    """The fake server on ``127.0.0.1:port`` (0: a free port).

    Attributes:
        calls: ``(path, body)`` of every POST, in arrival order.
        generate_delay_s: sleep before answering a generate request (a slow or hung server).
        fail_status: answer every generate request with this HTTP status and a message (0: answer normally).
        drop_one_sample: return one sample fewer than asked.
        version: the weight version label (set by ``/update_weight_version`` and ``/finish_weight_update``).
        received: the tensors of every ``/update_weights`` of the ``file`` transfer, read from the file it names.
    """

    daemon_threads = True

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.calls: list[tuple[str, Any]] = []
        self.generate_delay_s = 0.0
        self.fail_status = 0
        self.drop_one_sample = False
        self.version = "default"
        self.received: dict[str, Any] = {}
        self.folder: str | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def generated_prompts(self) -> list[list[int]]:
        """The prompts of the generate requests this server answered, in arrival order."""
        return [body["token_ids"] for path, body in self.calls if path == "/inference/v1/generate"]

    def start(self) -> "FakeServer":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?")[0]
        if path == "/health":
            self._answer(200, {})
        elif path == "/v1/models":
            self._answer(200, {"data": [{"id": MODEL, "max_model_len": MAX_MODEL_LEN}]})
        elif path == "/server_info":
            self._answer(200, {"vllm_config": {"weight_transfer_config": {"backend": "rlvr_file"},
                                               "model_config": {"dtype": "torch.float32"},
                                               "parallel_config": {"world_size": 1}},
                               "system_env": {"vllm_version": "fake"}})
        else:
            self._answer(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        server = self.server
        with server._lock:
            server.calls.append((path, body))
        if path == "/inference/v1/generate":
            if server.generate_delay_s:
                time.sleep(server.generate_delay_s)
            if server.fail_status:
                self._answer(server.fail_status, {"error": {"message": "the fake server refuses"}})
                return
            choices = fake_samples(body["token_ids"], body["sampling_params"], server.version)
            self._answer(200, {"choices": choices[:-1] if server.drop_one_sample else choices})
        elif path in ("/update_weight_version", "/finish_weight_update"):
            version = (body or {}).get("new_version", (body or {}).get("weight_version"))
            if version is not None:
                server.version = str(version)
            self._answer(200, {})
        elif path == "/init_weight_transfer_engine":
            server.folder = body["init_info"]["folder"]
            self._answer(200, {})
        elif path == "/update_weights":
            from safetensors.torch import load_file

            server.received.update(load_file(f"{server.folder}/{body['update_info']['file']}"))
            self._answer(200, {})
        elif path in ("/pause", "/resume", "/reset_prefix_cache", "/start_weight_update",
                      "/shutdown_weight_transfer_engine"):
            self._answer(200, {})
        else:
            self._answer(404, {"detail": "Not Found"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    FakeServer(parser.parse_known_args()[0].port).serve_forever()


if __name__ == "__main__":
    main()
