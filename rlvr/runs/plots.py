"""PNG plots of the curves people look at: reward, solve rate, response length, KL, entropy, clip fraction (each
where the run logs it); for runs with tools, the tool use (``plots/tools.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on training machines
import matplotlib.pyplot as plt  # noqa: E402

from rlvr.runtime.atomic import atomic_open  # noqa: E402

PANELS: list[tuple[str, str, list[str]]] = [  # (title, y-axis label, metric keys)
    ("reward", "mean reward", ["reward/mean"]),
    ("solve rate", "fraction solved", ["reward/solve_rate", "eval/pass_at_1"]),
    ("response length", "tokens", ["rollout/response_length", "rollout/response_length_correct",
                                   "rollout/response_length_incorrect"]),
    ("KL to reference", "nats/token", ["train/kl"]),
    ("entropy", "nats/token", ["train/entropy"]),
    ("clip fraction", "fraction of tokens", ["train/clip_fraction"]),
]
TOOL_PANELS: list[tuple[str, str, list[str]]] = [  # the tools figure: same layout as PANELS
    ("samples calling the tool", "fraction of samples", ["tools/fraction_of_samples_calling"]),
    ("tool error rate", "fraction of calls", ["tools/error_rate"]),
    ("calls and turns", "per sample", ["tools/calls_per_sample", "tools/turns_per_sample"]),
    ("tool timeouts", "timed-out calls per step", ["tools/timeouts"]),
]
STAGE_PANELS: list[tuple[str, str, list[str]]] = [  # SFT and DPO runs (rlvr sft, rlvr dpo): same layout
    ("loss", "loss", ["train/loss", "eval/loss"]),
    ("preference accuracy", "fraction of pairs", ["train/accuracy", "eval/accuracy"]),
    ("implicit rewards", "beta x log-ratio", ["train/rewards_chosen", "train/rewards_rejected", "train/margin"]),
    ("log-probs of the responses", "nats per response", ["train/logps_chosen", "train/logps_rejected",
                                                         "train/ref_logps_chosen", "train/ref_logps_rejected"]),
    ("held-out pass@1", "fraction solved", ["eval/pass_at_1"]),
    ("gradient norm", "norm", ["train/grad_norm"]),
]
ZERO_MEANS_ABSENT = {"train/kl", "train/clip_fraction", "tools/timeouts"}
"""Series that are 0 at every step when the run has no such term (no KL penalty; no clipping, e.g. one on-policy
epoch; no tool call that timed out): left out, not drawn as a flat line."""
UNIT_INTERVAL = {"fraction of samples", "fraction of calls", "fraction of pairs"}
"""Panels (by y-axis label) drawn on a 0-1 axis, so that a rate near 1 or near 0 reads as such."""


def _series(records: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    points = [(r["step"], r[key]) for r in records
              if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    if key in ZERO_MEANS_ABSENT and all(y == 0 for _, y in points):
        return []
    return points


def plot_curves(records: list[dict[str, Any]], out_path: Path, title: str = "",
                panels: list[tuple[str, str, list[str]]] | None = None) -> Path | None:
    """Write a grid of the curves the run logged to ``out_path`` (PNG): one panel per logged quantity (none for what
    the run does not log), evals as points (joined only from three evals on), integer steps, labelled axes.
    ``panels``: (title, y label, metric keys) of each panel; default :data:`PANELS` (an RL run's).
    Returns the path, or None when there is nothing to plot."""
    return _plot_panels(records, panels or PANELS, out_path, title)


def plot_tools(records: list[dict[str, Any]], out_path: Path, title: str = "") -> Path | None:
    """Write the tool use of a run with tools to ``out_path`` (PNG), one panel each, from the ``tools/*`` metrics of
    ``metrics.jsonl`` records: the fraction of samples calling a tool, the tool error rate (failed calls over
    calls), calls and turns per sample, and timed-out calls per step (only when some call timed out).
    Returns the path, or None (nothing written) when no record holds ``tools/*`` metrics: a run without tools."""
    return _plot_panels(records, TOOL_PANELS, out_path, title)


def _plot_panels(records: list[dict[str, Any]], spec: list[tuple[str, str, list[str]]], out_path: Path,
                 title: str) -> Path | None:
    from matplotlib.ticker import MaxNLocator

    panels = [(name, ylabel, series) for name, ylabel, keys in spec
              if (series := [(key, pts) for key in keys if (pts := _series(records, key))])]
    if not panels:
        return None
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.5 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.remove()
    for ax, (name, ylabel, series) in zip(axes.flat, panels):
        short = [key.split("/", 1)[1] for key, _ in series]
        for key, points in series:
            xs, ys = zip(*points)
            is_eval = key.startswith("eval/")
            ax.plot(xs, ys, marker="o" if is_eval or len(xs) == 1 else None, markersize=5,
                    linestyle="-" if not is_eval or len(xs) >= 3 else "none",
                    label=key if short.count(key.split("/", 1)[1]) > 1 else key.split("/", 1)[1])
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if ylabel in UNIT_INTERVAL:
            ax.set_ylim(-0.03, 1.03)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
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
