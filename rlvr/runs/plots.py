"""PNG plots of the curves people look at: reward, solve rate, response length, KL (and entropy, clip fraction)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on training machines
import matplotlib.pyplot as plt  # noqa: E402

from rlvr.runs.atomic import atomic_open  # noqa: E402

PANELS: list[tuple[str, list[str]]] = [
    ("reward", ["reward/mean"]),
    ("solve rate", ["reward/solve_rate", "eval/pass_at_1"]),
    ("response length (tokens)", ["rollout/response_length", "rollout/response_length_correct",
                                  "rollout/response_length_incorrect"]),
    ("KL to reference (nats/token)", ["train/kl"]),
    ("entropy (nats/token)", ["train/entropy"]),
    ("clip fraction", ["train/clip_fraction"]),
]


def plot_curves(records: list[dict[str, Any]], out_path: Path, title: str = "") -> Path | None:
    """Write a grid of the main curves to ``out_path`` (PNG); returns it, or None when there is nothing to plot."""
    if not records:
        return None
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (name, keys) in zip(axes.flat, PANELS, strict=True):
        for key in keys:
            points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o" if key.startswith("eval/") else None, markersize=4,
                        label=key.split("/", 1)[1])
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
    return save_figure(fig, out_path, title)


def save_figure(fig: Any, out_path: Path, title: str = "") -> Path:
    """Title, lay out, write ``fig`` to ``out_path`` (PNG, parents created) and close it; returns ``out_path``."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_open(out_path, "wb") as fh:
        fig.savefig(fh, dpi=90, format="png")
    plt.close(fig)
    return out_path
