"""What a benchmark report names next to every figure: the CPU (model and the vector extensions that decide
bf16 speed), the commit measured and the date."""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    """``"<model> (AVX-512, AVX512-BF16, AMX-bf16)"`` from /proc/cpuinfo; the platform's processor string elsewhere."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    names = (("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX-bf16"))
    extras = [name for flag, name in names if flag in flags] or (["AVX2"] if "avx2" in flags else ["no AVX2"])
    return f"{model} ({', '.join(extras)})"


def cpu_description() -> dict[str, Any]:
    """The CPU's model name, its bf16-relevant flags and the core count (every timing is quoted with it)."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = set(re.search(r"^flags\s*:\s*(.+)$", text, re.M).group(1).split()) if "flags" in text else set()
    return {"model": name.group(1).strip() if name else "unknown", "cores": os.cpu_count(),
            "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})}


def commit() -> str:
    """The short hash of the checkout's HEAD (``+changes`` when the work tree differs from it)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return head + ("+changes" if dirty else "")


def stamp() -> str:
    """``"2026-12-02, commit abc1234, <cpu>"``: the line that goes with a measurement."""
    return f"{time.strftime('%Y-%m-%d')}, commit {commit()}, {cpu_name()}"


def study_header(script: str, argv: list[str], **fields: Any) -> dict[str, Any]:
    """The opening fields of a study's json: when (UTC, to the minute), the commit (:func:`commit`), the CPU
    (:func:`cpu_description`), the command as typed (``python benchmarks/<script> <argv>``) and the 1-minute
    load at the start, then ``fields``."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit(),
            "cpu": cpu_description(), "command": " ".join(["python", f"benchmarks/{script}", *argv]),
            "load_1m_at_start": os.getloadavg()[0], **fields}
