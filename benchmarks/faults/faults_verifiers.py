"""Faults of user verifiers: at call time (memory, processes left behind, a kill of the trainer mid-call, raising,
hanging, crashing, bad return values, floods of output) and at import (a syntax error, an exception, ``sys.exit``,
``os._exit``, a missing dependency, a loop). A verifier's trouble must cost its own calls, never the trainer."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

from bench import Bench, fault
from fixtures import IMPORT_FAULTS
from harness import (
    MODEL_LOAD,
    Check,
    alive,
    before_model_load,
    exit_code,
    file_check,
    no_traceback,
    nothing_left,
    one_error_line,
    output_has,
    within,
)


def _recipe(b: Bench, name: str, verifier: str, spec: dict | None = None, **sections) -> Path:
    """A 2-step recipe whose scored verifier is ``hostile_verifiers:<verifier>``."""
    raw = b.fx.raw(**sections)
    raw["verifiers"] = [{"name": f"hostile_verifiers:{verifier}", **(spec or {})},
                        {"name": "good_verifiers:starts_with_digit", "weight": 0.0}]
    raw["trainer"] = {**raw["trainer"], "steps": 2, "save_every": 0, **sections.get("trainer", {})}
    return b.fx.recipe(name, raw)


def _sample_scores(run: Path, label: str) -> list:
    """Every sample's score from verifier ``label`` in the run's samples files."""
    scores = []
    for path in sorted((run / "samples").glob("step-*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rewards = row.get("scores") or {}
            if label in rewards:
                scores.append(rewards[label])
    return scores


def _metric_sum(run: Path, pattern: str) -> float:
    total = 0.0
    for line in (run / "metrics.jsonl").read_text().splitlines():
        for key, value in json.loads(line).items():
            if re.fullmatch(pattern, key) and isinstance(value, (int, float)):
                total += value
    return total


# ======================================================================================================= call time
@fault("verifier allocating 6 GiB a call (verifiers[].memory_mb 512)", "verifier",
       "those calls fail with MemoryError (counted in reward/infra_failures) and the run finishes; the workers' "
       "oom_score_adj is 1000 (the kernel's first choice)", data_lost="the failed calls' samples leave the loss")
def verifier_memory(b: Bench) -> list[Check]:
    recipe = _recipe(b, "v-memory", "allocates_6gb_on_odd_answers", {"memory_mb": 512},
                     reward={"max_failure_rate": 0.9})
    run = b.run_dir("v-memory")
    r = b.train(recipe, run)
    checks = [exit_code(r, 0), no_traceback(r), nothing_left(r.tag)]
    if r.code == 0:
        failed = _metric_sum(run, r"reward/infra_failures")
        scores = [s for s in _sample_scores(run, "hostile_verifiers:allocates_6gb_on_odd_answers") if s is not None]
        checks += [file_check("calls past the limit failed", failed > 0, f"reward/infra_failures total {failed:g}"),
                   file_check("the other calls read oom_score_adj 1000", bool(scores) and set(scores) == {1.0},
                              f"scores {sorted(set(scores))}")]
    return checks


@fault("verifier whose subprocess allocates 20 GiB (memory_mb 512)", "verifier",
       "the subprocess's allocation is refused (the call's limit reaches what it starts); the run finishes")
def verifier_subprocess_memory(b: Bench) -> list[Check]:
    recipe = _recipe(b, "v-subprocess-memory", "subprocess_allocates_20gb", {"memory_mb": 512})
    run = b.run_dir("v-subprocess-memory")
    r = b.train(recipe, run)
    checks = [exit_code(r, 0), no_traceback(r), nothing_left(r.tag)]
    if r.code == 0:
        scores = _sample_scores(run, "hostile_verifiers:subprocess_allocates_20gb")
        checks.append(file_check("every such allocation refused", bool(scores) and set(scores) == {1.0},
                                 f"{scores.count(1.0)} of {len(scores)} refused"))
    return checks


class _PidWatch:
    """Polls the pid file the hostile verifiers write; records the most of those pids alive at once."""

    def __init__(self, path: Path) -> None:
        self.path, self.most, self._stop = path, 0, threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def pids(self) -> list[int]:
        if not self.path.exists():
            return []
        return [p for line in self.path.read_text().splitlines() if line.strip() for p in json.loads(line)]

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, len(alive(self.pids())))
            time.sleep(0.1)

    def __enter__(self) -> _PidWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join()


@fault("verifier leaving a child and a SIGTERM-ignoring setsid'd daemon every call (2 workers)", "verifier",
       "what a call starts ends with the call (at most 2 calls' processes alive at once, not one per call of the "
       "run); nothing is left when the run ends")
def verifier_children(b: Bench) -> list[Check]:
    pid_file = b.work / "pids-children.jsonl"
    pid_file.unlink(missing_ok=True)
    recipe = _recipe(b, "v-children", "leaves_children", reward={"num_workers": 2})
    with _PidWatch(pid_file) as watch:
        r = b.train(recipe, b.run_dir("v-children"), env={"FAULTS_PID_FILE": str(pid_file)})
    started = len(watch.pids())
    return [exit_code(r, 0), no_traceback(r),
            file_check("at most 4 of them alive at once", 0 < started and watch.most <= 4,
                       f"{started} started over the run, at most {watch.most} alive at once"),
            nothing_left(r.tag, pids=watch.pids())]


@fault("kill -9 of the trainer while verifier calls hold children and daemons", "verifier",
       "the workers, their calls' children and the setsid'd daemons all end within 15 s")
def verifier_trainer_killed(b: Bench) -> list[Check]:
    pid_file = b.work / "pids-killed.jsonl"
    pid_file.unlink(missing_ok=True)
    recipe = _recipe(b, "v-killed", "hangs_with_children", {"timeout_s": 600}, reward={"num_workers": 2})
    watch = _PidWatch(pid_file)

    def kill_when_called(proc) -> None:
        def wait() -> None:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and len(watch.pids()) < 2 and proc.poll() is None:
                time.sleep(0.1)
            time.sleep(0.5)
            proc.kill()
        threading.Thread(target=wait, daemon=True).start()

    r = b.train(recipe, b.run_dir("v-killed"), env={"FAULTS_PID_FILE": str(pid_file)}, on_start=kill_when_called)
    return [exit_code(r, -9), file_check("calls had started children", len(watch.pids()) >= 2, f"{len(watch.pids())} "
                                         "pids recorded"),
            nothing_left(r.tag, wait_s=15, pids=watch.pids())]


def _stops(b: Bench, name: str, verifier: str, needle: str, spec: dict | None = None, workers: int = 1) -> list[Check]:
    recipe = _recipe(b, name, verifier, spec, trainer={"max_failed_steps": 1}, reward={"num_workers": workers})
    r = b.train(recipe, b.run_dir(name), timeout=240)
    error = (r.error_lines() or [""])[0]
    early = MODEL_LOAD not in r.out
    return [exit_code(r, 2), one_error_line(r, re.escape(verifier), needle),
            Check("stopped before the model loads, or names --overwrite", early or "--overwrite" in error,
                  "before the model loads (the pre-flight's gold check)" if early else ""),
            no_traceback(r), within(r, 180), nothing_left(r.tag)]


STOPS = ("the run stops at the first failed step (trainer.max_failed_steps 1), or the pre-flight's gold check before "
         "the model loads, with exit 2 and one line naming the verifier and its failure (and --overwrite, as no "
         "checkpoint exists); no process left")


@fault("verifier raising on every call", "verifier", STOPS)
def verifier_raises(b: Bench) -> list[Check]:
    return _stops(b, "v-raises", "raises", "ValueError")


@fault("verifier hanging on every call (timeout_s 1)", "verifier", STOPS)
def verifier_hangs(b: Bench) -> list[Check]:
    return _stops(b, "v-hangs", "hangs", "(?i)time", {"timeout_s": 1}, workers=4)


@fault("verifier segfaulting its worker", "verifier", STOPS)
def verifier_segfaults(b: Bench) -> list[Check]:
    return _stops(b, "v-segfaults", "segfaults", "(?i)sig|died|exit|crash")


@fault("verifier calling os._exit(0) mid-call", "verifier", STOPS)
def verifier_exits(b: Bench) -> list[Check]:
    return _stops(b, "v-exits", "exits", "(?i)exit|died|crash")


@fault("verifier returning NaN", "verifier", STOPS)
def verifier_nan(b: Bench) -> list[Check]:
    return _stops(b, "v-nan", "returns_nan", "(?i)nan")


@fault("verifier returning a string", "verifier", STOPS)
def verifier_text(b: Bench) -> list[Check]:
    return _stops(b, "v-text", "returns_text", "(?i)type|str")


@fault("verifier printing 10 MB a call", "verifier",
       "the run finishes and its output stays small (under 1 MB for ~320 MB printed)")
def verifier_prints(b: Bench) -> list[Check]:
    r = b.train(_recipe(b, "v-prints", "prints_10mb"), b.run_dir("v-prints"))
    return [exit_code(r, 0), no_traceback(r),
            Check("output under 1 MB", len(r.out) < 1_000_000, f"{len(r.out):,} characters"), nothing_left(r.tag)]


# ========================================================================================================== import
def _import_fault(b: Bench, module: str) -> list[Check]:
    recipe = _recipe(b, f"i-{module}", "raises")
    raw = recipe.read_text().replace("hostile_verifiers:raises", f"{module}:score")
    recipe.write_text(raw)
    r = b.train(recipe, b.run_dir(f"i-{module}"), timeout=240)
    line = IMPORT_FAULTS[module][1]
    needles = [re.escape(module)] + ([rf"{module}\.py:{line}"] if line else [])
    return [exit_code(r, 2), one_error_line(r, *needles), before_model_load(r), no_traceback(r), within(r, 120),
            nothing_left(r.tag)]


IMPORT_EXPECTED = ("`rlvr train` exits 2 with one line naming the module{line}, before the model loads; rlvr itself "
                   "never runs the module")


@fault("verifier module with a syntax error", "import", IMPORT_EXPECTED.format(line=" and FILE:LINE"))
def import_syntax_error(b: Bench) -> list[Check]:
    return _import_fault(b, "syntax_error")


@fault("verifier module raising at import", "import", IMPORT_EXPECTED.format(line=" and FILE:LINE"))
def import_raises(b: Bench) -> list[Check]:
    return _import_fault(b, "raises_at_import")


@fault("verifier module calling sys.exit(3) at import", "import", IMPORT_EXPECTED.format(line=" and FILE:LINE"))
def import_sys_exit(b: Bench) -> list[Check]:
    return _import_fault(b, "sys_exit_at_import")


@fault("verifier module calling os._exit(3) at import", "import", IMPORT_EXPECTED.format(line=""))
def import_os_exit(b: Bench) -> list[Check]:
    return _import_fault(b, "os_exit_at_import")


@fault("verifier module importing a package that is not installed", "import",
       IMPORT_EXPECTED.format(line=" and FILE:LINE"))
def import_missing_dependency(b: Bench) -> list[Check]:
    return _import_fault(b, "missing_dependency")


@fault("verifier module looping at import (`rlvr check`)", "import",
       "`rlvr check` ends after the 60 s import limit with an error naming the module; no process left")
def import_loops(b: Bench) -> list[Check]:
    recipe = _recipe(b, "i-loops", "raises")
    recipe.write_text(recipe.read_text().replace("hostile_verifiers:raises", "loops_at_import:score"))
    r = b.cli.rlvr("check", str(recipe), timeout=300)
    return [exit_code(r, 1), output_has(r, r"^error .*loops_at_import.*did not finish importing",
                                        "an error naming the module and the limit"),
            no_traceback(r), within(r, 150), nothing_left(r.tag)]


@fault("verifier function name misspelt (good_verifiers:digit_fractoin)", "import",
       "one line naming the function and suggesting digit_fraction, before the model loads")
def import_misspelt(b: Bench) -> list[Check]:
    raw = b.fx.raw()
    raw["verifiers"][0]["name"] = "good_verifiers:digit_fractoin"
    r = b.train(b.fx.recipe("i-misspelt", raw), b.run_dir("i-misspelt"))
    return [exit_code(r, 2), one_error_line(r, "digit_fractoin", "digit_fraction"), before_model_load(r),
            no_traceback(r)]
