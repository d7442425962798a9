"""The suite's time limits follow RLVR_TEST_TIME_SCALE and the load, and a limit that stops a test says so."""
import subprocess
import sys

import pytest

from tests import limits


def test_scale_follows_the_variable_and_the_load(monkeypatch):
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (1.0, 0.0, 0.0))
    monkeypatch.setattr(limits.os, "cpu_count", lambda: 2)
    monkeypatch.setenv("RLVR_TEST_TIME_SCALE", "2.5")
    assert limits.scale() == 2.5 and limits.limit(300) == 750  # load 0.5 a core: no extra
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (14.0, 0.0, 0.0))
    assert limits.scale() == 2.5 * 4.0  # load 7 a core, capped at 4x
    monkeypatch.setenv("RLVR_TEST_TIME_SCALE", "fast")
    with pytest.raises(ValueError, match="RLVR_TEST_TIME_SCALE='fast': expected a positive number"):
        limits.scale()


def test_a_subprocess_past_its_limit_fails_naming_the_limit(monkeypatch):
    monkeypatch.setenv("RLVR_TEST_TIME_SCALE", "0.01")
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    with pytest.raises(pytest.fail.Exception, match=r"time limit: .* ran past 1 s \(100 s nominal, scaled 0.01x .*"
                                                    r"raise RLVR_TEST_TIME_SCALE"):
        limits.run([sys.executable, "-c", "import time; time.sleep(30)"], 100)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    with pytest.raises(pytest.fail.Exception, match="time limit"):
        limits.communicate(proc, 100)
    assert proc.returncode is not None  # killed, not left behind
