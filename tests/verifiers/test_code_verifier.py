"""The `code` verifier and `rlvr verify code`: program extraction, scoring modes, the JSONL command."""
import argparse
import json

import pytest

from rlvr import sandbox
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.verifiers import get_verifier
from rlvr.verifiers.code import build_program, code_reward, code_rewards, code_rewards_batch, extract_program

SORT_TESTS = [{"input": "3\n3 1 2\n", "output": "1 2 3\n"}, {"input": "1\n7\n", "output": "7\n"},
              {"input": "4\n2 2 1 1\n", "output": "1 1 2 2\n"}]
SAMPLE = {"test_type": "stdio", "tests": SORT_TESTS, "limits": {"time_s": 2}}
needs_sandbox = pytest.mark.skipif(docker_problem() is not None and bwrap_problem() is not None,
                                   reason="neither Docker nor bubblewrap can run here")


def fenced(code, lang="python"):
    return f"Here is my answer.\n```{lang}\n{code}```\nDone."


def test_extract_program_takes_the_last_python_block():
    text = "```python\nprint(1)\n```\nthen\n```text\nnot code\n```\n```py\nprint(2)\n```\n"
    assert extract_program(text) == "print(2)\n"
    assert extract_program("```\nprint(3)\n```") == "print(3)\n"  # no language given
    assert extract_program("print(4)") == "print(4)"  # no fence: the whole text
    assert extract_program("intro\n```python\nprint(5)\nprint(6)") == "print(5)\nprint(6)"  # cut off


def test_extract_program_takes_the_block_of_the_samples_language():
    text = "```python\nprint(1)\n```\n```cpp\nint main(){}\n```\n```c++\nint main(){return 0;}\n```\n"
    assert extract_program(text, "cpp") == "int main(){return 0;}\n"
    assert extract_program(text, "python") == "print(1)\n"
    assert extract_program("```js\nconsole.log(1)\n```", "javascript") == "console.log(1)\n"
    assert extract_program("```\nclass Main {}\n```", "java") == "class Main {}\n"  # untagged block
    with pytest.raises(ValueError, match="unknown language 'cobol'"):
        extract_program(text, "cobol")


def test_build_program_places_the_code_after_the_stub():
    sample = {"entry_point": "f", "stub": "import math\n\ndef f(x):\n    \"\"\"doc\"\"\"\n"}
    full = build_program("def f(x):\n    return math.floor(x)\n", sample)
    assert full.startswith(sample["stub"].rstrip() + "\n    pass\n") and full.endswith("return math.floor(x)\n")
    assert build_program("    return 1\n", sample) == sample["stub"] + "    return 1\n"  # a body continuation
    assert build_program("print(1)", {}) == "print(1)"


def test_code_is_registered():
    assert get_verifier("code") is code_reward


@needs_sandbox
def test_scores_fraction_and_all_modes():
    right = fenced("import sys\nd = sys.stdin.read().split()\nprint(*sorted(map(int, d[1:])))\n")
    dedup = fenced("import sys\nd = sys.stdin.read().split()\nprint(*sorted(set(map(int, d[1:]))))\n")
    assert code_reward(right, SAMPLE) == {"score": 1.0, "passed": True, "verdicts": ["AC", "AC", "AC"],
                                          "reason": "all 3 tests passed"}
    partial = code_reward(dedup, SAMPLE)
    assert partial["verdicts"] == ["AC", "AC", "WA"] and partial["passed"] is False
    assert partial["score"] == pytest.approx(2 / 3)
    assert code_reward(dedup, SAMPLE, mode="all")["score"] == 0.0
    assert code_reward(fenced("print 1\n"), SAMPLE)["verdicts"] == ["CE", "CE", "CE"]


@needs_sandbox
def test_batch_scoring_keeps_the_order():
    programs = [fenced(f"input()\nprint(*range(1, {n} + 1))\n") for n in (1, 3, 2)]
    samples = [{"test_type": "stdio", "tests": [{"input": "x\n", "output": "1 2 3\n"}]}] * 3
    assert [r["score"] for r in code_rewards(programs, samples)] == [0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="sample 1"):
        code_rewards(["print(1)", "print(1)"], [SAMPLE, {"tests": "x", "test_type": "call"}])


