"""The report figures' panels (matplotlib, no display): grouped base / novel / HM bars with their values printed, and
the routing scores of base and novel test images against a router's threshold."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

METRICS = ("Base", "Novel", "HM")
"""The three bars of a method in a base-to-novel panel."""
MARGIN = 8.0
"""Accuracy points shown below the lowest bar and above the highest (the axis starts there, not at 0, so the
differences the tables report are visible; each bar's value is printed on it)."""


def accuracy_bars(ax: plt.Axes, values: Mapping[str, Sequence[float]], title: str,
                  metrics: Sequence[str] = METRICS, value_size: float = 7) -> None:
    """Grouped bars on ``ax``: per method (``values``: label -> one accuracy per name of ``metrics``, in order) its
    accuracies, each with its value above it (a NaN is left out); the y axis spans the values with :data:`MARGIN`
    points either side (within 0-100), the legend sits above the plot, outside the bars."""
    labels = list(values)
    numbers = np.array([list(v) for v in values.values()], dtype=float)
    finite = numbers[np.isfinite(numbers)]
    lo = max(0.0, math.floor(finite.min() - MARGIN)) if finite.size else 0.0
    hi = min(100.0, math.ceil(finite.max() + MARGIN)) if finite.size else 100.0
    width = 0.8 / len(metrics)
    x = np.arange(len(labels))
    colours = plt.get_cmap("tab10").colors
    for i, name in enumerate(metrics):
        column = numbers[:, i] if numbers.size else np.array([])
        offset = (i - (len(metrics) - 1) / 2) * width
        bars = ax.bar(x + offset, np.nan_to_num(column - lo, nan=0.0), width, bottom=lo, label=name,
                      color=colours[i % len(colours)])
        for bar, value in zip(bars, column):
            if np.isfinite(value):
                ax.annotate(f"{value:.1f}", (bar.get_x() + bar.get_width() / 2, value), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=value_size, rotation=90)
    ax.set_xticks(x, labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylim(lo, hi + (hi - lo) * 0.12)  # room for the printed values
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncols=min(len(metrics), 4), loc="lower center", bbox_to_anchor=(0.5, 1.08), frameon=False)
    ax.grid(axis="y", alpha=0.3)


def score_histogram(ax: plt.Axes, base: np.ndarray, novel: np.ndarray, threshold: float, log2: bool) -> None:
    """Overlaid histograms of the base and novel scores on ``ax`` with the threshold as a dashed line (``log2``: on a
    log2 axis)."""
    values = np.concatenate([base, novel, [threshold]])
    if log2:
        lo = max(values[values > 0].min(), 1e-12) if (values > 0).any() else 1e-12
        bins = np.logspace(math.log2(lo), math.log2(values.max()), 40, base=2.0)
        base, novel = np.clip(base, lo, None), np.clip(novel, lo, None)
        ax.set_xscale("log", base=2)
    else:
        bins = np.linspace(values.min(), values.max(), 40)
    style = {"bins": bins, "histtype": "stepfilled", "alpha": 0.6}
    ax.hist(base, label=f"base (seen), n={len(base)}", color="tab:blue", **style)
    ax.hist(novel, label=f"novel (unseen), n={len(novel)}", color="tab:orange", **style)
    ax.axvline(threshold, color="black", linestyle="--", label=f"threshold {threshold:.3g}")
    ax.set_ylabel("test samples")
    ax.legend(fontsize=8, loc="upper right")
