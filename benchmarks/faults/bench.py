"""The fault list and what faults share: the registry (:func:`fault`), and :class:`Bench`, the work folder with its
fixtures, the CLI runner, run folders made once and copied per fault (the unbroken baseline run, a run killed in its
last step), and what this machine allows (a small filesystem to fill, Docker, bubblewrap).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fixtures import Fixtures
from harness import Check, Cli, Result, copy_run

GROUPS = {
    "same-run": "Same seed, same run",
    "kill": "Kills and interrupts",
    "checkpoint": "Damaged checkpoints and run folders",
    "disk": "A full disk",
    "verifier": "Verifiers at call time",
    "import": "Verifier modules at import",
    "recipe": "Recipes",
    "data": "Data rows",
    "sandbox": "Hostile programs in the sandbox",
    "suite": "The test suite's limits",
}


@dataclass(frozen=True)
class Fault:
    """One fault: ``run`` starts rlvr under it and returns the checks that decide whether it held.

    Attributes:
        name: short and unique.
        group: a key of :data:`GROUPS`.
        expected: what must happen, in words (the checks are its exact form).
        data_lost: the finished data the fault may cost when it holds.
        needs: what the machine must allow ("mount", "docker", "bwrap"); without it the fault is not tried.
    """

    name: str
    group: str
    expected: str
    data_lost: str
    run: Callable[[Bench], list[Check]]
    needs: tuple[str, ...] = ()


FAULTS: list[Fault] = []


def fault(name: str, group: str, expected: str, data_lost: str = "none",
          needs: tuple[str, ...] = ()) -> Callable[[Callable[[Bench], list[Check]]], Callable[[Bench], list[Check]]]:
    """Register the decorated function as a fault (see :class:`Fault`)."""
    if group not in GROUPS:
        raise ValueError(f"fault {name!r}: unknown group {group!r}; expected one of {sorted(GROUPS)}")

    def register(fn: Callable[[Bench], list[Check]]) -> Callable[[Bench], list[Check]]:
        if any(f.name == name for f in FAULTS):
            raise ValueError(f"two faults are named {name!r}")
        FAULTS.append(Fault(name, group, expected, data_lost, fn, needs))
        return fn

    return register


class StateError(RuntimeError):
    """A run folder that faults start from could not be made (the fault that needs it fails, naming this)."""


MOUNT_SCRIPT = r"""
mnt=$1 size=$2 fill=$3 src=$4 listing=$5
shift 5
mount -t tmpfs -o "size=$size" tmpfs "$mnt" || exit 97
if [ -n "$src" ]; then cp -a "$src"/. "$mnt"/ || exit 98; fi
if [ "$fill" = 1 ]; then dd if=/dev/zero of="$mnt/.filler" bs=4096 2>/dev/null; fi
"$@"
rc=$?
if [ -n "$listing" ]; then (cd "$mnt" && find . -type f ! -name .filler -printf '%p %s\n' | sort) > "$listing"; fi
exit $rc
"""


class Bench:
    """The work folder shared by the faults.

    Args:
        work: an empty folder (the run's own).
        python: the interpreter that runs rlvr.
    """

    def __init__(self, work: Path, python: str) -> None:
        self.work = work
        self.python = python
        self.fx = Fixtures(work)
        self.cli = Cli(python, work)
        self.runs = work / "runs"
        self.runs.mkdir(exist_ok=True)
        self.fx.recipe("baseline")  # before faults run side by side
        self._states: dict[str, Path | StateError] = {}
        self.made: dict[str, Result] = {}  # the command that made each state
        self._can: dict[str, bool] = {}

    # ------------------------------------------------------------------------------------------------ run folders
    def run_dir(self, name: str) -> Path:
        """A path for a new run folder (nothing there)."""
        path = self.runs / name
        if path.exists():
            shutil.rmtree(path)
        return path

    def state(self, name: str, make: Callable[[Path], Result]) -> Path:
        """The run folder ``name``, made once by ``make(path)``, which returns the command's result (kept in
        :attr:`made`) or raises :class:`StateError` when it cannot."""
        if name not in self._states:
            path = self.run_dir(f"state-{name}")
            try:
                self.made[name] = make(path)
                self._states[name] = path
            except StateError as exc:
                self._states[name] = exc
        got = self._states[name]
        if isinstance(got, StateError):
            raise got
        return got

    def copy(self, state: Path, name: str) -> Path:
        return copy_run(state, self.runs / name)

    def baseline(self) -> Path:
        """The unbroken run of the baseline recipe (4 steps, checkpoints at 2 and 4): what a resumed run must equal."""
        def make(path: Path) -> Result:
            r = self.train(self.baseline_recipe(), path)
            if r.code != 0 or not (path / "summary.json").is_file():
                raise StateError(f"the unbroken baseline run failed (exit {r.code}): {r.out[-300:]!r}")
            return r
        return self.state("baseline", make)

    def baseline_recipe(self) -> Path:
        return self.fx.recipes / "baseline.yaml"

    def killed_in_step_4(self) -> Path:
        """A run of the baseline recipe killed with SIGKILL during step 4: checkpoint step-2 whole, steps 1-3 in
        metrics.jsonl and samples/."""
        def make(path: Path) -> Result:
            r = self.train(self.baseline_recipe(), path, kill_on=r"^step 3/4", env=self.slow_steps())
            if r.code != -9 or not (path / "checkpoints" / "step-2").is_dir() or \
                    (path / "checkpoints" / "step-4").exists():
                raise StateError(f"a run killed during step 4 was not made (exit {r.code}; checkpoints "
                                 f"{sorted(p.name for p in (path / 'checkpoints').glob('*'))})")
            return r
        return self.state("killed-in-step-4", make)

    @staticmethod
    def slow_steps() -> dict[str, str]:
        """Environment that makes each verifier call take 0.25 s (a step ~4 s, the same numbers), so that a kill
        timed by a step's line lands inside the next step."""
        return {"FAULTS_VERIFIER_SLEEP": "0.25"}

    # ---------------------------------------------------------------------------------------------------- commands
    def train(self, recipe: Path, run: Path, *extra: str, **kw) -> Result:
        return self.cli.rlvr("train", str(recipe), "-o", str(run), *extra, **kw)

    def mounted(self, mountpoint: Path, size: str, argv: list[str], *, fill: bool = True, copy_from: Path | None = None,
                listing: Path | None = None) -> list[str]:
        """``argv`` wrapped to run with a fresh tmpfs of ``size`` (e.g. ``64k``) mounted at ``mountpoint`` in a mount
        namespace of its own (``unshare``; nothing outside sees it, and it goes when the command ends). ``copy_from``'s
        files are copied in first; ``fill`` fills it to the last byte; ``listing`` receives its files and sizes as
        the command left them."""
        prefix = ["unshare", "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
        return prefix + ["sh", "-c", MOUNT_SCRIPT, "sh", str(mountpoint), size, "1" if fill else "0",
                         str(copy_from or ""), str(listing or ""), *argv]

    # ------------------------------------------------------------------------------------------- what the host has
    def can(self, need: str) -> bool:
        if need not in self._can:
            self._can[need] = _probe(need, self.work)
        return self._can[need]


def _probe(need: str, work: Path) -> bool:
    def ok(argv: list[str]) -> bool:
        try:
            return subprocess.run(argv, capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    if need == "mount":
        probe = work / ".mount-probe"
        probe.mkdir(exist_ok=True)
        prefix = ["unshare", "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
        return ok(prefix + ["sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"])
    if need == "docker":
        return shutil.which("docker") is not None and ok(["docker", "info"])
    if need == "bwrap":
        return shutil.which("bwrap") is not None and ok(["bwrap", "--ro-bind", "/", "/", "true"])
    raise ValueError(f"unknown need {need!r}")
