"""Processes inside the sandbox: a spawned program (`_Proc`), its rlimits, and the helpers that kill, reap
and clean up after it. Standard library only; shipped as source after codec.py and before rpc.py and
driver.py (see `rlvr.sandbox.harness`), so the three share one namespace at run time."""
import ctypes
import math
import os
import resource
import shutil
import signal
import time

OUT_TAIL = 4096  # bytes of stderr kept per test
SPAWN_PATH = "/usr/local/bin:/usr/bin:/bin"  # where programs and their toolchains are looked up
# Words an out-of-memory death leaves on stderr: Python and Java (OutOfMemoryError), C++, Node.
_MEMORY_WORDS = (b"MemoryError", b"std::bad_alloc", b"heap out of memory")
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
# Every program run gets namespaces of its own: a user namespace (which lets an unprivileged process make the
# others, and holds its own user keyring), an IPC namespace (System V shared memory, message queues and
# semaphores, POSIX message queues: all gone when the run ends) and a pid namespace (its kill(-1) reaches only
# its own processes; the driver, the fork server and the sandbox's pid 1 have no pid there). An exec'd run gets
# all three (`_enter_run_namespaces`); a run forked by the fork server shares the server's children's pid
# namespace and gets the other two (see forkserver.py). The Docker backend's seccomp profile allows unshare()
# with these flags and no others.
CLONE_NEWUSER, CLONE_NEWIPC, CLONE_NEWPID = 0x10000000, 0x08000000, 0x20000000
JOB_NAMESPACES = CLONE_NEWUSER | CLONE_NEWIPC | CLONE_NEWPID
_LIBC = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


FORK_TRIES = 20  # a fork failing with EAGAIN is tried again every 50 ms for about a second (fork_retrying)


def fork_retrying(reap=None):
    """os.fork(), tried again for about a second while it fails with EAGAIN: the processes of a program just
    killed (a fork bomb's) count against the sandbox's process limit until their exits are collected, so the fork
    of the next run can fail for a moment after a clean-up that succeeded (seen on a loaded machine). `reap`,
    called between tries, collects exits. Raises BlockingIOError when the limit stays full."""
    for attempt in range(FORK_TRIES):
        try:
            return os.fork()
        except BlockingIOError:
            if attempt == FORK_TRIES - 1:
                raise
            if reap is not None:
                reap()
            time.sleep(0.05)


def _drop_capabilities():
    """Drop every capability (those a new user namespace gives its first process, over that namespace)."""
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3: all zero
    if _LIBC.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _remove_ipc_objects():
    """Remove every System V IPC object of the current IPC namespace now (needs CAP_IPC_OWNER over it). The
    namespace already keeps them from any other run; this returns their memory at once, where the namespace's
    own teardown frees it only tens of ms later (the kernel defers it), when the next job may need it."""
    for kind, remove in (("shm", lambda i: _LIBC.shmctl(i, 0, None)), ("msg", lambda i: _LIBC.msgctl(i, 0, None)),
                         ("sem", lambda i: _LIBC.semctl(i, 0, 0))):  # IPC_RMID = 0
        try:
            with open("/proc/sysvipc/" + kind) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            remove(int(row.split()[1]))


def _enter_run_namespaces():
    """In a freshly forked child (single-threaded, its fds and rlimits already set): move into new user, IPC
    and pid namespaces. The caller's process stays outside as a stand-in that waits for the program and
    ends as it ended (exit code, or the same signal), so the driver tracks it like the program itself; the
    program continues from here as pid 1 of its own namespace, with no capability (the user namespace's are
    dropped at once). When the program ends, the kernel kills whatever it left in its namespace, and the stand-in
    removes the System V IPC objects it left before ending (the rest goes with the namespace). Raises OSError
    when unshare fails."""
    if _LIBC.unshare(JOB_NAMESPACES) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "unshare(user, ipc, pid namespaces): %s" % os.strerror(err))
    pid = os.fork()
    if pid == 0:
        os.setsid()  # a session of its own: its kill(0) and killpg reach nothing outside its namespace either
        _drop_capabilities()
        return
    os.closerange(0, 65536)  # the pipes stay with the program alone: they end when it ends
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    _remove_ipc_objects()  # we still hold the namespace's capabilities (only the program dropped them)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:  # (SIGKILL's action cannot be set)
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


class _Abort(BaseException):
    """Ends the current test with a status; a BaseException so that `except Exception` in tests misses it."""

    def __init__(self, status, detail):
        super().__init__(detail)
        self.status, self.detail = status, detail


