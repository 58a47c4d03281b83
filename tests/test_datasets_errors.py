"""Bad input: missing folders, split files, native files and images are named with a pointer to DATASETS.md."""
from __future__ import annotations

import json
import os
import re

import pytest

from datasets.catalog import DATASETS, register_datasets
from engine.dataset_base import build_dataset
from engine.errors import InvalidInputError
from tests.helpers_datasets import ALL_DATASETS, WRITERS, make_cfg, write_tree

register_datasets()

DATASETS_MD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "DATASETS.md")


def hint(name: str) -> str:
    return f"(expected layout for {name}: see DATASETS.md#{name.lower()})"


@pytest.mark.parametrize("name", ALL_DATASETS)
def test_missing_dataset_folder_names_path_and_docs(tmp_path, name):
    expected = f"Dataset folder not found: {tmp_path / WRITERS[name][0]} {hint(name)}"
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(expected)}$"):
        build_dataset(make_cfg(tmp_path, name))


def test_every_docs_anchor_exists():
    """Every registered dataset's ``DATASETS.md#<name>`` pointer is a heading's GitHub anchor."""
    with open(DATASETS_MD) as f:
        anchors = {re.sub(r"[^a-z0-9 _-]", "", line[3:].strip().lower()).replace(" ", "-")
                   for line in f if line.startswith("## ")}
    names = set(ALL_DATASETS) | set(DATASETS)
    assert {name.lower() for name in names} <= anchors


def test_empty_root_is_called_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"DATASET.ROOT \(--data\) is empty"):
        build_dataset(make_cfg("", "EuroSAT"))


def test_missing_image_folder(tmp_path):
    (tmp_path / "eurosat").mkdir()
    with pytest.raises(FileNotFoundError, match=re.escape(f"Image folder not found: {tmp_path}/eurosat/2750 "
                                                          f"{hint('EuroSAT')}")):
        build_dataset(make_cfg(tmp_path, "EuroSAT"))


@pytest.mark.parametrize("name,native", [("OxfordPets", "annotations/trainval.txt"),
                                         ("StanfordCars", "devkit/cars_train_annos.mat"),
                                         ("SUN397", "ClassName.txt"), ("UCF101", "ucfTrainTestlist/classInd.txt"),
                                         ("OxfordFlowers", "imagelabels.mat")])
def test_missing_split_and_native_file(tmp_path, name, native):
    tree = write_tree(name, tmp_path, "native")
    os.remove(os.path.join(tree.dataset_dir, native))
    message = (f"Split file not found: {tree.split_file}, and {os.path.join(tree.dataset_dir, native)} needed to "
               f"create it is missing too {hint(name)}")
    with pytest.raises(FileNotFoundError, match=re.escape(message)):
        build_dataset(make_cfg(tmp_path, name))


@pytest.mark.parametrize("name", ["EuroSAT", "StanfordCars", "FGVCAircraft", "OxfordPets"])
def test_image_listed_but_missing(tmp_path, name):
    tree = write_tree(name, tmp_path, "json" if name != "FGVCAircraft" else "native")
    missing = next(p for p, (_, tag) in tree.truth.items() if tag in ("train", "trainval"))
    os.remove(missing)
    source = tree.split_file or os.path.join(tree.dataset_dir, "images_variant_train.txt")
    with pytest.raises(FileNotFoundError, match=re.escape(f"Image not found: {missing} (listed in {source}; "
                                                          f"expected layout for {name}")):
        build_dataset(make_cfg(tmp_path, name))


def test_malformed_split_file(tmp_path):
    tree = write_tree("DescribableTextures", tmp_path, "json")
    with open(tree.split_file, "w") as f:
        f.write('{"train": []}')
    with pytest.raises(ValueError, match=f"Split file {re.escape(tree.split_file)} must hold .* train, val and test"):
        build_dataset(make_cfg(tmp_path, "DescribableTextures"))


def test_imagenet_val_not_in_class_folders(tmp_path):
    tree = write_tree("ImageNet", tmp_path)
    val_dir = os.path.join(tree.dataset_dir, "images", "val")
    for wnid in os.listdir(val_dir):  # the raw ILSVRC2012 val archive is flat
        for fname in os.listdir(os.path.join(val_dir, wnid)):
            os.replace(os.path.join(val_dir, wnid, fname), os.path.join(val_dir, fname))
        os.rmdir(os.path.join(val_dir, wnid))
    with pytest.raises(ValueError, match="sort the val images into class folders"):
        build_dataset(make_cfg(tmp_path, "ImageNet"))


