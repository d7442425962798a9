"""Errors the sandbox raises about itself (a program's own failures are verdicts, never exceptions)."""


class SandboxError(RuntimeError):
    """The sandbox could not run a program (engine gone, image missing, backend misconfigured)."""


class SandboxUnavailable(SandboxError):
    """No isolation backend can run here; the message says what to install or start."""
