"""A sweep's report, one per protocol beside its table (``report.md`` and ``report.png``): base-to-novel Base / Novel /
HM per dataset and method (mean ± sample std over seeds) with their averages, the routing rates of the routed methods
and the Mahalanobis scores of one routed run; cross-dataset and DG accuracy per target. Read from the run folders'
files only (``analysis.b2n``, ``analysis.transfer``, the routing dumps), so it can be made for any output tree.

``python -m analysis.report ROOT PROTOCOL OUT_DIR`` writes it (the protocol runner runs it in a child process, as
reading the routing dumps imports torch).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tabulate import tabulate

from analysis import stats
from analysis.b2n import SeedRuns, collect_b2n, label_trainer
from analysis.errors import ResultsError
from analysis.layout import AVERAGE, dataset_sort_key
from analysis.readers import RunRecord
from analysis.transfer import collect_transfer, default_targets, labels, order
from engine.atomic import atomic_write_text
from trainers.catalog import method_name

CONVENTION = "sample"
"""Spread over seeds: the sample standard deviation (ddof = 1)."""
ROUTED_KEYS = ("route_acc_seen", "route_acc_unseen")
"""results.json fields of a routed run: the % of base test images sent to θ_s, of novel ones to θ_u."""
REPORT_MD, REPORT_PNG = "report.md", "report.png"
PANEL_COLUMNS = 4


def mean_std(values: Sequence[float]) -> str:
    """``mean ± std`` over seeds (sample std; only the mean for one value; ``-`` for none)."""
    values = [v for v in values if v == v]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{stats.mean(values):.2f} ± {stats.std(values, CONVENTION):.2f}"


@dataclass
class Report:
    """What a protocol's report holds: (heading, markdown table) sections, the bar panels (title -> method -> one
    value per name of :attr:`metrics`) and the routed run whose scores are plotted."""

    title: str
    sections: list[tuple[str, str]] = field(default_factory=list)
    panels: dict[str, dict[str, tuple[float, ...]]] = field(default_factory=dict)
    metrics: tuple[str, ...] = ("Base", "Novel", "HM")
    scores: tuple | None = None
    """(base scores, novel scores, threshold, title) of one routed run, or None."""


def _quiet_collect(root: str, keyword: str, methods: Sequence[str] | None) -> dict[str, dict[str, SeedRuns]]:
    """``collect_b2n`` of a routing field: its warnings were already given by the accuracy pass."""
    with contextlib.redirect_stderr(io.StringIO()):
        return collect_b2n([root], keyword, methods)


def hm_seeds(runs: SeedRuns) -> list[float]:
    """The per-seed HM of the seeds with both halves."""
    return [stats.harmonic_mean(runs.base[s], runs.novel[s]) for s in runs.base if s in runs.novel]


def b2n_report(root: str, methods: Sequence[str] | None = None, names: Mapping[str, str] | None = None) -> Report:
    """The base-to-novel report of the runs under ``root`` (``<output>/base2new``); ``methods``: globs in table
    order; ``names``: how to show a method label (default: itself)."""
    data = collect_b2n([root], "accuracy", methods)
    if not data:
        raise ResultsError(f"no base-to-novel run under {root}")
    show = {label: (names or {}).get(label, label) for label in data}
    datasets = sorted({ds for per in data.values() for ds in per}, key=dataset_sort_key)
    report = Report("Base-to-novel")
    rows = []
    for ds in datasets:
        for label, per in data.items():
            if ds in per:
                runs = per[ds]
                rows.append([ds, show[label], len(runs.base), mean_std(list(runs.base.values())),
                             mean_std(list(runs.novel.values())), mean_std(hm_seeds(runs))])
    averages = _averages(data, datasets)
    rows += [[AVERAGE, show[label], n, f"{b:.2f}", f"{v:.2f}", f"{h:.2f}"] for label, (n, b, v, h) in averages.items()]
    report.sections.append(("Base / Novel / HM per dataset (mean ± sample std over seeds; HM per seed, then "
                            "averaged; the average over the datasets with both halves)",
                            tabulate(rows, headers=["dataset", "method", "seeds", "Base", "Novel", "HM"],
                                     tablefmt="github", disable_numparse=True)))
    report.sections.append(_routing_section(root, methods, show, datasets))
    for ds in ([AVERAGE] if len(datasets) > 1 else []) + datasets:
        if ds == AVERAGE:
            report.panels["average over the datasets"] = {show[m]: averages[m][1:] for m in averages}
        else:
            report.panels[ds] = {show[m]: (stats.mean(list(per[ds].base.values())),
                                           stats.mean(list(per[ds].novel.values())),
                                           stats.mean(hm_seeds(per[ds])) if hm_seeds(per[ds]) else math.nan)
                                 for m, per in data.items() if ds in per}
    report.scores = _routed_scores(root)
    return report


def _averages(data: Mapping[str, Mapping[str, SeedRuns]], datasets: Sequence[str]
              ) -> dict[str, tuple[int, float, float, float]]:
    """Per method whose every dataset has both halves: (datasets, mean Base, mean Novel, HM of those means)."""
    out = {}
    for label, per in data.items():
        complete = [per[ds] for ds in datasets if ds in per and per[ds].base and per[ds].novel]
        if complete:
            base = stats.mean([stats.mean(list(r.base.values())) for r in complete])
            novel = stats.mean([stats.mean(list(r.novel.values())) for r in complete])
            out[label] = (len(complete), base, novel, stats.harmonic_mean(base, novel))
    return out


def _routing_section(root: str, methods: Sequence[str] | None, show: Mapping[str, str],
                     datasets: Sequence[str]) -> tuple[str, str]:
    seen, unseen = (_quiet_collect(root, key, methods) for key in ROUTED_KEYS)
    rows = [[ds, show.get(label, label), mean_std(list(seen[label][ds].base.values())),
             mean_std(list(unseen.get(label, {}).get(ds, SeedRuns()).novel.values()))]
            for ds in datasets for label in seen if ds in seen[label] and seen[label][ds].base]
    table = tabulate(rows, headers=["dataset", "routed method", "base → θ_s %", "novel → θ_u %"],
                     tablefmt="github", disable_numparse=True) if rows else "No routed method in this sweep."
    return "Routing: test images each routed method sends to the right student (mean ± sample std)", table


def _routed_scores(root: str) -> tuple | None:
    """The Mahalanobis scores of the first routed run with dumps (by method, dataset, seed), or None."""
    from analysis.dumps import find_units, unit_scores  # reads the .pt dumps: torch

    try:
        units = [u for u in find_units([root]) if u.logits_paths]
    except ResultsError:
        return None
    for unit in units:
        try:
            base, novel, threshold = unit_scores(unit, "mahalanobis")
        except (ResultsError, FileNotFoundError):
            continue
        record = RunRecord.read(unit.dirs[0])
        method = method_name(label_trainer(unit.method), record.routed_on)
        return base, novel, threshold, f"{method}'s Mahalanobis scores\n{unit.label} test split"
    return None


def transfer_report(root: str, protocol: str, source: str, targets: Sequence[str] | None = None,
                    methods: Sequence[str] | None = None) -> Report:
    """The cross-dataset (``xd``) or DG (``dg``) report of the runs under the output root ``root``: per method, the
    source and each target (mean ± sample std over seeds) and the targets' average."""
    targets = list(targets or default_targets(root, protocol, source))
    values = collect_transfer(root, protocol, source, targets, methods=methods)
    if not values:
        raise ResultsError(f"no {protocol} run from {source} under {root}")
    keys = order(list(values), methods)
    names = labels(keys)
    rows, panel = [], {}
    for key in keys:
        cells = [list(values[key].get(ds, {}).values()) for ds in (source, *targets)]
        means = [stats.mean(c) if c else math.nan for c in cells]
        average = stats.mean(means[1:]) if all(m == m for m in means[1:]) else math.nan
        rows.append([names[key], *map(mean_std, cells), "-" if average != average else f"{average:.2f}"])
        panel[names[key]] = (*means, average)
    title = {"xd": "Cross-dataset", "dg": "Domain generalisation"}[protocol]
    report = Report(f"{title} from {source}")
    report.sections.append((f"{title} from {source} (mean ± sample std over seeds; Average: of the target means)",
                            tabulate(rows, headers=["method", f"{source} (source)", *targets, "Average"],
                                     tablefmt="github", disable_numparse=True)))
    report.panels = {"accuracy per dataset (mean over seeds)": panel}
    report.metrics = (f"{source} (source)", *targets, "Average")
    return report


