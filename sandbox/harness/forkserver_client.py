"""The driver's side of the fork server (forkserver.py): start it, ask it for a child, collect its reports.
Shipped after processes.py and before rpc.py and driver.py (one namespace at run time)."""
# _Proc, _kill, OUT_TAIL and fork_retrying come from processes.py.
import json
import os
import socket
import time


class _Usage:
    """The part of a resource.struct_rusage the driver reads, rebuilt from a fork server report."""

    def __init__(self, cpu_s):
        self.ru_utime, self.ru_stime = float(cpu_s), 0.0


class _ForkServer:
    """One warm fork server, started on first use and again after it died (a program may kill it, and the
    driver's kill(-1) clean-up after a program that left processes behind kills it too)."""

    START_S = 15.0  # the server must say hello within this long (a cold Python on a loaded machine)

    def __init__(self, driver, source):
        self.d, self.source = driver, source
        self.pid = self.init_pid = None
        self.ctl = None
        self.failed = None  # why it could not start: then programs are exec'd as before

    @property
    def alive(self):
        return self.ctl is not None

    def start(self):
        """Start the server; False (and self.failed set) when it cannot start."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stdin_fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        argv = [self.d.python, "-I", "-B", "-c", self.source] + (["namespaces"] if self.d.namespaces else [])
        env = self.d.program_env()
        pid = fork_retrying(self.d.reap)
        if pid == 0:  # child: no Python-level cleanup may run here, whatever happens
            try:
                os.setsid()
                fds = [stdin_fd, out_w, 2, theirs.fileno()]
                high = [os.dup(fd) for fd in fds]
                for target, fd in enumerate(high):
                    os.dup2(fd, target)
                os.closerange(len(fds), 65536)
                os.execve(argv[0], argv, env)
            except BaseException as e:  # noqa: BLE001 - report and vanish
                os.write(2, ("sandbox driver: cannot start the fork server: %r\n" % (e,)).encode())
            os._exit(127)
        theirs.close()
        for fd in (stdin_fd, out_w, out_r):
            os.close(fd)
        self.pid, self.ctl = pid, ours
        hello = self._receive(time.monotonic() + self.START_S)
        if not hello or "ready" not in hello:
            self.stop()
            self.failed = "the fork server did not start"
            return False
        self.init_pid = hello.get("init")  # pid 1 of its children's pid namespace (a reaper), or None
        return True

    def spawn(self, argv, job, stdin_fd, extra_fds=(), cpu_s=None):
        """A child of the server running `python3 -I -B argv...` with the job's limits, stdin from stdin_fd
        and new stdout/stderr pipes; a _Proc, or None when the server is not available."""
        if not self.alive and (self.failed or not self.start()):
            return None
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        request = {"argv": list(argv), "workdir": self.d.workdir, "cpu_s": cpu_s or job["time_s"],
                   "memory_mb": job["memory_mb"], "file_mb": job["file_mb"], "nproc": self.d.nproc}
        try:
            socket.send_fds(self.ctl, [json.dumps(request).encode()], [stdin_fd, out_w, err_w, *extra_fds])
            answer = self._receive(time.monotonic() + 5.0)
        except OSError:
            answer = None
        finally:
            os.close(out_w)
            os.close(err_w)
        if not answer or "pid" not in answer:
            os.close(out_r)
            os.close(err_r)
            self.stop()
            return None
        proc = _Proc(int(answer["pid"]), out_r, err_r)
        return proc

    def collect(self):
        """Record the exit reports waiting on the control socket in the driver's `reaped`."""
        while self.alive:
            report = self._receive(0.0)
            if report is None:
                return
            if "exit" in report:
                self.d.reaped[int(report["exit"])] = (int(report["status"]), _Usage(report["cpu_s"]))

    def fileno(self):
        return self.ctl.fileno() if self.alive else None

    def _receive(self, until):
        """The next message as a dict, None when none came by `until`; stops the server at end of stream."""
        self.ctl.settimeout(max(until - time.monotonic(), 0.0))
        try:
            data = self.ctl.recv(65536)
        except (BlockingIOError, socket.timeout):
            return None
        except OSError:
            data = b""
        if not data:
            self.stop()
            return None
        return json.loads(data)

    def stop(self):
        """Close the control socket (the server exits on end of stream) and kill it."""
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None
        for pid in (self.pid, self.init_pid):  # its pid namespace goes with its pid 1
            if pid is not None:
                _kill(pid)
        if self.pid is not None:
            self.d.reap()
        self.pid = self.init_pid = None
