"""The data-root check (``python -m datasets.check``) on tiny trees in each dataset's real layout: what it lists
agrees with the readers, and each kind of damage is one line naming the path and the fix."""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from datasets.catalog import DATASETS
from datasets.check import check_dataset, check_table
from datasets.layouts import LAYOUTS
from datasets.sizes import Sizes
from tests.helpers_datasets import ALL_DATASETS, DEFAULT_N, JSON_COUNTS, MODES, write_image, write_tree
from tests.helpers_run import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHORT = {layout.name: short for short, layout in LAYOUTS.items()}


def check(root, short: str, sizes: dict | None = None):
    return check_dataset(str(root), short, sizes if sizes is not None else {})


@pytest.mark.parametrize("name", ALL_DATASETS)
def test_the_check_lists_what_the_reader_reads(tmp_path, name):
    """Classes, counts and image paths of the check are the reader's (the reader builds its records and stats every
    image itself); a test-only dataset counts its test images once."""
    tree = write_tree(name, tmp_path, mode=MODES[name][0])
    reader = getattr(importlib.import_module(DATASETS[name]), name)
    data = reader.read(tree.dataset_dir)
    found = check(tmp_path, SHORT[name])
    assert found.ok, found.problems
    assert found.classes == len(data.lab2cname) == DEFAULT_N[name]
    splits = {"test": data.test} if data.test_only else {"train": data.train, "val": data.val, "test": data.test}
    assert {k: v for k, v in found.counts.items() if v is not None} == \
        {k: len(v) for k, v in splits.items() if v is not None}
    assert sorted(found.images) == sorted({d.impath for items in splits.values() for d in items or ()})


