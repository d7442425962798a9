"""The `code` verifier: run the program in a completion against the sample's tests, in the sandbox.

Example (needs Docker or bubblewrap)::

    >>> code_reward("```python\\nprint(sum(map(int, input().split())))\\n```",
    ...             {"test_type": "stdio", "tests": [{"input": "1 2\\n", "output": "3\\n"}]})  # doctest: +SKIP
    {'score': 1.0, 'passed': True, 'verdicts': ['AC'], 'reason': 'all 1 tests passed'}

Fields read from the sample (a dataset row): `tests` and `test_type` (stdio, call or assert; formats in
`rlvr.sandbox.jobs`), optional `language` (python, c, cpp, java, javascript; default python; other languages
have stdio tests only), `checker` (default "lines") and `limits` (`time_s`, `memory_mb`, ...), and for
HumanEval-style rows `entry_point` plus `stub` (the signature and docstring the model was asked to
complete): a completion that defines the entry point runs after the stub (so the stub's imports and
helpers exist, the completion's function wins), any other completion continues the stub. The stub's
own imports and helpers (every top-level import, def, class and assignment but the entry point) are also
run at the top of the test code, in the sandbox's trusted driver, so the tests call the prompt's helpers
(HumanEval/32 `poly`, /38 `encode_cyclic`, /50 `encode_shift`) even when the completion redefines them.

Returns {"score", "passed", "verdicts", "reason"}; score is the fraction of tests passed (mode="fraction")
or 1/0 for all passed (mode="all"); raises ValueError for a malformed row. A fault of the program (wrong
output, crash, timeout) is a score; a fault of the machinery (no sandbox can run here, the sandbox broke while
the program ran, a checker raised) is not: it raises `rlvr.sandbox.SandboxError`, which a `RewardFunction`
records as that sample's failure (left out of its group and the loss, counted), never a 0. `code_rewards`
scores many completions in one batch (faster); a `RewardFunction` uses it through the registry's batch hook,
so a whole step's completions go to the sandbox in one `rlvr.sandbox.run_many`, and one program's failure
costs only that program. With `backend: remote` (or `sandbox_urls`) the programs run on sandbox servers
(`rlvr sandbox serve`, or a SandboxFusion deployment) and are judged here with the same checkers: the same
verdicts; a server that fails is a machinery failure of the programs it held (docs/services.md).
"""
from __future__ import annotations

import ast
import os
import re
from typing import Any, Literal

from rlvr import sandbox
from rlvr.verifiers.registry import verifier

_FENCE = re.compile(r"```[ \t]*(?P<lang>[\w+#-]*)[^\n]*\n(?P<body>.*?)(?:```|\Z)", re.S)
# Fence tags that mark a block as written in each language (```cpp, ```c++, ```js, ...).
FENCE_TAGS = {
    "python": {"python", "py", "python3"}, "c": {"c"}, "cpp": {"cpp", "c++", "cxx", "cc"},
    "java": {"java"}, "javascript": {"javascript", "js", "node", "nodejs"},
}


def extract_program(completion: str, language: str = "python") -> str:
    """The program in a completion: the last fenced block tagged with `language` (```python, ```cpp, ...),
    else the last fenced block with no tag, else the whole text. An unclosed last fence (a cut-off
    completion) runs to the end. Raises ValueError for an unknown language."""
    lang = sandbox.parse_language(language).name
    blocks = [(m.group("lang").lower(), m.group("body")) for m in _FENCE.finditer(completion)]
    for wanted in (FENCE_TAGS[lang], {""}):
        chosen = [body for lang, body in blocks if lang in wanted]
        if chosen:
            return chosen[-1]
    return completion


def build_program(code: str, sample: dict[str, Any]) -> str:
    """The program to run: `code`, placed after the sample's `stub` when it has one (see module doc)."""
    stub, entry = sample.get("stub"), sample.get("entry_point")
    if not isinstance(stub, str) or not stub:
        return code
    if isinstance(entry, str) and re.search(rf"^[ \t]*(async[ \t]+)?def[ \t]+{re.escape(entry)}[ \t]*\(", code, re.M):
        return f"{stub.rstrip()}\n    pass\n\n\n{code}"
    return stub + code


