"""Summarise results across seeds, experiments and methods (CoOp's ``parse_test_res.py``, extended).

Run from the repository root:

  python parse_test_res.py DIR [--ci95] [--multi-exp] [--keyword accuracy] [--test-log] [--format plain|github|csv]
      One line per run folder of DIR (``seed1``, ``seed_1``, ...), then mean ± sample std (ddof=1), or ± the 95 %
      t-interval half-width (n-1 dof) with ``--ci95``. ``--multi-exp``: every sub-folder of DIR is an experiment.
  python parse_test_res.py b2n ROOT [ROOT ...] [--methods M ...] [--reference M] [--paper] [--wilcoxon A B]
                               [--metric base|novel|hm] [--seed-table] [--format ...]
      Base-to-novel summary: pairs ``train_base/<ds>/shots_K/<TRAINER>/<cfg>/seedS`` with
      ``test_new/<ds>/shots_K/<TRAINER>/<cfg>/seedS`` into Base / Novel / HM per dataset (HM of the seed means) and an
      Average row (HM of the average Base and Novel, as the papers do); methods side by side with Δ vs a reference.
  python parse_test_res.py paper [TABLE]
      Print the published numbers stored in results/paper_results.json.
  (A results folder literally named ``b2n`` or ``paper`` is given as ``./b2n`` / ``./paper``.)

A run folder is read from ``results.json`` (this project's engine; percentages) and otherwise from ``log.txt``
(Dassl/CoOp/PromptKD/MaPLe/PromptSRC logs): the last ``* <keyword>: X%`` after the line ``Finish training``, or after
``=> result`` with ``--test-log``. PromptKD fallback: PromptKD keeps base and novel in one ``seed_S`` folder under
``train_base`` (no ``test_new`` partner); there the base accuracy is the best (max) ``Evaluate on the *val* set``
block (PromptKD deploys the best-val checkpoint, its val set is the base test set) and the novel accuracy is the
test after ``Finish training``.
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import json
import math
import os
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats
from tabulate import tabulate

RESULT_FILE = "results.json"
LOG_FILE = "log.txt"
PAPER_FILE = Path(__file__).resolve().parent / "results" / "paper_results.json"
ROLE_DIRS = {"train_base": "base", "test_base": "base", "test_new": "novel"}
DATASET_ORDER = ("imagenet", "caltech101", "oxford_pets", "stanford_cars", "oxford_flowers", "food101",
                 "fgvc_aircraft", "sun397", "dtd", "eurosat", "ucf101")
AVERAGE = "average"
METRICS = ("base", "novel", "hm")
FORMATS = {"plain": "simple", "github": "github", "csv": "csv"}


class ResultsError(Exception):
    """Bad input for the parser (missing folder, nothing parsable, unknown method); printed as one line."""


# ----------------------------------------------------------------------------------------------- statistics

def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; NaN for fewer than two values)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return math.nan, math.nan
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else math.nan


def ci95_halfwidth(values: Sequence[float]) -> float:
    """Half-width of the 95 % Student-t confidence interval of the mean (n-1 dof; NaN for n < 2)."""
    n = len(values)
    if n < 2:
        return math.nan
    return float(stats.t.ppf(0.975, n - 1) * np.std(values, ddof=1) / math.sqrt(n))


def harmonic_mean(base: float, novel: float) -> float:
    """HM = 2·B·N / (B + N) (NaN if either is missing)."""
    if math.isnan(base) or math.isnan(novel):
        return math.nan
    return 0.0 if base + novel == 0 else 2.0 * base * novel / (base + novel)


# ----------------------------------------------------------------------------------------------- reading runs

def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip("%"))
        except ValueError:
            return None
    return None


def value_from_results_json(obj: Any, keyword: str) -> float | None:
    """``keyword`` from a results.json dict (top level, or under ``metrics`` / ``results``), in percent."""
    if not isinstance(obj, dict):
        return None
    for scope in (obj, obj.get("metrics"), obj.get("results")):
        if isinstance(scope, dict) and keyword in scope:
            return _number(scope[keyword])
    return None


def _metric_pattern(keyword: str) -> re.Pattern:
    return re.compile(rf"\* {re.escape(keyword)}: ([\.\deE+-]+)%")


def value_from_log(text: str, keyword: str = "accuracy", test_log: bool = False) -> float | None:
    """Last ``* keyword: X%`` after the end signal (``Finish training``, or ``=> result`` with ``test_log``)."""
    signal = "=> result" if test_log else "Finish training"
    pattern = _metric_pattern(keyword)
    found, value = False, None
    for line in text.splitlines():
        if line.strip() == signal:
            found = True
        elif found and (m := pattern.search(line)):
            value = float(m.group(1))
    return value


def val_values_from_log(text: str, keyword: str = "accuracy") -> list[float]:
    """``keyword`` of every ``Evaluate on the *val* set`` block before ``Finish training`` (PromptKD's base)."""
    pattern = _metric_pattern(keyword)
    values, in_val = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "Finish training":
            break
        if stripped.startswith("Evaluate on the"):
            in_val = stripped == "Evaluate on the *val* set"
        elif in_val and (m := pattern.search(line)):
            values.append(float(m.group(1)))
            in_val = False
    return values


def _read_text(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def is_run_dir(path: str) -> bool:
    """A run folder holds results.json or log.txt."""
    return os.path.isfile(os.path.join(path, RESULT_FILE)) or os.path.isfile(os.path.join(path, LOG_FILE))


def read_run(run_dir: str, keyword: str = "accuracy", test_log: bool = False) -> float | None:
    """The run's ``keyword`` value: results.json first, else log.txt; None if neither has it."""
    json_path = os.path.join(run_dir, RESULT_FILE)
    if os.path.isfile(json_path):
        try:
            with open(json_path) as f:
                value = value_from_results_json(json.load(f), keyword)
        except json.JSONDecodeError as e:
            raise ResultsError(f"malformed {json_path}: {e} (delete it or re-run the evaluation)") from None
        if value is not None:
            return value
    log_path = os.path.join(run_dir, LOG_FILE)
    if os.path.isfile(log_path):
        return value_from_log(_read_text(log_path), keyword, test_log)
    return None


def seed_of(name: str) -> int | None:
    """Seed number of a ``seed1`` / ``seed_1`` folder name."""
    m = re.fullmatch(r"seed_?(\d+)", name)
    return int(m.group(1)) if m else None


def _require_dir(path: str) -> None:
    if not os.path.isdir(path):
        raise ResultsError(f"directory not found: {path} (run from the repository root or give the output path)")


def find_runs(directory: str) -> list[str]:
    """Run folders of ``directory``: its non-hidden sub-folders holding results, or ``directory`` itself."""
    _require_dir(directory)
    subdirs = [os.path.join(directory, d) for d in sorted(os.listdir(directory)) if not d.startswith(".")]
    runs = [d for d in subdirs if os.path.isdir(d) and is_run_dir(d)]
    if not runs and is_run_dir(directory):
        runs = [directory]
    return runs


# ----------------------------------------------------------------------------------------------- tables

def _cell(value: Any, floatfmt: str) -> Any:
    if isinstance(value, float):
        return "-" if math.isnan(value) else format(value, floatfmt)
    return "-" if value is None else value


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], fmt: str = "plain",
                 floatfmt: str = ".2f") -> str:
    """Render rows as a plain / GitHub-markdown table (tabulate) or CSV; NaN and None print as ``-``."""
    if fmt not in FORMATS:
        raise ResultsError(f"unknown table format {fmt!r}; use one of {', '.join(FORMATS)}")
    cells = [[_cell(v, floatfmt) for v in row] for row in rows]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(cells)
        return buf.getvalue().rstrip("\n")
    return tabulate(cells, headers=list(headers), tablefmt=FORMATS[fmt], disable_numparse=True)


