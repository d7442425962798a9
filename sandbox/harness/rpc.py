"""`call` and `assert` tests inside the sandbox: the program runs once in a runner process (runner.py) and
answers calls; for `assert` the test code runs in the driver and reaches the program through proxies.
Shipped after processes.py and before driver.py (one namespace at run time)."""
# encode(), decode() and validated() come from codec.py; _Abort, _write_all and OUT_TAIL from processes.py; LEFT_OVER
# from driver.py.
import builtins
import json
import os
import signal
import time


class _RpcSession:
    """One job of kind `call` or `assert`. The program runs once in a runner process (restarted after a
    timeout or a crash) and answers calls. For `assert` the test code runs here, in the driver, and reaches
    the program's functions through _Proxy objects, so every comparison is made on plain decoded values
    that the program's objects cannot influence."""

    def __init__(self, driver, i, job, path):
        self.d, self.i, self.job, self.path = driver, i, job, path
        self.proc = self.last_proc = None  # the runner now, and the last one started (for its stderr)
        self.abort = None  # the _Abort that ended the runner during the current test
        self.until = 0.0  # deadline (monotonic s) of the current test
        self.in_unit = False
        self.namespace = {"__name__": "tests", "__builtins__": builtins}

    def start(self):
        """Start the runner and wait for the program's top level to finish; raises _Abort if it fails."""
        req_r, req_w = os.pipe2(os.O_CLOEXEC)
        rep_r, rep_w = os.pipe2(os.O_CLOEXEC)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        budget_s = self.job["time_s"] * (len(self.job.get("cases") or self.job.get("units")) + 1)
        proc = self.d.spawn_python(self.job, ["-c", self.d.runner_source, self.path], null, (req_r, rep_w), budget_s)
        for fd in (null, req_r, rep_w):
            os.close(fd)
        proc.req_w, proc.rep_r, proc.limit_s = req_w, rep_r, budget_s
        self.proc = self.last_proc = proc
        try:
            names = _reply(self.d.pump(proc, self.job["output_bytes"], time.monotonic() + self.job["time_s"], True),
                           "ready")
            if not isinstance(names, list):
                raise _Abort("error", "the program wrote to the sandbox's answer channel")
        except _Abort:
            self.stop()
            raise
        for name in names:
            # Never a builtin's name: a program defining abs() must not change what abs() means in the tests.
            if isinstance(name, str) and name.isidentifier() and not hasattr(builtins, name):
                self.namespace.setdefault(name, _Proxy(self, name))

    def stop(self):
        if self.proc is not None:
            self.d.end_process(self.proc)
            self.d.clean_after_program()
            self.proc = None

    def call(self, fn, args, kwargs, decoded=True):
        """Call `fn` in the program before self.until; returns its value (decoded, or when not `decoded` in
        codec form as `validated` checked it), or raises the program's own error (marked _from_program) or
        _Abort.

        Only an `assert` test's code needs the value decoded, and it runs under the test's timer (on_alarm),
        which also bounds the decoding. A `call` test's value goes to the host undecoded: decoding it here
        would have no deadline, and a program writing its own answer (keys that all hash alike) could make
        it take quadratic time."""
        if self.abort is not None:
            raise self.abort  # the runner is gone; tests that swallowed the first _Abort see it again
        request = json.dumps({"fn": fn, "args": encode(list(args)), "kwargs": encode(dict(kwargs))})
        try:
            try:
                _write_all(self.proc.req_w, (request + "\n").encode("utf-8"))
            except BrokenPipeError:
                pass  # it is gone; pump reports how it ended
            answer = _reply(self.d.pump(self.proc, self.job["output_bytes"], self.until, True), "ok", "err")
            value = validated(answer["ok"]) if "ok" in answer else None
        except ValueError as e:  # only a program writing to the answer channel itself sends a malformed value
            self.abort = _Abort("error", "the program wrote to the sandbox's answer channel: %s" % e)
            raise self.abort from None
        except _Abort as abort:
            self.abort = abort
            raise
        if "ok" in answer:
            return decode(value) if decoded else value
        raise _program_error(str(answer["err"]), str(answer.get("msg", "")))

    def run(self):
        units = self.job["cases"] if self.job["kind"] == "call" else self.job["units"]
        fatal = None  # (status, detail) for every remaining test: the top level or a setup statement failed
        j = 0
        for unit in units:
            is_test = self.job["kind"] == "call" or unit["test"]
            started = time.monotonic()
            value = None
            if fatal is None and self.proc is None and self.d.left_over:
                fatal = ("error", LEFT_OVER)
            if fatal is None and self.proc is None:
                try:
                    self.start()
                except _Abort as abort:
                    fatal = (abort.status, abort.detail)
            if fatal is not None:
                status, detail = fatal
            else:
                started = time.monotonic()
                self.until, self.abort = started + self.job["time_s"], None
                self.proc.out.clear()  # output caps count per test; the runner's stdout is not a result
                self.proc.err_total = 0
                status, detail, value = self.run_one(unit)
                if self.abort is not None:  # also when the test code caught it
                    status, detail = self.abort.status, self.abort.detail
                if self.abort is not None or self.proc.rep_r is None:
                    self.stop()
            if is_test:
                self.d._report(self.i, j, status, detail, started, self.last_proc, value=value)
                j += 1
            elif status != "ok":
                fatal = (status, "a setup statement failed: " + detail)
        self.stop()

    def run_one(self, unit):
        """(status, detail, encoded value) of one call case or one top-level statement of assert code."""
        try:
            if self.job["kind"] == "call":
                return "ok", "", self.call(self.job["fn"], unit["args"], unit["kwargs"], decoded=False)
            code = compile(unit["code"], "tests.py", "exec")
            self.in_unit = True
            signal.setitimer(signal.ITIMER_REAL, max(self.until - time.monotonic(), 0.001))
            try:
                exec(code, self.namespace)
            finally:
                self.in_unit = False
                signal.setitimer(signal.ITIMER_REAL, 0)
            return "ok", "", None
        except _Abort as abort:
            return abort.status, abort.detail, None
        except AssertionError as e:
            if getattr(e, "_from_program", False):
                return "error", "AssertionError in the program: %s" % e, None
            return "failed", ("AssertionError: %s" % e) if str(e) else "AssertionError", None
        except BaseException as e:  # noqa: BLE001 - the program's error, or the test code's own
            status = "memory" if isinstance(e, MemoryError) else "error"
            origin = " in the program" if getattr(e, "_from_program", False) else ""
            return status, "%s%s: %s" % (type(e).__name__, origin, e), None

    def on_alarm(self):
        if self.in_unit:
            signal.setitimer(signal.ITIMER_REAL, 0.05)  # keeps firing if the test code swallows it
            raise _Abort("timeout", "no result within %.3g s" % self.job["time_s"])


