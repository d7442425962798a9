"""The ``server`` rollout engine: samples from vLLM servers (``rlvr serve``) over HTTP, and sends them the trainer's
weights after every optimizer step.

Requests. Each prompt is one ``POST /inference/v1/generate`` (vLLM's token-in, token-out route on its OpenAI-compatible
server): the prompt's token ids and the same ``vllm.SamplingParams`` the in-process engine builds
(:meth:`rlvr.rollout.vllm_engine.VLLMRolloutEngine.sampling_params`: ``n`` samples, ``logprobs=0``, the eos ids as
stop tokens, the per-prompt seed drawn from torch's RNG, stop strings kept in the output). The answer carries each
sample's token ids, the log-prob of each sampled token (the server runs with ``--logprobs-mode processed_logprobs``:
log softmax of logits / temperature before top-p/k, as in-process), its finish reason and stop string, and the weight
version of each token. The ids are never decoded and re-encoded. Finish reasons are mapped as in-process: a stop
string -> ``stop_sequence``, a last token that is an eos id -> ``stop``, else ``length``.

Spreading. The prompts of one call go round robin over the servers (prompt i to server ``(start + i) mod S``, the
start moving on by the call's prompt count), all at once from a thread pool; each request has its own timeout
(``rollout.servers.request_timeout_s``). The same seeds give the same samples whichever server draws them.

Failures (``rollout.servers.on_server_failure: error``). A server that refuses a request (HTTP error) or returns a
malformed answer is an error naming it. A server rlvr started that stops answering is restarted once, given the
current weights, and sent its requests again (same seeds, same samples); one that fails again, or a server given by
URL that stops answering, is an error naming its URL and what to do. The design keeps no degraded mode: a run either
has all its servers or stops, so its samples never depend on which servers were up.

Weight sync (:meth:`ServerEngine.sync_weights`, timed by the trainer's ``sync`` stage). Rank 0 pauses every server
(``/pause?mode=keep``: requests in flight freeze where they are), sends the weights through the weight transfer the
servers run (:mod:`rlvr.rollout.server_weights`: ``nccl``, ``ipc`` or ``file``), labels them with the new version
(``/finish_weight_update``), drops every KV block computed with the old weights
(``/reset_prefix_cache?reset_running_requests=true``: requests in flight are recomputed from their tokens), and
resumes. Every rank walks the weights (ZeRO-3 gathers) and waits at a barrier, so no rank samples before the servers
hold the new weights. A LoRA policy sends its merged weights (base + (alpha / r) B A), not the adapter.

Versions. :attr:`ServerEngine.policy_version` counts the syncs this engine made (0 = the weights the servers started
with, or were given when the engine connected). Each :class:`rlvr.rollout.base.Completion` carries the version of
the weights that sampled its first token, read from the server's per-token version spans (a sample that straddles a
sync keeps its first token's version; its later tokens come from the new weights, over a recomputed KV cache). It is
the count of syncs, not the trainer's step: after a resume the count starts again at 0.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import torch

from rlvr.rollout.base import Completion, SamplingParams, check_prompts
from rlvr.rollout.server_client import ServerClient, ServerError, ServerInfo, ServerUnreachable, transfer_name
from rlvr.rollout.weight_sync import SyncWatchdog

if TYPE_CHECKING:
    from rlvr.config import Recipe
    from rlvr.rollout.server_launch import ServerFleet

GENERATE_ROUTE = "/inference/v1/generate"
_SYNC_HINT = ("A ZeRO-3 gather waits for every rank: check the other ranks' logs. A server that stops answering "
              "during a sync: check its log (a server rlvr started logs to rollout.servers' log folder).")


@dataclass(frozen=True)
class GroupRequest:
    """One prompt's request: its index in the call, the server it goes to, and the JSON body."""

    index: int
    server: int
    body: dict[str, Any]


