"""What the RM -> PPO chain (``benchmarks/rm_ppo_chain.py``) reports, from the runs' ``metrics.jsonl`` records.

- the over-optimisation curve of a PPO run against a reward model: per step, the proxy score (``reward/rm_mean``, the
  RM's mean raw score of the step's samples), the gold score (``reward/gold_<verifier>``, the verifier's mean on the
  same samples, not optimised) and sqrt(KL from the initial policy) (``train/sqrt_kl_from_init``, nats^0.5 per
  sample), as in Gao et al. 2022, "Scaling Laws for Reward Model Overoptimization" (arXiv 2210.10760), Fig. 1;
- start / end / peak of each score (means over ``window`` steps: one step of 32 samples is noisy);
- the median seconds per stage of a step after warm-up (``time/<stage>_s``), for PPO vs GRPO on the same batch.

Pure functions over lists of dicts (no torch), plus one matplotlib plot.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.trainer.stages import STAGES  # the step's stages in order; update = the policy's, update_critic = PPO's

PROXY = "reward/rm_mean"
SQRT_KL = "train/sqrt_kl_from_init"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


@dataclass
class Curve:
    """One run's per-step points, in step order (equal lengths)."""

    steps: list[int]
    sqrt_kl: list[float]
    proxy: list[float]
    gold: list[float]


def read_curve(records: list[dict[str, Any]], gold_key: str = "reward/gold_math") -> Curve:
    """The steps of ``records`` (``metrics.jsonl`` lines) that carry all three of sqrt KL, proxy and gold.

    Raises:
        ValueError: no record has all three (not a PPO run against a reward model with a gold verifier?).
    """
    rows = sorted((r for r in records if all(_finite(r.get(k)) for k in (SQRT_KL, PROXY, gold_key))),
                  key=lambda r: r["step"])
    if not rows:
        raise ValueError(f"no step has all of {SQRT_KL}, {PROXY} and {gold_key}: a PPO run "
                         f"(algorithm.name: ppo) with reward.source: reward_model and a gold verifier?")
    return Curve(steps=[int(r["step"]) for r in rows], sqrt_kl=[float(r[SQRT_KL]) for r in rows],
                 proxy=[float(r[PROXY]) for r in rows], gold=[float(r[gold_key]) for r in rows])


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start): element i averages values[i-window+1..i].

    Raises:
        ValueError: window < 1.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    return [statistics.fmean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def score_summary(values: list[float], steps: list[int], sqrt_kl: list[float], window: int) -> dict[str, float]:
    """``start`` (mean of the first ``window`` steps), ``end`` (mean of the last ``window``), ``peak`` (the largest
    trailing ``window``-step mean) with the step and sqrt KL it ends at."""
    smooth = moving_average(values, window)
    first = min(window, len(values)) - 1  # the first full window (or the whole curve when shorter)
    i = max(range(first, len(values)), key=lambda j: smooth[j])
    return {"start": statistics.fmean(values[:window]), "end": statistics.fmean(values[-window:]),
            "peak": smooth[i], "peak_step": steps[i], "peak_sqrt_kl": sqrt_kl[i]}


def curve_summary(curve: Curve, window: int = 3) -> dict[str, Any]:
    """Gold and proxy ``start``/``end``/``peak`` (:func:`score_summary`) and the last step's sqrt KL and KL (nats)."""
    return {"steps": len(curve.steps), "window": window,
            "proxy": score_summary(curve.proxy, curve.steps, curve.sqrt_kl, window),
            "gold": score_summary(curve.gold, curve.steps, curve.sqrt_kl, window),
            "final_sqrt_kl": curve.sqrt_kl[-1], "final_kl": curve.sqrt_kl[-1] ** 2}


def stage_medians(records: list[dict[str, Any]], warmup: int = 1) -> dict[str, float]:
    """Median seconds per stage (``time/<stage>_s``) over the steps after the first ``warmup``, and ``step``: the
    median of each step's sum of stages (stages are exclusive, so they add up to the step). A stage a run never
    timed is left out; one timed on some steps only counts 0 on the others.

    Raises:
        ValueError: fewer than one step after warm-up.
    """
    rows = sorted((r for r in records if any(k.startswith("time/") for k in r)), key=lambda r: r["step"])[warmup:]
    if not rows:
        raise ValueError(f"no timed step after the first {warmup} (warm-up): run more steps")
    out: dict[str, float] = {}
    for stage in STAGES:
        key = f"time/{stage}_s"
        if any(key in r for r in rows):
            out[stage] = statistics.median(float(r.get(key, 0.0)) for r in rows)
    out["step"] = statistics.median(sum(float(r.get(f"time/{s}_s", 0.0)) for s in STAGES) for r in rows)
    out["steps_measured"] = float(len(rows))
    return out


def step_time_table(runs: dict[str, dict[str, float]]) -> str:
    """A markdown table of :func:`stage_medians` results, one column per run (seconds; "-" where not timed)."""
    names = list(runs)
    stages = [s for s in (*STAGES, "step") if any(s in runs[n] for n in names)]
    lines = ["| stage (median s) | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for s in stages:
        cells = [f"{runs[n][s]:.2f}" if s in runs[n] else "-" for n in names]
        label = "**step**" if s == "step" else s
        lines.append(f"| {label} | " + " | ".join(f"**{c}**" if s == "step" else c for c in cells) + " |")
    return "\n".join(lines)


def plot_gold_vs_proxy(curves: dict[str, Curve], out_path: Path, window: int = 3, gold_label: str = "gold (math "
                       "verifier solve rate)", title: str = "") -> Path:
    """One panel per run: gold (left axis, circles, solid line) and proxy (right axis, squares, dashed line) against
    sqrt(KL from the initial policy). The per-step points are coloured by step; the lines are ``window``-point means
    taken in order of sqrt(KL), so they never zig-zag back where KL fell between steps. Writes ``out_path`` (PNG).

    Raises:
        ValueError: no curves.
    """
    if not curves:
        raise ValueError("no curves to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(6.4 * len(curves), 4.2), squeeze=False)
    for ax, (name, c) in zip(axes[0], curves.items(), strict=True):
        right = ax.twinx()
        order = sorted(range(len(c.steps)), key=lambda i: (c.sqrt_kl[i], c.steps[i]))
        xs = [c.sqrt_kl[i] for i in order]
        gold = ax.scatter(c.sqrt_kl, c.gold, c=c.steps, cmap="viridis", marker="o", s=14, alpha=0.7)
        right.scatter(c.sqrt_kl, c.proxy, c=c.steps, cmap="viridis", marker="s", s=14, alpha=0.7)
        ax.plot(xs, moving_average([c.gold[i] for i in order], window), "-", color="C0", label=gold_label)
        right.plot(xs, moving_average([c.proxy[i] for i in order], window), "--", color="C3",
                   label="proxy (RM score)")
        fig.colorbar(gold, ax=right, pad=0.12, label="step")
        ax.set_xlabel("sqrt(KL from the initial policy)  (nats$^{1/2}$ per sample)")
        ax.set_ylabel("gold: solve rate", color="C0")
        right.set_ylabel("proxy: RM mean score", color="C3")
        ax.set_title(f"{name} ({len(c.steps)} steps)")
        ax.grid(alpha=0.3)
        lines = ax.get_lines() + right.get_lines()
        ax.legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
