"""The program's side of `call` and `assert` tests: run the program, then serve calls from the driver.

Runs inside the untrusted program's own process, started by the driver as
`python3 -I -c CODEC_AND_THIS_SOURCE PROGRAM_PATH` with requests on fd 3 and answers on fd 4 (one JSON line
each). Nothing in this process is trusted: the program can read or replace any of it. That is fine because
the driver learns no more from it than "the function returned this value", which an honest function could
have returned too; expected values and comparisons never enter this process.

Requests:  {"fn": name, "args": encoded list, "kwargs": encoded dict}
Answers:   {"ready": [callable global names]} once the program's top level has run, then per request
           {"ok": encoded value} or {"err": exception type name, "msg": text}.
"""
# encode() and decode() come from codec.py, which is prepended to this file when it is shipped.
import builtins
import json
import os
import sys


def _send(text):
    data = (text + "\n").encode("utf-8")
    while data:
        data = data[os.write(4, data):]


def _resolve(namespace, name):
    fn = namespace.get(name)
    if callable(fn):
        return fn
    cls = namespace.get("Solution")
    if isinstance(cls, type) and callable(getattr(cls, name, None)):
        return getattr(cls(), name)  # LeetCode style: a method of class Solution
    raise NameError("the program defines no function %r (nor a class Solution with that method)" % name)


def _serve(path):
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    namespace = {"__name__": "solution", "__file__": path, "__builtins__": builtins}
    exec(code, namespace)  # SystemExit, os._exit and exec* end this process: the driver sees an early exit
    names = sorted(k for k, v in list(namespace.items()) if callable(v) and not k.startswith("__"))
    _send(json.dumps({"ready": names}))
    for line in os.fdopen(3, "rb"):
        request = json.loads(line)
        try:
            fn = _resolve(namespace, request["fn"])
            value = fn(*decode(request["args"]), **decode(request["kwargs"]))
            answer = json.dumps({"ok": encode(value)})
        except Exception as e:  # the program's own error, reported by name; BaseException ends the process
            answer = json.dumps({"err": type(e).__name__, "msg": str(e)[:1000]})
        _send(answer)


_serve(sys.argv[1])
