"""Data roles (docs/ARCHITECTURE.md): PETR's labelled base / unlabelled novel training sets, PromptKD's all-classes set,
all-class evaluation labels, and the cross-dataset / dg roles with ImageNet as source."""
from __future__ import annotations

from collections import Counter

import pytest

from datasets.catalog import register_datasets
from engine.dataset_base import UNLABELED, build_dataset
from engine.registry import DATASET_REGISTRY
from tests.helpers_datasets import ALL_DATASETS, MODES, TEST_ONLY, make_cfg, write_tree
from tests.test_datasets_readers import check_items, paths, per_class
from trainers.catalog import register_trainers

register_datasets()
register_trainers()

TRAIN_DATASETS = [name for name in ALL_DATASETS if name not in TEST_ONLY]


def assert_no_test_image_in_training(ds) -> None:
    training = set(paths(ds.train_x)) | set(paths(ds.train_u)) | set(paths(ds.router_x)) | set(paths(ds.val))
    assert not training & set(paths(ds.test))


@pytest.mark.parametrize("num_shots", [-1, 2])
@pytest.mark.parametrize("name", TRAIN_DATASETS)
def test_seen_unseen_base2novel_roles(tmp_path, name, num_shots):
    tree = write_tree(name, tmp_path, MODES[name][0])
    n, m = tree.n, tree.n // 2 + tree.n % 2
    built = {sub: build_dataset(make_cfg(tmp_path, name, **{"DATASET.SUBSAMPLE_CLASSES": sub,
                                                             "DATASET.NUM_SHOTS": num_shots}), "seen_unseen")
             for sub in ("base", "new")}
    expected_train = [min(c, num_shots) if num_shots >= 1 else c for c in tree.counts["train"]]
    for sub, dataset in built.items():
        ds = dataset.splits
        # θ_s: labelled base-class train images, labels in the all-class space
        check_items(tree, ds.train_x, "train")
        assert per_class(ds.train_x, n) == expected_train[:m] + [0] * (n - m)
        # θ_u: every novel-class train image (K per class when few-shot), no usable label
        assert all(d.label == UNLABELED and d.classname == "" for d in ds.train_u)
        assert all(tree.truth[d.impath][0] >= m for d in ds.train_u)
        assert len(ds.train_u) == sum(expected_train[m:])
        assert paths(ds.router_x) == paths(ds.train_x)
        # evaluation: all-class labels and names, restricted to the evaluated subset
        assert ds.lab2cname == dict(enumerate(tree.classnames)) and dataset.num_classes == n
        evaluated = list(range(m)) if sub == "base" else list(range(m, n))
        assert ds.eval_labels == evaluated
        assert (ds.protocol, ds.role, ds.subsample) == ("base2novel", "seen_unseen", sub)
        check_items(tree, ds.test, "test")
        assert sorted({d.label for d in ds.test}) == evaluated
        assert len(ds.test) == sum(tree.counts["test"][i] for i in evaluated)
        if name == "ImageNet":
            assert ds.val is None  # no real val split, and never the test set
        else:
            check_items(tree, ds.val, "val")
            assert sorted({d.label for d in ds.val}) == evaluated
        assert_no_test_image_in_training(ds)
    assert paths(built["base"].train_x) == paths(built["new"].train_x)
    if num_shots >= 1:  # the same shots as CoOp's base-class training set (shared cache)
        coop = build_dataset(make_cfg(tmp_path, name, **{"DATASET.SUBSAMPLE_CLASSES": "base",
                                                         "DATASET.NUM_SHOTS": num_shots}))
        assert paths(coop.train_x) == paths(built["base"].train_x)


@pytest.mark.parametrize("name", ["EuroSAT", "OxfordPets", "ImageNet"])
def test_distill_all_base2novel_roles(tmp_path, name):
    tree = write_tree(name, tmp_path, MODES[name][0])
    n, m = tree.n, tree.n // 2 + tree.n % 2
    ds = build_dataset(make_cfg(tmp_path, name, **{"DATASET.SUBSAMPLE_CLASSES": "new"}), "distill_all").splits
    check_items(tree, ds.train_x, "train")
    assert per_class(ds.train_x, n) == tree.counts["train"]  # every train image of every class
    assert ds.train_u is None and ds.router_x is None and ds.source_lab2cname is None
    assert ds.eval_labels == list(range(m, n)) and ds.lab2cname == dict(enumerate(tree.classnames))
    check_items(tree, ds.test, "test")  # not relabelled
    assert len(ds.test) == sum(tree.counts["test"][m:])
    if "val" in tree.counts:
        check_items(tree, ds.val, "val")
        assert len(ds.val) == sum(tree.counts["val"][m:])
    assert_no_test_image_in_training(ds)


def test_seen_unseen_cross_dataset_roles(tmp_path):
    source = write_tree("ImageNet", tmp_path)
    target = write_tree("EuroSAT", tmp_path, "json")
    ds = build_dataset(make_cfg(tmp_path, "EuroSAT", **{"TRAINER.MODAL": "cross"}), "seen_unseen").splits
    check_items(source, ds.train_x, "train")  # labelled ImageNet train images, ImageNet label space
    assert len(ds.train_x) == sum(source.counts["train"])
    assert ds.source_lab2cname == dict(enumerate(source.classnames))
    assert paths(ds.router_x) == paths(ds.train_x)
    assert all(d.label == UNLABELED for d in ds.train_u)
    assert sorted(paths(ds.train_u)) == sorted(p for p, (_, tag) in target.truth.items() if tag == "train")
    check_items(target, ds.test, "test")
    assert len(ds.test) == sum(target.counts["test"])
    assert ds.lab2cname == dict(enumerate(target.classnames)) and ds.eval_labels == list(range(target.n))
    assert ds.protocol == "cross"
    assert_no_test_image_in_training(ds)


