"""The curves plot shows what the run logged and nothing else: no empty panels, no flat zero KL or clip fraction,
evals as points, integer steps, labelled axes."""

from matplotlib import pyplot as plt

from rlvr.runs import plots


def _records(steps=4, kl=0.0, clip=0.0):
    out = [{"step": 0, "eval/pass_at_1": 0.4}]
    out += [{"step": s, "reward/mean": 0.1 * s, "reward/solve_rate": 0.1 * s, "rollout/response_length": 8.0,
             "train/kl": kl * s, "train/clip_fraction": clip, "train/entropy": 1.0} for s in range(1, steps + 1)]
    out.append({"step": steps, "eval/pass_at_1": 0.9})
    return out


def _figure(monkeypatch, records, tmp_path):
    drawn = {}

    def keep(fig, out_path, title=""):
        drawn["fig"] = fig
        return out_path

    monkeypatch.setattr(plots, "save_figure", keep)
    assert plots.plot_curves(records, tmp_path / "curves.png") == tmp_path / "curves.png"
    return drawn["fig"]


def test_only_logged_quantities_get_a_panel(monkeypatch, tmp_path):
    fig = _figure(monkeypatch, _records(), tmp_path)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["reward", "solve rate", "response length", "entropy"]  # KL and clip fraction are all 0
    assert all(ax.get_ylabel() and ax.get_xlabel() == "step" for ax in fig.axes)
    assert not any(t.get_text() == "not logged" for ax in fig.axes for t in ax.texts)
    plt.close(fig)
    fig = _figure(monkeypatch, _records(kl=0.01, clip=0.05), tmp_path)
    assert [ax.get_title() for ax in fig.axes][-3:] == ["KL to reference", "entropy", "clip fraction"]
    plt.close(fig)


def test_two_evals_are_two_points_and_steps_are_integers(monkeypatch, tmp_path):
    fig = _figure(monkeypatch, _records(steps=3), tmp_path)
    solve = next(ax for ax in fig.axes if ax.get_title() == "solve rate")
    evals = next(line for line in solve.lines if line.get_label() == "pass_at_1")
    assert evals.get_linestyle() == "None" and evals.get_marker() == "o" and list(evals.get_xdata()) == [0, 3]
    fig.canvas.draw()
    ticks = solve.get_xticks()
    assert all(float(t).is_integer() for t in ticks)
    plt.close(fig)


def test_the_png_is_written(tmp_path):
    assert plots.plot_curves(_records(), tmp_path / "p" / "curves.png").is_file()
    assert plots.plot_curves([], tmp_path / "none.png") is None
