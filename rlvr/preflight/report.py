"""What a pre-flight check found: one :class:`Finding` per fact, kept in a :class:`Report`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Level = Literal["ok", "info", "skip", "warn", "error"]


class PreflightError(ValueError):
    """A recipe that would fail or waste its run: raised before any model is loaded on the accelerator."""


@dataclass(frozen=True)
class Finding:
    """One result of one check.

    Attributes:
        level: ``ok`` (passed), ``info`` (a number to know, e.g. the memory estimate), ``skip`` (could not be
            checked here, with the reason), ``warn`` (the run goes on, probably not as meant), ``error`` (the run
            would fail or learn nothing).
        check: the check's name (``eos``, ``gold``, ``memory``, ...).
        message: what was found; for errors and warnings, also what to change.
    """

    level: Level
    check: str
    message: str


@dataclass
class Report:
    """The findings of every check on one recipe, in the order they ran."""

    findings: list[Finding] = field(default_factory=list)

    def add(self, level: Level, check: str, message: str) -> None:
        self.findings.append(Finding(level, check, message))

    def of_level(self, level: Level) -> list[Finding]:
        return [f for f in self.findings if f.level == level]

    @property
    def errors(self) -> list[Finding]:
        return self.of_level("error")

    @property
    def warnings(self) -> list[Finding]:
        return self.of_level("warn")

    def render(self, levels: tuple[Level, ...] = ("ok", "info", "skip", "warn", "error")) -> str:
        """One line per finding (continuation lines indented), e.g. ``error   gold: ...``."""
        lines = []
        for f in self.findings:
            if f.level in levels:
                head, *rest = f.message.splitlines() or [""]
                lines.append(f"{f.level:<7} {f.check}: {head}")
                lines.extend(f"          {line}" for line in rest)
        return "\n".join(lines)

    def summary(self) -> str:
        counts = {level: len(self.of_level(level)) for level in ("error", "warn", "skip")}
        verdict = "FAILED" if counts["error"] else "ok"
        return (f"{verdict}: {counts['error']} error(s), {counts['warn']} warning(s), {counts['skip']} check(s) "
                f"skipped")

    def raise_for_errors(self) -> None:
        """Raises :class:`PreflightError` with every error, one per line, when there is any."""
        if self.errors:
            lines = [f"{f.check}: {f.message}" for f in self.errors]
            raise PreflightError("the recipe's pre-flight checks failed:\n  " + "\n  ".join(lines))