def _spread(values: Sequence[float], ci95: bool) -> float:
    return ci95_halfwidth(values) if ci95 else mean_std(values)[1]


def _spread_text(ci95: bool, n: int) -> str:
    return f"95% CI half-width, t with {n - 1} dof" if ci95 else "sample std"


# ----------------------------------------------------------------------------------------------- default mode

def summarize_dir(directory: str, keyword: str = "accuracy", test_log: bool = False) -> list[tuple[str, float | None]]:
    """``(run name, value)`` for every run folder of ``directory``."""
    runs = find_runs(directory)
    if not runs:
        raise ResultsError(f"no run folders with {RESULT_FILE} or {LOG_FILE} in {directory}")
    return [(os.path.basename(os.path.normpath(r)), read_run(r, keyword, test_log)) for r in runs]


def _print_dir_summary(directory: str, keyword: str, test_log: bool, ci95: bool, fmt: str) -> float:
    results = summarize_dir(directory, keyword, test_log)
    values = [v for _, v in results if v is not None]
    print(f"Summary of directory: {directory}")
    print(render_table(["run", keyword], [(name, v) for name, v in results], fmt))
    if not values:
        raise ResultsError(f"no '* {keyword}: X%' value found in {directory} (try --test-log for eval-only logs)")
    mean = float(np.mean(values))
    print(f"* {keyword}: {mean:.2f}% +- {_cell(_spread(values, ci95), '.2f')}% "
          f"({_spread_text(ci95, len(values))}, n={len(values)})")
    return mean


