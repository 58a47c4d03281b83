"""``python -m datasets.check --data DATA [NAME ...|all]``: is a data root ready? Per dataset: found or missing, the
file that lists its splits, its classes and train / val / test counts against the published ones, every listed image
that is absent (a stat of each), and the unreadable ones among a fixed sample (every image with ``--full``).

Exit status 0 when every named dataset matches, 1 when one does not (one line per problem, naming the path and the
fix), 2 for bad arguments. Torch-free: the runner's preflight runs the same check.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tabulate import tabulate
from tqdm import tqdm

from engine.errors import InvalidInputError

from .layouts import CLASSNAMES, LAYOUTS, PAPER_DATASETS, Layout, find_layout
from .sizes import PUBLISHED_SIZES, Sizes
from .split_files import (
    SPLITS,
    layout_hint,
    read_variants,
    read_wnid_classnames,
    sorted_files,
    sorted_subdirs,
    split_entries,
    variant_entries,
)

SAMPLE = 32
"""Images decoded per dataset without ``--full``: evenly spaced over the sorted listing (the same ones every time)."""
MAX_LINES = 10
"""Missing or unreadable images named one per line per dataset; the rest are counted in one more line."""
PROGRESS_MIN = 2000
"""Stats and decodes of at least this many images show a progress bar."""


@dataclass
class DatasetCheck:
    """What the check found for one dataset under the data root."""

    short: str
    layout: Layout
    dataset_dir: str
    found: bool = False
    listing: str = ""
    """The file (or folder) its splits were read from."""
    classes: int | None = None
    counts: dict[str, int | None] = field(default_factory=dict)
    """Images per split (None: the dataset has no such split)."""
    images: list[str] = field(default_factory=list)
    """Every listed image, once."""
    on_disk: bool = False
    """The images were listed from the folders themselves (so they exist)."""
    missing: int = 0
    unreadable: int = 0
    problems: list[str] = field(default_factory=list)
    """One line each: the path, what is wrong, the fix."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, path: str, what: str, fix: str) -> None:
        self.problems.append(f"{path}: {what}; {fix}")

    def hint(self) -> str:
        return layout_hint(self.layout.name).split(": ")[1]


def _entries_listing(check: DatasetCheck, splits: Mapping[str, list]) -> None:
    """Record the splits' entries (relative to the image folder): counts, classes and the unique image paths."""
    image_dir = os.path.join(check.dataset_dir, check.layout.image_dir)
    if check.layout.test_only:
        splits = {"train": None, "val": None, "test": splits["test"]}
    check.counts = {key: None if items is None else len(items) for key, items in splits.items()}
    check.classes = len({label for items in splits.values() for _, label, _ in items or ()})
    paths = (os.path.join(image_dir, rel) for items in splits.values() for rel, _, _ in items or ())
    check.images = list(dict.fromkeys(paths))


def _list_split_file(check: DatasetCheck) -> None:
    path = os.path.join(check.dataset_dir, check.layout.split_file)
    check.listing = path
    if not os.path.isfile(path):
        check.problem(path, "split file missing", f"put the published {check.layout.split_file} there ({check.hint()})")
        return
    try:
        _entries_listing(check, split_entries(path, check.layout.name))
    except (InvalidInputError, ValueError) as e:
        check.problem(path, f"unreadable split file ({e})", f"download it again ({check.hint()})")


def _list_variants(check: DatasetCheck) -> None:
    variants = os.path.join(check.dataset_dir, "variants.txt")
    check.listing = os.path.join(check.dataset_dir, "images_variant_*.txt")
    lists = {key: os.path.join(check.dataset_dir, f"images_variant_{key}.txt") for key in SPLITS}
    absent = [p for p in (variants, *lists.values()) if not os.path.isfile(p)]
    for path in absent:
        check.problem(path, "class or split list missing", f"unpack the dataset's data/ folder here ({check.hint()})")
    if absent:
        return
    try:
        cname2lab = read_variants(variants)
        _entries_listing(check, {key: variant_entries(path, cname2lab, variants, check.layout.name)
                                 for key, path in lists.items()})
    except (InvalidInputError, ValueError) as e:
        check.problem(check.listing, f"unreadable split list ({e})", f"unpack the dataset again ({check.hint()})")


def _classnames(check: DatasetCheck) -> dict[str, str] | None:
    """``classnames.txt`` of the dataset, or None (a problem) when it is missing."""
    path = os.path.join(check.dataset_dir, CLASSNAMES)
    if not os.path.isfile(path):
        check.problem(path, "class-name file missing",
                      f"copy ImageNet's {CLASSNAMES} (CoOp's, one '<wnid> <name>' line per class) there "
                      f"({check.hint()})")
        return None
    return read_wnid_classnames(path)