def broken_root(root) -> dict[str, str]:
    """One good dataset (EuroSAT) and three broken ones; returns the damaged paths."""
    write_tree("EuroSAT", root, mode="json")
    dtd = write_tree("DescribableTextures", root, mode="json")
    gone = os.path.join(dtd.dataset_dir, "images", "banded")
    shutil.rmtree(gone)
    food = write_tree("Food101", root, mode="json")
    truncated = sorted(p for p in food.truth if p.endswith(".jpg"))[4]
    with open(truncated, "rb") as f:
        data = f.read()
    with open(truncated, "wb") as f:
        f.write(data[:len(data) // 2])
    caltech = write_tree("Caltech101", root, mode="json")
    with open(caltech.split_file) as f:
        split = json.load(f)
    split["train"].pop()
    with open(caltech.split_file, "w") as f:
        json.dump(split, f)
    return {"gone": gone, "truncated": truncated, "split": caltech.split_file}


def test_one_good_dataset_and_three_broken_ones(tmp_path):
    damaged = broken_root(tmp_path)
    # the tiny trees' own sizes, by hand: classes (DEFAULT_N) x 3 train / 2 val / 2 test images (JSON_COUNTS)
    sizes = {"eurosat": Sizes(5, 15, 10, 10), "dtd": Sizes(4, 12, 8, 8), "food101": Sizes(3, 9, 6, 6),
             "caltech101": Sizes(5, 15, 10, 10)}
    checks = {short: check(tmp_path, short, sizes) for short in sizes}
    assert checks["eurosat"].ok and checks["eurosat"].counts == {"train": 15, "val": 10, "test": 10}
    # a missing class folder: one line for its 3 + 2 + 2 listed images, and the counts still match the split file
    assert checks["dtd"].problems == [f"{damaged['gone']}: folder missing (7 listed images); restore it from the "
                                      "dataset's archive (see DATASETS.md#describabletextures)"]
    assert checks["dtd"].missing == 7
    # a truncated image: decoded (the sample holds every image of a tree this small) and named
    [line] = checks["food101"].problems
    assert line.startswith(f"{damaged['truncated']}: unreadable (") and \
        line.endswith("restore it from the dataset's archive")
    assert checks["food101"].unreadable == 1 and checks["food101"].missing == 0
    # a split file with one train entry less than the expected sizes
    assert checks["caltech101"].problems == [
        f"{damaged['split']}: not the published split: train 14 (published 15); put the published "
        "split_zhou_Caltech101.json in place (see DATASETS.md#caltech101)"]
    rows = {line.split()[0]: line.split() for line in check_table(list(checks.values()), sizes).splitlines()[2:]}
    assert rows["EuroSAT"][2:8] == ["ok", "split_zhou_EuroSAT.json", "5", "15", "10", "10"]
    assert rows["Caltech101"][2:4] == ["1", "problem(s)"] and rows["Caltech101"][6:9] == ["14", "/", "15"]
    assert rows["DescribableTextures"][-2:] == ["7", "0"] and rows["Food101"][-2:] == ["0", "1"]


def test_imagenet_without_its_class_name_file(tmp_path):
    tree = write_tree("ImageNet", tmp_path)
    os.remove(os.path.join(tree.dataset_dir, "classnames.txt"))
    found = check(tmp_path, "imagenet")
    assert found.problems == [f"{tree.dataset_dir}/classnames.txt: class-name file missing; copy ImageNet's "
                              "classnames.txt (CoOp's, one '<wnid> <name>' line per class) there "
                              "(see DATASETS.md#imagenet)"]
    assert found.counts == {"train": 4 * JSON_COUNTS[0], "val": None, "test": 4 * JSON_COUNTS[2]}


def test_published_sizes_are_compared(tmp_path):
    """Without an expected-sizes mapping the published table applies: a tiny EuroSAT is not the published split."""
    write_tree("EuroSAT", tmp_path, mode="json")
    [line] = check_dataset(str(tmp_path), "eurosat").problems
    assert "not the published split: classes 5 (published 10), train 15 (published 13,500), val 10 (published " \
           "5,400), test 10 (published 8,100)" in line


def demo_root(root) -> str:
    """A DemoCool folder in the demo's layout (no published sizes): 2 classes, 2 train / 1 val / 1 test each."""
    folder = os.path.join(root, "democool")
    split = {"train": [], "val": [], "test": []}
    for label, cls in enumerate(("blue_circle", "purple_star")):
        for i, tag in enumerate(("train", "train", "val", "test")):
            write_image(os.path.join(folder, "images", cls, f"{i}.png"), seed=label * 10 + i)
            split[tag].append([f"{cls}/{i}.png", label, cls.replace("_", " ")])
    with open(os.path.join(folder, "split_zhou_DemoCool.json"), "w") as f:
        json.dump(split, f)
    return folder


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "datasets.check", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def test_command_line_exit_status(tmp_path):
    folder = demo_root(tmp_path)
    done = run_check("--root", str(tmp_path), "democool")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "All 1 dataset(s) match."
    row = next(line.split() for line in done.stdout.splitlines() if line.startswith("DemoCool"))
    assert row == ["DemoCool", "democool/", "ok", "split_zhou_DemoCool.json", "2", "4", "2", "2", "0", "0"]
    missing = os.path.join(folder, "images", "purple_star", "1.png")
    os.remove(missing)
    done = run_check("--root", str(tmp_path), "DemoCool", "--full")
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == (f"DemoCool: {missing}: listed in split_zhou_DemoCool.json but missing; "
                                            "restore it from the dataset's archive")
    done = run_check("--root", str(tmp_path), "eurosatt")
    assert done.returncode == 2 and done.stderr.startswith("error: unknown dataset 'eurosatt'; use one of: imagenet")


BAD_ENTRIES = {
    "path 5": (lambda root, e: [5, *e[1:]], "has a path that is no file name"),
    "absolute path": (lambda root, e: [os.path.join(root, "outside.jpg"), *e[1:]],
                      "has a path that is absolute or climbs with '..' (listed paths are relative, inside the "
                      "dataset's folder)"),
    "'..' path": (lambda root, e: ["../../outside.jpg", *e[1:]],
                  "has a path that is absolute or climbs with '..' (listed paths are relative, inside the dataset's "
                  "folder)"),
    "label 'abc'": (lambda root, e: [e[0], "abc", e[2]], "has the label 'abc', which is no integer"),
    "class name 3": (lambda root, e: [e[0], e[1], 3], "has the class name 3, which is no string"),
}


@pytest.mark.parametrize("case", list(BAD_ENTRIES))
def test_a_bad_split_entry_is_one_problem_line(tmp_path, case):
    """An entry whose path would be read outside the data root (an image lies there, readable), or of the wrong type,
    is one line naming the file, the split and the entry: never a traceback, never ``ok``."""
    tree = write_tree("EuroSAT", str(tmp_path / "data"), mode="json")
    write_image(str(tmp_path / "outside.jpg"))
    with open(tree.split_file) as f:
        split = json.load(f)
    edit, problem = BAD_ENTRIES[case]
    entry = split["val"][1] = edit(str(tmp_path), split["val"][1])
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    found = check(tmp_path / "data", "eurosat")
    assert found.problems == [
        f"{tree.split_file}: unreadable split file (Split file {tree.split_file}: the val entry {entry!r} {problem}; "
        "fix it or download the split file again (expected layout for EuroSAT: see DATASETS.md#eurosat)); download it "
        "again (see DATASETS.md#eurosat)"]
    assert found.images == [] and found.counts == {}


def test_a_split_file_nesting_too_deep_is_one_problem_line(tmp_path):
    """A split file nesting 100,000 lists (deeper than the JSON parser recurses): one line naming it, no traceback."""
    tree = write_tree("EuroSAT", str(tmp_path / "data"), mode="json")
    with open(tree.split_file, "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)
    found = check(tmp_path / "data", "eurosat")
    assert len(found.problems) == 1 and found.problems[0].startswith(
        f"{tree.split_file}: unreadable split file (Split file {tree.split_file} is no readable JSON (its arrays or "
        "objects nest deeper than ")

def test_a_variant_list_line_outside_the_image_folder_is_one_problem_line(tmp_path):
    """FGVC-Aircraft's own lists (``<image id> <variant>``) are held to the same rule."""
    tree = write_tree("FGVCAircraft", str(tmp_path), mode="native")
    listing = os.path.join(tree.dataset_dir, "images_variant_test.txt")
    with open(listing) as f:
        lines = f.read().splitlines()
    lines[0] = "../../outside " + lines[0].split(" ", 1)[1]
    with open(listing, "w") as f:
        f.write("\n".join(lines) + "\n")
    [line] = check(tmp_path, "fgvc_aircraft").problems
    assert line == (f"{tree.dataset_dir}/images_variant_*.txt: unreadable split list ({listing} lists the path "
                    "'../../outside.jpg', which is absolute or climbs with '..' (listed paths are relative, inside "
                    "the dataset's folder); fix it or unpack the dataset again (expected layout for FGVCAircraft: see "
                    "DATASETS.md#fgvcaircraft)); unpack the dataset again (see DATASETS.md#fgvcaircraft)")