def _reply(line, *keys):
    """The runner's answer line as a dict holding one of keys (for "ready": its value); _Abort when it is
    anything else (a program writing to the answer channel itself)."""
    try:
        answer = json.loads(line)
    except (ValueError, RecursionError):
        answer = None
    if not isinstance(answer, dict) or not any(k in answer for k in keys):
        raise _Abort("error", "the program wrote to the sandbox's answer channel")
    return answer[keys[0]] if keys == ("ready",) else answer


class _Proxy:
    """Stands for one of the program's functions inside the assert code: a call crosses to the program's
    process and only plain data comes back."""

    def __init__(self, session, name):
        self._session, self.__name__ = session, name

    def __call__(self, *args, **kwargs):
        return self._session.call(self.__name__, args, kwargs)

    def __repr__(self):
        return "<function %s of the program>" % self.__name__


def _program_error(name, message):
    """Rebuild an exception the program raised: the builtin type of that name when there is one (so that
    tests catching ValueError still work), else RuntimeError; marked as coming from the program."""
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls, message = RuntimeError, "%s: %s" % (name, message)
    try:
        error = cls(message)
    except Exception:  # noqa: BLE001 - exotic constructors (UnicodeDecodeError, ...)
        error = RuntimeError("%s: %s" % (name, message))
    error._from_program = True
    return error