def test_seen_unseen_dg_roles_are_transductive_on_the_target(tmp_path):
    source = write_tree("ImageNet", tmp_path)
    target = write_tree("ImageNetA", tmp_path)
    ds = build_dataset(make_cfg(tmp_path, "ImageNetA", **{"TRAINER.MODAL": "dg", "DATASET.NUM_SHOTS": 2}),
                       "seen_unseen").splits
    check_items(source, ds.train_x, "train")
    assert per_class(ds.train_x, source.n) == [2] * source.n  # K-shot ImageNet
    true_u = Counter(target.truth[p][0] for p in paths(ds.train_u))
    assert [true_u[label] for label in range(target.n)] == [2] * target.n  # K target images per class
    assert all(d.label == UNLABELED for d in ds.train_u)
    assert set(paths(ds.train_u)) <= set(paths(ds.test))  # dg: the target's test images (as PromptKD)
    assert ds.val is None and ds.lab2cname == dict(enumerate(target.classnames))
    assert ds.eval_labels == list(range(target.n)) and len(ds.test) == sum(target.counts["test"])


def test_distill_all_cross_and_dg(tmp_path):
    target = write_tree("DescribableTextures", tmp_path, "json")
    variant = write_tree("ImageNetR", tmp_path)
    cross = build_dataset(make_cfg(tmp_path, "DescribableTextures", **{"TRAINER.MODAL": "cross"}), "distill_all")
    check_items(target, cross.train_x, "train")
    assert len(cross.train_x) == sum(target.counts["train"]) and cross.train_u is None
    dg = build_dataset(make_cfg(tmp_path, "ImageNetR", **{"TRAINER.MODAL": "dg"}), "distill_all")
    assert sorted(paths(dg.train_x)) == sorted(variant.truth) and paths(dg.test) == paths(dg.train_x)
    dg_target = build_dataset(make_cfg(tmp_path, "DescribableTextures", **{"TRAINER.MODAL": "dg"}), "distill_all")
    assert paths(dg_target.train_x) == paths(dg_target.test)  # dg on a dataset with a train split: its test images


def test_standard_role_ignores_the_protocol(tmp_path):
    write_tree("EuroSAT", tmp_path, "json")
    plain = build_dataset(make_cfg(tmp_path, "EuroSAT", "NotRegisteredTrainer"))
    cross = build_dataset(make_cfg(tmp_path, "EuroSAT", **{"TRAINER.MODAL": "cross"}), "standard")
    assert (plain.splits.role, cross.splits.role) == ("standard", "standard")
    assert paths(plain.train_x) == paths(cross.train_x) and paths(plain.test) == paths(cross.test)


def test_dassl_style_construction_takes_the_registered_trainers_role(tmp_path):
    """Dassl's ``Dataset(cfg)`` call has no role: the reader falls back to the DATA_ROLE of TRAINER.NAME."""
    write_tree("EuroSAT", tmp_path, "json")
    ds = DATASET_REGISTRY.get("EuroSAT")(make_cfg(tmp_path, "EuroSAT", "PETR"))
    assert ds.splits.role == "seen_unseen" and ds.splits.router_x
    assert build_dataset(make_cfg(tmp_path, "EuroSAT", "PETR"), "standard").splits.role == "standard"


def test_role_and_protocol_errors(tmp_path):
    write_tree("ImageNetA", tmp_path)
    write_tree("EuroSAT", tmp_path, "json")
    petr = "seen_unseen"
    with pytest.raises(ValueError, match="ImageNetA has only a test set.*TRAINER.MODAL dg"):
        build_dataset(make_cfg(tmp_path, "ImageNetA"), petr)
    with pytest.raises(ValueError, match="TRAINER.MODAL is 'xd'"):
        build_dataset(make_cfg(tmp_path, "EuroSAT", **{"TRAINER.MODAL": "xd"}), petr)
    with pytest.raises(ValueError, match="DATASET.SUBSAMPLE_CLASSES is 'half'"):
        build_dataset(make_cfg(tmp_path, "EuroSAT", **{"DATASET.SUBSAMPLE_CLASSES": "half"}))
    with pytest.raises(ValueError, match="Did you mean 'ImageNet'"):
        build_dataset(make_cfg(tmp_path, "EuroSAT", **{"TRAINER.MODAL": "cross",
                                                        "DATASET.SOURCE_DATASET": "ImageNett"}), petr)
    with pytest.raises(FileNotFoundError, match="Dataset folder not found: .*imagenet "):
        build_dataset(make_cfg(tmp_path, "EuroSAT", **{"TRAINER.MODAL": "cross"}), petr)
    with pytest.raises(ValueError, match="declares DATA_ROLE 'teacher'"):
        build_dataset(make_cfg(tmp_path, "EuroSAT"), "teacher")
