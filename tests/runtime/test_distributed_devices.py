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

    def is_initialized(self) -> bool:
        return True

    def get_world_size(self) -> int:
        return 2

    def get_backend(self) -> str:
        return "nccl"

    def all_reduce(self, tensor: torch.Tensor, op=None) -> None:
        self.devices.append(tensor.device)
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
    monkeypatch.setattr(backend, "get_backend", lambda: "gloo")
    assert d.collective_device() == torch.device("cpu")


def test_one_process_needs_no_backend():
    assert d.all_reduce_sum(torch.tensor([2.0])).tolist() == [2.0]
    assert d.all_reduce_max(7) == 7


@pytest.mark.parametrize("stage, backward, collective", [
    (0, True, False), (1, True, False), (2, False, False), (2, True, True), (3, False, True), (3, True, True)])
def test_which_micro_batch_passes_must_match_across_ranks(stage, backward, collective):
    """Fix 9: ZeRO-2 reduces gradients in every backward, so its update passes must match across ranks too."""
    assert micro_batches_are_collective(stage, backward) is collective
