"""λ sweep of the Mahalanobis router on the training sets, from saved logits (no model needed).

Usage (from the repository root):
  python -m tools.lambda_sweep output/base2new [DIR ...] [--lambdas 0.6 1.0 1.4 1.8] [--percentile P]
                                  [--format plain|github|csv] [--json OUT]

Per dataset (mean over seeds) and averaged: the share of seen (base) train samples routed to the seen branch
(fit on the same ``router_fit_logits.pt``) and the share of unseen (novel) train samples (``train_u_logits.pt``)
routed to the unseen branch, for each λ of ``T = λ · P_percentile(d_fit)``.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence

if not __package__:  # run as `python tools/lambda_sweep.py`
    from _repo_root import add_to_path

    add_to_path()

import numpy as np

from analysis.dumps import DumpUnit, find_units
from analysis.errors import ResultsError
from analysis.layout import AVERAGE, dataset_sort_key
from analysis.tables import FORMATS, render_table
from engine.utils import write_json
from trainers.routing.routers import MahalanobisRouter, load_q_dump

DEFAULT_LAMBDAS = (0.6, 1.0, 1.4, 1.8)


def sweep_unit(unit: DumpUnit, lambdas: Sequence[float],
               percentile: float | None = None) -> dict[float, tuple[float, float]]:
    """``{λ: (% seen train routed seen, % unseen train routed unseen)}`` for one dataset/seed (percentile: the run's
    ``router.json`` unless given)."""
    _, percentile = unit.router_settings(percentile=percentile)
    router = MahalanobisRouter(percentile=percentile).fit(load_q_dump(unit.fit_path))
    d_seen = router.fit_scores
    d_unseen = router.distance(load_q_dump(unit.train_u_path))
    out = {}
    for lam in lambdas:
        router.lam = lam
        thr = router.threshold
        out[lam] = (100.0 * (d_seen <= thr).double().mean().item(), 100.0 * (d_unseen > thr).double().mean().item())
    return out


def sweep(units: Sequence[DumpUnit], lambdas: Sequence[float], percentile: float | None = None) -> dict:
    """``{method: {dataset or "average": {λ: (seen %, unseen %)}}}`` with seed means and the dataset average."""
    grouped: dict = defaultdict(lambda: defaultdict(list))
    for unit in units:
        grouped[unit.method][unit.dataset].append(sweep_unit(unit, lambdas, percentile))
    out: dict = {}
    for method, datasets in grouped.items():
        rows = {ds: {lam: tuple(np.mean([r[lam] for r in runs], axis=0).tolist()) for lam in lambdas}
                for ds, runs in sorted(datasets.items(), key=lambda kv: dataset_sort_key(kv[0]))}
        rows[AVERAGE] = {lam: tuple(np.mean([rows[ds][lam] for ds in rows], axis=0).tolist()) for lam in lambdas}
        out[method] = rows
    return out


def sweep_table(summary: dict, lambdas: Sequence[float]) -> tuple[list[str], list[list]]:
    """Rows ``dataset, [method,] seen@λ1, unseen@λ1, ...``."""
    show_method = len(summary) > 1
    headers = ["dataset", *(["method"] if show_method else [])]
    for lam in lambdas:
        headers += [f"seen@{lam:g}", f"unseen@{lam:g}"]
    rows = []
    for method, datasets in summary.items():
        for ds, per_lam in datasets.items():
            rows.append([ds, *([method or "-"] if show_method else []),
                         *[v for lam in lambdas for v in per_lam[lam]]])
    return headers, rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Training-set routing accuracy of the Mahalanobis router per λ.")
    p.add_argument("dirs", nargs="+", help="output roots, method folders or run folders with PETR dumps")
    p.add_argument("--lambdas", nargs="+", type=float, default=list(DEFAULT_LAMBDAS),
                   help=f"the λ values of the table's rows (default {' '.join(map(str, DEFAULT_LAMBDAS))})")
    p.add_argument("--percentile", type=float,
                   help="percentile of the seen-train distances (default: each run's router.json)")
    p.add_argument("--format", choices=list(FORMATS), default="plain", help="plain text, GitHub markdown or CSV")
    p.add_argument("--json", help="also write the numbers to this JSON file")
    args = p.parse_args(argv)
    try:
        if any(lam <= 0 for lam in args.lambdas):
            raise ResultsError(f"--lambdas must be > 0, got {args.lambdas}")
        summary = sweep(find_units(args.dirs), args.lambdas, args.percentile)
    except (ResultsError, ValueError, FileNotFoundError) as e:
        print(f"lambda_sweep.py: error: {e}", file=sys.stderr)
        return 2
    print(render_table(*sweep_table(summary, args.lambdas), args.format))
    percentile = f"P{args.percentile:g}" if args.percentile is not None else "the percentile of each run's router.json"
    print(f"seen@λ: % of seen train samples routed to the seen branch; unseen@λ: % of unseen train samples routed "
          f"to the unseen branch; T = λ · {percentile} of the seen-train distances. Mean over seeds.")
    if args.json:
        write_json({m: {ds: {str(lam): v for lam, v in r.items()} for ds, r in rows.items()}
                    for m, rows in summary.items()}, args.json)
        print(f"Saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
