"""The curves plot shows what the run logged and nothing else: no empty panels, no flat zero KL or clip fraction,
evals as points, integer steps, labelled axes; the tools figure only for a run that logged ``tools/*``, with those
series' values."""

from matplotlib import pyplot as plt

from rlvr.runs import plots


def _records(steps=4, kl=0.0, clip=0.0):
    out = [{"step": 0, "eval/pass_at_1": 0.4}]
    out += [{"step": s, "reward/mean": 0.1 * s, "reward/solve_rate": 0.1 * s, "rollout/response_length": 8.0,
             "train/kl": kl * s, "train/clip_fraction": clip, "train/entropy": 1.0} for s in range(1, steps + 1)]
    out.append({"step": steps, "eval/pass_at_1": 0.9})
    return out


def _drawn(monkeypatch, plot, records, out_path):
    """Run ``plot`` with saving replaced by keeping the figure: (its return value, the figure or None)."""
    drawn = {}

    def keep(fig, out_path, title=""):
        drawn["fig"] = fig
        return out_path

    monkeypatch.setattr(plots, "save_figure", keep)
    return plot(records, out_path), drawn.get("fig")


def _figure(monkeypatch, records, tmp_path):
    out, fig = _drawn(monkeypatch, plots.plot_curves, records, tmp_path / "curves.png")
    assert out == tmp_path / "curves.png"
    return fig


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


def _tool_records(steps=4, timeouts=0.0):
    return [{"step": s, "reward/mean": 0.1 * s, "tools/fraction_of_samples_calling": 0.5 + 0.1 * s,
             "tools/error_rate": 0.2 / s, "tools/calls_per_sample": 0.25 * s, "tools/turns_per_sample": 1.0 + 0.2 * s,
             "tools/timeouts": timeouts * s, "tools/truncated_outputs": 0.0} for s in range(1, steps + 1)]


def _tools_figure(monkeypatch, records, tmp_path):
    return _drawn(monkeypatch, plots.plot_tools, records, tmp_path / "tools.png")


def _line(fig, title, label):
    ax = next(ax for ax in fig.axes if ax.get_title() == title)
    line = next(line for line in ax.lines if line.get_label() == label)
    return list(line.get_xdata()), [float(y) for y in line.get_ydata()]


def test_a_run_with_tools_gets_the_tools_figure_with_its_values(monkeypatch, tmp_path):
    records = _tool_records()
    out, fig = _tools_figure(monkeypatch, records, tmp_path)
    assert out == tmp_path / "tools.png"
    assert [ax.get_title() for ax in fig.axes] == ["samples calling the tool", "tool error rate", "calls and turns"]
    steps = [1, 2, 3, 4]
    for title, key in (("samples calling the tool", "tools/fraction_of_samples_calling"),
                       ("tool error rate", "tools/error_rate"),
                       ("calls and turns", "tools/calls_per_sample"),
                       ("calls and turns", "tools/turns_per_sample")):
        assert _line(fig, title, key.split("/", 1)[1]) == (steps, [r[key] for r in records])
    assert all(ax.get_xlabel() == "step" and ax.get_ylabel() for ax in fig.axes)
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim() == (-0.03, 1.03)  # rates on a 0-1 axis
    plt.close(fig)
    _, fig = _tools_figure(monkeypatch, _tool_records(timeouts=1.0), tmp_path)  # timeouts drawn once there are any
    assert [ax.get_title() for ax in fig.axes][-1] == "tool timeouts"
    assert _line(fig, "tool timeouts", "timeouts") == (steps, [1.0, 2.0, 3.0, 4.0])
    plt.close(fig)


def test_a_run_without_tools_gets_no_tools_figure(monkeypatch, tmp_path):
    out, fig = _tools_figure(monkeypatch, _records(), tmp_path)
    assert out is None and fig is None
    assert plots.plot_tools(_records(), tmp_path / "tools.png") is None
    assert not (tmp_path / "tools.png").exists()
    monkeypatch.undo()
    assert plots.plot_tools(_tool_records(), tmp_path / "p" / "tools.png").is_file()
