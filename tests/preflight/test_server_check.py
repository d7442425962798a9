"""`rlvr check` on a recipe with `rollout.engine: server`: the servers rlvr will start (ports, devices, transfer) and
those given by URL (they answer, one model, a transfer rlvr knows, the vLLM version, room for a response), before the
model loads; and the memory estimate counts the servers started on this machine. Stand-in servers: no vLLM."""

from __future__ import annotations

import os
import socket

import pytest

from rlvr.config import Recipe
from rlvr.preflight.devices import GIB, DeviceMemory
from rlvr.preflight.memory import estimate_memory
from rlvr.preflight.model_shape import ModelShape
from rlvr.preflight.report import Report
from rlvr.preflight.server_check import check_servers, installed_vllm_version
from tests.rollout.fake_vllm_server import MAX_MODEL_LEN, MODEL, FakeServer

DATA = {"source": {"type": "jsonl", "path": "rows.jsonl"}}


def _recipe(max_new_tokens: int = 16, engine: str = "server", **servers) -> Recipe:
    return Recipe(data=DATA, verifiers=[{"name": "math"}],
                  rollout={"engine": engine, "servers": servers, "max_new_tokens": max_new_tokens})


def _findings(recipe: Recipe, probe: bool = True) -> list[tuple[str, str]]:
    report = Report()
    check_servers(report, recipe, probe)
    return [(f.level, f.message) for f in report.findings if f.check == "servers"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake():
    server = FakeServer().start()
    yield server
    server.stop()


def test_another_engine_checks_no_server():
    assert _findings(_recipe(engine="hf", urls=["http://127.0.0.1:9"])) == []


def test_free_ports_and_cores_are_ok_naming_them_and_the_transfer(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    port = _free_port()
    found = _findings(_recipe(launch={"count": 1, "port": port, "devices": ["0"]}))
    assert found == [("ok", f"1 rollout server(s) to start at 127.0.0.1:{port} on 0, weight transfer file")]


def test_a_taken_port_is_an_error_naming_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        found = _findings(_recipe(launch={"count": 2, "port": port}))
    errors = [m for level, m in found if level == "error"]
    assert len(errors) == 1 and f"port(s) {port} of rollout.servers.launch are in use" in errors[0]
    assert "rollout.servers.launch.port" in errors[0]


def test_cores_the_machine_lacks_and_a_malformed_device_entry_are_errors(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    cores = os.cpu_count()
    found = _findings(_recipe(launch={"count": 2, "port": _free_port(), "devices": [f"0-{cores}", "x"]}))
    errors = [m for level, m in found if level == "error"]
    assert errors == [f"rollout.servers.launch.devices[0] = '0-{cores}' names core {cores}, but this machine has "
                      f"{cores} cores (0-{cores - 1})",
                      "rollout.servers.launch.devices[1] = 'x': expected core ids such as '1', '2,3' or '0-7'"]


def test_a_server_given_by_url_is_called_and_described(fake):
    found = _findings(_recipe(urls=[fake.url]))
    assert ("ok", f"{fake.url} serves {MODEL} (vLLM fake, weight transfer rlvr_file, max_model_len {MAX_MODEL_LEN}, "
                  f"1 worker(s))") in found
    warn = [m for level, m in found if level == "warn"]
    local = installed_vllm_version()  # the stand-in says its version is "fake"
    assert warn == ([] if local is None else [
        f"rollout server {fake.url} runs vLLM fake, this machine {local}: the weight transfer and the token routes can "
        f"differ between releases; install the same version on both"])
    assert not [m for level, m in found if level == "error"]


def test_urls_are_called_only_when_probing(fake):
    assert _findings(_recipe(urls=["http://127.0.0.1:9"]), probe=False) == []


def test_a_server_that_does_not_answer_is_an_error_naming_it():
    url = f"http://127.0.0.1:{_free_port()}"
    errors = [m for level, m in _findings(_recipe(urls=[url])) if level == "error"]
    assert len(errors) == 1 and errors[0].startswith(f"rollout server {url} does not answer")


def test_a_context_too_short_for_the_response_and_a_transfer_mismatch_are_errors(fake):
    recipe = _recipe(MAX_MODEL_LEN, urls=[fake.url], weight_transfer="nccl")
    errors = [m for level, m in _findings(recipe) if level == "error"]
    assert errors == [
        f"rollout server {fake.url} holds {MAX_MODEL_LEN} tokens (max_model_len), not a prompt and "
        f"rollout.max_new_tokens={MAX_MODEL_LEN}: restart it with a larger `rlvr serve --max-model-len`",
        f"rollout server {fake.url} runs weight transfer 'file', but rollout.servers.weight_transfer='nccl': restart "
        f"it with `rlvr serve ... --weight-transfer nccl`, or set rollout.servers.weight_transfer: auto"]


SHAPE = ModelShape(params=100_000_000, layers=4, hidden=256, intermediate=1024, heads=4, kv_heads=4, head_dim=64,
                   vocab=1000, max_positions=2048, source="test")


def _part(recipe: Recipe, device: DeviceMemory) -> list:
    est = estimate_memory(recipe, {"policy": SHAPE}, device, ranks=1, max_prompt_tokens=64)
    return [p for p in est.parts if "rollout server" in p.name]


def test_servers_started_on_a_cpu_machine_hold_their_weights_and_kv_cache_in_its_ram():
    parts = _part(_recipe(launch={"count": 2}), DeviceMemory("host RAM", 24 * GIB, "cpu"))
    assert [(p.name, p.bytes, p.phase) for p in parts] == [
        ("2 rollout server(s) here (bf16 weights + 2 GiB KV cache each)",
         2 * (2 * SHAPE.params + 2 * GIB), "resident")]
    assert _part(_recipe(urls=["http://elsewhere:8100"]), DeviceMemory("host RAM", 24 * GIB, "cpu")) == []


def test_servers_on_the_trainers_gpu_take_vllms_share_and_those_on_others_nothing(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    gpu = DeviceMemory("H100-80GB", 80 * GIB, "gpu")
    shared = _part(_recipe(launch={"count": 1, "extra_args": ["--gpu-memory-utilization", "0.3"]}), gpu)
    assert [(p.bytes, p.phase) for p in shared] == [(0.3 * 80 * GIB, "resident")]
    default = _part(_recipe(launch={"count": 1}), gpu)
    assert [p.bytes for p in default] == [0.9 * 80 * GIB]
    assert _part(_recipe(launch={"count": 2, "devices": ["1", "2"]}), gpu) == []
