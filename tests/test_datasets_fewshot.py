"""Few-shot sampling: K per class (val min(K, 4)), determinism per seed, the portable JSON cache and its errors."""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys

import pytest

from datasets.catalog import register_datasets
from datasets.fewshot import fewshot_path, fewshot_splits
from datasets.splits import SplitData
from engine.dataset_base import Datum, build_dataset
from engine.errors import InvalidInputError
from tests.helpers_datasets import ALL_DATASETS, MODES, TEST_ONLY, make_cfg, write_tree
from tests.helpers_run import HANG_GUARD_S, read_only
from tests.test_datasets_readers import check_items, per_class

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
register_datasets()

K = 2
TRAIN_DATASETS = [name for name in ALL_DATASETS if name not in TEST_ONLY]


def relpaths(items: list[Datum], base: str) -> list[tuple[str, int, str]]:
    return [(os.path.relpath(d.impath, base), d.label, d.classname) for d in items]


@pytest.mark.parametrize("name", TRAIN_DATASETS)
def test_fewshot_counts_cache_and_moved_root(tmp_path, capsys, name):
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    tree = write_tree(name, root_a, MODES[name][0])
    ds = build_dataset(make_cfg(root_a, name, **{"DATASET.NUM_SHOTS": K}))
    assert per_class(ds.train_x, tree.n) == [min(K, c) for c in tree.counts["train"]]
    check_items(tree, ds.train_x, "train")
    if "val" in tree.counts:
        assert per_class(ds.val, tree.n) == [min(K, 4, c) for c in tree.counts["val"]]
        check_items(tree, ds.val, "val")

    cache = os.path.join(tree.dataset_dir, "split_fewshot", f"shot_{K}-seed_1.json")
    with open(cache) as f:
        content = json.load(f)
    assert [tuple(e) for e in content["train"]] == relpaths(ds.train_x, tree.dataset_dir)
    assert all(not os.path.isabs(rel) and not rel.startswith("..") for rel, _, _ in content["train"] + content["val"])
    capsys.readouterr()

    again = build_dataset(make_cfg(root_a, name, **{"DATASET.NUM_SHOTS": K}))  # read back from the cache
    assert f"Loading few-shot data from {cache}" in capsys.readouterr().out
    assert relpaths(again.train_x, tree.dataset_dir) == relpaths(ds.train_x, tree.dataset_dir)

    os.remove(cache)  # same seed → same shots, whatever the global random state
    random.seed(12345)
    resampled = build_dataset(make_cfg(root_a, name, **{"DATASET.NUM_SHOTS": K}))
    assert relpaths(resampled.train_x, tree.dataset_dir) == relpaths(ds.train_x, tree.dataset_dir)

    shutil.move(str(root_a), str(root_b))  # the cache stays valid after moving the data root
    capsys.readouterr()
    moved = build_dataset(make_cfg(root_b, name, **{"DATASET.NUM_SHOTS": K}))
    assert "Loading few-shot data from" in capsys.readouterr().out
    new_dir = os.path.join(root_b, tree.folder)
    assert all(d.impath.startswith(str(root_b)) for d in moved.train_x)
    assert relpaths(moved.train_x, new_dir) == relpaths(ds.train_x, tree.dataset_dir)


def _synthetic(tmp_path, per_class_train: int, per_class_val: int, n: int = 3) -> SplitData:
    """A SplitData over empty files (few-shot sampling never opens images)."""
    items: dict[str, list[Datum]] = {"train": [], "val": []}
    for split, count in (("train", per_class_train), ("val", per_class_val)):
        for label in range(n):
            for i in range(count):
                path = tmp_path / split / f"c{label}" / f"{i}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
                items[split].append(Datum(str(path), label=label, classname=f"c{label}"))
    return SplitData("Synthetic", str(tmp_path), items["train"], items["val"], items["train"][:1],
                     {label: f"c{label}" for label in range(n)}, str(tmp_path / "split.json"))


def test_val_shots_are_capped_at_four_and_seeds_differ(tmp_path):
    data = _synthetic(tmp_path, per_class_train=20, per_class_val=6)
    train, val = fewshot_splits(data, 5, seed=1)
    assert per_class(train, 3) == [5, 5, 5] and per_class(val, 3) == [4, 4, 4]  # min(K, 4)
    train2, val2 = fewshot_splits(data, 2, seed=1)
    assert per_class(train2, 3) == [2, 2, 2] and per_class(val2, 3) == [2, 2, 2]
    other, _ = fewshot_splits(data, 5, seed=2)
    assert sorted(d.impath for d in other) != sorted(d.impath for d in train)  # 20C5 per class: equal is ~0
    assert os.path.isfile(fewshot_path(str(tmp_path), 5, 1)) and os.path.isfile(fewshot_path(str(tmp_path), 5, 2))
    assert fewshot_splits(data, 0, seed=1) == (data.train, data.val)


