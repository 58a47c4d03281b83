"""Shared split handling for the 15 CoOp datasets: reading/writing/creating ``split_zhou_*.json``, folder checks
that point to DATASETS.md, listing class folders, and every class-name rule (EuroSAT, Caltech, SUN397, UCF101, ...).

Dataset readers call these helpers and return a :class:`SplitData`; they never apply few-shot sampling or class
subsampling (that is ``datasets/fewshot.py`` and ``datasets/protocols.py``).
"""
from __future__ import annotations

import os
import random
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tqdm import tqdm

from engine.dataset_base import Datum
from engine.errors import InvalidInputError
from engine.inputs import declare_cache, record_input
from engine.utils import write_json

from .split_files import (
    SPLITS,
    layout_hint,
    read_wnid_classnames,
    sorted_files,
    sorted_subdirs,
    split_entries,
)

SPLIT_SEED = 1
"""Seed of the ``random.Random`` that creates a missing split file (fixed, so every run creates the same split)."""

PROGRESS_MIN_CLASSES = 100
"""Folder-per-class readers show a progress bar from this many classes on (ImageNet-scale listings)."""

CALTECH_IGNORED = ("BACKGROUND_Google", "Faces_easy")
"""Caltech-101 folders that are not classes."""

CALTECH_NEW_CNAMES = {"airplanes": "airplane", "Faces": "face", "Leopards": "leopard", "Motorbikes": "motorbike"}
"""Caltech-101 folder → class name where CoOp renames the class (applied when a split is created)."""

EUROSAT_NEW_CNAMES = {
    "AnnualCrop": "Annual Crop Land",
    "Forest": "Forest",
    "HerbaceousVegetation": "Herbaceous Vegetation Land",
    "Highway": "Highway or Road",
    "Industrial": "Industrial Buildings",
    "Pasture": "Pasture Land",
    "PermanentCrop": "Permanent Crop Land",
    "Residential": "Residential Buildings",
    "River": "River",
    "SeaLake": "Sea or Lake",
}
"""EuroSAT folder → CoOp's expanded class name (applied when a split is created)."""


@dataclass
class SplitData:
    """What a reader returns: the full dataset (all classes, labels 0..n-1) with its real train/val/test splits.

    ``val`` is None when the dataset has no validation split (ImageNet and its variants). ``test_only`` marks the
    ImageNet variants, whose ``train`` is their test data (CoOp's convention).
    """

    name: str
    dataset_dir: str
    train: list[Datum]
    val: list[Datum] | None
    test: list[Datum]
    lab2cname: dict[int, str]
    split_file: str
    test_only: bool = False




def dataset_folder(root: str, folder: str, name: str) -> str:
    """Absolute ``<root>/<folder>``; raises FileNotFoundError naming it when it is missing."""
    path = os.path.join(os.path.abspath(os.path.expanduser(root)), folder)
    if not os.path.isdir(path):
        hint = layout_hint(name) if root else f"DATASET.ROOT (--data) is empty; {layout_hint(name)}"
        raise FileNotFoundError(f"Dataset folder not found: {path} ({hint})")
    return path


def require_dir(path: str, name: str, what: str = "Image folder") -> str:
    """``path`` if it is a folder, else FileNotFoundError naming it."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{what} not found: {path} ({layout_hint(name)})")
    return path


def require_file(path: str, name: str, what: str = "File") -> str:
    """``path`` if it is a file, else FileNotFoundError naming it."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} not found: {path} ({layout_hint(name)})")
    return path


def make_datum(impath: str, label: int, classname: str, source: str, name: str) -> Datum:
    """A ``Datum``; a missing image raises FileNotFoundError naming the image and the file that listed it."""
    try:
        return Datum(impath=impath, label=label, classname=classname)
    except FileNotFoundError:
        raise FileNotFoundError(f"Image not found: {impath} (listed in {source}; {layout_hint(name)})") from None






def collect_lab2cname(name: str, source: str, *item_lists: Sequence[Datum] | None) -> dict[int, str]:
    """Label → class name over all items; labels must be 0..n-1 and each label must have a single name."""
    mapping: dict[int, str] = {}
    for items in item_lists:
        for item in items or ():
            known = mapping.setdefault(item.label, item.classname)
            if known != item.classname:
                raise InvalidInputError(f"{name}: label {item.label} has two class names, {known!r} and "
                                        f"{item.classname!r}, in {source}")
    labels = sorted(mapping)
    n = len(labels)
    if labels != list(range(n)):
        bad = [f"{label} ({mapping[label]!r})" for label in labels if not 0 <= label < n]
        missing = [str(label) for label in range(n) if label not in mapping]
        raise InvalidInputError(f"{name}: labels in {source} must be 0..{n - 1} without gaps ({n} classes), but it "
                                f"has label {', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''} and none "
                                f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}; fix the labels")
    return {lab: mapping[lab] for lab in labels}


