"""StageTimer: a stage nested in another counts only as itself, so a step's stages add up to its time."""

from rlvr.trainer import stages
from rlvr.trainer.stages import StageTimer


def test_nested_stage_is_excluded_from_the_enclosing_one(monkeypatch):
    # clock readings: update opens at 0, update_critic opens at 3 and closes at 7, update closes at 10;
    # then rollout twice (10 -> 11, 11 -> 13): a stage entered twice adds up
    clock = iter([0.0, 3.0, 7.0, 10.0, 10.0, 11.0, 11.0, 13.0])
    monkeypatch.setattr(stages.time, "perf_counter", lambda: next(clock))
    timer = StageTimer()
    with timer("update"):
        with timer("update_critic"):
            pass
    for _ in range(2):
        with timer("rollout"):
            pass
    assert timer.seconds == {"update_critic": 4.0, "update": 6.0, "rollout": 3.0}


def test_three_levels_subtract_only_the_direct_child(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 4.0, 6.0, 9.0])  # a [0, 9], b [1, 6], c [2, 4]
    monkeypatch.setattr(stages.time, "perf_counter", lambda: next(clock))
    timer = StageTimer()
    with timer("a"):
        with timer("b"):
            with timer("c"):
                pass
    assert timer.seconds == {"c": 2.0, "b": 3.0, "a": 4.0}
    assert sum(timer.seconds.values()) == 9.0