def test_class_missing_from_cache_is_reported(tmp_path):
    data = _synthetic(tmp_path, per_class_train=4, per_class_val=2)
    fewshot_splits(data, 2, seed=1)
    cache = fewshot_path(str(tmp_path), 2, 1)
    with open(cache) as f:
        content = json.load(f)
    content["train"] = [e for e in content["train"] if e[1] != 1]
    with open(cache, "w") as f:
        json.dump(content, f)
    with pytest.raises(ValueError, match=rf"Class 'c1' \(label 1\) has no image in the few-shot train set.*{cache}"):
        fewshot_splits(data, 2, seed=1)


def test_class_without_val_images_is_reported(tmp_path):
    data = _synthetic(tmp_path, per_class_train=4, per_class_val=2)
    data.val = [d for d in data.val if d.label != 2]
    with pytest.raises(ValueError, match=r"Class 'c2' \(label 2\) has no image in the few-shot val set.*split.json"):
        fewshot_splits(data, 2, seed=1)


def test_stale_cache_is_reported(tmp_path):
    data = _synthetic(tmp_path, per_class_train=4, per_class_val=2)
    fewshot_splits(data, 2, seed=1)
    data.lab2cname = {0: "c0", 1: "renamed", 2: "c2"}
    with pytest.raises(ValueError, match="does not match"):
        fewshot_splits(data, 2, seed=1)


@pytest.mark.parametrize("edit, problem", [
    (lambda e: ["../../outside.jpg", *e[1:]], "has a path that is absolute or climbs with '..' (listed paths are "
     "relative, inside the dataset's folder)"),
    (lambda e: [e[0], "abc", e[2]], "has the label 'abc', which is no integer"),
    (lambda e: [e[0], e[1]], "is not [path, label, class name]"),
], ids=["'..' path", "label 'abc'", "two fields"])
def test_a_bad_fewshot_entry_is_one_error(tmp_path, edit, problem):
    """A few-shot file's entries are checked as a split file's: one error naming the file, the split and the entry (an
    image lies outside the dataset folder for the '..' path to reach)."""
    data = _synthetic(tmp_path / "data", per_class_train=4, per_class_val=2)
    (tmp_path / "outside.jpg").touch()
    fewshot_splits(data, 2, seed=1)
    cache = fewshot_path(str(tmp_path / "data"), 2, 1)
    with open(cache) as f:
        content = json.load(f)
    entry = content["val"][0] = edit(content["val"][0])
    with open(cache, "w") as f:
        json.dump(content, f)
    message = f"Few-shot file {cache}: the val entry {entry!r} {problem}; delete it to sample again"
    with pytest.raises(InvalidInputError, match=f"^{re.escape(message)}$"):
        fewshot_splits(data, 2, seed=1)


def _split_paths(tree, split: str) -> set[str]:
    with open(tree.split_file) as f:
        return {os.path.join(tree.dataset_dir, "2750", rel) for rel, _, _ in json.load(f)[split]}


def test_changed_split_never_trains_on_test_images(tmp_path):
    """A 2-shot sample is cached; then the split file changes so that those shots are test images. The stale cache
    must not be used: the run stops with one line naming the file, and the old file stays."""
    tree = write_tree("EuroSAT", tmp_path, "json")
    cfg = make_cfg(tmp_path, "EuroSAT", **{"DATASET.NUM_SHOTS": 2})
    shots = {d.impath for d in build_dataset(cfg).train_x}
    cache = fewshot_path(tree.dataset_dir, 2, 1)
    before = open(cache).read()
    with open(tree.split_file) as f:
        split = json.load(f)
    moved = [e for e in split["train"] if os.path.join(tree.dataset_dir, "2750", e[0]) in shots]
    split["train"] = [e for e in split["train"] if e not in moved] + split["test"]
    split["test"] = moved
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    assert shots <= _split_paths(tree, "test")  # the cached shots are test images now
    with pytest.raises(InvalidInputError) as info:
        build_dataset(cfg)
    message = str(info.value)
    assert message.startswith(f"Few-shot file {cache} was sampled from other data than {tree.split_file} holds now")
    assert "\n" not in message and open(cache).read() == before  # one line; nothing deleted or rewritten
    os.rename(cache, cache + ".old")  # moved away: sampled again from the current split, no test image in train
    again = build_dataset(cfg)
    assert {d.impath for d in again.train_x}.isdisjoint(_split_paths(tree, "test"))
    assert {d.impath for d in again.train_x} <= _split_paths(tree, "train")


