"""Reading the datasets' split and class lists without building any image record (standard library only), so the
data-root check and the runner's preflight read them exactly as the readers do, without torch.

``datasets/splits.py`` builds the readers' records from these entries.
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from typing import IO

from engine.errors import InvalidInputError
from engine.inputs import open_input

SPLITS = ("train", "val", "test")
Entry = tuple[str, int, str]
"""One listed image: (path relative to the image folder, label, class name)."""


def layout_hint(name: str) -> str:
    """The pointer to the dataset's section of DATASETS.md used in every error message."""
    return f"expected layout for {name}: see DATASETS.md#{name.lower()}"


def open_list(path: str) -> IO[str]:
    """Open a split, class-list or native list file of a dataset as text, through the inputs ledger (role
    ``split``): a run records every list its images come from."""
    return open_input(path, "split", text=True)


def sorted_subdirs(path: str) -> list[str]:
    """Names of the non-hidden sub-folders of ``path`` in sorted order (files such as README.txt are skipped)."""
    return sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))


def sorted_files(path: str) -> list[str]:
    """Names of the non-hidden files of ``path`` in sorted order (so listings do not depend on the file system)."""
    return sorted(e.name for e in os.scandir(path) if e.is_file() and not e.name.startswith("."))


def read_wnid_classnames(path: str) -> OrderedDict[str, str]:
    """``classnames.txt`` of the ImageNet family: lines ``<wnid> <class name ...>`` → ordered wnid → name."""
    classnames: OrderedDict[str, str] = OrderedDict()
    with open_list(path) as f:
        for line in f:
            parts = line.strip().split(" ")
            if parts[0]:
                classnames[parts[0]] = " ".join(parts[1:])
    return classnames


def split_entries(split_path: str, name: str) -> dict[str, list[Entry]]:
    """The entries of a ``split_zhou_*.json`` file: ``{"train"|"val"|"test": [[relpath, label, classname], ...]}``;
    a malformed file is a ValueError naming it."""
    try:
        with open_list(split_path) as f:
            split = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"Malformed JSON in {split_path}: {e}") from None
    if not isinstance(split, dict) or any(key not in split for key in SPLITS):
        raise InvalidInputError(f"Split file {split_path} must hold a JSON object with keys train, val and test; "
                                f"re-download it ({layout_hint(name)})")
    output = {}
    for key in SPLITS:
        items = []
        for entry in split[key]:
            if not (isinstance(entry, list) and len(entry) == 3):
                raise InvalidInputError(f"Split file {split_path}: entry {entry!r} in {key!r} is not "
                                        "[path, label, name]")
            relpath, label, classname = entry
            items.append((relpath, int(label), classname))
        output[key] = items
    return output


def read_variants(path: str) -> dict[str, int]:
    """FGVC-Aircraft's ``variants.txt``: class name → label in line order."""
    with open_list(path) as f:
        return {c: i for i, c in enumerate(line.strip() for line in f if line.strip())}


def variant_entries(path: str, cname2lab: dict[str, int], variants_path: str, name: str) -> list[Entry]:
    """FGVC-Aircraft's ``images_variant_<split>.txt`` (lines ``<image id> <variant>``) as entries ``<id>.jpg``."""
    items = []
    with open_list(path) as f:
        for line in f:
            if line.strip():
                imname, classname = line.strip().split(" ", 1)
                if classname not in cname2lab:
                    raise InvalidInputError(f"{name}: {path} names variant {classname!r}, missing in {variants_path}")
                items.append((imname + ".jpg", cname2lab[classname], classname))
    return items
