"""Which files on disk a dataset's splits are read from, in the standard library only: the dataset's folder under
the data root and its few-shot files' names. The protocol runner digests these files in its job records without
importing the readers (they import torch)."""
from __future__ import annotations

import ast
import os

from .catalog import DATASETS
from .demo_specs import DATASET_DIRS

FEWSHOT_FOLDER = "split_fewshot"
"""The few-shot files' folder inside a dataset folder (and inside OUTPUT_DIR when the dataset folder is read-only)."""
SPLIT_SUFFIXES = (".json", ".txt")
"""Split and class-list files in a dataset folder (CoOp's ``split_zhou_*.json``, ``classnames.txt``, list files)."""


def fewshot_path(dataset_dir: str, num_shots: int, seed: int, folder: str = "") -> str:
    """Where the few-shot file of (K, seed) lives: in ``folder``, by default ``<dataset_dir>/split_fewshot``."""
    return os.path.join(folder or os.path.join(dataset_dir, FEWSHOT_FOLDER), f"shot_{num_shots}-seed_{seed}.json")


def dataset_folder(name: str) -> str:
    """The folder under the data root of the registered dataset ``name``: its reader class's ``dataset_dir``, read
    from the reader's source, so that the class stays the one place that names it."""
    if name in DATASET_DIRS:
        return DATASET_DIRS[name]
    if name not in DATASETS:
        raise ValueError(f"unknown dataset '{name}'; registered: {', '.join(sorted(DATASETS))}")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), DATASETS[name].split(".")[-1] + ".py")
    with open(source, encoding="utf-8") as f:
        tree = ast.parse(f.read(), source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
                        and any(isinstance(t, ast.Name) and t.id == "dataset_dir" for t in stmt.targets)):
                    return stmt.value.value
    raise ValueError(f"{source}: class {name} declares no dataset_dir = '<folder>'")


def split_files(root: str, name: str, shots: int = 0, seed: int | None = None) -> list[str]:
    """The split files of dataset ``name`` under ``root`` that exist: the JSON and text files directly in its folder
    and, for ``shots`` > 0 and a seed, the few-shot file of that K and seed."""
    folder = os.path.join(root, dataset_folder(name))
    if not os.path.isdir(folder):
        return []
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(SPLIT_SUFFIXES))
    fewshot = fewshot_path(folder, shots, seed) if shots > 0 and seed is not None else ""
    return [f for f in [*files, fewshot] if f and os.path.isfile(f)]
