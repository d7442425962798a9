"""Resource limits for one program run: `Limits`, with units in every field name."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Limits:
    """Limits applied to every test of a program.

    time_s: wall-clock seconds per test (per stdio run, per call case, per top-level assert statement).
    memory_mb: address-space limit of the program's process, in MiB (MemoryError or OOM kill -> MLE).
    output_kb: stdout (and, separately, stderr) cap per test, in KiB; more is OLE.
    pids: processes and threads the sandbox may hold at once (Docker pids limit; RLIMIT_NPROC in bwrap).
    scratch_mb: size of the writable scratch tmpfs (the only writable place), in MiB; also the largest file.
    cpus: CPU share of one sandbox (Docker CPU quota), in cores.
    compile_time_s: wall-clock (and CPU) seconds for compiling the program, once per program (C, C++,
        Java; JavaScript's syntax check); more is CE.
    compile_memory_mb: the compiler's address-space limit (javac: its heap), in MiB; under Docker the
        container's memory cgroup bounds it too.
    """

    time_s: float = 2.0
    memory_mb: int = 256
    output_kb: int = 1024
    pids: int = 64
    scratch_mb: int = 64
    cpus: float = 1.0
    compile_time_s: float = 30.0
    compile_memory_mb: int = 1024

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Limits.{f.name} must be a positive number, got {value!r}")
        for name in ("time_s", "compile_time_s"):
            if getattr(self, name) > 600:
                raise ValueError(f"Limits.{name} must be at most 600 s, got {getattr(self, name)!r}")
        if self.compile_memory_mb < 128:
            raise ValueError(f"Limits.compile_memory_mb must be at least 128 (compilers need it), "
                             f"got {self.compile_memory_mb!r}")
        if self.memory_mb < 32:
            raise ValueError(f"Limits.memory_mb must be at least 32 (Python needs ~20 MiB), got {self.memory_mb!r}")
        if self.pids < 8:
            raise ValueError(f"Limits.pids must be at least 8 (the sandbox's own processes count), got {self.pids!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | Limits | None) -> Limits:
        """Build Limits from a dataset row's `limits` dict (or pass Limits through; None gives defaults).

        Raises ValueError naming an unknown key and the valid ones, or a bad value."""
        if data is None:
            return cls()
        if isinstance(data, Limits):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"limits must be a mapping like {{'time_s': 2, 'memory_mb': 256}}, got {data!r}")
        valid = [f.name for f in fields(cls)]
        for key in data:
            if key not in valid:
                raise ValueError(f"unknown limit {key!r}; valid limits: {', '.join(valid)}")
        return cls(**data)
