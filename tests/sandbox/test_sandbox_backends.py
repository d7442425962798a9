"""Backend choice: `auto` never runs code unsandboxed; `none` works only when named, and harms nothing."""
import subprocess

import pytest

from rlvr import sandbox
from rlvr.sandbox import SandboxUnavailable
from rlvr.sandbox import backends as backends


def test_unknown_backend_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown sandbox backend 'docekr'; valid: auto, docker, bwrap, none"):
        sandbox.get_backend("docekr")


def test_auto_refuses_rather_than_running_unsandboxed(monkeypatch):
    def unavailable(name):
        if name in ("docker", "bwrap"):
            raise SandboxUnavailable(f"{name} is not here")
        raise AssertionError(f"auto asked for backend {name!r}")

    monkeypatch.setattr(backends, "_get", unavailable)
    monkeypatch.setattr(backends, "_docker_refused_at", -1e9)
    with pytest.raises(SandboxUnavailable, match=r"docker is not here.*bwrap is not here.*must be asked for by name"):
        sandbox.get_backend("auto")


def test_unsandboxed_backend_runs_trusted_code_and_kills_only_its_own_processes():
    bystander = subprocess.Popen(["sleep", "60"])  # same user as the programs: it must survive the clean-up
    program = ("import subprocess\nsubprocess.Popen(['sleep', '61.5'], stdout=subprocess.DEVNULL)\n"
               "print(sum(map(int, input().split())))\n")
    try:
        result = sandbox.run(program, [{"input": "2 3\n", "output": "5\n"}], backend="none")
        assert result.codes == ["AC"] and result.backend == "none"
        assert bystander.poll() is None
        assert _processes_with_args("sleep 61.5") == []  # the program's own orphan was killed
    finally:
        bystander.kill()
        bystander.wait()


def _processes_with_args(text):
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split(None, 1)[-1] == text]


def test_a_forked_child_gets_its_own_backends_and_never_its_parents_pools():
    # A verifier pool forks its workers from the trainer: a backend inherited from the parent would share
    # its warm drivers' exec sockets and its containers, and the child's exit would remove them.
    import multiprocessing

    from rlvr.sandbox.backends import docker_pool

    class FakePool:  # stands for a parent's ContainerPool in the registry that close_all_pools walks
        pass

    parent_backend = sandbox.get_backend("none")
    parent_backend.from_parent = True
    fake = FakePool()
    docker_pool._POOLS.add(fake)
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(1) as pool:
            inherited_attr, pools_seen = pool.apply(_backend_state_in_child)
        assert (inherited_attr, pools_seen) == (False, 0)
        assert sandbox.get_backend("none") is parent_backend  # the parent keeps its own
    finally:
        docker_pool._POOLS.discard(fake)
        del parent_backend.from_parent


def _backend_state_in_child():
    from rlvr.sandbox.backends import docker_pool

    return getattr(sandbox.get_backend("none"), "from_parent", False), len(docker_pool._POOLS)