@needs_sandbox
def test_humaneval_style_row_with_stub():
    sample = {"test_type": "assert", "entry_point": "add", "stub": "def add(a, b):\n    \"\"\"Add.\"\"\"\n",
              "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n\ncheck(add)\n"}
    assert code_reward(fenced("def add(a, b):\n    return a + b\n"), sample)["score"] == 1.0
    assert code_reward("    return a + b\n", sample)["score"] == 1.0  # continuation of the stub
    assert code_reward(fenced("def add(a, b):\n    return a - b\n"), sample)["score"] == 0.0


@needs_sandbox
def test_a_cpp_problem_is_judged_as_cpp():
    sample = {"language": "cpp", "test_type": "stdio", "tests": [{"input": "3 4\n", "output": "7\n"}]}
    right = fenced("#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a+b;}\n", "cpp")
    wrong = fenced("#include <iostream>\nint main(){std::cout<<1;}\n", "c++")
    try:
        scored = code_rewards([right, wrong, fenced("print(7)\n")], [sample] * 3)
    except sandbox.SandboxUnavailable:
        pytest.skip("this sandbox cannot run C++ here")
    assert [(s["score"], s["verdicts"]) for s in scored] == [(1.0, ["AC"]), (0.0, ["WA"]), (0.0, ["CE"])]


def test_bad_rows_and_modes_are_refused():
    with pytest.raises(ValueError, match="mode"):
        code_reward("print(1)", SAMPLE, mode="some")
    with pytest.raises(ValueError, match=r"needs sample\['tests'\]"):
        code_reward("print(1)", {"test_type": "stdio"})
    with pytest.raises(ValueError, match="unknown limit 'seconds'"):
        code_reward("print(1)", dict(SAMPLE, limits={"seconds": 1}))
    with pytest.raises(ValueError, match=r"sample 0: unknown language 'rust'; supported: python, c, cpp, java"):
        code_reward("fn main() {}", dict(SAMPLE, language="rust"))


def test_no_sandbox_is_a_machinery_failure_not_a_score(monkeypatch):
    def unavailable(*_a, **_k):
        raise sandbox.SandboxUnavailable("no backend")

    monkeypatch.setattr(sandbox, "run_many", unavailable)
    with pytest.raises(sandbox.SandboxUnavailable, match="no backend"):
        code_reward("print(1)", SAMPLE)
    out = code_rewards_batch(["print(1)", "print(2)"], [SAMPLE, SAMPLE])
    assert [type(x).__name__ for x in out] == ["SandboxUnavailable", "SandboxUnavailable"]


def test_a_broken_sandbox_fails_that_program_only(monkeypatch):
    """A program whose tests the sandbox could not finish has no score (a failure of the machinery, left out of
    its group), while the other programs of the batch keep their verdicts."""
    broken = sandbox.ExecResult(sandbox.ExecStatus.SANDBOX_ERROR, detail="container vanished")
    fine = sandbox.ExecResult(sandbox.ExecStatus.OK, stdout="3\n")
    from rlvr.sandbox.judge import judge

    def run_many(jobs, backend="auto", on_done=None):
        return [judge(jobs[0], [broken], "docker", 0.0, "container vanished"), judge(jobs[1], [fine], "docker", 0.0)]

    monkeypatch.setattr(sandbox, "run_many", run_many)
    sample = {"test_type": "stdio", "tests": [{"input": "", "output": "3\n"}]}
    out = code_rewards_batch(["print(3)", "print(3)"], [sample, sample])
    assert isinstance(out[0], sandbox.SandboxError) and "container vanished" in str(out[0])
    assert out[1] == {"score": 1.0, "passed": True, "verdicts": ["AC"], "reason": "all 1 tests passed"}


