"""``plots/curriculum.png``: the solve-rate histogram of each step's groups, zero-variance groups before and after
dynamic sampling, generation rounds, and the difficulty pools' sizes, from ``metrics.jsonl`` records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on training machines
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rlvr.curriculum.histogram import BIN_LABELS  # noqa: E402
from rlvr.runs.plots import save_figure  # noqa: E402


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return ([p[0] for p in points], [float(p[1]) for p in points]) if points else ([], [])


def plot_curriculum(records: list[dict[str, Any]], out_path: Path, title: str = "") -> Path | None:
    """Write the curriculum plot to ``out_path`` (PNG); returns it, or None when no step logged curriculum metrics."""
    keys = [f"curriculum/group_solve_rate/{label}" for label in BIN_LABELS]
    steps = [r for r in records if keys[0] in r]
    if not steps:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    xs = [r["step"] for r in steps]
    shares = [[float(r.get(k, 0.0)) for r in steps] for k in keys]
    colors = plt.get_cmap("RdYlGn")([i / (len(keys) - 1) for i in range(len(keys))])
    ax.stackplot(xs, shares, labels=[f"{label}%" for label in BIN_LABELS], colors=colors, alpha=0.9)
    ax.set_title("groups by solve rate (share of the step's groups)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    ax = axes[1]
    for key, label in (("rollout/zero_var_groups_before_filter", "zero-variance, generated"),
                       ("rollout/zero_var_groups_after_filter", "zero-variance, trained on"),
                       ("rollout/batch_filled", "batch filled")):
        x, y = _series(records, key)
        if x:
            ax.plot(x, y, label=label)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("dynamic sampling")
    twin = ax.twinx()
    x, y = _series(records, "rollout/rounds")
    if x:
        twin.step(x, y, where="mid", color="gray", alpha=0.6, label="generation rounds")
        twin.set_ylabel("rounds")
        twin.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7, loc="upper left")
    ax = axes[2]
    for pool in ("easy", "normal", "hard"):
        x, y = _series(records, f"curriculum/pool_{pool}")
        if x:
            ax.plot(x, y, label=pool)
    ax.set_title("difficulty pools (prompts)")
    ax.legend(fontsize=7)
    for a in axes:
        a.set_xlabel("step")
        a.grid(alpha=0.3)
    return save_figure(fig, out_path, title)
