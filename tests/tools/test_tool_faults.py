"""Every tool fault answers the model with a short error and never raises: the python tool in the sandbox (timeout,
exception, 10 MB print, bytes that are not UTF-8, hostile code contained), function tools (raise, timeout, bytes,
bad arguments) and malformed calls; and a whole round through the tool environment."""

import time

import pytest

from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.tools import CallFormat, FunctionTool, PythonTool, ToolEnvironment
from rlvr.tools.environment import Episode
from tests.tools.scripted import chat_tokenizer

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]
FAULTS = {
    "ok": ("print(6 * 7)", "ok", "42"),
    "timeout": ("while True:\n    pass", "timeout", "TimeoutError"),
    "raise": ("x = 1\nraise ValueError('bad value')", "error", "ValueError: bad value"),
    "huge_print": ("print('x' * 10_000_000)", "error", "output limit exceeded"),
    "not_utf8": ("import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')", "ok", "ok \ufffd\ufffd end"),
    "syntax": ("def f(:\n    pass", "error", "SyntaxError"),
    "hostile_fs": ("open('/etc/passwd', 'a').write('x')", "error", "Error"),
    "exit": ("import sys\nsys.exit(3)", "error", ""),
}


def _skip_unless(backend):
    problem = docker_problem() if backend == "docker" else bwrap_problem()
    if problem:
        pytest.skip(f"{backend}: {problem}")


@pytest.mark.security
@pytest.mark.parametrize("backend", BACKENDS)
def test_python_tool_faults_are_short_errors_in_one_batch(backend):
    _skip_unless(backend)
    tool = PythonTool(time_s=1.0, output_kb=64, backend=backend)
    names = list(FAULTS)
    results = tool.run_batch([{"code": FAULTS[k][0]} for k in names], [{} for _ in names])
    for name, result in zip(names, results):
        _, status, text = FAULTS[name]
        assert result.status == status, (name, result)
        assert text in result.output, (name, result.output[-300:])
        assert len(result.output) < 70_000, name  # bounded by the output limit, not 10 MB


@pytest.mark.parametrize("backend", BACKENDS)
def test_sessions_keep_each_samples_variables_and_never_share_them(backend):
    _skip_unless(backend)
    tool = PythonTool(time_s=2.0, session=True, backend=backend)
    a, b = {}, {}
    first = tool.run_batch([{"code": "x = 5\nprint('set')"}, {"code": "x = 7"}], [a, b])
    assert [r.status for r in first] == ["ok", "ok"] and first[0].output == "set\n"
    second = tool.run_batch([{"code": "print(x * 2)"}, {"code": "print(x * 2)"}, {"code": "print(x)"}], [a, b, {}])
    assert second[0].output == "10\n" and second[1].output == "14\n"  # the earlier cell's print is not repeated
    assert second[2].status == "error" and "NameError" in second[2].output


def _slow(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "woke"


def _fails(n: int) -> str:
    raise RuntimeError(f"broken {n}")


def _raw(kind: str) -> object:
    return {"bad": b"\xff\xfe", "good": "caf\u00e9".encode(), "obj": {"a": [1, 2]}, "none": None}[kind]


def test_function_tool_faults():
    slow = FunctionTool(_slow, timeout_s=0.3)
    results = slow.run_batch([{"seconds": 0.0}, {"seconds": 5.0}, {"secs": 1}, {"seconds": 1, "extra": 2}],
                             [{}] * 4)
    assert [r.status for r in results] == ["ok", "timeout", "malformed", "malformed"]
    assert results[0].output == "woke" and "TimeoutError" in results[1].output
    assert "bad arguments for _slow" in results[2].output
    [failed] = FunctionTool(_fails).run_batch([{"n": 3}], [{}])
    assert failed.status == "error" and failed.output == "RuntimeError: broken 3"
    raw = FunctionTool(_raw).run_batch([{"kind": k} for k in ("bad", "good", "obj", "none")], [{}] * 4)
    assert [r.status for r in raw] == ["error", "ok", "ok", "ok"]
    assert "not UTF-8" in raw[0].output and raw[1].output == "caf\u00e9" and raw[2].output == '{"a": [1, 2]}'


def test_bound_kwargs_are_hidden_and_cannot_be_overridden():
    def lookup(key: str, table: str) -> str:
        return f"{table}[{key}]"

    tool = FunctionTool(lookup, kwargs={"table": "x.csv"})
    assert list(tool.schema["function"]["parameters"]["properties"]) == ["key"]
    ok, clash = tool.run_batch([{"key": "a"}, {"key": "a", "table": "/etc/passwd"}], [{}, {}])
    assert ok.output == "x.csv[a]" and clash.status == "malformed"


@pytest.mark.parametrize("fmt, text, expected", [
    ("hermes", "<tool_call>\n{not json}\n</tool_call>", "not valid JSON"),
    ("hermes", '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>', "unknown tool 'nope'"),
    ("hermes", '<tool_call>\n{"arguments": {}}\n</tool_call>', '"name"'),
    ("hermes", "just a closing tag</tool_call>", "<tool_call>{...}</tool_call>"),
    ("hermes", '<tool_call>\n{"name": "_fails", "arguments": {"m": 1}}\n</tool_call>', "bad arguments"),
    ("fenced", "```_fails\n[1, 2]\n```\n", "JSON object"),
    ("fenced", "```_fails\n{\"n\": 1\n```\n", "JSON object"),
])
def test_malformed_calls_are_answered_never_raised(fmt, text, expected):
    env = ToolEnvironment([FunctionTool(_fails)], CallFormat(fmt), chat_tokenizer(), instructions=False)
    [reply] = env.step_many([Episode({}, [])], [text], [True])
    [record] = reply.calls
    assert record.status == "malformed" and expected in record.output
    assert not reply.done


def test_long_outputs_are_cut_in_the_middle_and_marked():
    env = ToolEnvironment([FunctionTool(_raw)], CallFormat("fenced"), chat_tokenizer(), max_tool_output_tokens=40,
                          instructions=False)
    env.tools["_raw"].fn = lambda kind: "a" * 5000 + "b" * 5000
    [reply] = env.step_many([Episode({}, [])], ['```_raw\n{"kind": "x"}\n```\n'], [True])
    [record] = reply.calls
    assert record.truncated and record.output.startswith("a") and record.output.endswith("b")
    assert "tokens cut" in record.output and len(record.output) < 80
    assert reply.text.startswith("```output\n") and reply.text.endswith("```\n")


@pytest.mark.security
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_round_of_python_calls_through_the_environment(backend):
    _skip_unless(backend)
    env = ToolEnvironment([PythonTool(time_s=1.0, backend=backend)], CallFormat("fenced"), chat_tokenizer(),
                          instructions=False)
    texts = ["```python\nprint(1 + 1)\n```\n", "```python\nimport time; time.sleep(30)\n```\n", "no call here",
             "```bash\nls\n```\n"]
    replies = env.step_many([Episode({}, []) for _ in texts], texts, [True, True, False, True])
    assert replies[0].text == "```output\n2\n```\n" and replies[0].calls[0].status == "ok"
    assert replies[1].calls[0].status == "timeout" and "TimeoutError" in replies[1].text
    assert replies[2].done and not replies[2].calls
    assert not replies[3].done and replies[3].text is None and not replies[3].messages  # not a call: goes on
