"""Collectives run on the process-group backend's device (issue 11, fix 8): under NCCL there is no CPU path, so a
helper that hands a CPU tensor to ``all_reduce`` raises on the first multi-GPU step.

A fake non-gloo backend stands in for NCCL: it records the device of every tensor handed to it and refuses CPU
tensors, as NCCL does. No GPU is needed: the fake device is ``meta`` (no data), so the fake stops each call once it has
recorded the device; what is checked is where the tensor was when it reached the backend.
"""

import pytest
import torch

import rlvr.runtime.distributed as d
from rlvr.trainer.micro_batches import micro_batches_are_collective


class Reached(Exception):
    """The fake backend got a tensor on an accelerator device (what a real NCCL call would accept)."""


class FakeAcceleratorBackend:
    """Just enough of ``torch.distributed`` for the helpers: two ranks on a non-gloo backend."""

    ReduceOp = torch.distributed.ReduceOp

    def __init__(self) -> None:
        self.devices: list[torch.device] = []
        self.groups: list[object] = []

    def is_initialized(self) -> bool:
        return True

    def get_world_size(self) -> int:
        return 2

    def get_backend(self, group=None) -> str:
        return "gloo" if group == "producer" else "nccl"  # a thread's own gloo group beside the default NCCL one

    def all_reduce(self, tensor: torch.Tensor, op=None, group=None) -> None:
        self.devices.append(tensor.device)
        self.groups.append(group)
        if tensor.device.type == "cpu":
            raise RuntimeError("No backend type associated with device type cpu")  # NCCL's own message
        raise Reached


@pytest.fixture
def fake(monkeypatch):
    backend = FakeAcceleratorBackend()
    monkeypatch.setattr(d, "dist", backend)
    monkeypatch.setattr(d, "collective_device", lambda: torch.device("meta"))
    return backend


@pytest.mark.parametrize("call", [
    lambda: d.all_reduce_sum(torch.tensor([1.0, 2.0], dtype=torch.float64)),
    lambda: d.all_reduce_sum(torch.tensor([3])),
    lambda: d.all_reduce_max(3),
    lambda: d.all_reduce_max(0.25),
], ids=["sum-float64", "sum-int", "max-int", "max-float"])
def test_every_reduction_reaches_the_backend_on_its_device(fake, call):
    with pytest.raises(Reached):
        call()
    assert [dev.type for dev in fake.devices] == ["meta"]


def test_collective_device_follows_the_backend(monkeypatch):
    backend = FakeAcceleratorBackend()
    monkeypatch.setattr(d, "dist", backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert d.collective_device() == torch.device("cuda", 1)
    monkeypatch.setattr(backend, "get_backend", lambda group=None: "gloo")
    assert d.collective_device() == torch.device("cpu")


def test_a_threads_own_group_takes_its_collectives_and_device_in_that_thread_only(monkeypatch):
    """The asynchronous producer's collectives go to its gloo group (on the CPU) while the trainer's thread keeps the
    default NCCL group (on its GPU)."""
    import threading

    backend = FakeAcceleratorBackend()
    monkeypatch.setattr(d, "dist", backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    seen = {}

    def producer() -> None:
        with d.thread_process_group("producer"):
            seen["device"] = d.collective_device()
            with pytest.raises(RuntimeError, match="No backend type"):  # the fake refuses CPU tensors after noting them
                d.all_reduce_sum(torch.tensor([1.0]))
        seen["after"] = d.collective_device()

    with d.thread_process_group("producer"):
        thread = threading.Thread(target=producer)
        thread.start()
        thread.join()
        assert d.collective_device() == torch.device("cpu")  # this thread's own setting
    assert d.collective_device() == torch.device("cuda", 0)
    assert seen == {"device": torch.device("cpu"), "after": torch.device("cuda", 0)}
    assert backend.groups == ["producer"] and [dev.type for dev in backend.devices] == ["cpu"]


def test_one_process_needs_no_backend():
    assert d.all_reduce_sum(torch.tensor([2.0])).tolist() == [2.0]
    assert d.all_reduce_max(7) == 7


@pytest.mark.parametrize("stage, backward, collective", [
    (0, True, False), (1, True, False), (2, False, False), (2, True, True), (3, False, True), (3, True, True)])
def test_which_micro_batch_passes_must_match_across_ranks(stage, backward, collective):
    """Fix 9: ZeRO-2 reduces gradients in every backward, so its update passes must match across ranks too."""
    assert micro_batches_are_collective(stage, backward) is collective
