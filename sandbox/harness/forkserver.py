"""The fork server inside the sandbox: a warm Python that forks a fresh child per Python program run, so a
test costs a fork (~2 ms) instead of an interpreter start (~20 ms).

Started by the driver as `python3 -I -B -c PROCESSES_AND_THIS_SOURCE` with its control socket (AF_UNIX,
SOCK_SEQPACKET) at fd 3, an empty memfd as stdin, a pipe as stdout (so its std streams are set up as a
program's will be: stdin seekable, stdout a block-buffered pipe, stderr line-buffered). It never receives
a test, an expected output or anything of another program: only, per run, a request
  {"argv": ["solution.py"] or ["-c", SOURCE, ARG...], "workdir", "cpu_s", "memory_mb", "file_mb", "nproc"}
with the run's stdin, stdout and stderr (and extra fds for the call/assert runner) attached (SCM_RIGHTS).
It says {"ready": its pid, "init": pid 1 of its children's pid namespace or null} once, then answers
{"pid": pid} once the child exists and {"exit": pid, "status": wait status, "cpu_s": s} when it
has ended (it waits for nothing else meanwhile: the driver runs one program at a time).

The child is set up as the driver's `spawn` sets up an exec'd program: its own session, the fds at 0, 1,
2, 3..., every other fd closed, the run's rlimits, when started with the argument `namespaces` the server's
children's pid namespace, an IPC namespace of its own and a user namespace of its own, with no capability (see
`_enter_server_namespaces`), dumpable (the server itself is not: the child can
neither ptrace it nor read its memory), oom_score_adj 1000 (the server's own, inherited: if memory runs
out, a program or the server goes, never the driver), the work folder as cwd. It then runs the program
as `python3 -I -B` would: a fresh `__main__`, sys.argv, SystemExit codes, a traceback and exit code 1 for
an uncaught exception, non-daemon threads joined, atexit handlers, streams flushed. Differences from a
fresh interpreter: the modules the server imported are already loaded, and the hash seed is the server's
(one per server: it lives as long as its driver, which may serve many batches). A program in its own pid
namespace cannot signal the server; should the server die anyway, its child is reaped by the driver (the
subreaper) and the server restarted.
"""
# Shipped after processes.py (see `rlvr.sandbox.harness`): _LIBC, PR_SET_DUMPABLE, _set_limits,
# _enter_run_namespaces and fork_retrying come from there.
import ctypes
import fcntl
import gc
import json
import socket
import sys
import types

_MAX_REQUEST = 1 << 20
_NAMESPACES = sys.argv[1:] == ["namespaces"]  # started for a batch that asked for per-run namespaces


