"""Every Python file of the project (the package, its verifiers and sandbox, benchmarks, scripts, tests) has no name
that is used but never defined, as pyflakes reads it: the kind of leftover a rename leaves in code no test runs
(``benchmarks/bench_sandbox.py`` called ``sandbox.batch`` after ``sandbox`` became ``rlvr.sandbox``). The
in-sandbox harness files share one namespace at run time, so they are checked as the sources they are shipped as."""

from pathlib import Path

from pyflakes import api, messages
from pyflakes.reporter import Reporter

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("rlvr", "verifiers", "sandbox", "benchmarks", "scripts", "tests")


class _Collect(Reporter):
    def __init__(self) -> None:
        super().__init__(None, None)
        self.found: list[str] = []

    def flake(self, message) -> None:
        if isinstance(message, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text) -> None:
        self.found.append(f"{filename}:{lineno}: syntax error: {msg}")

    def unexpectedError(self, filename, msg) -> None:
        self.found.append(f"{filename}: {msg}")


def test_no_undefined_names():
    from rlvr.sandbox import harness

    harness_dir = REPO / "sandbox" / "harness"
    files = sorted(p for folder in FOLDERS if (REPO / folder).is_dir() for p in (REPO / folder).rglob("*.py")
                   if p.parent != harness_dir or p.name == "__init__.py")
    assert len(files) > 100
    reporter = _Collect()
    for path in files:
        api.checkPath(str(path), reporter)
    for bundle in (harness.driver_source, harness.forkserver_source, harness.runner_source):
        api.check(bundle(), f"<shipped {bundle.__name__}>", reporter)
    assert reporter.found == []


def test_the_check_sees_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import rlvr.sandbox.batch\n\nsandbox.batch.FORK_SERVER = True\n")
    reporter = _Collect()
    api.checkPath(str(bad), reporter)
    assert len(reporter.found) == 1 and "undefined name 'sandbox'" in reporter.found[0]