def _folder_images(check: DatasetCheck, image_dir: str, folders: Sequence[str]) -> list[str] | None:
    """Every image of ``image_dir/<folder>/``; a missing folder is a problem (None when ``image_dir`` is absent)."""
    if not os.path.isdir(image_dir):
        check.problem(image_dir, "image folder missing", f"unpack the dataset's images there ({check.hint()})")
        return None
    images = []
    for folder in tqdm(folders, desc=f"Listing {image_dir}", unit="class", disable=len(folders) < 100):
        class_dir = os.path.join(image_dir, folder)
        if os.path.isdir(class_dir):
            images.extend(os.path.join(class_dir, f) for f in sorted_files(class_dir))
        else:
            check.problem(class_dir, "class folder missing", f"restore it from the dataset's archive ({check.hint()})")
    return images


def _list_folders(check: DatasetCheck) -> None:
    """The folder-per-class layouts of the ImageNet family (classes named by ``classnames.txt``)."""
    layout, image_dir = check.layout, os.path.join(check.dataset_dir, check.layout.image_dir)
    check.listing, check.on_disk = image_dir, True
    classnames = _classnames(check)
    roles = {"train": os.path.join(image_dir, "train"), "test": os.path.join(image_dir, "val")} \
        if layout.kind == "imagenet" else {"test": image_dir}
    if layout.kind == "numbered":
        sizes = PUBLISHED_SIZES.get(check.short)
        count = len(classnames) if classnames else sizes.classes if sizes else 0
        folders = [str(label) for label in range(count)]
    else:
        first = next(iter(roles.values()))
        folders = sorted_subdirs(first) if os.path.isdir(first) else []
        unnamed = [f for f in folders if classnames is not None and f not in classnames]
        if unnamed:
            check.problem(os.path.join(check.dataset_dir, CLASSNAMES), f"no line for folder(s) {', '.join(unnamed[:3])}"
                          f"{', ...' if len(unnamed) > 3 else ''}", f"use ImageNet's {CLASSNAMES} ({check.hint()})")
    check.classes = len(folders)
    check.counts = {"train": None, "val": None, "test": None}
    for role, folder in roles.items():
        if role == "test" and layout.kind == "imagenet" and os.path.isdir(folder):
            extra = sorted(set(sorted_subdirs(folder)) - set(folders))
            if extra:
                check.problem(folder, f"{len(extra)} folder(s) not in images/train ({', '.join(extra[:3])})",
                              f"sort the val images into the train set's wnid folders ({check.hint()})")
        images = _folder_images(check, folder, folders)
        if images is not None:
            check.counts[role] = len(images)
            check.images.extend(images)


LISTERS = {"split": _list_split_file, "variants": _list_variants, "imagenet": _list_folders, "wnid": _list_folders,
           "numbered": _list_folders}


def _compare(check: DatasetCheck, sizes: Sizes) -> None:
    """A problem for each count that differs from the published split's."""
    if check.layout.kind == "split":
        fix = f"put the published {check.layout.split_file} in place ({check.hint()})"
    else:
        fix = f"restore the missing images and folders from the dataset's archive ({check.hint()})"
    wanted = {"classes": sizes.classes, "train": sizes.train, "val": sizes.val, "test": sizes.test}
    found = {"classes": check.classes, **check.counts}
    differ = [f"{key} {_number(found.get(key))} (published {_number(value)})" for key, value in wanted.items()
              if found.get(key) != value]
    if differ:
        check.problem(check.listing, f"not the published split: {', '.join(differ)}", fix)


def _number(value: int | None) -> str:
    return "none" if value is None else f"{value:,}"


def _find_missing(check: DatasetCheck) -> None:
    """Stat every listed image; an absent folder is one line for all its images."""
    absent: dict[str, list[str]] = defaultdict(list)
    folders: dict[str, bool] = {}
    for path in tqdm(check.images, desc=f"Checking {check.layout.name}", unit="img",
                     disable=len(check.images) < PROGRESS_MIN):
        if not os.path.isfile(path):
            folder = os.path.dirname(path)
            absent[folder if not folders.setdefault(folder, os.path.isdir(folder)) else ""].append(path)
    files = absent.pop("", [])
    for folder, paths in absent.items():
        check.problem(folder, f"folder missing ({len(paths)} listed image{'s' if len(paths) > 1 else ''})",
                      f"restore it from the dataset's archive ({check.hint()})")
    for path in files[:MAX_LINES]:
        check.problem(path, f"listed in {os.path.basename(check.listing)} but missing",
                      "restore it from the dataset's archive")
    if len(files) > MAX_LINES:
        check.problem(check.dataset_dir, f"{len(files) - MAX_LINES} more listed images missing",
                      "restore them from the dataset's archive")
    check.missing = sum(len(p) for p in absent.values()) + len(files)


def decode_error(path: str) -> str:
    """Why the image at ``path`` cannot be decoded in full ("" when it can; ``engine.images``: the run's reader calls
    the same files unreadable)."""
    from PIL import Image

    from engine.images import UNREADABLE, unreadable_reason

    try:
        with Image.open(path) as image:
            image.load()
    except UNREADABLE as e:
        return unreadable_reason(e)
    return ""


