"""Summarise results across seeds, experiments and methods (CoOp's ``parse_test_res.py``, extended).

Run from the repository root:

  python parse_test_res.py DIR [--ci95] [--multi-exp] [--keyword accuracy] [--test-log] [--stats upstream|sample]
                           [--format plain|github|csv]
      One line per run folder of DIR (``seed1``, ``seed_1``, ...) with the classes its accuracy covers (base, novel,
      all), then ``* accuracy: M% +- S% (...) on the <classes>``: mean ± std, or ± the 95 % interval half-width with
      ``--ci95``. ``--multi-exp``: every sub-folder of DIR is an experiment.
  python parse_test_res.py b2n ROOT [ROOT ...] [--methods M ...] [--baseline M] [--paper] [--wilcoxon A B]
                               [--metric base|novel|hm] [--seed-table] [--stats ...] [--format ...]
      Base-to-novel summary: pairs ``train_base/<ds>/shots_K/<TRAINER>/<cfg>/seedS`` with
      ``test_new/<ds>/shots_K/<TRAINER>/<cfg>/seedS`` into Base / Novel / HM per dataset (HM of the seed means) and an
      Average row (HM of the average Base and Novel, as the papers do); methods side by side with Δ vs a baseline
      (``--baseline``; default: the first ``--methods`` entry, else the zero-shot CLIP runs, else no Δ columns).
  python parse_test_res.py xd ROOT [--source S] [--targets T ...] [--methods M ...] [--keyword K] [--format ...]
  python parse_test_res.py dg ROOT [--source S] [--targets T ...] [--methods M ...] [--keyword K] [--format ...]
      Cross-dataset / domain-generalisation table in the papers' layout: per method the source, each target (mean
      over seeds) and the average over the targets, from the output root holding xd/, dg/ and ZeroshotCLIP/ (where
      each cell is read from: ``analysis/transfer.py``).
  python parse_test_res.py paper [TABLE]
      Print the published numbers stored in results/paper_results.json.
  (A results folder literally named ``b2n``, ``xd``, ``dg`` or ``paper`` is given as ``./b2n`` etc.)

Statistics (``--stats``): ``upstream`` (default) = CoOp's / PromptKD's population std (np.std) and 1.96·std/√n;
``sample`` = sample std (ddof=1) and the Student-t interval (n-1 dof). The output names the one used. With
``--format csv`` standard output holds only CSV rows; titles, notes and warnings go to standard error. The reading
rules (results.json, else the run's log after ``Finish training`` / ``=> result``: log.txt, or a Dassl rerun's newest
finished ``log.txt-<timestamp>``; which classes a run covers; a run recording another dataset, seed, trainer or
classes than its folder's is left out with one warning line; PromptKD's ``seed_<S>`` tree) are in
``analysis/readers.py`` and ``analysis/b2n.py``.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence

from analysis import stats
from analysis.b2n import (
    TEST_SELECTED,
    b2n_table,
    collect_b2n,
    default_baseline,
    order_methods,
    resolve_method,
    seed_table,
    summarize_b2n,
    wilcoxon_test,
)
from analysis.errors import ResultsError
from analysis.layout import AVERAGE, dataset_sort_key, require_dir
from analysis.paper import METRICS, PAPER_FILE, load_paper
from analysis.readers import classes_phrase, common_classes, dir_runs
from analysis.tables import FORMATS, format_cell, print_note, render_table
from analysis.transfer import collect_transfer, default_targets, transfer_table

# ----------------------------------------------------------------------------------------------- default mode


def print_dir_summary(directory: str, keyword: str = "accuracy", test_log: bool = False, ci95: bool = False,
                      convention: str = stats.DEFAULT_CONVENTION, fmt: str = "plain") -> float:
    """Print one row per run folder (its classes and value) and upstream's ``* keyword: M% +- S%`` line, followed by
    the classes the runs cover; returns the mean."""
    runs = dir_runs(directory)
    rows = [(name, record.classes, record.value(keyword, test_log)) for name, record in runs]
    values = [v for _, _, v in rows if v is not None]
    print_note(f"Summary of directory: {directory}", fmt)
    print(render_table(["run", "classes", keyword], rows, fmt))
    on_test = [name for name, record in runs if record.selected_on == "test"]
    if on_test:
        print_note(f"Note: {len(on_test)} of {len(rows)} runs selected their model on the test split "
                   f"(results.json selected_on: test; TEST.FINAL_MODEL best_val without a val split): "
                   f"{', '.join(on_test)}; not comparable to runs selected without test data", fmt)
    kd = [name for name, record in runs if record.upstream_promptkd]
    if kd:
        print_note(f"Note: {', '.join(kd)}: upstream PromptKD's base-to-novel runs, whose final test covers the novel "
                   "classes; their base accuracy is the best *val* block (parse_test_res.py b2n reads both)", fmt)
    if not values:
        raise ResultsError(f"no '* {keyword}: X%' value found in {directory} (try --test-log for eval-only logs)")
    mean = stats.mean(values)
    spread = format_cell(stats.spread(values, convention, ci95))
    print_note(f"* {keyword}: {mean:.2f}% +- {spread}% ({stats.spread_label(convention, ci95, len(values))}) on "
               f"{classes_phrase(_covered(directory, rows))}", fmt)
    return mean


def _covered(directory: str, rows: list[tuple[str, str | None, float | None]]) -> str | None:
    """The classes the ``(run, classes, value)`` rows with a value cover (``analysis.readers.common_classes``), and
    one warning line when they differ: their mean mixes them."""
    kinds: dict[str, list[str]] = {}
    for name, classes, value in rows:
        if value is not None:
            kinds.setdefault(classes or "not recorded", []).append(name)
    if len(kinds) > 1:
        parts = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in kinds.items())
        print(f"warning: the runs of {directory} cover different classes ({parts}): their mean mixes them",
              file=sys.stderr)
    return common_classes([classes for _, classes, value in rows if value is not None])


def run_default(args: argparse.Namespace) -> None:
    """DIR mode: one folder of seeds, or (``--multi-exp``) one row per experiment folder."""
    if not args.multi_exp:
        print_dir_summary(args.directory, args.keyword, args.test_log, args.ci95, args.stats, args.format)
        return
    require_dir(args.directory)
    rows = []
    for exp in sorted(d for d in os.listdir(args.directory) if not d.startswith(".")):
        path = os.path.join(args.directory, exp)
        if not os.path.isdir(path):
            continue
        read = [(name, record.classes, record.value(args.keyword, args.test_log)) for name, record in dir_runs(path)]
        values = [v for _, _, v in read if v is not None]
        rows.append((exp, _covered(path, read), len(values), stats.mean(values),
                     stats.spread(values, args.stats, args.ci95)))
    if not rows:
        raise ResultsError(f"--multi-exp: no experiment folders in {args.directory}")
    spread = "ci95" if args.ci95 else "std"
    print(render_table(["experiment", "classes", "n", args.keyword, spread], rows, args.format))
    means = [r[3] for r in rows if not math.isnan(r[3])]
    print_note(f"{spread}: {stats.spread_label(args.stats, args.ci95)} over each experiment's seeds.\n"
               f"Average performance: {stats.mean(means):.2f}% (mean of {len(means)} experiment means)", args.format)


# ----------------------------------------------------------------------------------------------- base-to-novel


def run_b2n(args: argparse.Namespace) -> None:
    """b2n mode: Base / Novel / HM table, optional seed table and Wilcoxon test."""
    data = collect_b2n(args.roots, args.keyword, args.methods, args.shots)
    if not data:
        raise ResultsError(f"no base-to-novel runs found under {', '.join(args.roots)} "
                           "(expected <root>/train_base|test_new/<dataset>/<shots>/<trainer>/<config>/<seed>)")
    if args.methods:
        data = order_methods(data, args.methods)
    summary = summarize_b2n(data)
    paper = load_paper(args.paper_file) if args.paper or _uses_paper(args) else None
    baseline = args.baseline if args.baseline is not None else default_baseline(summary, args.methods)
    if baseline is not None and not baseline.startswith("paper:"):
        baseline = resolve_method(baseline, summary, paper)[0]  # a method's other names: its label in the table
    headers, rows = b2n_table(summary, baseline, paper if args.paper else None)
    print(render_table(headers, rows, args.format))
    notes = ["HM per dataset = HM of the seed means; Average = mean over datasets with both Base and Novel, "
             "HM of those averages. seeds = base/novel runs found."]
    if baseline is not None:
        why = ("set with --baseline" if args.baseline is not None else
               "first --methods entry" if args.methods else "zero-shot CLIP, the default")
        notes.append(f"Δ = row − {baseline} (baseline: {why}; change it with --baseline NAME).")
    elif len(summary) > 1:
        notes.append("No Δ columns: name the baseline with --baseline NAME (a measured method or paper:<name>).")
    if "selection" in headers:
        notes.append(f"selection '{TEST_SELECTED}': the checkpoint was chosen on the base test set: upstream "
                     "PromptKD's tree (seed_<S>, best_val on PromptKD's val split, the base test set; Base is the best "
                     "of those test evaluations and Novel the test of that checkpoint), or runs whose results.json "
                     "says selected_on: test (TEST.FINAL_MODEL best_val without a val split); not comparable to rows "
                     "selected without test data.")
    if len({rows[AVERAGE]["n_datasets"] for rows in summary.values()}) > 1:
        notes.append("Warning: methods cover different numbers of datasets; their Average rows are not comparable.")
    print_note("\n".join(notes), args.format)
    if args.seed_table:
        print()
        print(render_table(*seed_table(data, args.stats), args.format))
        print_note(f"Seed table: mean, std = {stats.spread_label(args.stats)}, ci95 = "
                   f"{stats.spread_label(args.stats, ci95=True)}, over seeds; HM is computed per seed.", args.format)
    if args.wilcoxon:
        res = wilcoxon_test(summary, args.wilcoxon[0], args.wilcoxon[1], args.metric, paper)
        print_note(f"Wilcoxon signed-rank (two-sided), {res['metric']}: {res['a']} vs {res['b']} over "
                   f"{len(res['datasets'])} datasets: W = {res['statistic']:.4g}, p = {res['pvalue']:.4g}, "
                   f"median Δ = {res['median_diff']:+.2f}", args.format)


def _uses_paper(args: argparse.Namespace) -> bool:
    names = [args.baseline or ""] + list(args.wilcoxon or [])
    return any(n.startswith("paper:") for n in names)


# ----------------------------------------------------------------------------------------------- xd / dg


def run_transfer(args: argparse.Namespace) -> None:
    """xd / dg mode: the source, each target and the targets' average per method."""
    targets = args.targets or default_targets(args.root, args.protocol, args.source)
    values = collect_transfer(args.root, args.protocol, args.source, targets, args.keyword, args.methods)
    headers, rows = transfer_table(values, args.source, targets, args.methods)
    print(render_table(headers, rows, args.format))
    print_note(f"{args.keyword} (%), mean over the seeds found; Average = mean over the targets (not the source), "
               "'-' unless every target has a value.", args.format)


