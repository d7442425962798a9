"""How much memory the device a run trains on has: a named GPU (``H100-80GB``), a size (``80GB``, ``40GiB``), the
visible CUDA device, or the host's RAM on a CPU machine."""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 1024**3

NAMED_GPUS: dict[str, float] = {
    "A10-24GB": 22.0, "L4-24GB": 22.0, "RTX4090-24GB": 23.6, "A100-40GB": 39.4, "L40S-48GB": 44.4,
    "A100-80GB": 79.2, "H100-80GB": 79.2, "H200-141GB": 139.8, "B200-180GB": 178.4,
}
"""GPU name -> memory in GiB as ``torch.cuda.get_device_properties(0).total_memory`` reports it (a card sold as
"80 GB" has 79.2 GiB)."""


@dataclass(frozen=True)
class DeviceMemory:
    """The memory one rank has. ``kind`` is ``gpu`` or ``cpu`` (host RAM, shared by every rank on the machine)."""

    name: str
    bytes: int
    kind: str

    @property
    def gib(self) -> float:
        return self.bytes / GIB


def parse_device_memory(text: str) -> DeviceMemory:
    """``H100-80GB`` (a name from :data:`NAMED_GPUS`, case-insensitive), or a size: ``80GB`` (decimal gigabytes),
    ``79.2GiB``, ``24G``.

    Raises:
        ValueError: neither a known GPU name nor a size with a unit, naming both forms.
    """
    for name, gib in NAMED_GPUS.items():
        if text.strip().lower() == name.lower():
            return DeviceMemory(name, int(gib * GIB), "gpu")
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(GB|G|GiB|TB|TiB)\s*", text, flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"--gpu-memory {text!r}: expected a GPU name ({', '.join(NAMED_GPUS)}) or a size such as "
                         f"80GB or 79.2GiB")
    value, unit = float(m.group(1)), m.group(2).lower()
    scale = {"gb": 1e9, "g": 1e9, "gib": GIB, "tb": 1e12, "tib": 1024 * GIB}[unit]
    return DeviceMemory(f"{text.strip()} GPU", int(value * scale), "gpu")


def local_device_memory() -> DeviceMemory:
    """The visible CUDA device 0, else the host's RAM (``/proc/meminfo`` MemTotal)."""
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return DeviceMemory(props.name, int(props.total_memory), "gpu")
    total = 0
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
    except OSError:
        pass
    return DeviceMemory("host RAM", total, "cpu")
