"""A Channel to a driver running as a local child process (used by the bwrap and none backends)."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

STDERR_TAIL = 8192  # bytes of the driver's stderr kept for error messages


class ProcessChannel:
    """Starts argv in its own session with piped stdin/stdout/stderr; `close()` kills its process group.

    Raises OSError from subprocess when argv cannot be started."""

    def __init__(self, argv: Sequence[str], **popen: Any) -> None:
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True, **popen)
        self._buf = bytearray()
        self._err = bytearray()
        self._err_thread = threading.Thread(target=self._read_stderr, daemon=True)
        self._err_thread.start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):  # type: ignore[union-attr]
            self._err += chunk
            del self._err[:-STDERR_TAIL]

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.close()

    def read_line(self, timeout_s: float) -> bytes | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        end = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no line from the driver within {timeout_s:.1f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return None
                self._buf += chunk
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line

    def diagnostics(self) -> str:
        return bytes(self._err).decode("utf-8", "replace")

    def close(self, grace_s: float = 0.5) -> None:
        """Give the process grace_s seconds to exit on its own (a driver whose batch is done exits at once,
        so its CPU time is accounted to us), then kill its process group and reap it (idempotent)."""
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self._err_thread.join(timeout=1.0)