def shown(paths: Sequence[str], base: str) -> str:
    """``N image(s) (the first three relative to base, ...)`` for one-line messages."""
    names = ", ".join(os.path.relpath(p, base) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
    return f"{len(paths)} image{'s' if len(paths) != 1 else ''} ({names})"


def drop_duplicates(items: list[Datum], split: str, source: str, base: str) -> list[Datum]:
    """``items`` with each image once: a repeated entry with the same label is dropped (one note names them), one
    with another label is an error."""
    labels: dict[str, int] = {}
    kept, twice = [], []
    for item in items:
        if item.impath not in labels:
            labels[item.impath] = item.label
            kept.append(item)
            continue
        if labels[item.impath] != item.label:
            raise InvalidInputError(f"{source} lists {os.path.relpath(item.impath, base)} in its {split} split with "
                                    f"labels {labels[item.impath]} and {item.label}; fix the split file")
        twice.append(item.impath)
    if not twice:
        return items
    print(f"Note: {source} lists {shown(sorted(set(twice)), base)} more than once in its {split} split; each is "
          "used once")
    return kept


def check_disjoint(splits: dict[str, list[Datum] | None], source: str, base: str, name: str) -> None:
    """Raise InvalidInputError naming the images that two of the splits share (train, val and test never overlap)."""
    paths = {split: {item.impath for item in items} for split, items in splits.items() if items is not None}
    names = list(paths)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            both = sorted(paths[first] & paths[second])
            if both:
                raise InvalidInputError(f"{source} lists {shown(both, base)} in both its {first} and {second} "
                                        f"splits; an image belongs to one split: fix or re-download the split file "
                                        f"({layout_hint(name)})")


def make_split_data(name: str, dataset_dir: str, split_file: str, train: list[Datum], val: list[Datum] | None,
                    test: list[Datum], test_only: bool = False) -> SplitData:
    """Bundle a reader's splits, checking that none is empty, each image is listed once (repeats are dropped with a
    note) and in one split only (``test_only`` datasets train on their test data, as CoOp), and computing
    ``lab2cname`` over all of them."""
    for split, items in (("train", train), ("val", val), ("test", test)):
        if items is not None and not items:
            raise InvalidInputError(f"{name}: the {split} split read from {split_file} is empty ({layout_hint(name)})")
    train, test = (drop_duplicates(items, split, split_file, dataset_dir) for split, items in
                   (("train", train), ("test", test)))
    val = None if val is None else drop_duplicates(val, "val", split_file, dataset_dir)
    if test_only:
        train = test
    else:
        check_disjoint({"train": train, "val": val, "test": test}, split_file, dataset_dir, name)
    lab2cname = collect_lab2cname(name, split_file, train, val, test)
    return SplitData(name, dataset_dir, train, val, test, lab2cname, split_file, test_only)


def read_split(split_path: str, prefix: str, name: str) -> tuple[list[Datum], list[Datum], list[Datum]]:
    """Read a ``split_zhou_*.json`` file (``split_entries``) into records of images under ``prefix``."""
    print(f"Reading split from {split_path}")
    entries = split_entries(split_path, name)
    train, val, test = ([make_datum(os.path.join(prefix, relpath), label, classname, split_path, name)
                         for relpath, label, classname in entries[key]] for key in SPLITS)
    return train, val, test


def relative_path(impath: str, base: str) -> str:
    """``impath`` relative to ``base`` with forward slashes (portable between machines)."""
    rel = os.path.relpath(impath, base)
    if rel.startswith(".."):
        raise InvalidInputError(f"Image {impath} lies outside {base}; split and few-shot files hold paths inside it")
    return rel.replace(os.sep, "/")


def relative_paths(items: Sequence[Datum], base: str) -> list[str]:
    """The items' image paths relative to ``base`` (see ``relative_path``); quick for the usual paths under it."""
    prefix = os.path.join(os.path.abspath(base), "")
    output = []
    for item in items:
        rel = item.impath[len(prefix):] if item.impath.startswith(prefix) else ""
        if not rel or ".." in rel.split(os.sep):
            rel = relative_path(item.impath, base)
        output.append(rel.replace(os.sep, "/"))
    return output


def encode_items(items: Sequence[Datum], base: str) -> list[list]:
    """``[[relpath, label, classname], ...]`` with paths relative to ``base``."""
    return [[rel, item.label, item.classname] for rel, item in zip(relative_paths(items, base), items)]


def write_split(train: list[Datum], val: list[Datum], test: list[Datum], split_path: str, prefix: str) -> None:
    """Write a split file in CoOp's format (paths relative to ``prefix``), atomically."""
    write_json({key: encode_items(items, prefix) for key, items in (("train", train), ("val", val),
                                                                   ("test", test))}, split_path)


def read_or_create_split(name: str, dataset_dir: str, split_path: str, prefix: str,
                         create: Callable[[random.Random], tuple[list[Datum], list[Datum], list[Datum]]]) -> SplitData:
    """Read ``split_path``; when it is missing, build the split with ``create`` (seeded) and save it, saying so."""
    if os.path.isfile(split_path):
        train, val, test = read_split(split_path, prefix, name)
    else:
        train, val, test = create(random.Random(SPLIT_SEED))
        declare_cache(os.path.dirname(split_path), "a split file created from the dataset's own lists")
        write_split(train, val, test, split_path, prefix)
        record_input(split_path, "split")
        print(f"Created split file {split_path} (not the published split; download {os.path.basename(split_path)} "
              f"for comparable numbers, see DATASETS.md)")
    return make_split_data(name, dataset_dir, split_path, train, val, test)


def native_file(path: str, split_path: str, name: str) -> str:
    """A file needed to create a missing split; when absent, the error names both it and the split file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Split file not found: {split_path}, and {path} needed to create it is missing "
                                f"too ({layout_hint(name)})")
    return path


def split_class_folders(image_dir: str, rng: random.Random, name: str, p_trn: float = 0.5, p_val: float = 0.2,
                        ignored: Sequence[str] = (), new_cnames: dict[str, str] | None = None
                        ) -> tuple[list[Datum], list[Datum], list[Datum]]:
    """CoOp's random per-class split of ``image_dir/<class>/<image>`` (default 50% train, 20% val, 30% test).

    Classes are the sorted folder names minus ``ignored``; per class the images are shuffled and cut at
    ``round(n * p_trn)`` and ``round(n * p_val)``; ``new_cnames`` renames classes.
    """
    print(f"Splitting {image_dir} into {p_trn:.0%} train, {p_val:.0%} val and {1 - p_trn - p_val:.0%} test")
    categories = [c for c in sorted_subdirs(image_dir) if c not in ignored]
    train: list[Datum] = []
    val: list[Datum] = []
    test: list[Datum] = []
    for label, category in enumerate(categories):
        category_dir = os.path.join(image_dir, category)
        images = [os.path.join(category_dir, im) for im in sorted_files(category_dir)]
        rng.shuffle(images)
        n_train, n_val = round(len(images) * p_trn), round(len(images) * p_val)
        if n_train == 0 or n_val == 0 or len(images) - n_train - n_val == 0:
            raise InvalidInputError(f"{name}: class folder {category_dir} has {len(images)} images, too few for a "
                                    f"train/val/test split")
        classname = (new_cnames or {}).get(category, category)
        for part, out in ((images[:n_train], train), (images[n_train:n_train + n_val], val),
                          (images[n_train + n_val:], test)):
            out.extend(Datum(impath=im, label=label, classname=classname) for im in part)
    return train, val, test


def split_trainval(trainval: list[Datum], rng: random.Random, name: str, p_val: float = 0.2
                   ) -> tuple[list[Datum], list[Datum]]:
    """CoOp's per-class cut of an official train(+val) list: ``round(n * p_val)`` random items per class to val."""
    print(f"Splitting trainval into {1 - p_val:.0%} train and {p_val:.0%} val")
    by_label: dict[int, list[int]] = defaultdict(list)
    for idx, item in enumerate(trainval):
        by_label[item.label].append(idx)
    train: list[Datum] = []
    val: list[Datum] = []
    for label, idxs in by_label.items():
        n_val = round(len(idxs) * p_val)
        if n_val == 0:
            raise InvalidInputError(f"{name}: class {label} has {len(idxs)} train images, too few to hold out a "
                                    "val split")
        rng.shuffle(idxs)
        for n, idx in enumerate(idxs):
            (val if n < n_val else train).append(trainval[idx])
    return train, val


def split_by_label_group(groups: dict[int, list[str]], lab2cname: dict[int, str], rng: random.Random, source: str,
                         name: str, p_trn: float = 0.5, p_val: float = 0.2
                         ) -> tuple[list[Datum], list[Datum], list[Datum]]:
    """The 50/20/30 per-class cut of image paths grouped by label (Oxford Flowers: labels listed in ``source``)."""
    train: list[Datum] = []
    val: list[Datum] = []
    test: list[Datum] = []
    for label, impaths in groups.items():
        rng.shuffle(impaths)
        n_train, n_val = round(len(impaths) * p_trn), round(len(impaths) * p_val)
        if n_train == 0 or n_val == 0 or len(impaths) - n_train - n_val == 0:
            raise InvalidInputError(f"{name}: class {lab2cname[label]!r} has {len(impaths)} images in {source}, "
                                    "too few for a train/val/test split")
        for part, out in ((impaths[:n_train], train), (impaths[n_train:n_train + n_val], val),
                          (impaths[n_train + n_val:], test)):
            out.extend(make_datum(im, label, lab2cname[label], source, name) for im in part)
    return train, val, test




def read_class_folders(image_dir: str, folders: Sequence[str], classnames: Sequence[str], name: str
                       ) -> list[Datum]:
    """Every image of ``image_dir/<folders[i]>/`` with label ``i`` and class name ``classnames[i]``."""
    items: list[Datum] = []
    pairs = tqdm(list(zip(folders, classnames)), desc=f"Reading {image_dir}", unit="class",
                 disable=len(folders) < PROGRESS_MIN_CLASSES)
    for label, (folder, classname) in enumerate(pairs):
        class_dir = require_dir(os.path.join(image_dir, folder), name, "Class folder")
        items.extend(Datum(impath=os.path.join(class_dir, im), label=label, classname=classname)
                     for im in sorted_files(class_dir))
    return items


def wnid_names(folders: Sequence[str], classnames: dict[str, str], classnames_path: str, name: str) -> list[str]:
    """Class names of wnid folders looked up in ``classnames.txt``; an unknown wnid is a clear error."""
    missing = [f for f in folders if f not in classnames]
    if missing:
        raise InvalidInputError(f"{name}: folder(s) {missing[:3]} have no line in {classnames_path} "
                                f"({layout_hint(name)})")
    return [classnames[f] for f in folders]


def pet_breed(imname: str) -> str:
    """Oxford Pets class name: the lower-cased breed part of an image name (``Abyssinian_12`` → ``abyssinian``)."""
    return "_".join(imname.split("_")[:-1]).lower()


def year_first(classname: str) -> str:
    """Stanford Cars class name with the trailing year moved to the front (``Audi R8 2012`` → ``2012 Audi R8``)."""
    names = classname.split(" ")
    return " ".join([names[-1]] + names[:-1])


def sun397_classname(class_dir: str) -> str:
    """SUN397 class name from ``a/abbey`` style paths: drop the letter, reverse the rest (``x/y/outdoor`` → ``outdoor
    y``)."""
    return " ".join(class_dir.split("/")[1:][::-1])


def split_camel_case(action: str) -> str:
    """UCF101 folder / class name: CamelCase joined by underscores (``ApplyEyeMakeup`` → ``Apply_Eye_Makeup``)."""
    return "_".join(re.findall("[A-Z][^A-Z]*", action))


def read_wnid_folder_dataset(name: str, dataset_dir: str, image_folder: str) -> SplitData:
    """A test-only ImageNet variant of ``<image_folder>/<wnid>/`` folders named by ``classnames.txt``.

    Labels index the sorted wnid folders present (200 for ImageNet-A/R), so the classifier covers exactly those.
    """
    classnames_path = require_file(os.path.join(dataset_dir, "classnames.txt"), name, "Class-name file")
    image_dir = require_dir(os.path.join(dataset_dir, image_folder), name)
    folders = sorted_subdirs(image_dir)
    names = wnid_names(folders, read_wnid_classnames(classnames_path), classnames_path, name)
    data = read_class_folders(image_dir, folders, names, name)
    return make_split_data(name, dataset_dir, classnames_path, data, None, data, test_only=True)
