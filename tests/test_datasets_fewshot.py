"""Few-shot sampling: K per class (val min(K, 4)), determinism per seed, the portable JSON cache and its errors."""
from __future__ import annotations

import json
import os
import random
import shutil

import pytest

from datasets.catalog import register_datasets
from datasets.fewshot import fewshot_path, fewshot_splits
from datasets.splits import SplitData
from engine.dataset_base import Datum, build_dataset
from tests.helpers_datasets import ALL_DATASETS, MODES, TEST_ONLY, make_cfg, write_tree
from tests.test_datasets_readers import check_items, per_class

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
