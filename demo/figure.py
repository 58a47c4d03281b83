"""The demo report's figure: the methods' base / novel / HM accuracies with their values (``analysis.figures``), and
PETR's Mahalanobis scores of base and novel test images against its threshold."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from analysis.figures import accuracy_bars, plt, score_histogram

SIZE_PX = (1500, 560)
"""Width and height of the PNG."""
DPI = 100


def report_figure(accuracy: Mapping[str, Sequence[float]], scores: tuple[np.ndarray, np.ndarray, float],
                  bars_title: str, scores_title: str, path: str) -> None:
    """Write the PNG ``path``: left, grouped bars of each method's (base, novel, HM) in ``accuracy`` with their
    values, titled ``bars_title``; right, the base and novel ``scores`` (and threshold) of PETR's router, titled
    ``scores_title``."""
    fig, (bars, hist) = plt.subplots(1, 2, figsize=(SIZE_PX[0] / DPI, SIZE_PX[1] / DPI), dpi=DPI,
                                     gridspec_kw={"width_ratios": [3, 2]})
    accuracy_bars(bars, accuracy, bars_title)
    score_histogram(hist, *scores, log2=True)
    hist.set_xlabel("Mahalanobis distance (log2 scale)")
    hist.set_title(scores_title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
