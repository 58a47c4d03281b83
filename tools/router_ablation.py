"""Routing ablation from saved logits: every router of trainers/routing.py on every dataset, no model needed.

Usage (from the repository root):
  python tools/router_ablation.py output/base2new [DIR ...] [--routers mahalanobis lof ...] [--lam 1.4]
                                   [--percentile 99] [--format plain|github|csv] [--json OUT]

DIR may be an output root (``train_base/`` + ``test_new/`` run folders are paired by dataset and seed), a method
folder, or a run folder holding both dumps. Each router is fitted on ``router_fit_logits.pt`` (seen train logits)
and applied to every ``logits_<split>.pt`` of the dataset/seed (dump contract: trainers/routing.py). Reported per
dataset (mean over seeds) and averaged over datasets: routing accuracy on the base (seen) and novel (unseen) test
samples, Base / Novel accuracy of the routed prediction (argmax restricted to each dump's ``eval_labels``) and HM.
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # allow `python tools/router_ablation.py`

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from engine.utils import write_json  # noqa: E402
from parse_test_res import (  # noqa: E402
    AVERAGE,
    FORMATS,
    ResultsError,
    dataset_sort_key,
    harmonic_mean,
    parse_run_path,
    render_table,
    seed_of,
)
from trainers.routing import (  # noqa: E402
    FIT_DUMP_NAME,
    ROUTERS,
    TRAIN_U_DUMP_NAME,
    build_router,
    load_logits_dump,
    load_q_dump,
    restricted_argmax,
    routing_metrics,
)

METRIC_KEYS = ("route_base", "route_novel", "base", "novel")


@dataclass
class DumpUnit:
    """The dumps of one method / dataset / seed, possibly spread over a train_base and a test_new folder."""

    method: str
    dataset: str
    seed: str
    dirs: list[str] = field(default_factory=list)

    def _first(self, name: str) -> str | None:
        paths = [os.path.join(d, name) for d in self.dirs if os.path.isfile(os.path.join(d, name))]
        return paths[0] if paths else None

    @property
    def fit_path(self) -> str:
        path = self._first(FIT_DUMP_NAME)
        if path is None:
            raise ResultsError(f"no {FIT_DUMP_NAME} in {', '.join(self.dirs)} (PETR evaluation writes it)")
        return path

    @property
    def train_u_path(self) -> str:
        path = self._first(TRAIN_U_DUMP_NAME)
        if path is None:
            raise ResultsError(f"no {TRAIN_U_DUMP_NAME} in {', '.join(self.dirs)} (PETR evaluation writes it)")
        return path

    @property
    def logits_paths(self) -> list[str]:
        return sorted(p for d in self.dirs for p in glob.glob(os.path.join(d, "logits_*.pt")))

    @property
    def label(self) -> str:
        return f"{self.dataset} seed {self.seed}" if self.seed else self.dataset


def _unit_key(directory: str) -> tuple[str, str, str]:
    rp = parse_run_path(directory)
    if rp is not None:
        seed = seed_of(rp.seed)
        return f"{rp.trainer}/{rp.config}", rp.dataset, str(seed) if seed is not None else rp.seed
    path = Path(os.path.abspath(directory))
    seed = seed_of(path.name)
    if seed is not None:
        return "", path.parent.name, str(seed)
    return "", path.name, ""


def find_units(dirs: Sequence[str]) -> list[DumpUnit]:
    """Every folder under ``dirs`` holding PETR dumps, grouped by (method, dataset, seed)."""
    units: dict[tuple[str, str, str], DumpUnit] = {}
    for top in dirs:
        if not os.path.isdir(top):
            raise ResultsError(f"directory not found: {top}")
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            if not any(f in (FIT_DUMP_NAME, TRAIN_U_DUMP_NAME) or (f.startswith("logits_") and f.endswith(".pt"))
                       for f in filenames):
                continue
            key = _unit_key(dirpath)
            unit = units.setdefault(key, DumpUnit(*key))
            if dirpath not in unit.dirs:
                unit.dirs.append(dirpath)
    if not units:
        raise ResultsError(f"no PETR logits dumps ({FIT_DUMP_NAME}, logits_<split>.pt) under {', '.join(dirs)}")
    for unit in units.values():  # the train_base folder first, so its fit dump wins
        unit.dirs.sort(key=lambda d: (parse_run_path(d) is None or parse_run_path(d).role != "train_base", d))
    return sorted(units.values(), key=lambda u: (u.method, dataset_sort_key(u.dataset), u.seed))


def evaluate_unit(unit: DumpUnit, routers: Sequence[str], lam: float = 1.4, percentile: float = 99.0,
                  **router_kw: dict) -> dict[str, dict[str, float]]:
    """Per router: routing accuracy on base/novel samples and Base/Novel accuracy (percent) of one unit."""
    fit_q = load_q_dump(unit.fit_path)
    dumps = [load_logits_dump(p) for p in unit.logits_paths]
    if not dumps:
        raise ResultsError(f"no logits_<split>.pt dumps for {unit.label} in {', '.join(unit.dirs)}")
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


def _nanmean(values: Sequence[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


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
            rows[ds] = {r: _with_hm({k: _nanmean([m[k] for m in ms]) for k in METRIC_KEYS})
                        for r, ms in datasets[ds].items()}
        routers = list(next(iter(rows.values())))
        rows[AVERAGE] = {r: _with_hm({k: _nanmean([rows[ds][r][k] for ds in rows]) for k in METRIC_KEYS})
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
    p.add_argument("--lam", type=float, default=1.4, help="λ of the Mahalanobis threshold")
    p.add_argument("--percentile", type=float, default=99.0, help="percentile of the seen-train scores")
    p.add_argument("--format", choices=list(FORMATS), default="plain")
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
    print(f"Routing accuracy and accuracy in %, mean over seeds; HM of the means. Threshold: {args.percentile:g}th "
          f"percentile of the seen-train scores (× λ={args.lam:g} for Mahalanobis).")
    if args.json:
        write_json(_nan_to_none(summary), args.json)
        print(f"Saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
