"""Where runs live, for the results library: the run layout of ``engine.runs`` (the base-to-novel tree
``<root>/<train_base|test_base|test_new>/<dataset>/shots_<K>/<TRAINER>/<config>/seed<S>``, or ``seed_<S>``; its
one owner) and the papers' dataset order.
"""
from __future__ import annotations

import os

from analysis.errors import ResultsError
from engine.runs import BASE2NEW_CLASSES as ROLE_DIRS
from engine.runs import LOG_FILE, RunPath, is_run_dir, parse_run_path, seed_key, seed_of
from engine.runs import RESULTS_FILE as RESULT_FILE

__all__ = ["AVERAGE", "DATASET_ORDER", "LOG_FILE", "RESULT_FILE", "ROLE_DIRS", "RunPath", "dataset_sort_key",
           "find_runs", "is_run_dir", "parse_run_path", "require_dir", "seed_key", "seed_of"]

DATASET_ORDER = ("imagenet", "caltech101", "oxford_pets", "stanford_cars", "oxford_flowers", "food101",
                 "fgvc_aircraft", "sun397", "dtd", "eurosat", "ucf101")
AVERAGE = "average"
"""Row name of the mean over datasets."""


def require_dir(path: str) -> None:
    """Raise a one-line :class:`ResultsError` when ``path`` is not a folder."""
    if not os.path.isdir(path):
        raise ResultsError(f"directory not found: {path} (run from the repository root or give the output path)")


def find_runs(directory: str) -> tuple[list[str], list[str]]:
    """Run folders of ``directory``: its non-hidden sub-folders holding results or a log, or ``directory`` itself;
    and the sub-folders beside such runs that hold neither (a run not started, or its files moved)."""
    require_dir(directory)
    subdirs = [os.path.join(directory, d) for d in sorted(os.listdir(directory)) if not d.startswith(".")]
    subdirs = [d for d in subdirs if os.path.isdir(d)]
    runs = [d for d in subdirs if is_run_dir(d)]
    if not runs:
        return ([directory] if is_run_dir(directory) else []), []
    return runs, [d for d in subdirs if d not in runs]


def dataset_sort_key(name: str) -> tuple[int, str]:
    """Order datasets as in the papers' tables; unknown names after, alphabetically; the average last."""
    if name == AVERAGE:
        return (len(DATASET_ORDER) + 1, name)
    return (DATASET_ORDER.index(name), name) if name in DATASET_ORDER else (len(DATASET_ORDER), name)