def sampling_body(n: int, sampling: SamplingParams, seed: int, eos_ids: list[int]) -> dict[str, Any]:
    """The ``sampling_params`` of a generate request: the fields of the in-process engine's ``vllm.SamplingParams``
    (:meth:`rlvr.rollout.vllm_engine.VLLMRolloutEngine.sampling_params`), plus the penalties at their neutral values
    (so no server default can change the distribution)."""
    greedy = sampling.temperature == 0
    body: dict[str, Any] = dict(
        n=n, temperature=sampling.temperature, top_p=1.0 if greedy else sampling.top_p,
        top_k=0 if greedy else sampling.top_k, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0,
        frequency_penalty=0.0, max_tokens=sampling.max_new_tokens, logprobs=0, stop_token_ids=list(eos_ids),
        ignore_eos=False, detokenize=bool(sampling.stop), seed=seed)
    if sampling.stop:
        body.update(stop=list(sampling.stop), include_stop_str_in_output=True)
    return body


def first_token_version(choice: dict[str, Any], fallback: int, newest: int) -> int:
    """The weight version of a sample's first token from the server's spans (``weight_versions``: ``[{"version":
    "3", "start": 0, "end": 12}, ...]``); ``fallback`` where the server gives none or a label that is not a version of
    this engine (not an integer in ``[fallback, newest]``)."""
    spans = choice.get("weight_versions") or []
    if not spans:
        return fallback
    try:
        version = int(spans[0]["version"])
    except (KeyError, TypeError, ValueError):
        return fallback
    return version if fallback <= version <= newest else fallback


def parse_group(url: str, index: int, n: int, answer: dict[str, Any], eos_ids: set[int], submitted: int,
                newest: int) -> list[Completion]:
    """The ``n`` completions of prompt ``index`` from a generate answer, in sample order.

    Raises:
        ServerError: the wrong number of samples, a token without its log-prob, or an aborted request (named with the
            server's URL).
    """
    choices = sorted(answer.get("choices") or [], key=lambda c: int(c.get("index", 0)))
    if len(choices) != n:
        raise ServerError(url, f"rollout server {url} returned {len(choices)} samples for prompt {index}, expected {n}")
    group = []
    for choice in choices:
        ids = [int(t) for t in choice.get("token_ids") or []]
        if choice.get("finish_reason") == "abort":
            raise ServerError(url, f"rollout server {url} aborted prompt {index} (paused with mode=abort or shutting "
                                   f"down while it generated)")
        content = (choice.get("logprobs") or {}).get("content") or []
        if len(content) != len(ids) or any(int(c["token_id"]) != t for c, t in zip(content, ids)):
            raise ServerError(url, f"rollout server {url} returned {len(content)} log-probs for {len(ids)} tokens "
                                   f"(prompt {index}, sample {choice.get('index')}); is it a `rlvr serve` server?")
        logprobs = [float(c["logprob"]) for c in content]
        version = first_token_version(choice, submitted, newest)
        stop = choice.get("stop_reason")
        if isinstance(stop, str):  # a stop string (an int would be a stop token id)
            group.append(Completion(ids, logprobs, "stop_sequence", stop, policy_version=version))
        else:
            group.append(Completion(ids, logprobs, "stop" if ids and ids[-1] in eos_ids else "length",
                                    policy_version=version))
    return group


def choose_transfer(requested: str, infos: list[ServerInfo], urls: list[str]) -> str:
    """The weight transfer of a fleet: the one every server runs, which ``rollout.servers.weight_transfer`` must
    match unless it is ``auto``.

    Raises:
        ValueError: a server without a weight transfer (not started with ``rlvr serve``), servers that run different
            ones, or one that differs from an explicit ``requested`` (the server is named, with the fix).
    """
    names = [transfer_name(info.weight_transfer) for info in infos]
    for url, info, name in zip(urls, infos, names):
        if name is None:
            raise ValueError(f"rollout server {url} runs no weight transfer rlvr knows (vLLM backend "
                             f"{info.weight_transfer!r}): start it with `rlvr serve MODEL` (--weight-transfer "
                             f"auto|nccl|ipc|file)")
        if requested != "auto" and name != requested:
            raise ValueError(f"rollout server {url} runs weight transfer {name!r}, but rollout.servers.weight_transfer="
                             f"{requested!r}: restart it with `rlvr serve ... --weight-transfer {requested}`, or set "
                             f"rollout.servers.weight_transfer: auto")
    if len(set(names)) > 1:
        listing = ", ".join(f"{u}: {n}" for u, n in zip(urls, names))
        raise ValueError(f"the rollout servers run different weight transfers ({listing}): start them all with the "
                         f"same `rlvr serve --weight-transfer`")
    return str(names[0])


