"""Routing ablation from saved logits: every router of trainers/routing/routers.py on every dataset, no model needed.

Usage (from the repository root):
  python -m tools.router_ablation output/base2new [DIR ...] [--routers mahalanobis lof ...] [--lam L]
                                      [--percentile 99] [--format plain|github|csv] [--json OUT]

DIR may be an output root (``train_base/`` + ``test_new/`` run folders are paired by dataset and seed), a method
folder, or a run folder holding both dumps. Each router is fitted on ``router_fit_logits.pt`` (seen train logits)
and applied to every ``logits_<split>.pt`` of the dataset/seed (dump contract: trainers/routing/routers.py). Reported
per dataset (mean over seeds) and averaged over datasets: routing accuracy on the base (seen) and novel (unseen) test
samples, Base / Novel accuracy of the routed prediction (argmax restricted to each dump's ``eval_labels``) and HM.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Sequence

if not __package__:  # run as `python tools/router_ablation.py`
    from _repo_root import add_to_path

    add_to_path()

import torch
from tqdm import tqdm

from analysis.dumps import DumpUnit, find_units, load_test_dumps
from analysis.errors import ResultsError
from analysis.layout import AVERAGE, dataset_sort_key
from analysis.stats import harmonic_mean, nanmean
from analysis.tables import FORMATS, render_table
from engine.utils import write_json
from trainers.routing.routers import ROUTERS, build_router, load_q_dump, restricted_argmax, routing_metrics

METRIC_KEYS = ("route_base", "route_novel", "base", "novel")


def evaluate_unit(unit: DumpUnit, routers: Sequence[str], lam: float | None = None, percentile: float | None = None,
                  **router_kw: dict) -> dict[str, dict[str, float]]:
    """Per router: routing accuracy on base/novel samples and Base/Novel accuracy (percent) of one unit; λ and the
    percentile default to the run's ``router.json``."""
    lam, percentile = unit.router_settings(lam, percentile)
    fit_q = load_q_dump(unit.fit_path)
    dumps = load_test_dumps(unit)
    is_seen = torch.cat([d["is_seen"] for d in dumps])
    out = {}
    for name in routers:
        router = build_router(name, lam=lam, percentile=percentile, **router_kw.get(name, {})).fit(fit_q)
        correct, routes = [], []
        for d in dumps:
            if router.needs_truth:
                router.set_truth(d["is_seen"])
            route, final = router.decide(torch.cat([d["q_s"], d["q_u"]], dim=1))
            correct.append(restricted_argmax(final, d["eval_labels"]) == d["labels"])
            routes.append(route)
        hits = torch.cat(correct).double()
        metrics = {"base": _pct(hits[is_seen]), "novel": _pct(hits[~is_seen]),
                   "route_base": math.nan, "route_novel": math.nan}
        if router.routes:
            rm = routing_metrics(torch.cat(routes), is_seen)
            metrics.update(route_base=rm["route_acc_seen"], route_novel=rm["route_acc_unseen"])
        out[name] = metrics
    return out


def _pct(x: torch.Tensor) -> float:
    return 100.0 * x.mean().item() if x.numel() else math.nan


def aggregate(per_unit: dict[tuple[str, str, str], dict[str, dict[str, float]]]) -> dict:
    """``{method: {dataset or "average": {router: metrics + hm}}}``: seed means, HM of means, dataset average."""
    grouped: dict[str, dict[str, dict[str, list[dict[str, float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for (method, dataset, _), results in per_unit.items():
        for router, metrics in results.items():
            grouped[method][dataset][router].append(metrics)
    out: dict = {}
    for method, datasets in grouped.items():
        rows: dict[str, dict[str, dict[str, float]]] = {}
        for ds in sorted(datasets, key=dataset_sort_key):
            rows[ds] = {r: _with_hm({k: nanmean([m[k] for m in ms]) for k in METRIC_KEYS})
                        for r, ms in datasets[ds].items()}
        routers = list(next(iter(rows.values())))
        rows[AVERAGE] = {r: _with_hm({k: nanmean([rows[ds][r][k] for ds in rows]) for k in METRIC_KEYS})
                         for r in routers}
        out[method] = rows
    return out


def _with_hm(metrics: dict[str, float]) -> dict[str, float]:
    return {**metrics, "hm": harmonic_mean(metrics["base"], metrics["novel"])}


def _nan_to_none(obj):
    """NaN → None recursively, so the JSON output is standard JSON (null)."""
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    return None if isinstance(obj, float) and math.isnan(obj) else obj


def ablation_table(summary: dict) -> tuple[list[str], list[list]]:
    """Rows ``dataset, [method,] router, route base, route novel, Base, Novel, HM``."""
    show_method = len(summary) > 1
    headers = ["dataset", *(["method"] if show_method else []), "router", "route base", "route novel",
               "Base", "Novel", "HM"]
    rows = []
    for method, datasets in summary.items():
        for ds, routers in datasets.items():
            for router, m in routers.items():
                rows.append([ds, *([method or "-"] if show_method else []), router, m["route_base"],
                             m["route_novel"], m["base"], m["novel"], m["hm"]])
    return headers, rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Compare all routers on saved PETR logits (no model needed).")
    p.add_argument("dirs", nargs="+", help="output roots, method folders or run folders with PETR dumps")
    p.add_argument("--routers", nargs="+", default=list(ROUTERS), help=f"subset of {', '.join(ROUTERS)}")
    p.add_argument("--lam", type=float, help="λ of the Mahalanobis threshold (default: each run's router.json)")
    p.add_argument("--percentile", type=float,
                   help="percentile of the seen-train scores (default: each run's router.json)")
    p.add_argument("--format", choices=list(FORMATS), default="plain", help="plain text, GitHub markdown or CSV")
    p.add_argument("--json", help="also write the numbers to this JSON file")
    args = p.parse_args(argv)
    try:
        for name in args.routers:
            build_router(name)  # unknown names fail here, with a "did you mean"
        units = find_units(args.dirs)
        per_unit = {(u.method, u.dataset, u.seed): evaluate_unit(u, args.routers, args.lam, args.percentile)
                    for u in tqdm(units, desc="datasets/seeds", file=sys.stderr)}
    except (ResultsError, ValueError, FileNotFoundError) as e:
        print(f"router_ablation.py: error: {e}", file=sys.stderr)
        return 2
    summary = aggregate(per_unit)
    print(render_table(*ablation_table(summary), args.format))
    used = "; ".join(f"λ {lam:g}, P{pct:g}" for lam, pct in sorted({u.router_settings(args.lam, args.percentile)
                                                                     for u in units}))
    print(f"Routing accuracy and accuracy in %, mean over seeds; HM of the means. Threshold: the percentile of the "
          f"seen-train scores (× λ for Mahalanobis): {used} (each run's router.json unless --lam / --percentile).")
    if args.json:
        write_json(_nan_to_none(summary), args.json)
        print(f"Saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