# ----------------------------------------------------------------------------------------------- paper numbers


def run_paper(args: argparse.Namespace) -> None:
    """paper mode: every stored table (or one) with its sources and notes."""
    paper = load_paper(args.paper_file)
    tables = paper["tables"]
    names = [args.table] if args.table else list(tables)
    for name in names:
        if name not in tables:
            raise ResultsError(f"unknown paper table {name!r}; available: {', '.join(tables)}")
        table = tables[name]
        columns = table["columns"]
        rows = [[ds, method, *[r.get(c, math.nan) for c in columns], ", ".join(entry["source"])]
                for method, entry in table["methods"].items()
                for ds, r in sorted(entry["rows"].items(), key=lambda kv: dataset_sort_key(kv[0]))]
        status = "complete" if table.get("complete") else "partial"
        print_note(f"== {name} ({status}): {table['description']}", args.format)
        if rows:
            print(render_table(["dataset", "method", *columns, "source"], rows, args.format))
        notes = [f"  [{key}] {paper['sources'].get(key, key)}"
                 for key in dict.fromkeys(k for entry in table["methods"].values() for k in entry["source"])]
        if table.get("note"):
            notes.append(f"  note: {table['note']}")
        print_note("\n".join(notes) + "\n", args.format)


# ----------------------------------------------------------------------------------------------- command line


