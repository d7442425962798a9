"""The server rollout engine without vLLM: request spreading, the mapping of answers and errors, the weight sync's
calls and data, the recipe keys, and servers rlvr starts (restarted once, then named), against
:mod:`tests.rollout.fake_vllm_server`. The tests against a real ``rlvr serve`` are in ``test_server_engine_vllm.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
import torch

from rlvr.rollout.base import SamplingParams
from rlvr.rollout.server_client import ServerError, ServerInfo, ServerUnreachable
from rlvr.rollout.server_engine import ServerEngine, choose_transfer, first_token_version, sampling_body
from rlvr.rollout.server_launch import ServerFleet, ServerLaunchError, launch_transfer, server_dtype
from tests.rollout.fake_vllm_server import FakeServer

EOS = 2
FAKE_SERVER = Path(__file__).with_name("fake_vllm_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fakes():
    servers = [FakeServer().start(), FakeServer().start()]
    yield servers
    for s in servers:
        s.stop()


def expected(prompt: list[int], seed: int, n: int, max_new_tokens: int) -> list[list[int]]:
    """What the fake server samples (see its module): even samples end with eos, odd ones run to the limit."""
    return [[len(prompt), seed % 1000, j] + ([EOS] if j % 2 == 0 else [7] * (max_new_tokens - 3)) for j in range(n)]


# ------------------------------------------------------------------------------------------------ requests
def test_prompts_go_round_robin_and_come_back_in_order_with_finish_reasons_and_logprobs(fakes):
    a, b = fakes
    engine = ServerEngine([a.url, b.url], [EOS])
    prompts = [[5, 6], [5, 6, 7], [9]]
    torch.manual_seed(0)
    seeds = torch.randint(0, 2**31 - 1, (3,)).tolist()  # the engine draws the same seeds from the same RNG state
    torch.manual_seed(0)
    groups = engine.generate(prompts, 2, SamplingParams(temperature=0.7, max_new_tokens=6))
    # requests go out concurrently: a server sees its prompts in any order
    assert sorted(a.generated_prompts()) == [[5, 6], [9]] and b.generated_prompts() == [[5, 6, 7]]
    for prompt, seed, group in zip(prompts, seeds, groups, strict=True):
        assert [c.token_ids for c in group] == expected(prompt, seed, 2, 6)
        assert [c.finish_reason for c in group] == ["stop", "length"]
        assert group[0].logprobs == pytest.approx([-0.1, -0.2, -0.3, -0.4])
        assert all(c.policy_version == 0 for c in group)  # the engine labelled the servers' weights 0
    engine.generate([[1], [2]], 1, SamplingParams(max_new_tokens=4))  # the next call starts where this one stopped
    assert b.generated_prompts()[1:] == [[1]] and a.generated_prompts()[2:] == [[2]]
    engine.close()


def test_a_stream_sends_one_request_a_sample_round_robin_and_returns_each_as_it_is_answered(fakes):
    a, b = fakes
    engine = ServerEngine([a.url, b.url], [EOS])
    work = {0: ([5, 6], 11), 1: ([5, 6, 7], 12), 2: ([9], 13)}
    got = {}
    with engine.open_stream() as stream:
        for key, (prompt, seed) in work.items():
            stream.submit(key, prompt, SamplingParams(temperature=0.7, max_new_tokens=6), seed)
        assert stream.pending() == 3
        with pytest.raises(ValueError, match="prompt 0 has 60 tokens; with max_new_tokens=6 it exceeds the rollout "
                                             "servers' max_model_len=64"):
            stream.submit(3, [1] * 60, SamplingParams(max_new_tokens=6), 0)
        while stream.pending():
            got.update(stream.poll(5.0))
    # each request is one sample (n = 1) with its own seed: sample 0 of the fake server ends with eos
    assert {k: c.token_ids for k, c in got.items()} == {k: expected(p, seed, 1, 6)[0] for k, (p, seed) in work.items()}
    assert all(c.finish_reason == "stop" and c.policy_version == 0 for c in got.values())
    assert sorted(a.generated_prompts()) == [[5, 6], [9]] and b.generated_prompts() == [[5, 6, 7]]
    bodies = [body["sampling_params"] for s in fakes for path, body in s.calls if path == "/inference/v1/generate"]
    assert sorted((p["n"], p["seed"]) for p in bodies) == [(1, 11), (1, 12), (1, 13)]
    engine.close()


def test_the_request_carries_the_in_process_engines_sampling_fields(fakes):
    engine = ServerEngine([fakes[0].url], [EOS, 9])
    torch.manual_seed(3)
    seed = torch.randint(0, 2**31 - 1, (1,)).item()
    torch.manual_seed(3)
    groups = engine.generate([[4, 4]], 3, SamplingParams(temperature=0.0, top_p=0.5, top_k=3, max_new_tokens=5,
                                                         stop=("</tool>",)))
    path, body = [c for c in fakes[0].calls if c[0] == "/inference/v1/generate"][0]
    assert body["model"] == "fake-model" and body["token_ids"] == [4, 4]
    assert body["sampling_params"] == dict(
        n=3, temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0,
        frequency_penalty=0.0, max_tokens=5, logprobs=0, stop_token_ids=[EOS, 9], ignore_eos=False, detokenize=True,
        seed=seed, stop=["</tool>"], include_stop_str_in_output=True)  # greedy: top-p/k off, as in-process
    assert [(c.finish_reason, c.stop_sequence) for c in groups[0]] == [("stop_sequence", "</tool>")] * 3
    assert sampling_body(1, SamplingParams(), 5, [EOS])["detokenize"] is False  # no stop strings: ids only
    engine.close()


def test_first_token_version_comes_from_the_servers_spans_within_the_engines_versions():
    spans = {"weight_versions": [{"version": "3", "start": 0, "end": 2}, {"version": "4", "start": 2, "end": 5}]}
    assert first_token_version(spans, fallback=3, newest=4) == 3  # straddles a sync: its first token's version
    assert first_token_version(spans, fallback=2, newest=5) == 3
    assert first_token_version({"weight_versions": [{"version": "default", "start": 0, "end": 1}]}, 2, 2) == 2
    assert first_token_version({"weight_versions": [{"version": "9", "start": 0, "end": 1}]}, 2, 4) == 2  # not ours
    assert first_token_version({}, fallback=1, newest=1) == 1


# ------------------------------------------------------------------------------------------------ errors
def test_a_dead_url_is_an_error_naming_it_and_what_to_do():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ServerUnreachable) as err:
        ServerEngine([url], [EOS], request_timeout_s=5)
    msg = str(err.value)
    assert err.value.url == url and f"rollout server {url} does not answer" in msg
    assert "`rlvr serve`" in msg and "rollout.servers.urls" in msg


def test_a_refusal_a_timeout_and_a_short_answer_are_errors_naming_the_server(fakes):
    a, _ = fakes
    engine = ServerEngine([a.url], [EOS], request_timeout_s=0.5)
    sampling = SamplingParams(max_new_tokens=4)
    a.fail_status = 500
    with pytest.raises(ServerError, match=rf"rollout server {a.url} answered HTTP 500 to generate \(prompt 0, 2 "
                                          r"samples\).*the fake server refuses"):
        engine.generate([[1]], 2, sampling)
    a.fail_status, a.generate_delay_s = 0, 2.0
    start = time.monotonic()
    with pytest.raises(ServerUnreachable, match=rf"rollout server {a.url} did not answer to generate \(prompt 0, 2 "
                                                r"samples\) within 0.5 s \(rollout.servers.request_timeout_s"):
        engine.generate([[1]], 2, sampling)
    assert time.monotonic() - start < 1.9
    a.generate_delay_s, a.drop_one_sample = 0.0, True
    with pytest.raises(ServerError, match=rf"rollout server {a.url} returned 1 samples for prompt 0, expected 2"):
        engine.generate([[1]], 2, sampling)
    assert engine.requests_failed == 3
    with pytest.raises(ValueError, match=r"prompt 1 has 62 tokens; with max_new_tokens=4 it exceeds the rollout "
                                         r"servers' max_model_len=64"):
        engine.generate([[1], [1] * 62], 2, sampling)
    engine.close()


def test_the_weight_transfer_is_the_servers_own_and_must_match_the_recipe():
    def info(backend):
        return ServerInfo("m", 64, "torch.float32", backend, 1, "0.32.0")

    urls = ["http://a:1", "http://b:2"]
    assert choose_transfer("auto", [info("rlvr_file"), info("rlvr_file")], urls) == "file"
    assert choose_transfer("nccl", [info("nccl"), info("nccl")], urls) == "nccl"
    with pytest.raises(ValueError, match=r"http://b:2 runs weight transfer 'file', but rollout.servers.weight_transfer"
                                         r"='nccl': restart it with `rlvr serve ... --weight-transfer nccl`"):
        choose_transfer("nccl", [info("nccl"), info("rlvr_file")], urls)
    with pytest.raises(ValueError, match=r"different weight transfers \(http://a:1: nccl, http://b:2: ipc\)"):
        choose_transfer("auto", [info("nccl"), info("ipc")], urls)
    with pytest.raises(ValueError, match=r"http://a:1 runs no weight transfer rlvr knows .* `rlvr serve MODEL`"):
        choose_transfer("auto", [info(None), info("nccl")], urls)
    assert launch_transfer("ipc", None, 2) == "ipc"  # as asked
    if not torch.cuda.is_available():
        assert launch_transfer("auto", None, 2) == "file"  # no GPU: files in shared memory
    assert [server_dtype(p) for p in ("auto", "fp32", "bf16")] == ["auto", "float32", "bfloat16"]


# ------------------------------------------------------------------------------------------------ weight sync
def test_sync_pauses_sends_every_weight_through_a_file_labels_the_version_and_resumes(fakes, tmp_path):
    a, b = fakes
    engine = ServerEngine([a.url, b.url], [EOS], transfer_folder=str(tmp_path))
    model = torch.nn.Linear(3, 2)
    engine.sync_weights(model)
    for server in (a, b):
        paths = [path for path, _ in server.calls if path not in ("/inference/v1/generate",)]
        assert paths == ["/update_weight_version", "/pause", "/init_weight_transfer_engine", "/start_weight_update",
                         "/update_weights", "/finish_weight_update", "/reset_prefix_cache", "/resume"]
        bodies = dict(server.calls)
        assert bodies["/update_weights"]["update_info"]["names"] == ["weight", "bias"]
        assert bodies["/finish_weight_update"] == {"weight_version": "1"}
        assert torch.equal(server.received["weight"], model.weight.detach())
        assert torch.equal(server.received["bias"], model.bias.detach())
    folder = Path(dict(a.calls)["/init_weight_transfer_engine"]["init_info"]["folder"])
    assert folder.parent == tmp_path and list(folder.iterdir()) == []  # each file is deleted once loaded
    assert engine.policy_version == 1 and engine.syncs == 1 and engine.last_sync_bytes == 8 * 4
    assert [c.policy_version for c in engine.generate([[1]], 2, SamplingParams(max_new_tokens=4))[0]] == [1, 1]
    engine.close()
    assert not folder.exists()


# ------------------------------------------------------------------------------------------------ recipe keys
def test_engine_server_needs_servers_and_checks_their_addresses():
    from rlvr.config.schema import RolloutConfig

    with pytest.raises(ValueError, match=r"rollout.engine=server needs servers: list running ones in rollout.servers"
                                         r".urls \(started with `rlvr serve MODEL`\), or set rollout.servers.launch"):
        RolloutConfig(engine="server")
    with pytest.raises(ValueError, match=r"'localhost:8100' is not a server address; expected http://host:port"):
        RolloutConfig(engine="server", servers={"urls": ["localhost:8100"]})
    with pytest.raises(ValueError, match=r"launch.devices lists 1 entries for launch.count=2"):
        RolloutConfig(engine="server", servers={"launch": {"count": 2, "devices": ["0"]}})
    ok = RolloutConfig(engine="server", servers={"urls": ["http://gpu-node-3:8100"], "launch": {"count": 1}})
    assert ok.servers.request_timeout_s == 600 and ok.servers.weight_transfer == "auto"
    assert RolloutConfig(engine="hf").servers.launch.count == 0  # other engines ignore the section


# ------------------------------------------------------------------------------------------------ launched servers
class FakeFleet(ServerFleet):
    """Servers that are :mod:`tests.rollout.fake_vllm_server` processes instead of ``rlvr serve``."""

    def command(self, server):
        return [sys.executable, str(FAKE_SERVER), "--port", str(server.port)]


def fleet_of(count: int, tmp_path: Path, cls=FakeFleet) -> ServerFleet:
    from rlvr.config.schema import ServerLaunchConfig

    launch = ServerLaunchConfig(count=count, port=free_port(), startup_timeout_s=30)
    return cls("unused", launch, served_model_name="fake-model", log_dir=tmp_path / "servers")


def test_a_launched_server_that_dies_is_restarted_once_then_named(tmp_path):
    fleet = fleet_of(1, tmp_path)
    fleet.start()
    fleet.wait_ready()
    engine = ServerEngine(fleet.urls, [EOS], fleet=fleet, request_timeout_s=10)
    sampling = SamplingParams(max_new_tokens=4)
    torch.manual_seed(0)
    first = engine.generate([[1], [2, 3]], 2, sampling)
    server = fleet.servers[0]
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait()
    torch.manual_seed(0)
    again = engine.generate([[1], [2, 3]], 2, sampling)  # restarted, the requests sent again: the same samples
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in first]
    assert server.restarts == 1 and engine.requests_failed == 2 and fleet.alive(server)
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait()
    with pytest.raises(ServerLaunchError, match=rf"server 0 \(http://127.0.0.1:{server.port}, started by rlvr, log "
                                                rf".*server-0.log\) failed again after its restart"):
        engine.generate([[1]], 2, sampling)
    engine.close()
    assert not fleet.alive(server)


class CrashingFleet(ServerFleet):
    def command(self, server):
        return [sys.executable, "-c", "import sys; print('no model at that path'); sys.exit(3)"]


def test_a_server_that_exits_before_it_is_ready_is_named_with_its_log(tmp_path):
    fleet = fleet_of(1, tmp_path, CrashingFleet)
    fleet.start()
    with pytest.raises(ServerLaunchError, match=r"(?s)server 0 .* exited with code 3 before it was ready; the end of "
                                                r"its log:\n    no model at that path"):
        fleet.wait_ready()


def test_a_taken_port_is_an_error_before_anything_starts(tmp_path):
    fleet = fleet_of(1, tmp_path)
    taken = FakeServer(fleet.servers[0].port).start()
    try:
        with pytest.raises(ServerLaunchError, match=rf"port {taken.server_address[1]} is in use"):
            fleet.start()
    finally:
        taken.stop()
        fleet.close()


def test_a_lora_policy_sends_its_merged_weights_and_the_metadata_says_so_without_gathering(fakes, tmp_path):
    """The servers get the base model's names with the adapters folded in (W + alpha / r B A); the metadata the
    NCCL transfer declares first lists the same names, dtypes and shapes in the same order."""
    from rlvr.config.schema import LoraConfig, ModelConfig
    from rlvr.models.loading import load_causal_lm
    from rlvr.models.lora import apply_lora
    from rlvr.rollout.server_weights import trainer_weights, weight_metadata
    from tests.tiny import build_tiny_model

    path = build_tiny_model(tmp_path / "model")
    cfg = ModelConfig(name=str(path), lora=LoraConfig(rank=2, alpha=4.0, target_modules=["q_proj"]))
    base = load_causal_lm(str(path), cfg)
    plain = {n: p.detach().clone() for n, p in base.named_parameters()}
    model = apply_lora(base, cfg.lora, base_name=str(path))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.5)
            elif "lora_A" in name:
                p.fill_(0.25)
    sent = list(trainer_weights(model, torch.bfloat16))
    assert sorted(n for n, _ in sent) == sorted(plain)  # the base model's names (a merged weight comes after its bias)
    assert [(n, t.dtype, tuple(t.shape)) for n, t in sent] == weight_metadata(model, torch.bfloat16)  # same order
    q = "model.layers.0.self_attn.q_proj.weight"
    merged = dict(sent)[q].float()  # (B A)_ij = r * 0.5 * 0.25 = 0.25, times alpha / r = 2: + 0.5 everywhere
    assert torch.allclose(merged, (plain[q] + 0.5).bfloat16().float())
    assert torch.equal(dict(sent)["model.norm.weight"].float(), plain["model.norm.weight"].bfloat16().float())
    engine = ServerEngine([fakes[0].url], [EOS], transfer_folder=str(tmp_path))
    engine.sync_weights(model)
    assert sorted(fakes[0].received) == sorted(plain)
    assert torch.allclose(fakes[0].received[q], plain[q] + 0.5)  # the fake serves fp32: merged in fp32
    engine.close()


def test_rlvr_serve_starts_vllm_with_what_the_engine_needs():
    from rlvr.serving.vllm_server import ServeOptions, resolve_transfer, server_environment, vllm_arguments

    cpu = ServeOptions(model="embedded:smollm2-135m-instruct", port=8105, max_model_len=512, extra_args=["--x", "1"])
    args = vllm_arguments(cpu, "/models/smol", "float32", gpu=False, transfer=resolve_transfer("auto", gpu=False))
    pairs = {a: b for a, b in zip(args, args[1:]) if a.startswith("--") and not b.startswith("--")}
    assert pairs["--model"] == "/models/smol" and pairs["--served-model-name"] == "embedded:smollm2-135m-instruct"
    assert pairs["--logprobs-mode"] == "processed_logprobs" and pairs["--generation-config"] == "vllm"
    assert pairs["--weight-transfer-config"] == '{"backend": "rlvr_file"}' and pairs["--port"] == "8105"
    assert pairs["--worker-extension-cls"] == "rlvr.serving.file_weight_transfer.FileTransferWorkerExtension"
    assert args[-4:] == ["--enforce-eager", "--no-enable-chunked-prefill", "--x", "1"] and "--enable-scale-out" in args
    assert server_environment(cpu, gpu=False, transfer="file") == {
        "VLLM_SERVER_DEV_MODE": "1", "VLLM_LOGGING_STREAM": "ext://sys.stderr", "VLLM_CPU_KVCACHE_SPACE": "2"}
    threads = ServeOptions(model="m", threads=3)
    assert server_environment(threads, gpu=False, transfer="file")["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert server_environment(ServeOptions(model="m", devices="0-1"), False, "file")["VLLM_CPU_OMP_THREADS_BIND"] == \
        "0-1"
    gpu = ServeOptions(model="m", devices="2,3", weight_transfer="ipc")
    env = server_environment(gpu, gpu=True, transfer="ipc")
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"
    gpu_args = vllm_arguments(gpu, "m", "bfloat16", gpu=True, transfer="ipc")
    assert gpu_args[-2:] == ["--tensor-parallel-size", "2"] and "--enforce-eager" not in gpu_args
    assert resolve_transfer("auto", gpu=True) == "nccl"
    with pytest.raises(ValueError, match="--threads and --devices both place the CPU backend's threads"):
        server_environment(ServeOptions(model="m", threads=2, devices="0"), gpu=False, transfer="file")
