"""Base-to-novel results: pair ``train_base`` with ``test_new`` runs into Base / Novel / HM per dataset and method.

Run folders follow :mod:`analysis.layout`. Base comes from ``train_base`` (or ``test_base``), Novel from
``test_new``, per seed; a run that records other classes, another seed, trainer or dataset than its folder's is left
out (``analysis.readers.RunRecord.misfit``). PromptKD's upstream tree has no ``test_new`` partner: one ``seed_<S>``
folder under ``train_base`` holds both (its log's config: TRAINER.NAME PromptKD, TRAINER.MODAL base2novel), its base
accuracy being the best (max) ``Evaluate on the *val* set`` block (PromptKD's val split is the base test set, and
``best_val`` deploys that checkpoint) and its novel accuracy the test after ``Finish training``; a log without a
config dump is taken for one when it has val blocks and its method has no ``test_new`` run of the dataset. Such rows
are flagged ``test_selected``: their checkpoint was chosen on test data; so are rows with a run whose results.json
says ``selected_on: test`` (best_val on a dataset without a val split).
"""
from __future__ import annotations

import fnmatch
import math
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from analysis import stats
from analysis.errors import ResultsError
from analysis.layout import (
    AVERAGE,
    ROLE_DIRS,
    RunPath,
    dataset_sort_key,
    is_run_dir,
    parse_run_path,
    require_dir,
    seed_key,
    seed_of,
)
from analysis.methods import MethodPatterns, catalog_method
from analysis.paper import METRICS, PAPER_FILE, load_paper, paper_as_summary, paper_rows
from analysis.readers import RunRecord, left_out_empty, routed_method
from trainers.catalog import method_name, method_trainer

ZERO_SHOT_TRAINER = "ZeroshotCLIP"
"""Default Δ baseline when ``--methods`` does not name one: zero-shot CLIP, the training-free reference."""
TEST_SELECTED = "base test"
"""Selection-column value of rows whose checkpoint was chosen on the base test set."""


@dataclass
class SeedRuns:
    """Base and novel accuracy per seed of one method on one dataset."""

    base: dict[str, float] = field(default_factory=dict)
    novel: dict[str, float] = field(default_factory=dict)
    test_selected: bool = False
    """The checkpoint was chosen on the base test set (upstream PromptKD's best_val on its ``seed_<S>`` tree)."""


@dataclass
class _Found:
    """Everything read for one method and dataset before the PromptKD fallback is decided."""

    base: dict[str, float] = field(default_factory=dict)
    novel: dict[str, float] = field(default_factory=dict)
    test_base: dict[str, float] = field(default_factory=dict)
    kd_base: dict[str, float] = field(default_factory=dict)
    kd_novel: dict[str, float] = field(default_factory=dict)
    test_selected: bool = False
    """A run's results.json says its model was selected on the test split."""
    routed_on: set[str] = field(default_factory=set)
    """The trainers whose runs PETR+X runs record routing on (its method: ``PETR+<that method>``)."""

    def merged(self) -> SeedRuns:
        """train_base wins over test_base for the same seed; the PromptKD fallback only without test_new runs."""
        if not self.novel and self.kd_novel:
            return SeedRuns(dict(self.kd_base), dict(self.kd_novel), test_selected=True)
        return SeedRuns({**self.test_base, **self.base}, dict(self.novel), test_selected=self.test_selected)


def label_trainer(label: str) -> str:
    """The trainer of a method label (``[root:]method[/config[/shots]][#i]``; ``PETR+KgCoOp`` -> ``PETRX``)."""
    return method_trainer(label.split(":")[-1].split("/")[0].split("#")[0])


def _unique_labels(keys: list[tuple[int, str, str, str]], roots: Sequence[str]) -> dict[tuple, str]:
    """Shortest unique label per (root, method, config, shots): method, then +config, +shots, then root:."""
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


def _read_run_into(rp: RunPath, keyword: str, found: _Found) -> None:
    record = RunRecord.read(rp.path)
    if record.misfits_its_folder():
        return
    seed = seed_key(rp.seed)
    role = ROLE_DIRS[rp.role]
    value = record.value(keyword, test_log=role == "novel")
    if value is None:
        value = record.value(keyword, test_log=role != "novel")
    kd_layout = rp.role == "train_base" and record.results is None
    if record.upstream_promptkd and kd_layout:  # its final test covers the novel classes, its val blocks the base
        if value is not None:
            found.kd_novel[seed] = value
            if val := record.val_values(keyword):
                found.kd_base[seed] = max(val)
        return
    if record.routed_on:
        found.routed_on.add(record.routed_on)
    if value is not None:
        (found.test_base if rp.role == "test_base" else found.base if role == "base" else found.novel)[seed] = value
        found.test_selected |= record.selected_on == "test"
    if kd_layout and record.classes is None and value is not None:  # no config dump: PromptKD's layout if val blocks
        if val := record.val_values(keyword):
            found.kd_base[seed], found.kd_novel[seed] = max(val), value


