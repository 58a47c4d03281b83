"""Plots of base vs novel routing scores from saved PETR logits (no model needed), as PNG files.

Usage (from the repository root):
  python -m tools.plot_routing_scores output/base2new [DIR ...] --out figures/ [--routers] [--datasets eurosat ...]
                                         [--lam L] [--percentile P]

Default: one figure per dataset/seed with the Mahalanobis distances of the base (seen) and novel (unseen) test
samples on a log2 axis and the threshold ``T = λ · P99``, plus ``mahalanobis_grid.png`` with every dataset when
there are several. ``--routers``: one figure per dataset/seed with a panel per scoring router of the ablation.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence

if not __package__:  # run as `python tools/plot_routing_scores.py`
    from _repo_root import add_to_path

    add_to_path()

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from analysis.dumps import DumpUnit, find_units, unit_scores
from analysis.errors import ResultsError
from analysis.figures import score_histogram
from trainers.routing.routers import ROUTERS

SCORE_ROUTERS = tuple(name for name, cls in ROUTERS.items() if cls.routes and not cls.needs_truth)


def _title(unit: DumpUnit, multi_method: bool) -> str:
    method = f"{unit.method}, " if multi_method and unit.method else ""
    return f"{unit.dataset} ({method}seed {unit.seed})" if unit.seed else f"{unit.dataset} ({method.rstrip(', ')})"


def _slug(unit: DumpUnit, multi_method: bool) -> str:
    parts = [unit.dataset] + ([unit.method.replace("/", "-")] if multi_method and unit.method else [])
    return "_".join(parts + ([f"seed{unit.seed}"] if unit.seed else []))


def _threshold_text(unit: DumpUnit, lam: float | None, percentile: float | None) -> str:
    lam, percentile = unit.router_settings(lam, percentile)
    return f"T = {lam:g} · P{percentile:g}"


def plot_mahalanobis(units: Sequence[DumpUnit], out_dir: str, lam: float | None = None,
                     percentile: float | None = None) -> list[str]:
    """One PNG per unit (and a grid of all units when there are several); returns the written paths. λ and the
    percentile default to each run's ``router.json``."""
    os.makedirs(out_dir, exist_ok=True)
    multi = len({u.method for u in units}) > 1
    data = [(u, *unit_scores(u, "mahalanobis", lam, percentile)) for u in units]
    written = []
    for unit, base, novel, thr in data:
        fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
        score_histogram(ax, base, novel, thr, log2=True)
        ax.set_xlabel("Mahalanobis distance (log2 scale)")
        ax.set_title(f"{_title(unit, multi)}: {_threshold_text(unit, lam, percentile)}")
        written.append(_save(fig, os.path.join(out_dir, f"{_slug(unit, multi)}_mahalanobis.png")))
    if len(data) > 1:
        cols = min(4, len(data))
        rows = math.ceil(len(data) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.5 * rows), dpi=100, squeeze=False)
        for ax, (unit, base, novel, thr) in zip(axes.flat, data):
            score_histogram(ax, base, novel, thr, log2=True)
            ax.set_title(f"{_title(unit, multi)}: {_threshold_text(unit, lam, percentile)}", fontsize=10)
            ax.set_xlabel("Mahalanobis distance")
        for ax in list(axes.flat)[len(data):]:
            ax.axis("off")
        fig.suptitle("Base vs novel test samples, threshold T = λ · percentile of the seen-train distances")
        written.append(_save(fig, os.path.join(out_dir, "mahalanobis_grid.png")))
    return written


def plot_routers(units: Sequence[DumpUnit], out_dir: str, routers: Sequence[str] = SCORE_ROUTERS,
                 lam: float | None = None, percentile: float | None = None) -> list[str]:
    """One PNG per unit with a panel per router (outlier scores, higher = more unseen-like)."""
    os.makedirs(out_dir, exist_ok=True)
    multi = len({u.method for u in units}) > 1
    written = []
    for unit in units:
        cols = min(4, len(routers))
        rows = math.ceil(len(routers) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.5 * rows), dpi=100, squeeze=False)
        for ax, name in zip(axes.flat, routers):
            base, novel, thr = unit_scores(unit, name, lam, percentile)
            score_histogram(ax, base, novel, thr, log2=name == "mahalanobis")
            ax.set_title(name)
            ax.set_xlabel("outlier score" + (" (log2)" if name == "mahalanobis" else ""))
        for ax in list(axes.flat)[len(routers):]:
            ax.axis("off")
        unit_lam, unit_percentile = unit.router_settings(lam, percentile)
        fig.suptitle(f"{_title(unit, multi)}: router scores, threshold at P{unit_percentile:g} of the seen-train "
                     f"scores (× λ={unit_lam:g} for mahalanobis)")
        written.append(_save(fig, os.path.join(out_dir, f"{_slug(unit, multi)}_routers.png")))
    return written


def _save(fig: plt.Figure, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Plot base vs novel routing scores from saved PETR logits.")
    p.add_argument("dirs", nargs="+", help="output roots, method folders or run folders with PETR dumps")
    p.add_argument("--out", required=True, help="folder for the PNG files")
    p.add_argument("--routers", action="store_true", help="one panel per router instead of Mahalanobis only")
    p.add_argument("--datasets", nargs="+", help="only these datasets")
    p.add_argument("--lam", type=float, help="λ of the Mahalanobis threshold (default: each run's router.json)")
    p.add_argument("--percentile", type=float, help="percentile of the seen-train scores (default: router.json)")
    args = p.parse_args(argv)
    try:
        units = [u for u in find_units(args.dirs) if not args.datasets or u.dataset in args.datasets]
        if not units:
            raise ResultsError(f"none of the datasets {args.datasets} has dumps under {', '.join(args.dirs)}")
        if args.routers:
            written = plot_routers(units, args.out, lam=args.lam, percentile=args.percentile)
        else:
            written = plot_mahalanobis(units, args.out, args.lam, args.percentile)
    except (ResultsError, ValueError, FileNotFoundError) as e:
        print(f"plot_routing_scores.py: error: {e}", file=sys.stderr)
        return 2
    print("\n".join(f"Saved {p}" for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