@needs_sandbox
def test_verify_code_command_prints_one_line_per_input_in_order(tmp_path, capsys):
    from rlvr.commands.verify_code import run

    rows = [
        {"id": "a", "solution": "print(sum(map(int, input().split())))", "test_type": "stdio",
         "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "2 2\n", "output": "4\n"}]},
        {"id": "b", "solution": "def f(x):\n    return x * 2\n", "test_type": "call", "checker": "json",
         "tests": {"fn_name": "f", "cases": [{"args": [2], "expected": 4}, {"args": [3], "expected": 7}]}},
        {"id": "c", "solution": "def g():\n    return 1\n", "test_type": "assert", "tests": "assert g() == 1\n",
         "limits": {"time_s": 1}},
        {"id": "d", "solution": "print(1)", "test_type": "stdio", "tests": "not json"},
        {"id": "e", "solution": "fn main() {}", "language": "rust", "test_type": "stdio",
         "tests": [{"input": "", "output": "\n"}]},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rc = run(argparse.Namespace(file=str(path)))
    captured = capsys.readouterr()
    out = [json.loads(line) for line in captured.out.splitlines()]
    assert rc == 1  # two lines could not be judged
    assert [o["id"] for o in out] == ["a", "b", "c", "d", "e"]
    assert "verify code" in captured.err and "5/5" in captured.err  # the progress bar, on stderr
    assert "judged 3 programs (2 passed, 2 not judged)" in captured.err
    assert (out[0]["score"], out[0]["passed"], out[0]["verdicts"]) == (1.0, True, ["AC", "AC"])
    assert (out[1]["score"], out[1]["passed"], out[1]["verdicts"]) == (0.5, False, ["AC", "WA"])
    assert (out[2]["passed"], out[2]["verdicts"]) == (True, ["AC"])
    assert out[3]["passed"] is False and "not JSON" in out[3]["error"]
    assert out[4]["error"] == ("line 5: unknown language 'rust'; supported: python, c, cpp, java, javascript "
                               "(aliases: c++, cxx, js, node, nodejs, py, python3)")
    assert out[1]["tests"] == rows[1]["tests"]  # the input fields are kept


@needs_sandbox
def test_an_integer_too_large_for_a_double_is_a_wrong_answer_for_its_program_only(tmp_path, capsys):
    """A call test expecting a float answered with 10 ** 400, and a json stdio test answered by print(10 ** 400),
    are WA for those programs; the programs beside them in the same file and batch keep their verdicts."""
    from rlvr.commands.verify_code import run

    call = {"fn_name": "p", "cases": [{"args": [], "expected": 2.5}]}
    rows = [
        {"id": "ok", "solution": "def p():\n    return 2.5\n", "test_type": "call", "checker": "float:1e-6", "tests": call},
        {"id": "huge_call", "solution": "def p():\n    return 10 ** 400\n", "test_type": "call", "checker": "float:1e-6",
         "tests": call},
        {"id": "huge_json", "solution": "print(10 ** 400)", "test_type": "stdio", "checker": "json",
         "tests": [{"input": "", "output": "2.5\n"}]},
        {"id": "exact_int", "solution": "def p():\n    return 10 ** 400\n", "test_type": "call", "checker": "json",
         "tests": {"fn_name": "p", "cases": [{"args": [], "expected": 5}]}},
        {"id": "sum", "solution": "print(sum(map(int, input().split())))", "test_type": "stdio",
         "tests": [{"input": "1 2\n", "output": "3\n"}]},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert run(argparse.Namespace(file=str(path))) == 0
    out = {o["id"]: (o["score"], o["verdicts"]) for o in map(json.loads, capsys.readouterr().out.splitlines())}
    assert out == {"ok": (1.0, ["AC"]), "huge_call": (0.0, ["WA"]), "huge_json": (0.0, ["WA"]),
                   "exact_int": (0.0, ["WA"]), "sum": (1.0, ["AC"])}
    samples = [{"test_type": r["test_type"], "checker": r.get("checker"), "tests": r["tests"]} for r in rows]
    scored = code_rewards_batch([fenced(r["solution"]) for r in rows], samples)
    assert [s["verdicts"] for s in scored] == [["AC"], ["WA"], ["WA"], ["WA"], ["AC"]]