def decoded_images(paths: Sequence[str], sample: int = SAMPLE, full: bool = False) -> list[str]:
    """The images a check decodes: every one (``full``), or ``sample`` of them evenly spaced over the sorted list (the
    same ones every time)."""
    present = sorted(paths)
    return present if full or len(present) <= sample else present[::len(present) // sample][:sample]


def _decode(check: DatasetCheck, sample: int, full: bool) -> None:
    """Decode every present image (``full``) or a fixed sample of them (:func:`decoded_images`)."""
    present = check.images if check.on_disk else [p for p in check.images if os.path.isfile(p)]
    todo = decoded_images(present, sample, full)
    bad = []
    for path in tqdm(todo, desc=f"Decoding {check.layout.name}", unit="img", disable=len(todo) < PROGRESS_MIN):
        error = decode_error(path)
        if error:
            bad.append((path, error))
    for path, error in bad[:MAX_LINES]:
        check.problem(path, f"unreadable ({error})", "restore it from the dataset's archive")
    if len(bad) > MAX_LINES:
        check.problem(check.dataset_dir, f"{len(bad) - MAX_LINES} more unreadable images",
                      "restore them from the dataset's archive")
    check.unreadable = len(bad)


def check_dataset(root: str, short: str, sizes: Mapping[str, Sizes] = PUBLISHED_SIZES, sample: int = SAMPLE,
                  full: bool = False) -> DatasetCheck:
    """Check dataset ``short`` (a key of ``LAYOUTS``) under ``root`` against ``sizes`` (datasets without an entry
    are checked for their listing and files only)."""
    layout = LAYOUTS[short]
    check = DatasetCheck(short, layout, os.path.join(os.path.abspath(os.path.expanduser(root)), layout.folder))
    if not os.path.isdir(check.dataset_dir):
        check.problem(check.dataset_dir, "dataset folder missing", f"put {layout.name} there ({check.hint()})")
        return check
    check.found = True
    LISTERS[layout.kind](check)
    if check.counts and short in sizes:
        _compare(check, sizes[short])
    if not check.on_disk:
        _find_missing(check)
    _decode(check, sample, full)
    return check


def _count(value: int | None, published: int | None, compared: bool) -> str:
    if value is None and (published is None or not compared):
        return "-"
    shown = "?" if value is None else f"{value:,}"
    if not compared or value == published:
        return shown
    return f"{shown} / {'-' if published is None else f'{published:,}'}"


def check_table(checks: Sequence[DatasetCheck], sizes: Mapping[str, Sizes] = PUBLISHED_SIZES) -> str:
    """One row per dataset: status, listing, classes and counts (``found / published`` where they differ), images
    missing and unreadable."""
    rows = []
    for check in checks:
        status = "ok" if check.ok else "missing" if not check.found else f"{len(check.problems)} problem(s)"
        published = sizes.get(check.short)
        compared = published is not None and bool(check.counts)
        counts = [_count(check.classes, published.classes if published else None, compared)]
        counts += [_count(check.counts.get(key), getattr(published, key) if published else None, compared)
                   for key in SPLITS]
        listing = os.path.relpath(check.listing, check.dataset_dir) if check.listing else "-"
        rows.append([check.layout.name, check.layout.folder + "/", status, listing, *counts, check.missing,
                     check.unreadable])
    return tabulate(rows, headers=["dataset", "folder", "status", "split file", "classes", "train", "val", "test",
                                   "missing", "unreadable"], colalign=("left",) * 4 + ("right",) * 6)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m datasets.check", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", default=["all"],
                   help="datasets (short names such as eurosat, or DATASET.NAME; 'all': CoOp's fifteen)")
    p.add_argument("--data", "--root", dest="root", default=os.environ.get("DATA"),
                   help="the datasets folder (default $DATA; --root: the former name)")
    p.add_argument("--full", action="store_true", help="decode every listed image, not only a fixed sample")
    p.add_argument("--sample", type=int, default=SAMPLE, help=f"images decoded per dataset (default {SAMPLE})")
    p.add_argument("--other-splits", action="store_true",
                   help="do not compare the counts with the published ones (splits made for a study, tiny trees)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not args.root:
            raise ValueError("no data root: pass --data DIR or set DATA (see DATASETS.md)")
        if args.sample < 0:
            raise ValueError("--sample must be 0 or more")
        names = [n for name in args.names for n in (PAPER_DATASETS if name == "all" else [find_layout(name)])]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sizes = {} if args.other_splits else PUBLISHED_SIZES
    checks = [check_dataset(args.root, short, sizes, args.sample, args.full) for short in dict.fromkeys(names)]
    print(f"Data root {os.path.abspath(args.root)} (counts: found / published where they differ)")
    print(check_table(checks, sizes))
    problems = [f"{check.layout.name}: {line}" for check in checks for line in check.problems]
    print("\n".join(["", *problems]) if problems else f"\nAll {len(checks)} dataset(s) match.")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
