"""Which files on disk a dataset's splits are read from, in the standard library only: the split and class-list
files in its folder (``datasets/layouts.py``) and its few-shot files' names. The protocol runner digests these files
in its job records without importing the readers (they import torch)."""
from __future__ import annotations

import os

from .layouts import LAYOUTS

FEWSHOT_FOLDER = "split_fewshot"
"""The few-shot files' folder inside a dataset folder (and inside OUTPUT_DIR when the dataset folder is read-only)."""
SPLIT_SUFFIXES = (".json", ".txt")
"""Split and class-list files in a dataset folder (CoOp's ``split_zhou_*.json``, ``classnames.txt``, list files)."""


def fewshot_path(dataset_dir: str, num_shots: int, seed: int, folder: str = "") -> str:
    """Where the few-shot file of (K, seed) lives: in ``folder``, by default ``<dataset_dir>/split_fewshot``."""
    return os.path.join(folder or os.path.join(dataset_dir, FEWSHOT_FOLDER), f"shot_{num_shots}-seed_{seed}.json")


def split_files(root: str, short: str, shots: int = 0, seed: int | None = None) -> list[str]:
    """The split files of dataset ``short`` (a key of ``LAYOUTS``) under ``root`` that exist: the JSON and text files
    directly in its folder and, for ``shots`` > 0 and a seed, the few-shot file of that K and seed."""
    folder = os.path.join(root, LAYOUTS[short].folder)
    if not os.path.isdir(folder):
        return []
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(SPLIT_SUFFIXES))
    fewshot = fewshot_path(folder, shots, seed) if shots > 0 and seed is not None else ""
    return [f for f in [*files, fewshot] if f and os.path.isfile(f)]
