"""The demo report's figure: the methods' base / novel / HM accuracies, and PETR's Mahalanobis scores of base and
novel test images against its threshold (the histogram of ``tools/plot_routing_scores.py``)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from tools.plot_routing_scores import histogram

SIZE_PX = (1400, 500)
"""Width and height of the PNG."""
DPI = 100


def report_figure(accuracy: Mapping[str, Sequence[float]], scores: tuple[np.ndarray, np.ndarray, float],
                  title: str, path: str) -> None:
    """Write the PNG ``path``: left, grouped bars of each method's (base, novel, HM) in ``accuracy``; right, the
    base and novel ``scores`` (and threshold) of PETR's router, titled ``title``."""
    fig, (bars, hist) = plt.subplots(1, 2, figsize=(SIZE_PX[0] / DPI, SIZE_PX[1] / DPI), dpi=DPI,
                                     gridspec_kw={"width_ratios": [3, 2]})
    x = np.arange(len(accuracy))
    for i, (label, colour) in enumerate((("Base", "tab:blue"), ("Novel", "tab:orange"), ("HM", "tab:green"))):
        values = [v[i] for v in accuracy.values()]
        bars.bar(x + (i - 1) * 0.27, values, 0.27, label=label, color=colour)
    bars.set_xticks(x, list(accuracy), rotation=30, ha="right", fontsize=8)
    bars.set_ylabel("test accuracy (%)")
    bars.set_title("Base-to-novel: base, novel and their harmonic mean")
    bars.legend(fontsize=8)
    histogram(hist, *scores, log2=True)
    hist.set_xlabel("Mahalanobis distance (log2 scale)")
    hist.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
