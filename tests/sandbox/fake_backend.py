"""A stand-in backend for the parts of sandbox checks that need no real sandbox: it answers the capability probe
(`rlvr.sandbox.capabilities`) as a sandbox holding the given Python modules and tools would."""
import json

from rlvr.sandbox import ExecResult, ExecStatus
from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.batch import BatchOutcome

ALL_TOOLS = ("python3", "gcc", "g++", "javac", "java", "node")


class FakeBackend(Backend):
    """Answers the probe as a sandbox holding `modules` and `tools` would; counts the batches it ran and keeps the
    modules each probe asked about."""

    def __init__(self, name="bwrap", modules=(), tools=ALL_TOOLS,
                 status=ExecStatus.OK, stdout=None):
        self.name, self.modules, self.tools, self.status, self.stdout = name, set(modules), set(tools), status, stdout
        self.asked = []

    def workers(self):
        return 1

    def language_problem(self, language):
        return None  # like Docker's: the sandbox itself says which tools it has

    def run_batch(self, jobs):
        asked = json.loads(jobs[0].tests[0]["input"])
        self.asked.append(asked["modules"])
        stdout = self.stdout if self.stdout is not None else json.dumps({
            "python": "3.11.2", "modules": {m: m in self.modules for m in asked["modules"]},
            "tools": {t: t in self.tools for t in asked["tools"]}})
        return BatchOutcome(results=[[ExecResult(self.status, stdout=stdout, detail="boom")]], reusable=True)
