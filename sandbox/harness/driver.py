"""The supervisor inside the sandbox: runs each program against its tests and reports what happened.

Started by a backend as `python3 -I -c CODEC_AND_THIS_SOURCE` inside a Docker container or a bubblewrap
sandbox, as the same unprivileged uid as the programs it runs (standard library only: it cannot import
`sandbox`). It reads a batch from stdin (a decimal byte count on the first line, then that much JSON) and
writes one JSON line per event to stdout:
  {"hello": pid}                                   once per batch, when it is ready;
  {"job": i, "test": j, "status": ..., ...}       once per test, in order (see `_report`);
  {"job": i, "done": true, "clean": bool}          after each job, once its processes and files are gone.
Then it waits for the next batch on the same stdin, with the same fork server, until end of stream or
`idle_exit_s` seconds without one (a warm driver per container: no exec, no interpreter start per batch),
or until a job could not be cleaned up (that sandbox is thrown away). A batch's jobs run exactly as jobs
of one batch always have: everything they started is killed and the scratch is wiped after each.
It compares nothing: expected outputs never come here. Statuses: ok, failed (an assert failed), error,
early_exit (ended with code 0 before its tests finished), timeout, memory, output_limit, compile_error.

Why the program cannot fool it although it shares our uid:
- PR_SET_DUMPABLE=0: the program cannot ptrace us, open /proc/<us>/fd/1 to write fake results, or read
  the assert tests from our memory. PR_SET_CHILD_SUBREAPER: orphans of the program become our children.
- each program run gets new user, IPC and pid namespaces (`_enter_run_namespaces`): its kill(-1) and SIGSTOPs
  reach only its own processes, the driver has no pid it could name, and System V / POSIX IPC objects it made
  are gone when it ends. A driver that cannot make them (asked to) refuses to start.
- each program runs in its own session under `timeout -s KILL`, with rlimits (address space = memory_mb,
  CPU time, file size, open files, processes where asked) and oom_score_adj 1000, from an empty scratch folder.
- a stdio test is over when the program's main process exits: its output is what the pipes hold then (up
  to the cap); whatever it left running (a daemon holding its stdout, say) is killed right after, so a
  correct program with a background child is judged on its answer, and only a main process that does not
  exit in time is a timeout.
- after every stdio test and every job, all other processes in the sandbox are killed (kill(-1): only in a
  private pid namespace; otherwise our descendants one by one) and, after a job, the scratch is wiped.
"""
# Shipped after codec.py, processes.py and rpc.py (see `rlvr.sandbox.harness`), whose names it uses.
import ctypes
import fcntl
import json
import os
import resource
import select
import shutil
import signal
import sys
import time

EVENTS_HOLD_S = 0.25  # a test's event waits at most about this long for the rest of its job's (see hold)
EVENTS_HOLD_BYTES = 1 << 20
SYNTAX_CHECK_S = 5.0  # a Python program's syntax check (compile(), in a child) ends by then: CE after (see batch.py)
# The detail of a test not run because processes the program started in an earlier test survived the clean-up (a fork
# bomb on a loaded machine): the sandbox's process limit may still be full, so a fork for the next run could fail
# (EAGAIN) and take the driver down, which would read as a broken sandbox rather than as the program's doing.
LEFT_OVER = "not run: processes this program started in an earlier test outlived their clean-up"