def _wanted(rp: RunPath, methods: MethodPatterns, shots: Sequence[str] | None) -> bool:
    return _matches(shots, rp.shots) and methods.folder(rp.trainer, rp.config)


def collect_b2n(roots: Sequence[str], keyword: str = "accuracy", methods: Sequence[str] | None = None,
                shots: Sequence[str] | None = None) -> dict[str, dict[str, SeedRuns]]:
    """``{method label: {dataset: SeedRuns}}`` from base-to-novel output trees (``methods``: ``analysis.methods``'
    entries, ``shots``: globs); a seed folder without results or log, a run recording another folder's run and a
    ``methods`` entry that names no run are left out, one warning line each."""
    patterns = MethodPatterns.of(methods)
    entries: dict[tuple, dict[str, _Found]] = defaultdict(lambda: defaultdict(_Found))
    there: set[str] = set()
    skipped = 0
    for root_idx, root in enumerate(roots):
        require_dir(root)
        for dirpath, dirnames, _ in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            rp = parse_run_path(dirpath)
            if not is_run_dir(dirpath):
                if rp is not None and seed_of(rp.seed) is not None and _wanted(rp, patterns, shots):
                    left_out_empty(dirpath)
                continue
            if rp is None:
                skipped += 1
                continue
            if _wanted(rp, patterns, shots):
                _read_run_into(rp, keyword, entries[(root_idx, rp.trainer, rp.config, rp.shots)][rp.dataset])
            else:
                there.add(method_name(rp.trainer))
    if skipped:
        print(f"Note: skipped {skipped} run folder(s) outside the <train_base|test_new>/<dataset>/<shots>/<trainer>/"
              "<config>/<seed> layout", file=sys.stderr)
    named = {}  # (root, method name, config, shots) -> (root, trainer, config, shots)
    for (root, trainer, config, shots), datasets in entries.items():
        method = routed_method(trainer, set().union(*(found.routed_on for found in datasets.values())))
        there.add(method)
        if patterns.rank(method, trainer, config) is not None:
            named[(root, method, config, shots)] = (root, trainer, config, shots)
    patterns.warn_unmatched([(name[1], trainer, config) for name, (_, trainer, config, _) in named.items()], there,
                            ", ".join(roots))
    labels = _unique_labels(sorted(named), roots)
    return {labels[name]: {ds: found.merged() for ds, found in entries[key].items()}
            for name, key in sorted(named.items())}


def order_methods(data: dict[str, Any], entries: Sequence[str]) -> dict[str, Any]:
    """Sort method labels by the first ``--methods`` entry naming them (the user's table order)."""
    patterns = MethodPatterns.of(entries)

    def rank(label: str) -> int:
        method, _, config = label.split(":")[-1].split("#")[0].partition("/")
        found = patterns.rank(method, label_trainer(label), config.split("/")[0])
        return len(entries) if found is None else found

    return dict(sorted(data.items(), key=lambda kv: rank(kv[0])))