def build_tests(sample: dict[str, Any]) -> Any:
    """The sample's `tests`; for assert tests with a `stub` and an `entry_point`, preceded by the stub's
    helpers (`stub_helpers`), so that the names the tests call are bound to the prompt's definitions.

    Without this, a completion that redefines a helper the tests call (e.g. an identity `encode_cyclic`
    next to an identity `decode_cyclic`) passes a wrong solution: the tests would see the completion's
    helper. Raises ValueError when the stub does not parse."""
    tests, stub, entry = sample.get("tests"), sample.get("stub"), sample.get("entry_point")
    kind = sandbox.TEST_TYPES.get(sample.get("test_type", "stdio"))
    if kind != "assert" or not isinstance(tests, str) or not isinstance(stub, str) or not isinstance(entry, str):
        return tests
    helpers = stub_helpers(stub, entry)
    return f"{helpers}\n\n\n{tests}" if helpers else tests


def stub_helpers(stub: str, entry_point: str) -> str:
    """The stub's top-level imports, function and class definitions and assignments, except the
    `entry_point` definition, as source (comments dropped). Raises ValueError when the stub does not parse."""
    try:
        tree = ast.parse(stub)
    except SyntaxError as e:
        raise ValueError(f"the sample's stub does not parse as Python ({e}); expected a signature and docstring") from None
    kept = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
    return "\n\n".join(ast.unparse(stmt) for stmt in tree.body if isinstance(stmt, kept)
                        and getattr(stmt, "name", None) != entry_point)


def sandbox_backend(backend: str = "auto", sandbox_urls: str | list[str] | None = None,
                    sandbox_token_env: str = "RLVR_SANDBOX_TOKEN", sandbox_protocol: str | None = None) -> Any:
    """What `rlvr.sandbox.run_many` is given: the backend's name, or for `sandbox_urls` (a comma-separated string or a
    list of server URLs) the remote backend of those servers, with the token read from the environment variable
    `sandbox_token_env` (a recipe names the variable, never the token). Raises ValueError for `sandbox_urls` with a
    backend other than remote (or auto)."""
    if sandbox_urls is None:
        return backend
    if backend not in ("auto", "remote"):
        raise ValueError(f"code verifier: sandbox_urls needs backend 'remote', got backend {backend!r}")
    return sandbox.remote_backend(sandbox_urls, os.environ.get(sandbox_token_env) or None, sandbox_protocol)


def code_rewards_batch(completions: list[str], samples: list[dict[str, Any]], *,
                       mode: Literal["fraction", "all"] = "fraction", backend: str = "auto",
                       sandbox_urls: str | list[str] | None = None, sandbox_token_env: str = "RLVR_SANDBOX_TOKEN",
                       sandbox_protocol: str | None = None) -> list[Any]:
    """The registry's batch hook for `code`: `code_rewards`, except that a malformed sample costs only
    itself (its entry is the ValueError, which `RewardFunction` records as that sample's failure)."""
    if mode not in ("fraction", "all"):
        raise ValueError(f"code verifier: mode must be 'fraction' or 'all', got {mode!r}")
    backend = sandbox_backend(backend, sandbox_urls, sandbox_token_env, sandbox_protocol)
    out: list[Any] = [None] * len(completions)
    good: list[int] = []
    jobs = []
    for i, (completion, sample) in enumerate(zip(completions, samples, strict=True)):
        try:
            jobs.append(build_job(completion, sample))
            good.append(i)
        except ValueError as e:
            out[i] = e
    for i, scored in zip(good, _judge_jobs(jobs, mode, backend), strict=True):
        out[i] = scored
    return out