def _add_stats(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stats", choices=stats.CONVENTIONS, default=stats.DEFAULT_CONVENTION,
                   help="upstream (default): population std (np.std) and 1.96*std/sqrt(n), as CoOp/PromptKD; "
                        "sample: sample std (ddof=1) and the Student-t interval (n-1 dof)")


def _add_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=list(FORMATS), default="plain",
                   help="plain text (default), GitHub markdown or CSV (standard output then holds only the CSV rows)")


KEYWORD_HELP = "the metric read from each run: a results.json key, or '* <keyword>: X%%' in its log (default accuracy)"
METHODS_HELP = ("methods in table order: as the tables name them (PETR+CoOp), by trainer (PETRCoOp) or scripts folder "
                "(petr_coop), or TRAINER / TRAINER/config globs")
PAPER_FILE_HELP = "the published numbers' file (default results/paper_results.json)"


def _default_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Mean ± std of results across seed folders (CoOp usage). "
                    "Other modes: 'parse_test_res.py b2n -h', 'xd -h', 'dg -h', 'paper -h'.")
    p.add_argument("directory", help="folder of run folders (seed1, seed_2, ...), or of experiments with --multi-exp")
    p.add_argument("--ci95", action="store_true", help="report the 95%% interval half-width instead of the std")
    p.add_argument("--test-log", action="store_true", help="parse after '=> result' instead of the end of training "
                   "('Finish training' / 'Finished training')")
    p.add_argument("--multi-exp", action="store_true", help="every sub-folder of DIR is an experiment")
    p.add_argument("--keyword", default="accuracy", help=KEYWORD_HELP)
    _add_stats(p)
    _add_format(p)
    return p