def write_figure(report: Report, path: str) -> None:
    """``report.png``: a bar panel per dataset or target (values on the bars) and the routed run's scores."""
    from analysis.figures import accuracy_bars, plt, score_histogram

    panels = list(report.panels.items())
    count = len(panels) + (report.scores is not None)
    cols = min(PANEL_COLUMNS, count)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), dpi=100, squeeze=False)
    flat = list(axes.flat)
    for ax, (title, values) in zip(flat, panels):
        accuracy_bars(ax, values, title, report.metrics)
    if report.scores is not None:
        base, novel, threshold, title = report.scores
        score_histogram(flat[len(panels)], base, novel, threshold, log2=True)
        flat[len(panels)].set_title(title, fontsize=10)
        flat[len(panels)].set_xlabel("Mahalanobis distance (log2 scale)")
    for ax in flat[count:]:
        ax.axis("off")
    fig.suptitle(report.title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(path: str, title: str, sections: Sequence[tuple[str, str]], figure: str) -> None:
    """``path`` (markdown, written atomically): ``title``, each (heading, markdown table) section and the figure."""
    parts = [f"# {title}", *(f"## {heading}\n\n{table}" for heading, table in sections),
             f"![accuracies and routing scores]({os.path.relpath(figure, os.path.dirname(path))})"]
    atomic_write_text("\n\n".join(parts) + "\n", path)


def protocol_report(root: str, protocol: str, out_dir: str, source: str = "imagenet",
                    targets: Sequence[str] | None = None, methods: Sequence[str] | None = None) -> list[str]:
    """Write ``report.md`` and ``report.png`` of ``protocol``'s runs under the output root ``root`` into ``out_dir``;
    returns their paths."""
    if protocol == "base2new":
        report = b2n_report(os.path.join(root, "base2new"), methods)
    else:
        report = transfer_report(root, protocol, source, targets, methods)
    os.makedirs(out_dir, exist_ok=True)
    figure, markdown = os.path.join(out_dir, REPORT_PNG), os.path.join(out_dir, REPORT_MD)
    write_figure(report, figure)
    write_report(markdown, report.title, report.sections, figure)
    return [markdown, figure]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m analysis.report ROOT PROTOCOL OUT_DIR [--source S] [--targets ...] [--methods ...]``."""
    p = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="the output root (holding base2new/, xd/, dg/)")
    p.add_argument("protocol", choices=("base2new", "xd", "dg"), help="which protocol's runs to report")
    p.add_argument("out_dir", help="where report.md and report.png go")
    p.add_argument("--source", default="imagenet", help="the cross-dataset / DG source (default imagenet)")
    p.add_argument("--targets", nargs="+",
                   help="the cross-dataset / DG targets, in column order (default: those found)")
    p.add_argument("--methods", nargs="+", help="trainer globs, in table order")
    args = p.parse_args(argv)
    try:
        written = protocol_report(args.root, args.protocol, args.out_dir, args.source, args.targets, args.methods)
    except ResultsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Report written to {written[0]} and {written[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
