"""``rlvr serve``: vLLM's own OpenAI-compatible API server, started with what ``rollout.engine: server`` needs.

What it adds to ``vllm serve MODEL`` (every flag below is vLLM's own; the server is vLLM's, run in this process):

- ``--logprobs-mode processed_logprobs``: each sampled token's log-prob under logits / temperature before top-p/k,
  the same numbers the in-process engine returns (:mod:`rlvr.rollout.vllm_engine`);
- ``--generation-config vllm``: no sampling defaults from the model's ``generation_config.json`` (a repetition penalty
  there would change the distribution behind the trainer's back); ``--enable-scale-out``: the token-in, token-out
  route ``/inference/v1/generate`` (vLLM's ``SamplingParams`` in, token ids, log-probs and the weight version of each
  token out), which :class:`rlvr.rollout.server_engine.ServerEngine` uses;
- ``VLLM_SERVER_DEV_MODE=1``: the weight-transfer and pause routes (``/init_weight_transfer_engine``,
  ``/update_weights``, ``/pause``, ``/resume``, ...) -- and vLLM's other development routes, which is why the server
  listens on 127.0.0.1 unless ``--host`` says otherwise: give other machines access on a trusted network only;
- ``--weight-transfer-config``: ``nccl`` on a GPU machine, ``file`` (:mod:`rlvr.serving.file_weight_transfer`) on a
  CPU one, or the one asked for; ``ipc`` also sets ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (its CUDA IPC handles
  travel pickled over HTTP);
- the dtype the trainer's precision choice gives the in-process engine (``--dtype auto``,
  :func:`rlvr.models.precision.choose_precision`), and on vLLM's CPU backend ``--enforce-eager`` and no chunked prefill
  (seeded sampling fails on CPU when a prompt's prefill is split over steps), as the in-process engine does;
- ``--devices``: the GPUs (``CUDA_VISIBLE_DEVICES``, tensor parallel over them) or, on CPU, the cores its threads are
  bound to (``VLLM_CPU_OMP_THREADS_BIND``); ``--threads N`` on CPU: N unbound threads.

It prints ``rlvr serve: ready at http://HOST:PORT ...`` on stdout once ``/health`` answers (vLLM logs to stderr).
``--vllm-args '...'`` passes more arguments to vLLM's server as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Literal

WeightTransfer = Literal["auto", "nccl", "ipc", "file"]

WORKER_EXTENSION = "rlvr.serving.file_weight_transfer.FileTransferWorkerExtension"

DEFAULT_PORT = 8100
DEFAULT_CPU_KV_CACHE_GIB = 2


@dataclass(frozen=True)
class ServeOptions:
    """What ``rlvr serve`` was asked for (its command-line flags)."""

    model: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    devices: str | None = None
    threads: int | None = None
    max_model_len: int | None = None
    dtype: str = "auto"
    served_model_name: str | None = None
    weight_transfer: WeightTransfer = "auto"
    seed: int = 0
    kv_cache_gib: int = DEFAULT_CPU_KV_CACHE_GIB
    extra_args: list[str] = field(default_factory=list)


def resolve_transfer(requested: WeightTransfer, gpu: bool) -> str:
    """The weight transfer a server runs: ``requested``, or for ``auto`` ``nccl`` on a GPU machine, else ``file``."""
    if requested != "auto":
        return requested
    return "nccl" if gpu else "file"


def server_environment(options: ServeOptions, gpu: bool, transfer: str) -> dict[str, str]:
    """The environment variables ``rlvr serve`` sets for vLLM (before importing it).

    Raises:
        ValueError: ``--threads`` on a GPU machine, or with ``--devices`` on CPU (both bind the CPU threads).
    """
    env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_LOGGING_STREAM": "ext://sys.stderr"}
    if transfer == "ipc":
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    if gpu:
        if options.threads is not None:
            raise ValueError("--threads sets the CPU backend's threads; on a GPU machine choose GPUs with --devices")
        if options.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = options.devices
        return env
    env["VLLM_CPU_KVCACHE_SPACE"] = str(options.kv_cache_gib)
    if options.threads is not None:
        if options.devices is not None:
            raise ValueError("--threads and --devices both place the CPU backend's threads: give one (--devices "
                             "binds them to cores, --threads leaves them unbound)")
        env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS=str(options.threads))
    elif options.devices is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = options.devices
    return env


def vllm_arguments(options: ServeOptions, model_path: str, dtype: str, gpu: bool, transfer: str) -> list[str]:
    """vLLM's server arguments for ``options`` (``model_path``: the resolved folder or hub name; ``dtype``: vLLM's)."""
    from rlvr.rollout.server_client import VLLM_BACKENDS

    args = ["--model", model_path, "--served-model-name", options.served_model_name or options.model,
            "--host", options.host, "--port", str(options.port), "--dtype", dtype, "--seed", str(options.seed),
            "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm", "--enable-scale-out",
            "--weight-transfer-config", json.dumps({"backend": VLLM_BACKENDS[transfer]}),
            "--worker-extension-cls", WORKER_EXTENSION]
    if options.max_model_len is not None:
        args += ["--max-model-len", str(options.max_model_len)]
    if gpu and options.devices is not None and "," in options.devices:
        args += ["--tensor-parallel-size", str(len(options.devices.split(",")))]
    if not gpu:
        args += ["--enforce-eager", "--no-enable-chunked-prefill"]
    return args + list(options.extra_args)


def choose_dtype(options: ServeOptions, model_path: str, gpu: bool) -> str:
    """vLLM's ``--dtype``: as given, or for ``auto`` the generation dtype the trainer's precision choice gives the
    model on this device (the in-process engine's, so server and in-process samples agree)."""
    if options.dtype != "auto":
        return options.dtype
    from transformers import AutoConfig

    from rlvr.models.precision import choose_precision, matmul_shape

    config = AutoConfig.from_pretrained(model_path)
    return choose_precision("auto", "cuda" if gpu else "cpu", matmul_shape(config)).vllm_dtype


def _announce_when_ready(url: str, line: str, stop: threading.Event) -> None:
    """Print ``line`` on stdout once ``url/health`` answers 200."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    print(line, flush=True)
                    return
        except OSError:
            pass
        stop.wait(1.0)


def public_url(host: str, port: int) -> str:
    """The address clients use: ``host``, or this machine's name where the server listens on every interface."""
    import socket

    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    return f"http://{shown}:{port}"


def serve(options: ServeOptions) -> int:
    """Start vLLM's API server in this process with :func:`vllm_arguments`; returns when it stops.

    Raises:
        ValueError: conflicting flags (:func:`server_environment`).
        rlvr.rollout.vllm_engine.VLLMNotInstalledError: vLLM is not installed.
        rlvr.models.loading.ModelLoadError: the model cannot be found.
    """
    import torch

    from rlvr.models.loading import resolve_model_path

    gpu = torch.cuda.is_available()
    transfer = resolve_transfer(options.weight_transfer, gpu)
    os.environ.update(server_environment(options, gpu, transfer))
    model_path = resolve_model_path(options.model)
    dtype = choose_dtype(options, model_path, gpu)
    from rlvr.rollout.vllm_engine import import_vllm

    import_vllm()
    import uvloop
    from vllm.entrypoints.launchers.api_server.entry import run_server
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser(prog="rlvr serve")).parse_args(
        vllm_arguments(options, model_path, dtype, gpu, transfer))
    validate_parsed_serve_args(args)
    url = public_url(options.host, options.port)
    stop = threading.Event()
    line = (f"rlvr serve: ready at {url} (model {options.served_model_name or options.model}, dtype {dtype}, weight "
            f"transfer {transfer}, {'GPU' if gpu else 'CPU backend'})")
    threading.Thread(target=_announce_when_ready, args=(f"http://127.0.0.1:{options.port}"
                                                        if options.host in ("0.0.0.0", "::", "") else url, line, stop),
                     name="rlvr-serve-ready", daemon=True).start()
    started = time.monotonic()
    try:
        uvloop.run(run_server(args))
    finally:
        stop.set()
    print(f"rlvr serve: stopped after {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``serve`` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "serve", help="serve a model with vLLM for rollout.engine: server (weight transfer, log-probs, token ids)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="hub name, local folder, or embedded:smollm2-135m-instruct")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0: every one; trusted networks "
                                                        "only: the weight-transfer routes are open)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--devices", help="GPU ids (CUDA_VISIBLE_DEVICES, e.g. 2,3: tensor parallel over both); on CPU the "
                                     "cores to bind threads to (e.g. 0-7)")
    p.add_argument("--threads", type=int, help="CPU backend: this many unbound threads (instead of --devices)")
    p.add_argument("--max-model-len", type=int, help="prompt + response tokens a request may hold")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
                   help="weight dtype; auto: the trainer's generation dtype for this model and device")
    p.add_argument("--served-model-name", help="the name clients send (default: MODEL as given)")
    p.add_argument("--weight-transfer", default="auto", choices=["auto", "nccl", "ipc", "file"],
                   help="how weights arrive from the trainer; auto: nccl on GPU, file on CPU")
    p.add_argument("--seed", type=int, default=0, help="vLLM's seed (requests from rlvr carry their own)")
    p.add_argument("--kv-cache-gib", type=int, default=DEFAULT_CPU_KV_CACHE_GIB,
                   help="CPU backend: KV cache size (VLLM_CPU_KVCACHE_SPACE)")
    p.add_argument("--vllm-args", default="", metavar="'ARGS'",
                   help="more arguments for vLLM's server, in one quoted string: --vllm-args '--max-num-seqs 64'")
    p.set_defaults(func=serve_command)
    return p


def serve_command(args: argparse.Namespace) -> int:
    """``rlvr serve``: the options from the command line, then :func:`serve`."""
    import shlex

    extra = shlex.split(args.vllm_args)
    options = ServeOptions(model=args.model, host=args.host, port=args.port, devices=args.devices,
                           threads=args.threads, max_model_len=args.max_model_len, dtype=args.dtype,
                           served_model_name=args.served_model_name, weight_transfer=args.weight_transfer,
                           seed=args.seed, kv_cache_gib=args.kv_cache_gib, extra_args=extra)
    return serve(options)
