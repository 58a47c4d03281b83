"""Each of the 15 readers on a tiny tree in the real layout: class names and order, labels, split sizes, split-file
creation, and CoOp's base/new class subsampling with relabelling (standard data role)."""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from datasets.catalog import register_datasets
from datasets.protocols import class_subset, subsample_classes
from engine.dataset_base import Datum, build_dataset
from tests.helpers_datasets import ALL_DATASETS, DEFAULT_N, MODES, TEST_ONLY, Tree, make_cfg, write_tree

register_datasets()

CASES = [pytest.param(name, mode, id=f"{name}-{mode}") for name in ALL_DATASETS for mode in MODES[name]]


def per_class(items: list[Datum], n: int) -> list[int]:
    counts = Counter(item.label for item in items)
    return [counts[label] for label in range(n)]


def check_items(tree: Tree, items: list[Datum], split: str, label_offset: int = 0) -> None:
    """Every item's label/name is its image's true class (shifted by ``label_offset``) and it sits in its split."""
    for item in items:
        label, tag = tree.truth[item.impath]
        assert item.label == label - label_offset, item.impath
        assert item.classname == tree.classnames[label]
        assert tag in (split, "any") or (tag == "trainval" and split in ("train", "val")), (item.impath, split)


def paths(items: list[Datum] | None) -> list[str]:
    return [item.impath for item in items or []]


@pytest.mark.parametrize("name,mode", CASES)
def test_reader_reads_the_real_layout(tmp_path, capsys, name, mode):
    tree = write_tree(name, tmp_path, mode)
    ds = build_dataset(make_cfg(tmp_path, name))
    out = capsys.readouterr().out

    assert ds.classnames == tree.classnames
    assert ds.lab2cname == dict(enumerate(tree.classnames))
    assert ds.num_classes == tree.n and ds.splits.eval_labels == list(range(tree.n))
    assert ds.train_u is None and ds.splits.router_x is None
    check_items(tree, ds.test, "test")
    assert per_class(ds.test, tree.n) == tree.counts["test"]
    if name in TEST_ONLY:  # CoOp: the test data doubles as train_x, no val
        assert paths(ds.train_x) == paths(ds.test) and ds.val is None
    else:
        check_items(tree, ds.train_x, "train")
        assert per_class(ds.train_x, tree.n) == tree.counts["train"]
        if name == "ImageNet":  # CoOp validates ImageNet on its test set
            assert paths(ds.val) == paths(ds.test)
        else:
            check_items(tree, ds.val, "val")
            assert per_class(ds.val, tree.n) == tree.counts["val"]
        assert not set(paths(ds.train_x)) & set(paths(ds.test))

    if tree.created:
        assert f"Created split file {tree.split_file} (not the published split" in out
        assert "DATASETS.md" in out
        with open(tree.split_file) as f:
            saved = json.load(f)
        assert {k: len(v) for k, v in saved.items()} == {k: sum(c) for k, c in tree.counts.items()}
        assert all(not os.path.isabs(rel) and str(tmp_path) not in rel for rel, _, _ in saved["train"])
        again = build_dataset(make_cfg(tmp_path, name))  # now read from the created file
        assert "Created split file" not in capsys.readouterr().out
        assert (paths(again.train_x), paths(again.val), paths(again.test)) == (
            paths(ds.train_x), paths(ds.val), paths(ds.test))
        os.remove(tree.split_file)  # creation is seeded: the same split again
        build_dataset(make_cfg(tmp_path, name))
        with open(tree.split_file) as f:
            assert json.load(f) == saved


@pytest.mark.parametrize("name", ALL_DATASETS)
def test_base_and_new_subsample_relabel(tmp_path, name):
    tree = write_tree(name, tmp_path, MODES[name][0])
    n = tree.n
    m = n // 2 + n % 2  # ceil(n / 2), written out
    base = build_dataset(make_cfg(tmp_path, name, **{"DATASET.SUBSAMPLE_CLASSES": "base"}))
    new = build_dataset(make_cfg(tmp_path, name, **{"DATASET.SUBSAMPLE_CLASSES": "new"}))

    assert base.classnames == tree.classnames[:m] and new.classnames == tree.classnames[m:]
    assert base.splits.eval_labels == list(range(m)) and new.splits.eval_labels == list(range(n - m))
    check_items(tree, base.test, "test")
    check_items(tree, new.test, "test", label_offset=m)  # new classes relabelled from 0
    assert len(base.test) == sum(tree.counts["test"][:m]) and len(new.test) == sum(tree.counts["test"][m:])
    if name not in TEST_ONLY:
        check_items(tree, base.train_x, "train")
        check_items(tree, new.train_x, "train", label_offset=m)
        assert len(base.train_x) == sum(tree.counts["train"][:m])
        assert len(new.train_x) == sum(tree.counts["train"][m:])
    if "val" in tree.counts:
        check_items(tree, new.val, "val", label_offset=m)
        assert len(new.val) == sum(tree.counts["val"][m:])


def test_class_halves_for_odd_and_even_counts():
    assert class_subset(range(5), "base") == [0, 1, 2] and class_subset(range(5), "new") == [3, 4]
    assert class_subset(range(4), "base") == [0, 1] and class_subset(range(4), "new") == [2, 3]
    assert class_subset([7, 2, 5, 2], "base") == [2, 5] and class_subset([7, 2, 5], "all") == [2, 5, 7]
    assert {n % 2 for n in DEFAULT_N.values()} == {0, 1}  # the trees above cover odd and even class counts


def test_subsample_classes_relabels_on_the_first_source(tmp_path):
    img = tmp_path / "x.jpg"
    img.write_bytes(b"")
    items = [Datum(str(img), label=lab, classname=f"c{lab}") for lab in (7, 2, 5, 2)]
    others = [Datum(str(img), label=lab, classname=f"c{lab}") for lab in (5, 7, 9)]
    base_items, base_others = subsample_classes(items, others, subsample="base")
    assert [(d.label, d.classname) for d in base_items] == [(0, "c2"), (1, "c5"), (0, "c2")]
    assert [(d.label, d.classname) for d in base_others] == [(1, "c5")]
    new_items, new_others, none = subsample_classes(items, others, None, subsample="new")
    assert [(d.label, d.classname) for d in new_items] == [(0, "c7")]
    assert [(d.label, d.classname) for d in new_others] == [(0, "c7")] and none is None
