"""A warm driver (one `docker exec` per container, serving batch after batch) keeps batches apart as
jobs of one batch always were: nothing a program leaves (files, processes) reaches a later batch, and
it exits on its own when idle."""
import pytest

from rlvr.sandbox import Job, Limits, get_backend
from rlvr.sandbox.backends import docker_backend
from rlvr.sandbox.backends.docker_backend import ExecChannel, docker_problem
from rlvr.sandbox.backends.docker_pool import ContainerSpec
from rlvr.sandbox.batch import request_bytes, run_batch
from rlvr.sandbox.judge import judge

pytestmark = [pytest.mark.docker, pytest.mark.security]
MARK = "rlvr-warm-driver-test-daemon"
# leaves a daemon (own session, holding nothing) and files in both scratch folders
LEAVER = (f"import os, subprocess\nsubprocess.Popen(['python3', '-c', 'import time; time.sleep(300)', '{MARK}'], "
          "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
          "open('/tmp/left', 'w').write('x')\nopen('/dev/shm/left', 'w').write('x')\nprint('ok')\n")
CHECKER = (f"import os\nmarks = [p for p in os.listdir('/proc') if p.isdigit() and "
           f"'{MARK}' in open('/proc/%s/cmdline' % p, 'rb').read().decode(errors='replace')]\n"
           "files = [f for f in ('/tmp/left', '/dev/shm/left') if os.path.exists(f)]\n"
           "print('clean' if not marks and not files else (marks, files))\n")


@pytest.fixture
def docker():
    if docker_problem():
        pytest.skip(docker_problem())
    return get_backend("docker")


def test_a_later_batch_on_a_warm_driver_sees_nothing_of_an_earlier_one(docker, monkeypatch):
    execs = []
    real_init = ExecChannel.__init__

    def counting_init(self, *args, **kwargs):
        execs.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(docker_backend.ExecChannel, "__init__", counting_init)
    limits = Limits(time_s=5, memory_mb=200)  # a spec of its own: no other test's container is reused
    leave = docker.run_batch([Job(LEAVER, [{"input": "", "output": "ok\n"}], limits=limits)])
    check = docker.run_batch([Job(CHECKER, [{"input": "", "output": "clean\n"}], limits=limits)])
    assert leave.reusable and check.reusable
    assert len(execs) == 1  # the second batch ran on the first one's driver, in the same container
    job = Job(CHECKER, [{"input": "", "output": "clean\n"}], limits=limits)
    verdict = judge(job, check.results[0], "docker", 0.0)
    assert verdict.codes == ["AC"], check.results[0][0].stdout


def test_an_idle_warm_driver_exits_by_itself(docker):
    spec = ContainerSpec.for_limits(Limits(time_s=5, memory_mb=201))
    container = docker.pool.acquire(spec)
    channel = ExecChannel(docker.client, container)
    try:
        jobs = [Job("print(input())\n", [{"input": "7\n", "output": "7\n"}])]
        request = request_bytes(jobs, pid_namespace=True, scratch=["/tmp", "/dev/shm"], nproc=None, idle_exit_s=0.5)
        outcome = run_batch(channel, jobs, request)
        assert outcome.reusable and outcome.results[0][0].stdout == "7\n"
        assert channel.read_line(10.0) is None  # end of stream: the driver exited after 0.5 s without a batch
    finally:
        channel.close()
        docker.pool.release(container, spec, reusable=False)