def _child(request, fds):
    status = 1
    try:
        os.setsid()
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100 + i) for i, fd in enumerate(fds)]  # no overlap with targets
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(len(high), resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        _set_limits(request, request["cpu_s"], request.get("nproc"), request["memory_mb"])
        if _NAMESPACES:
            # The server's children's pid namespace and this run's IPC namespace (made by the server) are ours
            # already; a user namespace of our own too (its own user keyring), then no capability is left.
            if _LIBC.unshare(CLONE_NEWUSER) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
            _drop_capabilities()
        _LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.chdir(request["workdir"])
        argv = list(request["argv"])
        if argv[0] == "-c":
            source, filename, sys.argv = argv[1], "<string>", ["-c", *argv[2:]]
        else:
            with open(argv[0], "rb") as f:
                source, filename, sys.argv = f.read(), argv[0], argv
        main = types.ModuleType("__main__")
        main.__dict__.update(__file__=filename, __builtins__=__builtins__, __cached__=None)
        if argv[0] == "-c":
            del main.__file__
        sys.modules["__main__"] = main
        code = compile(source, filename, "exec")
        try:
            exec(code, main.__dict__)
            status = 0
        except SystemExit as e:
            status = _exit_code(e)
        except BaseException:  # noqa: BLE001 - what the interpreter would print
            sys.excepthook(*sys.exc_info())
            status = 1
        status = _shutdown(status)
    except BaseException as e:  # noqa: BLE001 - a failure of our own set-up
        try:
            os.write(2, ("sandbox fork server: cannot start the program: %r\n" % (e,)).encode())
        except OSError:
            pass
    os._exit(status)


def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write("%s\n" % (code,))
    except BaseException:  # noqa: BLE001
        pass
    return 1


def _shutdown(status):
    """What the interpreter does after the main module: join threads, run atexit, flush the streams."""
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
    except SystemExit as e:
        status = _exit_code(e)
    except BaseException:  # noqa: BLE001
        sys.excepthook(*sys.exc_info())
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - e.g. a closed pipe: CPython exits 120 then
            status = 120 if status == 0 else status
    return status


def _warm_up():
    """Pay once, here, what every child would pay again: CPython builds its AST types on the first
    `compile()` of source text (~10 ms of CPU, more than a short program's whole run). Then freeze what
    exists: the children's garbage collector skips the server's own objects instead of touching (and so
    copying) their pages; the program's own objects are collected as usual."""
    compile("pass", "<warm-up>", "exec")
    gc.freeze()


def _enter_server_namespaces():
    """Once, before serving: new user, IPC and pid namespaces for our children (we stay outside the pid one).
    Its pid 1 is a child of ours that only reaps; every program run is then a later child, so a program's
    kill(-1) or SIGSTOP reaches the processes of that namespace only (programs' leftovers, killed after each
    test; pid 1 ignores them), never us or the driver. Before each run we move into a new IPC namespace (its
    children's: System V IPC and POSIX message queues private to the run), and after it we remove what the
    run left there, so its memory is back before the next job starts; the run adds a user namespace of its own
    (its user keyring) and drops the capabilities. No extra fork per run. Returns pid 1's pid."""
    uid, gid = os.getuid(), os.getgid()
    if _LIBC.unshare(JOB_NAMESPACES) != 0:
        raise OSError(ctypes.get_errno(), "unshare(user, ipc, pid namespaces)")
    # our ids mapped to themselves, so that a child may make a user namespace of its own (while still dumpable:
    # these files are root's otherwise)
    for name, text in (("uid_map", "%d %d 1" % (uid, uid)), ("setgroups", "deny"), ("gid_map", "%d %d 1" % (gid, gid))):
        with open("/proc/self/" + name, "w") as f:
            f.write(text)
    _LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    init = os.fork()
    if init == 0:
        try:
            os.closerange(0, 65536)
            _drop_capabilities()
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
            while True:  # orphans of the programs land here (the driver's subreaping stops at the namespace)
                try:
                    while os.waitpid(-1, os.WNOHANG)[0]:
                        pass
                except ChildProcessError:
                    pass
                signal.sigwait([signal.SIGCHLD])
        finally:
            os._exit(0)
    return init


def _serve():
    # once here, every child inherits it; before going non-dumpable, which makes /proc/self root's
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    init = _enter_server_namespaces() if _NAMESPACES else None
    _LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _warm_up()
    ctl = socket.socket(fileno=3)
    os.chdir("/")
    ctl.send(json.dumps({"ready": os.getpid(), "init": init}).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctl, _MAX_REQUEST, 16)
        except OSError:
            return
        if not data:
            return
        request = json.loads(data)
        if _NAMESPACES and _LIBC.unshare(CLONE_NEWIPC) != 0:  # each run's IPC namespace: ours until the next
            return
        pid = fork_retrying()
        if pid == 0:
            ctl.close()
            _child(request, fds)
        for fd in fds:
            os.close(fd)
        ctl.send(json.dumps({"pid": pid}).encode())
        _, status, usage = os.wait4(pid, 0)
        if _NAMESPACES:
            _remove_ipc_objects()  # its memory back before the driver hears of the exit (and runs the next job)
        ctl.send(json.dumps({"exit": pid, "status": status, "cpu_s": usage.ru_utime + usage.ru_stime}).encode())


_serve()