@verifier("code", batch=code_rewards_batch, score_range=(0.0, 1.0))
def code_reward(completion: str, sample: dict[str, Any], *, mode: Literal["fraction", "all"] = "fraction",
                backend: str = "auto", sandbox_urls: str | list[str] | None = None,
                sandbox_token_env: str = "RLVR_SANDBOX_TOKEN", sandbox_protocol: str | None = None) -> dict[str, Any]:
    """Score a completion's program against `sample["tests"]` (see the module docstring).

    Args:
        mode: "fraction" (share of tests passed) or "all" (1.0 only when every test passes, else 0.0).
        backend: sandbox backend: auto, docker, bwrap, remote (servers of `RLVR_SANDBOX_URL`), or none (no
            isolation, trusted code only).
        sandbox_urls: sandbox servers (`rlvr sandbox serve` or SandboxFusion) to run the programs on, instead of
            `RLVR_SANDBOX_URL`; their token is read from the environment variable `sandbox_token_env`;
            `sandbox_protocol`: auto, rlvr or sandboxfusion (docs/services.md).
    Raises:
        ValueError: unknown mode, missing `tests`, an unknown `language`, or malformed tests/checker/limits
            (the message names them).
        rlvr.sandbox.SandboxError: no sandbox can run here, or it failed while judging (not the program's fault).
    """
    return code_rewards([completion], [sample], mode=mode,
                        backend=sandbox_backend(backend, sandbox_urls, sandbox_token_env, sandbox_protocol))[0]


def code_rewards(completions: list[str], samples: list[dict[str, Any]], *,
                 mode: Literal["fraction", "all"] = "fraction", backend: Any = "auto") -> list[dict[str, Any]]:
    """`code_reward` for many completions at once, in order: the throughput path (one `rlvr.sandbox.run_many`,
    so several programs share each sandbox exec and run in parallel). Raises ValueError naming the index of
    the first malformed sample, and `rlvr.sandbox.SandboxError` when the machinery failed for any of them
    (`code_rewards_batch` keeps the others' scores instead)."""
    if mode not in ("fraction", "all"):
        raise ValueError(f"code verifier: mode must be 'fraction' or 'all', got {mode!r}")
    jobs = []
    for i, (completion, sample) in enumerate(zip(completions, samples, strict=True)):
        try:
            jobs.append(build_job(completion, sample))
        except ValueError as e:
            raise ValueError(f"code verifier, sample {i}: {e}") from None
    scored = _judge_jobs(jobs, mode, backend)
    failed = next((x for x in scored if isinstance(x, BaseException)), None)
    if failed is not None:
        raise failed
    return scored


def build_job(completion: str, sample: dict[str, Any]) -> sandbox.Job:
    """The sandbox Job for one completion and its sample (see the module docstring for the fields read).
    Raises ValueError for a malformed sample, naming what is wrong."""
    if "tests" not in sample:
        raise ValueError(f"code verifier needs sample['tests']; the sample has {sorted(sample)}")
    language = sample.get("language") or "python"
    return sandbox.Job(
        program=build_program(extract_program(completion, language), sample),
        tests=build_tests(sample),
        test_type=sample.get("test_type", "stdio"),
        checker=sample.get("checker") or "lines",
        limits=sandbox.Limits.from_mapping(sample.get("limits")),
        language=language,
    )


def _judge_jobs(jobs: list[sandbox.Job], mode: Literal["fraction", "all"],
                backend: Any) -> list[dict[str, Any] | sandbox.SandboxError]:
    """Per job its score dict, or the SandboxError that kept it from a verdict (a machinery failure)."""
    try:
        results = sandbox.run_many(jobs, backend=backend)
    except sandbox.SandboxError as e:
        return [e] * len(jobs)
    return [sandbox.SandboxError(f"the sandbox failed while judging: {result.error}") if result.error
            else score_result(result, mode) for result in results]


def score_result(result: sandbox.JudgeResult, mode: Literal["fraction", "all"] = "fraction") -> dict[str, Any]:
    """{"score", "passed", "verdicts", "reason"} for a judged program (see `code_reward` for `mode`)."""
    first = result.first_failure()
    score = result.fraction if mode == "fraction" else float(result.passed)
    reason = f"all {len(result.verdicts)} tests passed" if first is None else (
        f"test {first.index}: {first.verdict.value} ({first.reason})")
    return {"score": score, "passed": result.passed, "verdicts": result.codes, "reason": reason}