def run_default(args: argparse.Namespace) -> None:
    if not args.multi_exp:
        _print_dir_summary(args.directory, args.keyword, args.test_log, args.ci95, args.format)
        return
    _require_dir(args.directory)
    rows = []
    for exp in sorted(d for d in os.listdir(args.directory) if not d.startswith(".")):
        path = os.path.join(args.directory, exp)
        if not os.path.isdir(path):
            continue
        results = summarize_dir(path, args.keyword, args.test_log)
        values = [v for _, v in results if v is not None]
        mean = float(np.mean(values)) if values else math.nan
        rows.append((exp, len(values), mean, _spread(values, args.ci95)))
    if not rows:
        raise ResultsError(f"--multi-exp: no experiment folders in {args.directory}")
    spread = "ci95" if args.ci95 else "std"
    print(render_table(["experiment", "n", args.keyword, spread], rows, args.format))
    means = [r[2] for r in rows if not math.isnan(r[2])]
    print(f"Average performance: {float(np.mean(means)):.2f}% (mean of {len(means)} experiment means)")


# ----------------------------------------------------------------------------------------------- base-to-novel

@dataclass(frozen=True)
class RunPath:
    """A run folder in the base-to-novel layout ``<role>/<dataset>/<shots>/<trainer>/<config>/<seed>``."""

    role: str  # train_base / test_base / test_new
    dataset: str
    shots: str
    trainer: str
    config: str
    seed: str
    path: str


def parse_run_path(path: str) -> RunPath | None:
    """Parse a run folder path in the base-to-novel layout; None when it does not follow it."""
    parts = Path(os.path.abspath(path)).parts
    if len(parts) >= 6 and parts[-6] in ROLE_DIRS:
        return RunPath(*parts[-6:], path=path)
    return None


def dataset_sort_key(name: str) -> tuple[int, str]:
    """Order datasets as in the papers' tables; unknown names after, alphabetically; the average last."""
    if name == AVERAGE:
        return (len(DATASET_ORDER) + 1, name)
    return (DATASET_ORDER.index(name), name) if name in DATASET_ORDER else (len(DATASET_ORDER), name)


def _unique_labels(keys: list[tuple[int, str, str, str]], roots: Sequence[str]) -> dict[tuple, str]:
    """Shortest unique label per (root, trainer, config, shots): trainer, then +config, +shots, then root:."""
    def build(key: tuple, depth: int) -> str:
        root, trainer, config, shots = key
        label = "/".join([trainer, config, shots][: min(depth, 2) + 1])
        return f"{os.path.basename(os.path.normpath(roots[root]))}:{label}" if depth == 3 else label

    for depth in range(4):
        labels = {k: build(k, depth) for k in keys}
        if len(set(labels.values())) == len(keys):
            return labels
    return {k: f"{build(k, 3)}#{k[0]}" for k in keys}