def check_fleet(requested: str, infos: list[ServerInfo], urls: list[str]) -> str:
    """The fleet's weight transfer (:func:`choose_transfer`), once every server is seen to serve the same model.

    Raises:
        ValueError: the servers serve different models (each named with its model), or as :func:`choose_transfer`.
    """
    if len({info.model for info in infos}) > 1:
        listing = ", ".join(f"{u}: {i.model}" for u, i in zip(urls, infos))
        raise ValueError(f"the rollout servers serve different models ({listing}): a run samples one policy")
    return choose_transfer(requested, infos, urls)


class ServerEngine:
    """The ``server`` rollout engine (see the module).

    Args:
        urls: the servers (``http://host:port``), launched ones included.
        eos_ids: every id that ends a response (stop tokens).
        request_timeout_s: limit of one generate request (``rollout.servers.request_timeout_s``).
        weight_transfer: ``rollout.servers.weight_transfer`` (``auto``: the servers' own).
        transfer_folder: ``file`` transfer: the shared folder (``None``: ``/dev/shm``, else the temporary folder).
        weight_sync_timeout_s: limit of one sync (``rollout.weight_sync_timeout_s``); also each sync call's HTTP limit.
        rank, world_size: this trainer process's rank and the number of ranks (rank 0 talks to the servers in a sync).
        fleet: the servers rlvr started (restarted once when they die; stopped by :meth:`close`).
        max_concurrency: most requests in flight from this engine at once.
        gather_chunk_bytes: ZeRO-3 gather budget per collective, and the ``file`` transfer's bytes per file.
        startup_timeout_s: how long a rank other than 0 waits for servers rank 0 started.
    Raises:
        rlvr.rollout.server_client.ServerError: a server does not answer or is not a ``rlvr serve`` server.
        ValueError: the servers serve different models, or their weight transfers disagree (:func:`check_fleet`).
    """

    def __init__(self, urls: list[str], eos_ids: list[int], *, request_timeout_s: float = 600.0,
                 weight_transfer: str = "auto", transfer_folder: str | None = None,
                 weight_sync_timeout_s: float = 300.0, rank: int = 0, world_size: int = 1,
                 fleet: "ServerFleet | None" = None, max_concurrency: int = 256, gather_chunk_bytes: int = 1 << 30,
                 startup_timeout_s: float = 0.0) -> None:
        if not urls:
            raise ValueError("ServerEngine needs at least one server URL")
        if not eos_ids:
            raise ValueError("eos_ids is empty: the engine could never finish a response with 'stop'")
        self.eos_ids = [int(i) for i in eos_ids]
        self.request_timeout_s = request_timeout_s
        self.weight_sync_timeout_s = weight_sync_timeout_s
        self.transfer_folder = transfer_folder
        self.rank, self.world_size = rank, world_size
        self.fleet = fleet
        self.gather_chunk_bytes = gather_chunk_bytes
        self.http = httpx.Client(limits=httpx.Limits(max_connections=max_concurrency,
                                                     max_keepalive_connections=max_concurrency))
        self.clients = [ServerClient(url, self.http, request_timeout_s, self._hint(url)) for url in urls]
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="rlvr-rollout-request")
        # control calls (pause, resume, labels) have their own threads: a pool full of generate requests from another
        # thread must not hold up the pause of a weight sync
        self._control = ThreadPoolExecutor(max_workers=len(urls), thread_name_prefix="rlvr-server-control")
        self._lock = threading.Lock()
        self._next_server = 0
        self._transfer: Any = None
        self._model: torch.nn.Module | None = None
        self.policy_version = 0
        """Syncs made by this engine: the version of the weights the servers hold now."""
        self._newest_label = 0  # the newest version a server may report: policy_version + 1 while a sync runs
        self.syncs = 0
        self.requests_failed = 0
        """Requests that failed (each resent after a restart, or the error that stopped the call)."""
        self.last_sync_s = 0.0
        self.last_sync_bytes = 0
        if startup_timeout_s > 0 and rank != 0:
            self._wait_for_servers(startup_timeout_s)
        self.infos = [client.info() for client in self.clients]
        self.transfer = check_fleet(weight_transfer, self.infos, [c.url for c in self.clients])
        self.model_name = self.infos[0].model
        self.max_model_len = min(info.max_model_len for info in self.infos) or None
        from rlvr.rollout.server_weights import TORCH_DTYPES

        self.dtype = TORCH_DTYPES.get(self.infos[0].dtype, torch.float32)
        if rank == 0:  # the servers' weights are version 0 of this engine
            self._each(lambda c: c.post("/update_weight_version", "to label its weights",
                                        json={"new_version": "0"}))

    # ------------------------------------------------------------------------------------------------ set-up
    @classmethod
    def from_recipe(cls, recipe: "Recipe", model: torch.nn.Module, eos_ids: list[int],
                    fleet: "ServerFleet | None" = None) -> "ServerEngine":
        """The engine ``rollout.servers`` describes: the servers of ``fleet`` (started by
        :func:`rlvr.rollout.server_launch.start_fleet`; waited for here) and those of ``urls``. Servers given by URL
        may hold any weights, so they are given ``model``'s at once (as version 0).

        Raises:
            rlvr.rollout.server_launch.ServerLaunchError: a launched server did not come up.
            rlvr.rollout.server_client.ServerError, ValueError: as the constructor.
        """
        ro, servers = recipe.rollout, recipe.rollout.servers
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        launched: list[str] = []
        if fleet is not None:
            fleet.wait_ready()
            launched = fleet.urls
        elif servers.launch.count and rank != 0:  # rank 0 started them; this rank uses the same addresses
            launched = [f"http://127.0.0.1:{servers.launch.port + i}" for i in range(servers.launch.count)]
        engine = cls([*launched, *servers.urls], eos_ids, request_timeout_s=servers.request_timeout_s,
                     weight_transfer=servers.weight_transfer, transfer_folder=servers.transfer_folder,
                     weight_sync_timeout_s=ro.weight_sync_timeout_s, rank=rank, world_size=world, fleet=fleet,
                     startup_timeout_s=servers.launch.startup_timeout_s if launched else 0.0)
        if rank == 0:
            print(engine.describe(), flush=True)
        if servers.urls:
            engine.sync_weights(model, version=0)
        return engine

    def describe(self) -> str:
        """One line: the servers, the model, the weight transfer."""
        where = ", ".join(c.url for c in self.clients)
        return (f"[rlvr] rollout servers: {where} (model {self.model_name}, {self.dtype}, vLLM "
                f"{self.infos[0].vllm_version}, weight transfer {self.transfer})")

    def _hint(self, url: str) -> str:
        server = self.fleet.find(url) if self.fleet is not None else None
        return f" [{server.name()}]" if server is not None else ""

    def _wait_for_servers(self, timeout_s: float) -> None:
        """Wait (ranks other than 0) until every server answers ``/health``, or raise naming the first that does not."""
        deadline = time.monotonic() + timeout_s
        for client in self.clients:
            while True:
                try:
                    if self.http.get(f"{client.url}/health", timeout=5.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise ServerUnreachable(client.url, f"rollout server {client.url} did not answer /health within "
                                                        f"{timeout_s:g} s (rank 0 starts it; see rank 0's output)")
                time.sleep(1.0)

    def _each(self, call: Any) -> list[Any]:
        """``call(client)`` on every server at once; results in server order (the first error is raised)."""
        futures = [self._control.submit(call, c) for c in self.clients]
        return [f.result() for f in futures]

    # ------------------------------------------------------------------------------------------------ generate
    def generate(self, prompt_token_ids: list[list[int]], n: int,
                 sampling: SamplingParams) -> list[list[Completion]]:
        """Sample ``n`` completions per prompt on the servers. Returns groups in prompt order, each of ``n``.

        Raises:
            ValueError: ``n < 1``, an empty prompt, or a prompt + ``max_new_tokens`` longer than the servers'
                ``max_model_len`` (named by index and length).
            rlvr.rollout.server_client.ServerError: a server refused a request, answered malformed, or stopped
                answering (after the one restart of a server rlvr started); the message names it.
        """
        self.check_prompts(prompt_token_ids, n, sampling.max_new_tokens)
        if not prompt_token_ids:
            return []
        # one seed per prompt from torch's RNG, as the in-process engine draws them: the same seeds, the same samples
        seeds = torch.randint(0, 2**31 - 1, (len(prompt_token_ids),)).tolist()
        requests, submitted = self._requests(prompt_token_ids, n, sampling, seeds)
        groups: dict[int, list[Completion]] = {}
        failed = self._run(requests, n, submitted, groups)
        if failed:
            self._recover(failed)
            still = self._run([r for r, _ in failed], n, submitted, groups)
            if still:
                raise still[0][1]
        return [groups[i] for i in range(len(prompt_token_ids))]

    def check_prompts(self, prompt_token_ids: list[list[int]], n: int, max_new_tokens: int) -> None:
        """:func:`rlvr.rollout.base.check_prompts` against the servers' ``max_model_len``."""
        check_prompts(prompt_token_ids, n, max_new_tokens, self.max_model_len,
                      f"the rollout servers' max_model_len={self.max_model_len} "
                      "(rollout.vllm_max_model_len, or `rlvr serve --max-model-len`)")

    def _requests(self, prompt_token_ids: list[list[int]], n: int, sampling: SamplingParams, seeds: list[int],
                  first_index: int = 0) -> tuple[list[GroupRequest], int]:
        """One request per prompt (indices from ``first_index``), round robin over the servers from where the last
        call stopped, and the weight version they are sent at."""
        with self._lock:
            start = self._next_server
            self._next_server = (start + len(prompt_token_ids)) % len(self.clients)
            submitted = self.policy_version
        return [GroupRequest(first_index + i, (start + i) % len(self.clients),
                             {"model": self.model_name, "token_ids": [int(t) for t in p],
                              "sampling_params": sampling_body(n, sampling, s, self.eos_ids)})
                for i, (p, s) in enumerate(zip(prompt_token_ids, seeds, strict=True))], submitted

    @contextlib.contextmanager
    def open_stream(self) -> Iterator[ServerTurnStream]:
        """Continuous batching for a multi-turn rollout (:class:`~rlvr.rollout.base.TurnStream`): one request per
        sample and turn, sent when it is submitted (round robin over the servers), each returned as soon as it is
        answered; the servers batch what they hold continuously. Requests still in flight on exit are dropped."""
        stream = ServerTurnStream(self)
        try:
            yield stream
        finally:
            stream.drop()

    def _send(self, request: GroupRequest, n: int, submitted: int) -> list[Completion]:
        client = self.clients[request.server]
        answer = client.post(GENERATE_ROUTE, f"to generate (prompt {request.index}, {n} samples)",
                             json=request.body)
        return parse_group(client.url, request.index, n, answer, set(self.eos_ids), submitted, self._newest_label)

    def _run(self, requests: list[GroupRequest], n: int, submitted: int,
             groups: dict[int, list[Completion]]) -> list[tuple[GroupRequest, ServerError]]:
        """Send ``requests`` at once, filling ``groups``; returns the requests whose server did not answer. Any other
        failure is raised (the first by prompt index)."""
        futures: list[tuple[GroupRequest, Future]] = [(r, self._pool.submit(self._send, r, n, submitted))
                                                      for r in requests]
        unreachable: list[tuple[GroupRequest, ServerError]] = []
        errors: list[BaseException] = []
        for request, future in futures:
            try:
                groups[request.index] = future.result()
            except ServerUnreachable as exc:
                unreachable.append((request, exc))
            except BaseException as exc:  # noqa: BLE001 - raised below, after every request has finished
                errors.append(exc)
        self.requests_failed += len(unreachable) + len(errors)
        if errors:
            raise errors[0]
        return unreachable

    def _recover(self, failed: list[tuple[GroupRequest, ServerError]]) -> None:
        """Restart the launched servers that stopped answering (once each) and give them the current weights; raise
        the first failure that cannot be cured so (a server given by URL, a second failure, several trainer ranks)."""
        dead = {}
        for request, exc in failed:
            server = self.fleet.find(self.clients[request.server].url) if self.fleet is not None else None
            if server is None or self.world_size > 1:
                raise exc
            dead.setdefault(server.index, (server, exc))
        for server, exc in dead.values():
            self.fleet.restart(server, str(exc).split(":")[0])
        self._close_transfer()  # the restarted server has no transfer set up; every server gets it again
        for client in self.clients:
            client.post("/update_weight_version", "to label its weights", json={"new_version": "0"})
        if self._model is not None:  # the restarted servers start from the checkpoint: give them the current weights
            self.sync_weights(self._model, version=self.policy_version)

    # ------------------------------------------------------------------------------------------------ weight sync
    def sync_weights(self, model: torch.nn.Module, version: int | None = None) -> None:
        """Send ``model``'s current weights to every server (every rank calls this after each optimizer step).

        Args:
            model: the unwrapped HF model the DeepSpeed engine trains (ZeRO-3 partitions are gathered).
            version: the label of the new weights; ``None``: :attr:`policy_version` + 1 (a new version).
        Raises:
            rlvr.rollout.weight_sync.WeightSyncTimeout: the sync overran ``rollout.weight_sync_timeout_s`` (the
                message names the stage).
            rlvr.rollout.server_client.ServerError: a server failed a call of the sync (named).
        """
        new = self.policy_version + 1 if version is None else version
        started = time.perf_counter()
        with self._lock:
            self._newest_label = max(self.policy_version, new)
        sender = self.rank == 0
        with SyncWatchdog(self.weight_sync_timeout_s, "weight sync to the rollout servers", rank=self.rank,
                          hint=_SYNC_HINT) as wd:
            if sender:
                wd.stage("pausing the servers (/pause?mode=keep)")
                self._each(lambda c: c.post("/pause", "to pause for a weight sync", params={"mode": "keep"},
                                            timeout_s=self.weight_sync_timeout_s))
            try:
                wd.stage(f"setting up the {self.transfer} weight transfer")
                transfer = self._open_transfer(model)
                self.last_sync_bytes = self._send_weights(transfer, model, str(new), wd)
                if sender:  # KV blocks computed with the old weights: none may serve a later token
                    wd.stage("dropping the servers' KV cache (/reset_prefix_cache)")
                    self._each(lambda c: c.post("/reset_prefix_cache", "to drop KV blocks of the old weights",
                                                params={"reset_running_requests": "true"},
                                                timeout_s=self.weight_sync_timeout_s))
            finally:
                if sender:
                    wd.stage("resuming the servers (/resume)")
                    self._each(lambda c: c.post("/resume", "to resume after a weight sync",
                                                timeout_s=self.weight_sync_timeout_s))
            if self.world_size > 1 and torch.distributed.is_initialized():
                wd.stage("waiting for the other ranks (barrier after the sync)")
                torch.distributed.barrier()
        with self._lock:
            self.policy_version = self._newest_label = new
        self.syncs += 1
        self._model = model
        self.last_sync_s = time.perf_counter() - started

    def _fleet_client(self) -> Any:
        from rlvr.rollout.server_weights import FleetSyncClient

        return FleetSyncClient(self.clients, [info.world_size for info in self.infos], self.weight_sync_timeout_s)

    def _open_transfer(self, model: torch.nn.Module) -> Any:
        """The trainer's end of the weight transfer, set up at the first sync."""
        if self._transfer is not None:
            return self._transfer
        from rlvr.rollout.server_weights import FileTransfer, TrainerWeights, VLLMTrainerTransfer

        fleet = self._fleet_client()
        if self.transfer == "file":
            self._transfer = FileTransfer(fleet, self.transfer_folder, is_sender=self.rank == 0,
                                          chunk_bytes=self.gather_chunk_bytes)
        else:
            address = port = None
            if self.transfer == "nccl":
                from vllm.utils.network_utils import get_ip, get_open_port

                address, port = get_ip(), get_open_port()
            source = TrainerWeights(model, self.dtype, self.gather_chunk_bytes)
            self._transfer = VLLMTrainerTransfer(self.transfer, fleet, source, self.rank, address, port)
        return self._transfer

    def _send_weights(self, transfer: Any, model: torch.nn.Module, version: str, wd: SyncWatchdog) -> int:
        from rlvr.rollout.server_weights import FileTransfer, trainer_weights

        if isinstance(transfer, FileTransfer):
            weights = trainer_weights(model, self.dtype, self.gather_chunk_bytes, on_chunk=wd.stage)
            return transfer.send(weights, version, stage=wd.stage)
        transfer.engine.source.model = model
        transfer.engine.source.on_chunk = wd.stage
        wd.stage(f"sending the weights ({self.transfer})")
        transfer.send(version)
        return 0

    def _close_transfer(self) -> None:
        if self._transfer is not None:
            try:
                self._transfer.close()
            finally:
                self._transfer = None

    def close(self) -> None:
        """Stop the servers this engine started, remove the transfer folder, close the connections (idempotent)."""
        try:
            self._close_transfer()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._control.shutdown(wait=False, cancel_futures=True)
            self.http.close()
            if self.fleet is not None:
                self.fleet.close()
                self.fleet = None


class ServerTurnStream:
    """:meth:`ServerEngine.open_stream`'s stream. A server that stops answering is handled as in
    :meth:`ServerEngine.generate` (a launched server restarted once and its requests sent again; else the error)."""

    def __init__(self, engine: ServerEngine) -> None:
        self.engine = engine
        self.requests: dict[Future, tuple[GroupRequest, int]] = {}  # -> (the request, its version when sent)

    def submit(self, key: int, prompt_token_ids: list[int], sampling: SamplingParams, seed: int) -> None:
        self.engine.check_prompts([prompt_token_ids], 1, sampling.max_new_tokens)
        [request], submitted = self.engine._requests([prompt_token_ids], 1, sampling, [seed], first_index=key)
        self._send(request, submitted)

    def _send(self, request: GroupRequest, submitted: int) -> None:
        self.requests[self.engine._pool.submit(self.engine._send, request, 1, submitted)] = (request, submitted)

    def poll(self, timeout_s: float) -> list[tuple[int, Completion]]:
        if not self.requests:
            return []
        done, _ = wait(list(self.requests), timeout=timeout_s, return_when=FIRST_COMPLETED)
        ended, unreachable = [], []
        for future in done:
            request, submitted = self.requests.pop(future)
            try:
                ended.append((request.index, future.result()[0]))
            except ServerUnreachable as exc:
                unreachable.append((request, exc, submitted))
            except BaseException:
                self.engine.requests_failed += 1
                raise
        if unreachable:
            self.engine.requests_failed += len(unreachable)
            self.engine._recover([(request, exc) for request, exc, _ in unreachable])
            for request, _, submitted in unreachable:
                self._send(request, submitted)
        return ended

    def pending(self) -> int:
        return len(self.requests)

    def drop(self) -> None:
        """Forget the requests in flight (an error left the rollout); the ones not yet sent are cancelled."""
        for future in self.requests:
            future.cancel()
        self.requests.clear()