def _b2n_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="parse_test_res.py b2n",
                                description="Base / Novel / HM per dataset and method from train_base + test_new.")
    p.add_argument("roots", nargs="+", help="output roots holding train_base/ and test_new/ (e.g. output/base2new)")
    p.add_argument("--methods", nargs="+", help=METHODS_HELP)
    p.add_argument("--shots", nargs="+", help="shots folders to include (e.g. shots_16)")
    p.add_argument("--keyword", default="accuracy", help=KEYWORD_HELP)
    p.add_argument("--baseline", "--reference", dest="baseline",
                   help="method the Δ columns are relative to (a measured method, any name --methods takes, or "
                        "paper:<name>); default: the "
                        "first --methods entry, else the zero-shot CLIP runs (ZeroshotCLIP), else no Δ columns")
    p.add_argument("--paper", action="store_true", help="add the published rows of each measured method")
    p.add_argument("--paper-file", default=str(PAPER_FILE), help=PAPER_FILE_HELP)
    p.add_argument("--wilcoxon", nargs=2, metavar=("A", "B"), help="paired signed-rank test across datasets")
    p.add_argument("--metric", choices=METRICS, default="hm", help="metric for --wilcoxon")
    p.add_argument("--seed-table", action="store_true", help="also print mean, std and 95%% CI per metric")
    _add_stats(p)
    _add_format(p)
    return p


def _transfer_parser(protocol: str) -> argparse.ArgumentParser:
    what = {"xd": "cross-dataset", "dg": "domain-generalisation"}[protocol]
    p = argparse.ArgumentParser(prog=f"parse_test_res.py {protocol}",
                                description=f"The {what} table: source, targets and their average per method.")
    p.add_argument("root", help="output root holding xd/, dg/ and ZeroshotCLIP/ (e.g. output)")
    p.add_argument("--source", default="imagenet", help="source dataset (short name, default imagenet)")
    p.add_argument("--targets", nargs="+", help=f"target datasets in column order (default: the {protocol} targets "
                                                "found under ROOT)")
    p.add_argument("--methods", nargs="+", help=METHODS_HELP)
    p.add_argument("--keyword", default="accuracy", help=KEYWORD_HELP)
    _add_format(p)
    p.set_defaults(protocol=protocol)
    return p


def _paper_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="parse_test_res.py paper", description="Print the stored published numbers.")
    p.add_argument("table", nargs="?", help="table name (default: all)")
    p.add_argument("--paper-file", default=str(PAPER_FILE), help=PAPER_FILE_HELP)
    _add_format(p)
    return p


MODES = {"b2n": (_b2n_parser, run_b2n), "xd": (lambda: _transfer_parser("xd"), run_transfer),
         "dg": (lambda: _transfer_parser("dg"), run_transfer), "paper": (_paper_parser, run_paper)}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (errors print one line to stderr)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in MODES:
        build, run = MODES[argv[0]]
        args = build().parse_args(argv[1:])
    else:
        args, run = _default_parser().parse_args(argv), run_default
    try:
        run(args)
    except ResultsError as e:
        print(f"parse_test_res.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