def _matches(patterns: Sequence[str] | None, *names: str) -> bool:
    return not patterns or any(fnmatch.fnmatch(n, p) for p in patterns for n in names)


def collect_b2n(roots: Sequence[str], keyword: str = "accuracy", methods: Sequence[str] | None = None,
                shots: Sequence[str] | None = None) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """``{method: {dataset: {"base": {seed: v}, "novel": {seed: v}}}}`` from base-to-novel output trees."""
    entries: dict[tuple, dict[str, dict[str, dict[str, float]]]] = defaultdict(
        lambda: defaultdict(lambda: {"base": {}, "novel": {}, "test_base": {}, "kd_base": {}, "kd_novel": {}}))
    skipped = 0
    for root_idx, root in enumerate(roots):
        _require_dir(root)
        for dirpath, dirnames, _ in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            if not is_run_dir(dirpath):
                continue
            rp = parse_run_path(dirpath)
            if rp is None:
                skipped += 1
                continue
            if not _matches(shots, rp.shots) or not _matches(methods, rp.trainer, f"{rp.trainer}/{rp.config}"):
                continue
            cell = entries[(root_idx, rp.trainer, rp.config, rp.shots)][rp.dataset]
            _read_b2n_run(rp, keyword, cell)
    if skipped:
        print(f"Note: skipped {skipped} run folder(s) outside the <train_base|test_new>/<dataset>/<shots>/<trainer>/"
              "<config>/<seed> layout", file=sys.stderr)
    labels = _unique_labels(sorted(entries), roots)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for key, datasets in sorted(entries.items()):
        out[labels[key]] = {ds: _merge_b2n_cell(cell) for ds, cell in datasets.items()}
    return out


def _read_b2n_run(rp: RunPath, keyword: str, cell: dict[str, dict[str, float]]) -> None:
    seed = str(seed_of(rp.seed) if seed_of(rp.seed) is not None else rp.seed)
    role = ROLE_DIRS[rp.role]
    value = read_run(rp.path, keyword, test_log=role == "novel")
    if value is None:
        value = read_run(rp.path, keyword, test_log=role != "novel")
    if value is not None:
        cell["test_base" if rp.role == "test_base" else role][seed] = value
    log_path = os.path.join(rp.path, LOG_FILE)
    if rp.role == "train_base" and not os.path.isfile(os.path.join(rp.path, RESULT_FILE)) and os.path.isfile(log_path):
        val = val_values_from_log(_read_text(log_path), keyword)
        if val and value is not None:  # PromptKD single-folder layout candidate
            cell["kd_base"][seed], cell["kd_novel"][seed] = max(val), value