def summarize_b2n(data: dict[str, dict[str, SeedRuns]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per method and dataset: seed-mean Base and Novel, HM of the means, seed counts; plus the Average row."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for method, datasets in data.items():
        rows: dict[str, dict[str, Any]] = {}
        for ds, runs in datasets.items():
            base, novel = stats.mean(list(runs.base.values())), stats.mean(list(runs.novel.values()))
            rows[ds] = {"base": base, "novel": novel, "hm": stats.harmonic_mean(base, novel),
                        "n_base": len(runs.base), "n_novel": len(runs.novel), "test_selected": runs.test_selected}
        rows[AVERAGE] = average_row(rows)
        out[method] = rows
    return out


def average_row(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Mean Base and Novel over the datasets that have both; HM of those two averages."""
    complete = [r for ds, r in rows.items() if ds != AVERAGE and not math.isnan(r["base"])
                and not math.isnan(r["novel"])]
    base = stats.mean([r["base"] for r in complete])
    novel = stats.mean([r["novel"] for r in complete])
    return {"base": base, "novel": novel, "hm": stats.harmonic_mean(base, novel), "n_datasets": len(complete),
            "test_selected": any(r.get("test_selected", False) for r in complete)}


def default_baseline(summary: dict[str, Any], methods: Sequence[str] | None = None) -> str | None:
    """The Δ baseline when none is given: the first ``--methods`` entry, else the one zero-shot CLIP method.

    None with a single method, or when neither rule names one (the output then says to pass ``--baseline``).
    """
    if len(summary) < 2:
        return None
    if methods:
        return next(iter(summary))
    zero_shot = [label for label in summary if label_trainer(label) == ZERO_SHOT_TRAINER]
    return zero_shot[0] if len(zero_shot) == 1 else None


def resolve_method(name: str, summary: dict[str, dict], paper: dict[str, Any] | None) -> tuple[str, dict]:
    """A measured method label, or ``paper:<method>`` for published rows: its display label and rows."""
    if name.startswith("paper:"):
        paper = paper or load_paper()
        rows = paper_rows(paper, name[len("paper:"):])
        if rows is None:
            raise ResultsError(f"no published base-to-novel rows for {name[6:]!r} in {PAPER_FILE}")
        return f"{name[6:]} (paper)", paper_as_summary(rows)
    method = catalog_method(name)
    label = name if name in summary else method.name if method is not None and method.name in summary else None
    if label is None:
        raise ResultsError(f"unknown method {name!r}; measured methods: {', '.join(summary) or 'none'} "
                           "(use paper:<name> for published rows)")
    return label, summary[label]


def b2n_table(summary: dict[str, dict[str, dict[str, Any]]], baseline: str | None = None,
              paper: dict[str, Any] | None = None) -> tuple[list[str], list[list[Any]]]:
    """Long-format rows ``dataset, method, seeds, Base, Novel, HM[, ΔBase, ΔNovel, ΔHM][, selection]``.

    Δ = row − ``baseline`` (a measured label or ``paper:<name>``); ``paper`` adds each method's published rows;
    the selection column appears when a row's checkpoint was chosen on the base test set.
    """
    blocks: list[tuple[str, dict[str, dict[str, Any]], dict[str, str]]] = []
    for method, rows in summary.items():
        seeds = {ds: f"{r.get('n_base', '-')}/{r.get('n_novel', '-')}" for ds, r in rows.items()}
        seeds[AVERAGE] = f"{rows[AVERAGE]['n_datasets']} ds"
        blocks.append((method, rows, seeds))
        if paper is not None and (published := paper_rows(paper, label_trainer(method))) is not None:
            blocks.append((f"{method} (paper)", paper_as_summary(published), {}))
    ref_label, ref_rows = resolve_method(baseline, summary, paper) if baseline is not None else (None, None)
    datasets = sorted({ds for method, rows, _ in blocks if not method.endswith("(paper)") for ds in rows},
                      key=dataset_sort_key)
    show_selection = any(r.get("test_selected") for rows in summary.values() for r in rows.values())
    headers = ["dataset", "method", "seeds", "Base", "Novel", "HM"]
    if ref_rows is not None:
        headers += ["ΔBase", "ΔNovel", "ΔHM"]
    if show_selection:
        headers.append("selection")
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
            if show_selection:
                line.append(TEST_SELECTED if r.get("test_selected") else None)
            table.append(line)
    return headers, table


def seed_table(data: dict[str, dict[str, SeedRuns]],
               convention: str = stats.DEFAULT_CONVENTION) -> tuple[list[str], list[list[Any]]]:
    """Per method and dataset: n, mean, std and 95 % CI half-width (``convention``) of Base, Novel, per-seed HM."""
    headers = ["dataset", "method", "n"]
    for m in ("Base", "Novel", "HM"):
        headers += [m, f"{m} std", f"{m} ci95"]
    rows = []
    for method, datasets in data.items():
        for ds in sorted(datasets, key=dataset_sort_key):
            runs = datasets[ds]
            common = sorted(set(runs.base) & set(runs.novel))
            hms = [stats.harmonic_mean(runs.base[s], runs.novel[s]) for s in common]
            line: list[Any] = [ds, method, f"{len(runs.base)}/{len(runs.novel)}"]
            for values in (list(runs.base.values()), list(runs.novel.values()), hms):
                line += [stats.mean(values), stats.std(values, convention), stats.ci95_halfwidth(values, convention)]
            rows.append(line)
    return headers, rows


def wilcoxon_test(summary: dict[str, dict[str, dict[str, Any]]], a: str, b: str, metric: str = "hm",
                  paper: dict[str, Any] | None = None) -> dict[str, Any]:
    """Paired Wilcoxon signed-rank test (two-sided, scipy defaults) of ``a`` vs ``b`` across datasets."""
    label_a, rows_a = resolve_method(a, summary, paper)
    label_b, rows_b = resolve_method(b, summary, paper)
    common = sorted((ds for ds in rows_a if ds != AVERAGE and ds in rows_b
                     and not math.isnan(rows_a[ds][metric]) and not math.isnan(rows_b[ds][metric])),
                    key=dataset_sort_key)
    if len(common) < 2:
        raise ResultsError(f"Wilcoxon test needs at least 2 datasets with {metric} for both {a} and {b}, "
                           f"found {len(common)}")
    x = np.array([rows_a[ds][metric] for ds in common])
    y = np.array([rows_b[ds][metric] for ds in common])
    try:
        res = scipy_stats.wilcoxon(x, y)
    except ValueError as e:
        raise ResultsError(f"Wilcoxon test failed: {e}") from None
    return {"a": label_a, "b": label_b, "metric": metric, "datasets": common, "statistic": float(res.statistic),
            "pvalue": float(res.pvalue), "median_diff": float(np.median(x - y))}
