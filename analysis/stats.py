"""Statistics over seeds: mean, spread under a named convention, harmonic mean.

Two conventions (``--stats``):

* ``upstream`` (default): CoOp's / Dassl's / PromptKD's ``parse_test_res.py``, population standard deviation
  (``np.std``, ddof=0) and the 95 % interval half-width ``1.96 · std / √n``; numbers line up with upstream's output.
* ``sample``: sample standard deviation (ddof=1) and the Student-t 95 % interval half-width with n-1 degrees of
  freedom; NaN for fewer than two values.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats

UPSTREAM = "upstream"
SAMPLE = "sample"
CONVENTIONS = (UPSTREAM, SAMPLE)
DEFAULT_CONVENTION = UPSTREAM


def _check(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown statistics convention {convention!r}; use one of {', '.join(CONVENTIONS)}")


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean (NaN for no values)."""
    return float(np.mean(values)) if len(values) else math.nan


def nanmean(values: Sequence[float]) -> float:
    """Mean of the values that are not NaN (NaN if none is)."""
    return mean([v for v in values if not math.isnan(v)])


def std(values: Sequence[float], convention: str = DEFAULT_CONVENTION) -> float:
    """Standard deviation: population (``upstream``) or sample with ddof=1 (``sample``, NaN for n < 2)."""
    _check(convention)
    n = len(values)
    if n == 0 or (convention == SAMPLE and n < 2):
        return math.nan
    return float(np.std(values, ddof=0 if convention == UPSTREAM else 1))


def ci95_halfwidth(values: Sequence[float], convention: str = DEFAULT_CONVENTION) -> float:
    """Half-width of the 95 % interval of the mean: 1.96·std/√n (``upstream``) or Student-t, n-1 dof (``sample``)."""
    n = len(values)
    spread = std(values, convention)
    if math.isnan(spread):
        return math.nan
    factor = 1.96 if convention == UPSTREAM else float(scipy_stats.t.ppf(0.975, n - 1))
    return factor * spread / math.sqrt(n)


def spread(values: Sequence[float], convention: str = DEFAULT_CONVENTION, ci95: bool = False) -> float:
    """The ``±`` term: the standard deviation, or the 95 % interval half-width with ``ci95``."""
    return ci95_halfwidth(values, convention) if ci95 else std(values, convention)


def spread_label(convention: str = DEFAULT_CONVENTION, ci95: bool = False, n: int | None = None) -> str:
    """What the ``±`` term is, for the output (e.g. ``population std (np.std), as upstream``)."""
    _check(convention)
    if convention == UPSTREAM:
        text = "95% CI half-width 1.96*std/sqrt(n), as upstream" if ci95 else "population std (np.std), as upstream"
    else:
        dof = f"t with {n - 1} dof" if n is not None else "t with n-1 dof"
        text = f"95% CI half-width, {dof}" if ci95 else "sample std (ddof=1)"
    return text if n is None else f"{text}, n={n}"


def harmonic_mean(base: float, novel: float) -> float:
    """HM = 2·B·N / (B + N) (NaN if either is missing)."""
    if math.isnan(base) or math.isnan(novel):
        return math.nan
    return 0.0 if base + novel == 0 else 2.0 * base * novel / (base + novel)
