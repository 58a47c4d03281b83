"""Cross-dataset and domain-generalisation results in the papers' layout: one row per method, the source, each
target and the average over the targets.

Under an output root, a cell's runs are read from the first of these that holds any:

* the source: ``xd/train/<source>/<shots>/<trainer>/<config>/<seed>`` (the cross-dataset run on the source itself);
* a cross-dataset target: ``xd/train/<target>/...`` (a student trained for the target: PromptKD's and PETR's
  ``xd_train.sh``), else ``xd/test/<target>/...`` (a source-trained model evaluated on it);
* a DG target: ``dg/train/<target>/...`` (PETR's ``dg_train.sh``), else ``dg/test/<target>/...``, else
  ``xd/test/<target>/...`` (the source-distilled PromptKD student evaluated on it, ``xd_test.sh``);
* zero-shot CLIP: ``ZeroshotCLIP/<config>/<dataset>`` (one run: zero-shot evaluation is deterministic).

A cell is the mean over the seeds found; the average is the mean of the target cells, and ``-`` unless every
target has a value. A seed folder without results or log, and a run that records another dataset, seed or trainer
than its folder's or other classes than all, is left out with one warning line (``analysis.readers``).
"""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence

from analysis import stats
from analysis.errors import ResultsError
from analysis.layout import is_run_dir, require_dir, seed_key, seed_of
from analysis.methods import MethodPatterns
from analysis.readers import RunRecord, left_out_empty, routed_method
from trainers.catalog import method_name, method_trainer

ZERO_SHOT_TRAINER = "ZeroshotCLIP"
SEARCH = {"xd": {"source": ("xd/train",), "target": ("xd/train", "xd/test")},
          "dg": {"source": ("xd/train",), "target": ("dg/train", "dg/test", "xd/test")}}
"""Per protocol: the trees a source or target cell is read from, first match wins."""

Values = dict[tuple[str, str, str], dict[str, dict[str, float]]]
"""``{(method, config, shots): {dataset: {seed: value}}}`` (the method: ``trainers.catalog.method_name``)."""