class _Proc:
    """A spawned program: pid, pipes, what it wrote, and how it ended."""

    def __init__(self, pid, out_r, err_r):
        self.pid, self.out_r, self.err_r = pid, out_r, err_r
        self.req_w = self.rep_r = None
        self.out, self.err, self.rep = bytearray(), bytearray(), bytearray()
        self.err_total = 0
        self.exit_code = self.signal = None
        self.ended = False  # reaped, status known
        self.cpu_s = 0.0
        self.limit_s = 0.0

    def set_status(self, status, usage):
        self.ended = True
        if os.WIFEXITED(status):
            self.exit_code = os.WEXITSTATUS(status)
        elif os.WIFSIGNALED(status):
            self.signal = os.WTERMSIG(status)
        self.cpu_s = usage.ru_utime + usage.ru_stime

    def read_stderr_left(self):
        """Read what is already in the stderr pipe (the end of a traceback) without waiting for more."""
        self._read_left("err_r", 1 << 30)

    def read_output_left(self, cap):
        """Read what is already in the stdout and stderr pipes without waiting for more (a process the
        program left behind may hold them open); stop once more than `cap` bytes were read from either."""
        self._read_left("out_r", cap)
        self._read_left("err_r", cap)

    def _read_left(self, name, cap):
        fd = getattr(self, name)
        if fd is None:
            return
        os.set_blocking(fd, False)
        try:
            while len(self.out) <= cap and self.err_total <= cap:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.close_fd(fd)
                    return
                if name == "out_r":
                    self.out += chunk
                else:
                    self.err_total += len(chunk)
                    self.err += chunk
                    del self.err[:-OUT_TAIL]
        except BlockingIOError:
            pass

    def close_fd(self, fd):
        os.close(fd)
        for name in ("out_r", "err_r", "rep_r", "req_w"):
            if getattr(self, name) == fd:
                setattr(self, name, None)

    def close_all(self):
        for fd in (self.out_r, self.err_r, self.rep_r, self.req_w):
            if fd is not None:
                self.close_fd(fd)

    def memory_error(self):
        tail = bytes(self.err[-OUT_TAIL:])
        return any(word in tail for word in _MEMORY_WORDS)

    def exit_status(self):
        """(status, detail) of a process that ended on its own."""
        if self.exit_code == 0:
            return "ok", ""
        if self.exit_code is not None:
            if self.memory_error():
                return "memory", "MemoryError (exit code %d)" % self.exit_code
            if self.exit_code == 137:  # `timeout -s KILL` fired: over its budget
                return "timeout", "killed by the inner time limit"
            return "error", "exit code %d" % self.exit_code
        if self.signal in (signal.SIGXCPU,) or (self.signal == signal.SIGKILL and self.cpu_s >= self.limit_s):
            return "timeout", "CPU time limit (signal %d)" % self.signal
        if self.signal == signal.SIGKILL:
            return "memory", "killed by signal 9 (out of memory)"
        if self.memory_error():  # std::bad_alloc and V8's heap limit end in abort()
            return "memory", "out of memory (killed by signal %s)" % self.signal
        return "error", "killed by signal %s" % self.signal

    def death_status(self):
        """(status, detail) of a runner that closed its answer channel while we waited for a reply."""
        if self.exit_code is None and self.signal is None:
            return "error", "the program closed its answer channel"
        status, detail = self.exit_status()
        if status == "ok":
            return "early_exit", "the program ended with code 0 before its tests finished"
        return status, detail


def _set_limits(job, cpu_s, nproc, memory_mb):
    """rlimits of a spawned process: CPU seconds, RLIMIT_AS of memory_mb MiB (none when 0), file size, open
    files, no core dumps, and RLIMIT_NPROC when nproc is set."""
    cpu = int(math.ceil(cpu_s)) + 1
    limits = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_FSIZE, int(job["file_mb"]) << 20),
        (resource.RLIMIT_NOFILE, 1024),
        (resource.RLIMIT_CORE, 0),
    ]
    if memory_mb:
        limits.append((resource.RLIMIT_AS, int(memory_mb) << 20))
    if nproc:
        limits.append((resource.RLIMIT_NPROC, int(nproc)))
    for which, value in limits:
        soft, hard = value if isinstance(value, tuple) else (value, value)
        resource.setrlimit(which, (soft, hard))


def _children(pid):
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rpartition(b")")[2].split()[1]) == pid:
                found.append(int(name))
    return found


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(fd):
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _remove(path):
    """Remove a file or a tree the program may have made unwritable; True on success."""
    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        except OSError:
            pass
        func(p)

    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, onerror=fix)
        else:
            os.unlink(path)
        return True
    except OSError:
        return False
