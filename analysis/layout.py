"""Where runs live: run-folder names, the base-to-novel tree and the papers' dataset order.

Base-to-novel layout (CoOp's, also PromptKD's and this project's):
``<root>/<train_base|test_base|test_new>/<dataset>/shots_<K>/<TRAINER>/<config>/seed<S>`` (or ``seed_<S>``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from analysis.errors import ResultsError

RESULT_FILE = "results.json"
LOG_FILE = "log.txt"
ROLE_DIRS = {"train_base": "base", "test_base": "base", "test_new": "novel"}
"""Role folder → the classes its test covers."""
DATASET_ORDER = ("imagenet", "caltech101", "oxford_pets", "stanford_cars", "oxford_flowers", "food101",
                 "fgvc_aircraft", "sun397", "dtd", "eurosat", "ucf101")
AVERAGE = "average"
"""Row name of the mean over datasets."""


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


def seed_of(name: str) -> int | None:
    """Seed number of a ``seed1`` / ``seed_1`` folder name (None for other names)."""
    m = re.fullmatch(r"seed_?(\d+)", name)
    return int(m.group(1)) if m else None


def seed_key(name: str) -> str:
    """The seed as a key that pairs ``seed1`` with ``seed_1``; other names stay as they are."""
    seed = seed_of(name)
    return str(seed) if seed is not None else name


def is_run_dir(path: str) -> bool:
    """A run folder holds results.json or log.txt."""
    return os.path.isfile(os.path.join(path, RESULT_FILE)) or os.path.isfile(os.path.join(path, LOG_FILE))


def require_dir(path: str) -> None:
    """Raise a one-line :class:`ResultsError` when ``path`` is not a folder."""
    if not os.path.isdir(path):
        raise ResultsError(f"directory not found: {path} (run from the repository root or give the output path)")


def find_runs(directory: str) -> list[str]:
    """Run folders of ``directory``: its non-hidden sub-folders holding results, or ``directory`` itself."""
    require_dir(directory)
    subdirs = [os.path.join(directory, d) for d in sorted(os.listdir(directory)) if not d.startswith(".")]
    runs = [d for d in subdirs if os.path.isdir(d) and is_run_dir(d)]
    if not runs and is_run_dir(directory):
        runs = [directory]
    return runs


def dataset_sort_key(name: str) -> tuple[int, str]:
    """Order datasets as in the papers' tables; unknown names after, alphabetically; the average last."""
    if name == AVERAGE:
        return (len(DATASET_ORDER) + 1, name)
    return (DATASET_ORDER.index(name), name) if name in DATASET_ORDER else (len(DATASET_ORDER), name)
