"""What a benchmark report names next to every figure: the CPU (model and the vector extensions that decide
bf16 speed), the commit measured and the date."""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

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
