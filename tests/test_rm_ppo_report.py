"""The RM -> PPO chain's report (benchmarks/rm_ppo_report.py) on hand-made metrics records."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from rm_ppo_report import curve_summary, moving_average, plot_gold_vs_proxy, read_curve, stage_medians, step_time_table  # noqa: E402


def _records() -> list[dict]:
    # gold rises to a peak at step 4 and falls; proxy keeps rising; step 3 comes first in the file (order by step);
    # a record without the gold key (an eval line) is left out
    gold = [0.4, 0.5, 0.7, 0.8, 0.6, 0.3]
    proxy = [-1.0, 0.0, 1.0, 2.0, 3.0, 4.0]
    rows = [{"step": s + 1, "reward/rm_mean": proxy[s], "reward/gold_math": gold[s],
             "train/sqrt_kl_from_init": 0.5 * s} for s in range(6)]
    return [rows[2], rows[0], rows[1], *rows[3:], {"step": 6, "eval/pass_at_1": 0.9}]


def test_read_curve_orders_by_step_and_skips_incomplete_records():
    c = read_curve(_records())
    assert c.steps == [1, 2, 3, 4, 5, 6]
    assert c.gold == [0.4, 0.5, 0.7, 0.8, 0.6, 0.3]
    assert c.sqrt_kl == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]


def test_read_curve_names_the_missing_keys():
    with pytest.raises(ValueError, match="reward/gold_math"):
        read_curve([{"step": 1, "reward/rm_mean": 1.0}])


def test_moving_average_is_trailing():
    assert moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    with pytest.raises(ValueError, match="window"):
        moving_average([1.0], 0)


def test_curve_summary_start_end_peak():
    s = curve_summary(read_curve(_records()), window=2)
    # gold 2-step means: 0.4, 0.45, 0.6, 0.75, 0.7, 0.45 -> peak 0.75 ending at step 4 (sqrt KL 1.5)
    assert s["gold"]["start"] == pytest.approx(0.45)
    assert s["gold"]["end"] == pytest.approx(0.45)
    assert s["gold"]["peak"] == pytest.approx(0.75)
    assert (s["gold"]["peak_step"], s["gold"]["peak_sqrt_kl"]) == (4, 1.5)
    assert s["proxy"]["start"] == pytest.approx(-0.5) and s["proxy"]["end"] == pytest.approx(3.5)
    assert s["proxy"]["peak"] == pytest.approx(3.5) and s["proxy"]["peak_step"] == 6
    assert s["final_sqrt_kl"] == 2.5 and s["final_kl"] == pytest.approx(6.25)


def test_peak_ignores_the_partial_first_window():
    # the first value alone is higher than any full 3-step mean: the peak is a full window's mean
    s = curve_summary(read_curve([{"step": i + 1, "reward/rm_mean": 0.0, "reward/gold_math": g,
                                   "train/sqrt_kl_from_init": 0.0} for i, g in enumerate([0.9, 0.0, 0.0, 0.3])]), 3)
    assert s["gold"]["peak"] == pytest.approx(0.3) and s["gold"]["peak_step"] == 3


def test_stage_medians_skip_warmup_and_sum_the_step():
    recs = [{"step": 1, "time/rollout_s": 100.0, "time/update_s": 100.0},  # warm-up, left out
            {"step": 2, "time/rollout_s": 2.0, "time/update_s": 4.0, "time/update_critic_s": 3.0},
            {"step": 3, "time/rollout_s": 4.0, "time/update_s": 6.0, "time/update_critic_s": 5.0},
            {"step": 4, "time/rollout_s": 3.0, "time/update_s": 5.0},  # no critic time this step: counts 0
            {"step": 4, "eval/pass_at_1": 0.5}]
    m = stage_medians(recs, warmup=1)
    assert m["rollout"] == 3.0 and m["update"] == 5.0 and m["update_critic"] == 3.0
    assert m["step"] == 9.0  # step sums 2+4+3 = 9, 4+6+5 = 15, 3+5 = 8: median 9
    assert "values" not in m and m["steps_measured"] == 3.0
    with pytest.raises(ValueError, match="warm-up"):
        stage_medians(recs[:1], warmup=1)


def test_step_time_table_marks_untimed_stages():
    table = step_time_table({"PPO": {"rollout": 2.0, "values": 1.5, "step": 3.5}, "GRPO": {"rollout": 2.0,
                                                                                          "step": 2.0}})
    assert "| values | 1.50 | - |" in table
    assert "| **step** | **3.50** | **2.00** |" in table


def test_plot_writes_a_png(tmp_path):
    out = plot_gold_vs_proxy({"KL": read_curve(_records()), "no KL": read_curve(_records())}, tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no curves"):
        plot_gold_vs_proxy({}, tmp_path / "q.png")


def test_gold_vs_proxy_lines_follow_sqrt_kl_and_points_carry_the_step(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    records = _records()
    for r in records:  # KL falls between steps 3 and 4: a line in step order would turn back
        if r.get("step") == 4:
            r["train/sqrt_kl_from_init"] = 0.2
    figures = []
    monkeypatch.setattr(plt.Figure, "savefig", lambda self, *a, **k: figures.append(self))
    plot_gold_vs_proxy({"KL": read_curve(records)}, tmp_path / "p.png")
    fig = figures[0]
    ax = fig.axes[0]
    for line in ax.get_lines() + fig.axes[1].get_lines():
        xs = list(line.get_xdata())
        assert xs == sorted(xs)
    points = ax.collections[0]
    assert list(points.get_array()) == [1, 2, 3, 4, 5, 6]  # coloured by step
    assert any(a.get_ylabel() == "step" for a in fig.axes)  # the colour bar