class _Driver:
    def __init__(self, batch):
        self.pid_namespace = bool(batch["pid_namespace"])
        self.scratch = list(batch["scratch"])
        self.workdir = os.path.join(self.scratch[0], "w")
        self.python = shutil.which(batch.get("python", "python3")) or "/usr/bin/python3"
        self.timeout_bin = shutil.which("timeout") or "/usr/bin/timeout"
        self.runner_source = batch["runner"]
        self.nproc = batch.get("nproc")
        self.namespaces = bool(batch.get("namespaces"))  # new user, IPC and pid namespaces for every run
        # Python programs are forked from a warm interpreter when the batch asks for it (see forkserver.py)
        self.forkserver = _ForkServer(self, batch["forkserver"]) if batch.get("forkserver") else None
        self.session = None  # the _RpcSession running now, for SIGALRM
        self.dirty = False  # a clean-up failed: processes may survive, the sandbox must not be reused
        self.left_over = False  # the clean-up after this job's program failed: its remaining tests are not run
        self.reaped = {}  # pid -> (wait status, rusage) of children we reaped
        self.held, self.held_bytes, self.held_since = [], 0, 0.0  # test events not written yet (see hold)
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGALRM, self._on_alarm)
        # CPython builds its AST types on the first compile() of source text (~10 ms of CPU): once here,
        # not again in every forked syntax check (compile_error).
        compile("pass", "<warm-up>", "exec")

    # -- events ---------------------------------------------------------------------------------------
    @staticmethod
    def emit(message):
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def hold(self, message):
        """Queue a test's event: the held events go out together (one write, one hop through the
        container engine instead of one per test) with the job's "done", or before then once the oldest
        has waited EVENTS_HOLD_S (checked here and while a program runs, in pump) or they reach
        EVENTS_HOLD_BYTES. So an event is late by at most EVENTS_HOLD_S plus a clean-up, far inside the
        host's deadline for the next event (twice the time limit plus 10 s)."""
        if not self.held:
            self.held_since = time.monotonic()
        line = json.dumps(message) + "\n"
        self.held.append(line)
        self.held_bytes += len(line)
        if self.held_bytes > EVENTS_HOLD_BYTES or time.monotonic() - self.held_since > EVENTS_HOLD_S:
            self.flush_held()

    def flush_held(self, *last):
        """Write the held events, then `last` (more events), in one flush."""
        sys.stdout.write("".join(self.held) + "".join(json.dumps(m) + "\n" for m in last))
        sys.stdout.flush()
        self.held, self.held_bytes = [], 0

    def _report(self, job, test, status, detail="", started=None, proc=None, stdout=b"", value=None):
        stderr = bytes(proc.err[-OUT_TAIL:]).decode("utf-8", "replace") if proc else ""
        self.hold({
            "job": job, "test": test, "status": status, "detail": detail,
            "elapsed_s": round(time.monotonic() - started, 4) if started else 0.0,
            "exit_code": proc.exit_code if proc else None, "signal": proc.signal if proc else None,
            "stdout": stdout.decode("utf-8", "replace"),
            "stderr": stderr or (detail if status == "compile_error" else ""),
            "value": value,
        })

    # -- processes ------------------------------------------------------------------------------------
    def _on_alarm(self, *_):
        if self.session is not None:
            self.session.on_alarm()

    def reap(self):
        """Collect the status of every child that ended (and the fork server's reports on its children)."""
        if self.forkserver is not None:
            self.forkserver.collect()
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.reaped[pid] = (status, usage)

    def spawn(self, argv, job, stdin_fd, extra_fds=(), cpu_s=None, memory_mb=None):
        """Fork and exec argv in a new session with the job's rlimits: stdin from stdin_fd, stdout and stderr
        to new pipes, extra_fds at 3, 4, ... memory_mb: RLIMIT_AS in MiB (None: the job's, when its language
        takes one; 0: none). Returns a _Proc."""
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        env = self.program_env()
        cpu_s = cpu_s or job["time_s"]
        if memory_mb is None:
            memory_mb = job["memory_mb"] if job.get("address_space", True) else 0
        pid = fork_retrying(self.reap)
        if pid == 0:  # child: no Python-level cleanup may run here, whatever happens
            try:
                os.setsid()
                fds = [stdin_fd, out_w, err_w, *extra_fds]
                high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100 + i) for i, fd in enumerate(fds)]
                for target, fd in enumerate(high):
                    os.dup2(fd, target)
                os.closerange(len(high), resource.getrlimit(resource.RLIMIT_NOFILE)[1])
                for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGALRM):
                    signal.signal(sig, signal.SIG_DFL)
                _set_limits(job, cpu_s, self.nproc, memory_mb)
                # Our non-dumpable flag makes /proc/self root-owned: dumpable just for this write.
                _LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("1000")  # if memory runs out, the program goes first, not the driver
                if self.namespaces:
                    # the stand-in left outside stays non-dumpable: the program can reach it through /proc
                    _LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
                    _enter_run_namespaces()
                    _LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
                os.chdir(self.workdir)
                os.execve(argv[0], argv, env)
            except BaseException as e:  # noqa: BLE001 - report and vanish
                os.write(2, ("sandbox driver: cannot start %s: %r\n" % (argv[0], e)).encode())
            os._exit(127)
        os.close(out_w)
        os.close(err_w)
        return _Proc(pid, out_r, err_r)

    def program_env(self):
        """The environment of every program (and of the fork server, whose children inherit it)."""
        return {"PATH": SPAWN_PATH, "HOME": self.workdir, "TMPDIR": self.workdir, "LANG": "C.UTF-8",
                "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}

    def spawn_python(self, job, args, stdin_fd, extra_fds=(), budget_s=None):
        """Run `python3 -I -B args...` for job: a child of the fork server when there is one (a fork instead
        of an interpreter start), else exec'd under `timeout -s KILL`. Returns a _Proc."""
        budget_s = budget_s or job["time_s"]
        if self.forkserver is not None:
            proc = self.forkserver.spawn(args, job, stdin_fd, extra_fds, cpu_s=budget_s)
            if proc is not None:
                return proc
        return self.spawn(self.program_argv(job, *args, budget_s=budget_s), job, stdin_fd, extra_fds, cpu_s=budget_s)

    def program_argv(self, job, *args, budget_s):
        # `timeout -s KILL` is the inner backstop; the driver itself kills at the job's own deadline.
        backstop = [self.timeout_bin, "-s", "KILL", "%.3f" % (budget_s + 1.0)]
        if job.get("language", "python") != "python":
            return backstop + list(job["run"])  # run in the work folder, found on SPAWN_PATH
        return backstop + [self.python, "-I", "-B", *args]

    def others(self):
        """Processes of the sandbox that are neither us, pid 1 nor the fork server (outside a pid namespace:
        our children but the fork server)."""
        self.reap()
        server = self.forkserver
        keep = {os.getpid(), 1}
        if server is not None:
            keep |= {server.pid, server.init_pid}  # the fork server and its children's pid 1
        if not self.pid_namespace:
            return [pid for pid in _children(os.getpid()) if pid not in keep]
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep]

    def kill_all(self):
        """Kill every other process in the sandbox (only our descendants outside a pid namespace); True when
        none is left within 3 s. The fork server survives when nothing else is left (the usual case)."""
        if not self.others():
            return True
        if self.pid_namespace and self.forkserver is not None:
            self.forkserver.stop()  # kill(-1) cannot spare it; it restarts on next use
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            if self.pid_namespace:
                try:
                    os.kill(-1, signal.SIGKILL)  # everyone we may signal, except ourselves and pid 1
                except ProcessLookupError:
                    pass
            else:
                for pid in self.others():
                    _kill(pid)
            self.reap()
            if not self.others():
                if not self.pid_namespace:
                    return True
                try:
                    os.kill(-1, 0)
                except ProcessLookupError:
                    return True
            time.sleep(0.005)
        return False

    def wake_fds(self):
        """What wakes a wait for a child's end: SIGCHLD's wakeup pipe and the fork server's socket."""
        server = self.forkserver.fileno() if self.forkserver is not None else None
        return [self.wake_r] if server is None else [self.wake_r, server]

    def wait_exit(self, proc, until):
        """Wait until proc has been reaped or `until` (monotonic s) passes; True when it was reaped."""
        if proc.ended:
            return True
        while proc.pid not in self.reaped:
            self.reap()
            if proc.pid in self.reaped:
                break
            left = until - time.monotonic()
            if left <= 0:
                return False
            try:
                select.select(self.wake_fds(), [], [], min(left, 0.05))
            except _Abort:
                pass
            _drain(self.wake_r)
        proc.set_status(*self.reaped.pop(proc.pid))
        return True

    def pump(self, proc, cap, until, want_reply=False):  # noqa: C901 - one select loop
        """Read proc's stdout, stderr (and replies, fd proc.rep_r) until `want_reply` is met or, without it,
        until the process exited (then what its pipes hold is read without waiting: processes it left
        behind may keep them open, and are killed by the caller). Raises _Abort on deadline or output over
        cap."""
        while True:
            if want_reply and b"\n" in proc.rep:
                line, _, rest = bytes(proc.rep).partition(b"\n")
                proc.rep = bytearray(rest)
                return line
            open_fds = [fd for fd in (proc.out_r, proc.err_r, proc.rep_r) if fd is not None]
            if want_reply and proc.rep_r is None:
                self.wait_exit(proc, time.monotonic() + 1.0)
                proc.read_stderr_left()
                raise _Abort(*proc.death_status())
            if not want_reply and (proc.out_r is None or proc.pid in self.reaped):
                # main process gone (or stdout closed: wait for its exit until the deadline)
                if self.wait_exit(proc, until):
                    proc.read_output_left(cap)
                    if len(proc.out) > cap or proc.err_total > cap:
                        raise _Abort("output_limit", "wrote more than %d bytes" % cap)
                    return None
            left = until - time.monotonic()
            if left <= 0:
                raise _Abort("timeout", "no result within %.3g s" % proc.limit_s)
            if self.held:  # events of earlier tests go out while this one runs, once they waited long enough
                stale_in = self.held_since + EVENTS_HOLD_S - time.monotonic()
                if stale_in <= 0:
                    self.flush_held()
                else:
                    left = min(left, stale_in)
            ready, _, _ = select.select(open_fds + self.wake_fds(), [], [], left)
            for fd in ready:
                if fd not in open_fds:  # a signal, or a report from the fork server
                    _drain(self.wake_r)
                    self.reap()
                    continue
                chunk = os.read(fd, 65536)
                if fd == proc.out_r:
                    proc.out += chunk
                elif fd == proc.err_r:
                    proc.err_total += len(chunk)
                    proc.err += chunk
                    del proc.err[:-OUT_TAIL]
                else:
                    proc.rep += chunk
                if not chunk:
                    proc.close_fd(fd)
            if len(proc.out) > cap or proc.err_total > cap or len(proc.rep) > cap:
                raise _Abort("output_limit", "wrote more than %d bytes" % cap)

    def end_process(self, proc):
        """Kill proc's process group and collect its status."""
        if not proc.ended:
            _kill(-proc.pid)
            _kill(proc.pid)
        self.wait_exit(proc, time.monotonic() + 2.0)
        proc.close_all()

    # -- jobs -----------------------------------------------------------------------------------------
    def run_batch(self, jobs):
        """Run and report jobs in order; False when a job could not be cleaned up after (then this
        sandbox must not run anything more)."""
        for i, job in enumerate(jobs):
            # Statuses of processes no one waits for (orphans killed by a clean-up, an old fork server) go:
            # nothing of an earlier job is alive, and a warm driver lives long enough for pids to wrap
            # (pid_max is often 32768), when a stale entry would pass for a new program's exit.
            self.reaped.clear()
            self.left_over = False
            self.prepare_workdir()
            self.run_job(i, job)
            clean = self.kill_all() and self.wipe() and not self.dirty
            self.flush_held({"job": i, "done": True, "clean": clean})
            if not clean:
                return False  # the backend throws this sandbox away and reruns the rest elsewhere
        return True

    def prepare_workdir(self):
        os.makedirs(self.workdir, mode=0o700, exist_ok=True)

    def wipe(self):
        ok = True
        for root in self.scratch:
            try:
                entries = list(os.scandir(root))
            except OSError:
                continue
            for entry in entries:
                ok &= _remove(entry.path)
        return ok

    def run_job(self, i, job):
        path = os.path.join(self.workdir, job.get("source", "solution.py"))
        with open(path, "w", encoding="utf-8") as f:
            f.write(job["program"])
        n_tests = {"stdio": lambda: len(job["inputs"]), "call": lambda: len(job["cases"]),
                   "assert": lambda: sum(1 for u in job["units"] if u["test"])}[job["kind"]]()
        if job.get("language", "python") == "python":
            status, problem = "compile_error", self.compile_error(job)
        else:
            status, problem = self.compile_program(job)
        if problem is not None:
            for j in range(n_tests):
                self._report(i, j, status, problem)
            return
        if job["kind"] == "stdio":
            for j, text in enumerate(job["inputs"]):
                if self.left_over:
                    self._report(i, j, "error", LEFT_OVER)
                else:
                    self.run_stdio(i, j, job, path, text)
        else:
            self.session = _RpcSession(self, i, job, path)
            try:
                self.session.run()
            finally:
                self.session = None

    def compile_error(self, job):
        """Compile the program in a forked child under the job's memory limit: the message of a syntax
        error, or None. The child only compiles, never runs, the program."""
        r, w = os.pipe()
        pid = fork_retrying(self.reap)
        if pid == 0:
            code = 0
            try:
                os.close(r)
                _set_limits(job, SYNTAX_CHECK_S, None, job["memory_mb"])
                compile(job["program"], "solution.py", "exec")
            except BaseException as e:  # noqa: BLE001 - SyntaxError, ValueError (NUL), MemoryError, ...
                os.write(w, ("%s: %s" % (type(e).__name__, e)).encode("utf-8", "replace")[:OUT_TAIL])
                code = 3
            os._exit(code)
        os.close(w)
        message = b""
        end = time.monotonic() + SYNTAX_CHECK_S
        while time.monotonic() < end:
            ready, _, _ = select.select([r], [], [], end - time.monotonic())
            chunk = os.read(r, 65536) if ready else b""
            if not chunk:
                break
            message += chunk
        os.close(r)
        proc = _Proc(pid, None, None)
        if not self.wait_exit(proc, time.monotonic() + 1.0):
            _kill(pid)
            self.wait_exit(proc, time.monotonic() + 2.0)
            return "compiling the program took longer than %g s" % SYNTAX_CHECK_S
        if proc.exit_code == 0:
            return None
        return message.decode("utf-8", "replace") or "the compiler ended abnormally"

    def compile_program(self, job):
        """Compile a C, C++ or Java program (JavaScript: check its syntax) once, in the work folder, under
        the job's compile limits. Returns (status, message): (None, None) when it compiled, ("compile_error",
        the compiler's messages) when not, ("sandbox_error", why) when this sandbox lacks the toolchain."""
        missing = [t for t in job["tools"] if shutil.which(t, path=SPAWN_PATH) is None]
        if missing:
            return "sandbox_error", "this sandbox has no %s for %s programs (rebuild it: make sandbox)" % (
                ", ".join(missing), job["language"])
        if not job["compile"]:
            return None, None
        limit_s = float(job["compile_time_s"])
        argv = [self.timeout_bin, "-s", "KILL", "%.3f" % (limit_s + 1.0), *job["compile"]]
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        memory_mb = job["compile_memory_mb"] if job["address_space"] else 0
        proc = self.spawn(argv, job, null, cpu_s=limit_s, memory_mb=memory_mb)
        os.close(null)
        proc.limit_s = limit_s
        until = time.monotonic() + limit_s
        message = bytearray()
        while (proc.out_r is not None or proc.err_r is not None) and time.monotonic() < until:
            fds = [fd for fd in (proc.out_r, proc.err_r) if fd is not None]
            ready, _, _ = select.select(fds + [self.wake_r], [], [], max(until - time.monotonic(), 0))
            for fd in ready:
                if fd == self.wake_r:
                    _drain(fd)
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    proc.close_fd(fd)
                elif len(message) < OUT_TAIL:  # the first errors are the ones worth reading
                    message += chunk[:OUT_TAIL - len(message)]
        exited = self.wait_exit(proc, until)
        self.end_process(proc)
        self.dirty |= not self.kill_all()  # compiler helpers (cc1plus, as, ld) must not outlive it
        if not exited:
            return "compile_error", "compiling took longer than %.3g s" % limit_s
        if proc.exit_code == 0:
            return None, None
        text = message.decode("utf-8", "replace").strip()
        if proc.exit_code == 137 or proc.signal is not None:
            how = "was killed by signal %s" % (proc.signal or 9)
            text = "the compiler %s (out of time or memory: limits %.3g s, %d MiB)%s" % (
                how, limit_s, job["compile_memory_mb"], "\n" + text if text else "")
        return "compile_error", text or "the compiler exited with code %s" % proc.exit_code

    def run_stdio(self, i, j, job, path, text):
        started = time.monotonic()
        stdin_fd = os.memfd_create("stdin", os.MFD_CLOEXEC)  # input reaches no path the program can list
        os.write(stdin_fd, text.encode("utf-8"))
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        if job.get("language", "python") == "python":
            proc = self.spawn_python(job, [path], stdin_fd)
        else:
            proc = self.spawn(self.program_argv(job, path, budget_s=job["time_s"]), job, stdin_fd)
        os.close(stdin_fd)
        proc.limit_s = job["time_s"]
        try:
            self.pump(proc, job["output_bytes"], started + job["time_s"])
            status, detail = proc.exit_status()
        except _Abort as abort:
            status, detail = abort.status, abort.detail
        self.end_process(proc)
        self.clean_after_program()  # daemons the program left must not see the next test
        self._report(i, j, status, detail, started, proc, stdout=bytes(proc.out[: job["output_bytes"]]))

    def clean_after_program(self):
        """Kill what a program's run left; where that fails, the sandbox is dirty and the job's remaining tests are
        reported as the program's error (LEFT_OVER) instead of run."""
        if not self.kill_all():
            self.dirty = self.left_over = True