def test_imagenet_classnames_file_missing(tmp_path):
    tree = write_tree("ImageNetSketch", tmp_path)
    path = os.path.join(tree.dataset_dir, "classnames.txt")
    os.remove(path)
    with pytest.raises(FileNotFoundError, match=re.escape(f"Class-name file not found: {path} "
                                                          f"{hint('ImageNetSketch')}")):
        build_dataset(make_cfg(tmp_path, "ImageNetSketch"))


def test_wnid_folder_without_class_name(tmp_path):
    tree = write_tree("ImageNetR", tmp_path)
    os.makedirs(os.path.join(tree.dataset_dir, "imagenet-r", "n99999999"))
    with pytest.raises(ValueError, match=r"\['n99999999'\] have no line in .*classnames.txt"):
        build_dataset(make_cfg(tmp_path, "ImageNetR"))


def _edit_split(tree, edit) -> dict:
    with open(tree.split_file) as f:
        split = json.load(f)
    edit(split)
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    return split


def test_label_out_of_range_names_the_label(tmp_path):
    tree = write_tree("EuroSAT", tmp_path, "json")  # 5 classes, labels 0..4

    def relabel(split):
        for entry in split["train"] + split["val"] + split["test"]:
            if entry[1] == 3:
                entry[1] = 7
    _edit_split(tree, relabel)
    name = tree.classnames[3]
    message = (f"EuroSAT: labels in {tree.split_file} must be 0..4 without gaps (5 classes), but it has label 7 "
               f"({name!r}) and none 3; fix the labels")
    with pytest.raises(InvalidInputError, match=f"^{re.escape(message)}$"):
        build_dataset(make_cfg(tmp_path, "EuroSAT"))


def test_repeated_entries_are_used_once_with_a_note(tmp_path, capsys):
    """A split listing an image twice: each image counts once (a 2-shot sample holds two different images)."""
    tree = write_tree("EuroSAT", tmp_path, "json")
    split = _edit_split(tree, lambda s: s["train"].extend([e for e in s["train"] if e[1] == 0] * 3))
    first = [e[0] for e in split["train"] if e[1] == 0]
    ds = build_dataset(make_cfg(tmp_path, "EuroSAT", **{"DATASET.NUM_SHOTS": 2}))
    out = capsys.readouterr().out
    note = (f"Note: {tree.split_file} lists 3 images (2750/{first[0]}, 2750/{first[1]}, 2750/{first[2]}) more than "
            "once in its train split; each is used once")
    assert note in out
    per_label = [[d.impath for d in ds.train_x if d.label == label] for label in range(tree.n)]
    assert all(len(paths) == 2 and len(set(paths)) == 2 for paths in per_label)


def test_same_image_with_two_labels_is_an_error(tmp_path):
    tree = write_tree("EuroSAT", tmp_path, "json")
    split = _edit_split(tree, lambda s: s["train"].append([s["train"][0][0], 1, s["train"][3][2]]))
    with pytest.raises(InvalidInputError, match=re.escape(f"lists 2750/{split['train'][0][0]} in its train split "
                                                          "with labels 0 and 1")):
        build_dataset(make_cfg(tmp_path, "EuroSAT"))


def test_overlapping_splits_name_the_file_and_images(tmp_path):
    tree = write_tree("EuroSAT", tmp_path, "json")
    split = _edit_split(tree, lambda s: s["test"].extend(s["train"][:2]))
    rel = [f"2750/{e[0]}" for e in split["train"][:2]]
    message = (f"{tree.split_file} lists 2 images ({', '.join(sorted(rel))}) in both its train and test splits; an "
               "image belongs to one split: fix or re-download the split file (expected layout for EuroSAT: see "
               "DATASETS.md#eurosat)")
    with pytest.raises(InvalidInputError, match=f"^{re.escape(message)}$"):
        build_dataset(make_cfg(tmp_path, "EuroSAT"))