def _merge_b2n_cell(cell: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    base = {**cell["test_base"], **cell["base"]}  # train_base wins over test_base for the same seed
    novel = cell["novel"]
    if not novel and cell["kd_novel"]:  # PromptKD: base from the best val block, novel from the final test
        base, novel = dict(cell["kd_base"]), dict(cell["kd_novel"])
    return {"base": base, "novel": novel}


def summarize_b2n(data: dict[str, dict[str, dict[str, dict[str, float]]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per method and dataset: seed-mean Base and Novel, HM of the means, seed counts; plus the Average row."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for method, datasets in data.items():
        rows: dict[str, dict[str, Any]] = {}
        for ds, cell in datasets.items():
            base = mean_std(list(cell["base"].values()))[0]
            novel = mean_std(list(cell["novel"].values()))[0]
            rows[ds] = {"base": base, "novel": novel, "hm": harmonic_mean(base, novel),
                        "n_base": len(cell["base"]), "n_novel": len(cell["novel"])}
        rows[AVERAGE] = average_row(rows)
        out[method] = rows
    return out


def average_row(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Mean Base and Novel over the datasets that have both; HM of those two averages."""
    complete = [r for ds, r in rows.items() if ds != AVERAGE and not math.isnan(r["base"])
                and not math.isnan(r["novel"])]
    base = float(np.mean([r["base"] for r in complete])) if complete else math.nan
    novel = float(np.mean([r["novel"] for r in complete])) if complete else math.nan
    return {"base": base, "novel": novel, "hm": harmonic_mean(base, novel), "n_datasets": len(complete)}


# ----------------------------------------------------------------------------------------------- paper numbers

def load_paper(path: str | os.PathLike = PAPER_FILE) -> dict[str, Any]:
    """The published numbers (results/paper_results.json)."""
    if not os.path.isfile(path):
        raise ResultsError(f"paper results file not found: {path}")
    with open(path) as f:
        return json.load(f)


def _canonical(name: str, paper: dict[str, Any]) -> str:
    aliases = {k.lower(): v for k, v in paper.get("aliases", {}).items()}
    return aliases.get(name.lower(), name)


def paper_rows(paper: dict[str, Any], method: str, table: str = "base2novel") -> dict[str, dict[str, float]] | None:
    """``{dataset: {metric: value}}`` published for ``method`` (matched case-insensitively, via aliases)."""
    methods = paper["tables"][table]["methods"]
    wanted = _canonical(method, paper).lower()
    for name, entry in methods.items():
        if name.lower() == wanted:
            return entry["rows"]
    return None


def _paper_as_summary(rows: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    return {ds: {m: float(r.get(m, math.nan)) for m in METRICS} for ds, r in rows.items()}


# ----------------------------------------------------------------------------------------------- b2n output

def _resolve(name: str, summary: dict[str, dict], paper: dict[str, Any] | None) -> tuple[str, dict]:
    """A measured method label, or ``paper:<method>`` for published rows."""
    if name.startswith("paper:"):
        paper = paper or load_paper()
        rows = paper_rows(paper, name[len("paper:"):])
        if rows is None:
            raise ResultsError(f"no published base-to-novel rows for {name[6:]!r} in {PAPER_FILE}")
        return f"{name[6:]} (paper)", _paper_as_summary(rows)
    if name not in summary:
        raise ResultsError(f"unknown method {name!r}; measured methods: {', '.join(summary) or 'none'} "
                           "(use paper:<name> for published rows)")
    return name, summary[name]


def b2n_table(summary: dict[str, dict[str, dict[str, Any]]], reference: str | None = None,
              paper: dict[str, Any] | None = None) -> tuple[list[str], list[list[Any]]]:
    """Long-format rows ``dataset, method, seeds, Base, Novel, HM[, ΔBase, ΔNovel, ΔHM]``."""
    blocks: list[tuple[str, dict[str, dict[str, Any]], str]] = []
    for method, rows in summary.items():
        seeds = {ds: f"{r.get('n_base', '-')}/{r.get('n_novel', '-')}" for ds, r in rows.items()}
        seeds[AVERAGE] = f"{rows[AVERAGE]['n_datasets']} ds"
        blocks.append((method, rows, seeds))
        trainer = method.split(":")[-1].split("/")[0]  # labels are trainer[/config[/shots]], maybe root-prefixed
        if paper is not None and (published := paper_rows(paper, trainer)) is not None:
            blocks.append((f"{method} (paper)", _paper_as_summary(published), {}))
    ref_label, ref_rows = None, None
    if reference is not None:
        ref_label, ref_rows = _resolve(reference, summary, paper)
    datasets = sorted({ds for method, rows, _ in blocks if not method.endswith("(paper)") for ds in rows},
                      key=dataset_sort_key)
    headers = ["dataset", "method", "seeds", "Base", "Novel", "HM"]
    if ref_rows is not None:
        headers += ["ΔBase", "ΔNovel", "ΔHM"]
    table = []
    for ds in datasets:
        for method, rows, seeds in blocks:
            if ds not in rows:
                continue
            r = rows[ds]
            line = [ds, method, seeds.get(ds, "-"), r["base"], r["novel"], r["hm"]]
            if ref_rows is not None:
                ref = ref_rows.get(ds) if method != ref_label else None
                line += [r[m] - ref[m] if ref is not None else math.nan for m in METRICS]
            table.append(line)
    return headers, table


def seed_table(data: dict[str, dict[str, dict[str, dict[str, float]]]]) -> tuple[list[str], list[list[Any]]]:
    """Per method and dataset: n, mean, sample std and 95 % CI of Base, Novel and the per-seed HM."""
    headers = ["dataset", "method", "n"]
    for m in ("Base", "Novel", "HM"):
        headers += [m, f"{m} std", f"{m} ci95"]
    rows = []
    for method, datasets in data.items():
        for ds in sorted(datasets, key=dataset_sort_key):
            cell = datasets[ds]
            common = sorted(set(cell["base"]) & set(cell["novel"]))
            hms = [harmonic_mean(cell["base"][s], cell["novel"][s]) for s in common]
            line: list[Any] = [ds, method, f"{len(cell['base'])}/{len(cell['novel'])}"]
            for values in (list(cell["base"].values()), list(cell["novel"].values()), hms):
                line += [mean_std(values)[0], mean_std(values)[1], ci95_halfwidth(values)]
            rows.append(line)
    return headers, rows


def wilcoxon_test(summary: dict[str, dict[str, dict[str, Any]]], a: str, b: str, metric: str = "hm",
                  paper: dict[str, Any] | None = None) -> dict[str, Any]:
    """Paired Wilcoxon signed-rank test (two-sided, scipy defaults) of ``a`` vs ``b`` across datasets."""
    label_a, rows_a = _resolve(a, summary, paper)
    label_b, rows_b = _resolve(b, summary, paper)
    common = sorted((ds for ds in rows_a if ds != AVERAGE and ds in rows_b
                     and not math.isnan(rows_a[ds][metric]) and not math.isnan(rows_b[ds][metric])),
                    key=dataset_sort_key)
    if len(common) < 2:
        raise ResultsError(f"Wilcoxon test needs at least 2 datasets with {metric} for both {a} and {b}, "
                           f"found {len(common)}")
    x = np.array([rows_a[ds][metric] for ds in common])
    y = np.array([rows_b[ds][metric] for ds in common])
    try:
        res = stats.wilcoxon(x, y)
    except ValueError as e:
        raise ResultsError(f"Wilcoxon test failed: {e}") from None
    return {"a": label_a, "b": label_b, "metric": metric, "datasets": common, "statistic": float(res.statistic),
            "pvalue": float(res.pvalue), "median_diff": float(np.median(x - y))}


def run_b2n(args: argparse.Namespace) -> None:
    data = collect_b2n(args.roots, args.keyword, args.methods, args.shots)
    if not data:
        raise ResultsError(f"no base-to-novel runs found under {', '.join(args.roots)} "
                           "(expected <root>/train_base|test_new/<dataset>/<shots>/<trainer>/<config>/<seed>)")
    if args.methods:
        data = _order_methods(data, args.methods)
    summary = summarize_b2n(data)
    paper = load_paper(args.paper_file) if args.paper or _uses_paper(args) else None
    reference = args.reference if args.reference is not None else (next(iter(summary)) if len(summary) > 1 else None)
    headers, rows = b2n_table(summary, reference, paper if args.paper else None)
    print(render_table(headers, rows, args.format))
    notes = ["HM per dataset = HM of the seed means; Average = mean over datasets with both Base and Novel, "
             "HM of those averages. seeds = base/novel runs found."]
    if reference is not None:
        notes.append(f"Δ = row − {reference}.")
    if len({rows[AVERAGE]["n_datasets"] for rows in summary.values()}) > 1:
        notes.append("Warning: methods cover different numbers of datasets; their Average rows are not comparable.")
    print("\n".join(notes))
    if args.seed_table:
        print()
        print(render_table(*seed_table(data), args.format))
        print("Seed table: mean, sample std and 95% t-interval half-width over seeds; HM is computed per seed.")
    if args.wilcoxon:
        res = wilcoxon_test(summary, args.wilcoxon[0], args.wilcoxon[1], args.metric, paper)
        print(f"Wilcoxon signed-rank (two-sided), {res['metric']}: {res['a']} vs {res['b']} over "
              f"{len(res['datasets'])} datasets: W = {res['statistic']:.4g}, p = {res['pvalue']:.4g}, "
              f"median Δ = {res['median_diff']:+.2f}")


def _order_methods(data: dict[str, Any], patterns: Sequence[str]) -> dict[str, Any]:
    """Sort method labels by the first ``--methods`` pattern they match (the user's table order)."""
    def rank(label: str) -> int:
        names = (label, label.split(":")[-1].split("/")[0])
        return next((i for i, p in enumerate(patterns) if any(fnmatch.fnmatch(n, p) for n in names)), len(patterns))

    return dict(sorted(data.items(), key=lambda kv: rank(kv[0])))


def _uses_paper(args: argparse.Namespace) -> bool:
    names = [args.reference or ""] + list(args.wilcoxon or [])
    return any(n.startswith("paper:") for n in names)


def run_paper(args: argparse.Namespace) -> None:
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
        print(f"== {name} ({status}): {table['description']}")
        if rows:
            print(render_table(["dataset", "method", *columns, "source"], rows, args.format))
        for key in dict.fromkeys(k for entry in table["methods"].values() for k in entry["source"]):
            print(f"  [{key}] {paper['sources'].get(key, key)}")
        if table.get("note"):
            print(f"  note: {table['note']}")
        print()


# ----------------------------------------------------------------------------------------------- command line

def _default_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Mean ± std of results across seed folders (CoOp usage). "
                    "Other modes: 'parse_test_res.py b2n -h', 'parse_test_res.py paper -h'.")
    p.add_argument("directory", help="folder of run folders (seed1, seed_2, ...), or of experiments with --multi-exp")
    p.add_argument("--ci95", action="store_true", help="report the 95%% t-interval half-width instead of the std")
    p.add_argument("--test-log", action="store_true", help="parse after '=> result' instead of 'Finish training'")
    p.add_argument("--multi-exp", action="store_true", help="every sub-folder of DIR is an experiment")
    p.add_argument("--keyword", default="accuracy", help="metric name (results.json key / '* <keyword>: X%%')")
    p.add_argument("--format", choices=list(FORMATS), default="plain")
    return p


def _b2n_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="parse_test_res.py b2n",
                                description="Base / Novel / HM per dataset and method from train_base + test_new.")
    p.add_argument("roots", nargs="+", help="output roots holding train_base/ and test_new/ (e.g. output/base2new)")
    p.add_argument("--methods", nargs="+", help="trainer names or TRAINER/config globs to include, in table order")
    p.add_argument("--shots", nargs="+", help="shots folders to include (e.g. shots_16)")
    p.add_argument("--keyword", default="accuracy")
    p.add_argument("--reference", help="method for the Δ columns (a measured label or paper:<name>); "
                                       "default: the first method when there are several")
    p.add_argument("--paper", action="store_true", help="add the published rows of each measured method")
    p.add_argument("--paper-file", default=str(PAPER_FILE))
    p.add_argument("--wilcoxon", nargs=2, metavar=("A", "B"), help="paired signed-rank test across datasets")
    p.add_argument("--metric", choices=METRICS, default="hm", help="metric for --wilcoxon")
    p.add_argument("--seed-table", action="store_true", help="also print mean, std and 95%% CI per metric")
    p.add_argument("--format", choices=list(FORMATS), default="plain")
    return p


def _paper_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="parse_test_res.py paper", description="Print the stored published numbers.")
    p.add_argument("table", nargs="?", help="table name (default: all)")
    p.add_argument("--paper-file", default=str(PAPER_FILE))
    p.add_argument("--format", choices=list(FORMATS), default="plain")
    return p


MODES = {"b2n": (_b2n_parser, run_b2n), "paper": (_paper_parser, run_paper)}


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