class _Requests:
    """Batches from stdin (fd 0): a decimal byte count, a newline, then that much JSON."""

    def __init__(self):
        self.buf = bytearray()

    def _fill(self, until):
        """Read more into buf; False at end of stream or when `until` (monotonic s, None: never) passed."""
        if until is not None:
            left = until - time.monotonic()
            if left <= 0 or not select.select([0], [], [], left)[0]:
                return False
        chunk = os.read(0, 1 << 20)
        self.buf += chunk
        return bool(chunk)

    def next(self, idle_s):
        """The next batch as a dict; None at end of stream, or when none began within idle_s seconds."""
        until = None if idle_s is None else time.monotonic() + idle_s
        while b"\n" not in self.buf:
            if not self._fill(until):
                return None
            until = None  # a batch has begun: wait for the rest of it
        line, _, rest = bytes(self.buf).partition(b"\n")
        size = int(line)
        self.buf = bytearray(rest)
        while len(self.buf) < size:
            if not self._fill(None):
                return None
        body, self.buf = bytes(self.buf[:size]), bytearray(self.buf[size:])
        return json.loads(body)


def _namespaces_problem():
    """Why a child cannot enter new user, IPC and pid namespaces here (None when it can)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            _enter_run_namespaces()
            os._exit(0 if os.getpid() == 1 else 3)
        except BaseException as e:  # noqa: BLE001 - report and vanish
            os.write(w, repr(e).encode()[:500])
        os._exit(2)
    os.close(w)
    message = os.read(r, 1000).decode("utf-8", "replace")
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return None
    return message or "the probe ended with status %d" % status


def _main():
    if _LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        _Driver.emit({"fatal": "prctl failed (errno %d)" % ctypes.get_errno()})
        return 2
    requests = _Requests()
    batch = requests.next(None)
    if batch is None:
        return 0
    problem = _namespaces_problem() if batch.get("namespaces") else None
    if problem:  # never run programs without the isolation the host asked for
        _Driver.emit({"fatal": "this sandbox cannot give each program its own namespaces: %s" % problem})
        return 2
    driver = _Driver(batch)  # the sandbox's settings (scratch, pid namespace, fork server) come with the first
    while batch is not None:
        driver.emit({"hello": os.getpid()})
        if not driver.run_batch(batch["jobs"]):
            break
        batch = requests.next(batch.get("idle_exit_s"))
    if driver.forkserver is not None:
        driver.forkserver.stop()
    return 0


sys.exit(_main())