def test_fewshot_file_with_a_test_image_is_refused_one_without_digest_is_noted(tmp_path, capsys):
    tree = write_tree("EuroSAT", tmp_path, "json")
    cfg = make_cfg(tmp_path, "EuroSAT", **{"DATASET.NUM_SHOTS": 2})
    build_dataset(cfg)
    cache = fewshot_path(tree.dataset_dir, 2, 1)
    with open(cache) as f:
        content = json.load(f)
    with open(tree.split_file) as f:
        rel, label, name = json.load(f)["test"][0]
    test_entry = [f"2750/{rel}", label, name]
    edited = dict(content, train=[test_entry, *content["train"][1:]])  # the right digest, one shot is a test image
    with open(cache, "w") as f:
        json.dump(edited, f)
    message = (f"Few-shot file {cache} lists 1 image ({test_entry[0]}) in train, which {tree.split_file} has "
               "in its test split; move the file away to sample again")
    with pytest.raises(InvalidInputError, match=f"^{re.escape(message)}$"):
        build_dataset(cfg)
    with open(cache, "w") as f:
        json.dump(dict(edited, digest=None), f)  # no digest (an earlier version): still checked
    with pytest.raises(InvalidInputError, match=f"^{re.escape(message)}$"):
        build_dataset(cfg)
    with open(cache, "w") as f:
        json.dump({"train": content["train"], "val": content["val"]}, f)
    capsys.readouterr()
    assert relpaths(build_dataset(cfg).train_x, tree.dataset_dir) == [tuple(e) for e in content["train"]]
    assert (f"Note: few-shot file {cache} records no digest of its split (an earlier version wrote it); its images "
            "all lie in the current train and val splits, so it is used") in capsys.readouterr().out


def test_fewshot_dir_holds_the_files(tmp_path, capsys):
    tree = write_tree("EuroSAT", tmp_path / "data", "json")
    shots = tmp_path / "shots"
    cfg = make_cfg(tmp_path / "data", "EuroSAT", **{"DATASET.NUM_SHOTS": 2, "DATASET.FEWSHOT_DIR": str(shots)})
    first = relpaths(build_dataset(cfg).train_x, tree.dataset_dir)
    cache = shots / "eurosat" / "shot_2-seed_1.json"
    assert cache.is_file() and not os.path.exists(os.path.join(tree.dataset_dir, "split_fewshot"))
    capsys.readouterr()
    assert relpaths(build_dataset(cfg).train_x, tree.dataset_dir) == first
    assert f"Loading few-shot data from {cache}" in capsys.readouterr().out


READ_SHOTS = """import sys
from datasets.catalog import register_datasets
from engine.dataset_base import build_dataset
register_datasets()
from tests.helpers_datasets import make_cfg
build_dataset(make_cfg(sys.argv[1], "EuroSAT", **{"DATASET.NUM_SHOTS": 2, "OUTPUT_DIR": sys.argv[2]}))
"""


def test_read_only_dataset_folder_falls_back_to_the_output_folder(tmp_path, capsys):
    """On a read-only dataset folder (a shared mount) the few-shot file goes to <OUTPUT_DIR>/split_fewshot/<dataset>
    with a note; the shots are those of a writable copy, and a rerun reads the file back."""
    tree = write_tree("EuroSAT", tmp_path / "data", "json")
    shutil.copytree(tmp_path / "data", tmp_path / "copy")
    copy = build_dataset(make_cfg(tmp_path / "copy", "EuroSAT", **{"DATASET.NUM_SHOTS": 2}))
    out = tmp_path / "run"
    fallback = out / "split_fewshot" / "eurosat" / "shot_2-seed_1.json"
    with read_only(tree.dataset_dir) as prefix:
        done = subprocess.run([*prefix, sys.executable, "-c", READ_SHOTS, str(tmp_path / "data"), str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    note = (f"Note: {tree.dataset_dir}/split_fewshot is read-only; wrote the few-shot file to {fallback} instead "
            "(set DATASET.FEWSHOT_DIR to share one folder across runs)")
    assert note in done.stdout and not os.path.exists(os.path.join(tree.dataset_dir, "split_fewshot"))
    capsys.readouterr()
    again = build_dataset(make_cfg(tmp_path / "data", "EuroSAT", **{"DATASET.NUM_SHOTS": 2, "OUTPUT_DIR": str(out)}))
    assert f"Loading few-shot data from {fallback}" in capsys.readouterr().out
    assert relpaths(again.train_x, tree.dataset_dir) == relpaths(copy.train_x, os.path.join(tmp_path, "copy",
                                                                                              "eurosat"))