def _student_runs(root: str, tree: str, dataset: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """``{(trainer, config, shots): {seed: run folder}}`` under ``<root>/<tree>/<dataset>``: the run folders, and the
    seed folders beside them that hold none of a run's files."""
    found: dict[tuple[str, str, str], dict[str, str]] = defaultdict(dict)
    base = os.path.join(root, tree, dataset)
    if not os.path.isdir(base):
        return found
    for shots in sorted(os.listdir(base)):
        for trainer in sorted(_subdirs(os.path.join(base, shots))):
            for config in sorted(_subdirs(os.path.join(base, shots, trainer))):
                for seed in sorted(_subdirs(os.path.join(base, shots, trainer, config))):
                    path = os.path.join(base, shots, trainer, config, seed)
                    if is_run_dir(path) or seed_of(seed) is not None:
                        found[(trainer, config, shots)][seed_key(seed)] = path
    return {key: runs for key, runs in found.items() if any(is_run_dir(p) for p in runs.values())}


def _subdirs(path: str) -> list[str]:
    if not os.path.isdir(path):
        return []
    return [d for d in os.listdir(path) if not d.startswith(".") and os.path.isdir(os.path.join(path, d))]


def default_targets(root: str, protocol: str, source: str) -> list[str]:
    """The targets found under ``root`` (every dataset of the protocol's own trees but the source)."""
    trees = ("xd/train",) if protocol == "xd" else ("dg/train", "dg/test")
    found = sorted({d for t in trees for d in _subdirs(os.path.join(root, t))} - {source})
    if not found:
        raise ResultsError(f"no {protocol} targets under {root}; name them with --targets")
    return found


def collect_transfer(root: str, protocol: str, source: str, targets: Sequence[str], keyword: str = "accuracy",
                     methods: Sequence[str] | None = None) -> Values:
    """Every method's values per dataset and seed (``methods``: ``analysis.methods``' entries), keyed by method name
    (PETR+X's runs by the learner they routed on: ``PETR+KgCoOp``); an entry that names no run is one warning line."""
    require_dir(root)
    patterns = MethodPatterns.of(methods)
    there: set[str] = set()
    values: Values = defaultdict(dict)
    routed: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # the trainers PETR+X runs routed on
    for dataset in (source, *targets):
        role = "source" if dataset == source else "target"
        cells: dict[tuple[str, str, str], dict[str, str]] = {}
        for tree in SEARCH[protocol][role]:
            for key, runs in _student_runs(root, tree, dataset).items():
                cells.setdefault(key, runs)
        for config in _subdirs(os.path.join(root, ZERO_SHOT_TRAINER)):
            path = os.path.join(root, ZERO_SHOT_TRAINER, config, dataset)
            if is_run_dir(path):
                cells[(ZERO_SHOT_TRAINER, config, "-")] = {"-": path}
        for key, runs in cells.items():
            if not patterns.folder(*key[:2]):
                there.add(method_name(key[0]))
                continue
            read = {seed: _read_cell_run(path, dataset, key[0]) for seed, path in runs.items()}
            values[key][dataset] = {seed: v for seed, r in read.items() if r and (v := r.value(keyword)) is not None}
            routed[key] |= {r.routed_on for r in read.values() if r and r.routed_on}
    if not values:
        raise ResultsError(f"no {protocol} runs of source '{source}' under {root} (expected {root}/xd/train/{source}/"
                           "<shots>/<trainer>/<config>/<seed> and the target trees; see analysis/transfer.py)")
    named = {(routed_method(trainer, routed[trainer, config, shots]), config, shots): (trainer, cells)
             for (trainer, config, shots), cells in values.items()}
    there |= {method for method, _, _ in named}
    named = {key: value for key, value in named.items() if patterns.rank(key[0], value[0], key[1]) is not None}
    patterns.warn_unmatched([(method, trainer, config) for (method, config, _), (trainer, _) in named.items()], there,
                            root)
    return {key: cells for key, (_, cells) in named.items()}


def _read_cell_run(path: str, dataset: str, trainer: str) -> RunRecord | None:
    """The run in ``path`` (a run of ``trainer`` on every class of ``dataset``); None, with one warning line, for a
    folder without a run's files or holding another run."""
    if not is_run_dir(path):
        left_out_empty(path)
        return None
    record = RunRecord.read(path)
    return None if record.misfit(dataset, seed_of(os.path.basename(path)), trainer, "all") else record


def labels(keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    """The trainer alone when it names one key, else trainer/config, else trainer/config/shots."""
    out = {}
    for key in keys:
        same = [k for k in keys if k[0] == key[0]]
        if len(same) == 1:
            out[key] = key[0]
        elif len({k[1] for k in same}) == len(same):
            out[key] = f"{key[0]}/{key[1]}"
        else:
            out[key] = "/".join(key)
    return out


def order(keys: Sequence[tuple[str, str, str]], methods: Sequence[str] | None) -> list[tuple[str, str, str]]:
    """Keys in ``--methods`` order (the first entry naming each), zero-shot first otherwise."""
    patterns = MethodPatterns.of(methods)

    def rank(key: tuple[str, str, str]) -> tuple[int, tuple[str, str, str]]:
        if methods:
            found = patterns.rank(key[0], method_trainer(key[0]), key[1])
            return len(methods) if found is None else found, key
        return (0 if key[0] == ZERO_SHOT_TRAINER else 1), key

    return sorted(keys, key=rank)


def transfer_table(values: Values, source: str, targets: Sequence[str],
                   methods: Sequence[str] | None = None) -> tuple[list[str], list[list]]:
    """Headers and rows: method, seeds, the source, each target (seed means) and the targets' average."""
    keys = order(list(values), methods)
    names = labels(keys)
    rows = []
    for key in keys:
        cells = [stats.mean(list(values[key].get(ds, {}).values())) for ds in (source, *targets)]
        target_cells = cells[1:]
        average = stats.mean(target_cells) if not any(c != c for c in target_cells) else float("nan")
        seeds = max((len(v) for v in values[key].values()), default=0)
        rows.append([names[key], seeds if key[0] != ZERO_SHOT_TRAINER else "-", *cells, average])
    return ["method", "seeds", f"{source} (source)", *targets, "Average"], rows
