"""Reading the datasets' split and class lists without building any image record (standard library only), so the
data-root check and the runner's preflight read them exactly as the readers do, without torch.

``datasets/splits.py`` builds the readers' records from these entries.
"""
from __future__ import annotations

import os
import re
from collections import OrderedDict
from typing import IO

from engine.errors import InvalidInputError
from engine.inputs import open_input
from engine.json_text import load_json

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


def path_problem(relpath: object) -> str:
    """What is wrong with ``relpath``, an image path a list file gives relative to the image folder ("" when nothing
    is): a listed path is a non-empty string, relative and without a ``..`` part, so it stays inside the data root."""
    if not isinstance(relpath, str) or not relpath or "\0" in relpath:
        return "is no file name"
    if os.path.isabs(relpath) or ".." in relpath.replace(os.sep, "/").split("/"):
        return "is absolute or climbs with '..' (listed paths are relative, inside the dataset's folder)"
    return ""


def listed_path(relpath: object, source: str, fix: str) -> str:
    """``relpath``, an image path listed in the file ``source``, when :func:`path_problem` finds nothing wrong with
    it; else an InvalidInputError naming the file, the path and ``fix``."""
    problem = path_problem(relpath)
    if problem:
        raise InvalidInputError(f"{source} lists the path {relpath!r}, which {problem}; {fix}")
    return relpath


INTEGER = re.compile(r"\s*[+-]?[0-9]{1,18}\s*")
"""A label given as a string: an integer."""


def entry_problem(entry: object) -> str:
    """What is wrong with an entry ``[relpath, label, class name]`` of a list file ("" when nothing is): the path
    (:func:`path_problem`), a label that is no integer (or string of one), a class name that is no string."""
    if not (isinstance(entry, list) and len(entry) == 3):
        return "is not [path, label, class name]"
    relpath, label, classname = entry
    if path_problem(relpath):
        return f"has a path that {path_problem(relpath)}"
    if isinstance(label, bool) or not (isinstance(label, int) or isinstance(label, str) and INTEGER.fullmatch(label)):
        return f"has the label {label!r}, which is no integer"
    if not isinstance(classname, str):
        return f"has the class name {classname!r}, which is no string"
    return ""


def checked_entry(entry: object, source: str, split: str, fix: str) -> Entry:
    """An entry of ``split`` in the list file ``source`` as ``(relpath, label, class name)`` when
    :func:`entry_problem` finds nothing wrong with it; else one InvalidInputError naming the file, the split, the
    entry and ``fix``."""
    problem = entry_problem(entry)
    if problem:
        shown = repr(entry)
        raise InvalidInputError(f"{source}: the {split} entry {shown if len(shown) <= 160 else shown[:157] + '...'} "
                                f"{problem}; {fix}")
    relpath, label, classname = entry
    return relpath, int(label), classname


def split_entries(split_path: str, name: str) -> dict[str, list[Entry]]:
    """The entries of a ``split_zhou_*.json`` file: ``{"train"|"val"|"test": [[relpath, label, classname], ...]}``,
    each checked (:func:`checked_entry`); a malformed file is a ValueError naming it."""
    try:
        with open_list(split_path) as f:
            split = load_json(f)
    except ValueError as e:
        raise InvalidInputError(f"Split file {split_path} is no readable JSON ({e}); download the split file again "
                                f"({layout_hint(name)})") from None
    if not isinstance(split, dict) or any(not isinstance(split.get(key), list) for key in SPLITS):
        raise InvalidInputError(f"Split file {split_path} must hold a JSON object with keys train, val and test; "
                                f"re-download it ({layout_hint(name)})")
    fix = f"fix it or download the split file again ({layout_hint(name)})"
    return {key: [checked_entry(entry, f"Split file {split_path}", key, fix) for entry in split[key]]
            for key in SPLITS}


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
                imname, _, classname = line.strip().partition(" ")
                if classname not in cname2lab:
                    raise InvalidInputError(f"{name}: {path} names variant {classname!r}, missing in {variants_path}")
                fix = f"fix it or unpack the dataset again ({layout_hint(name)})"
                items.append((listed_path(imname + ".jpg", path, fix), cname2lab[classname], classname))
    return items
