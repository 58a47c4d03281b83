"""Bad input: missing folders, split files, native files and images are named with a pointer to DATASETS.md."""
from __future__ import annotations

import os
import re

import pytest

from datasets.catalog import DATASETS, register_datasets
from engine.dataset_base import build_dataset
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
    with pytest.raises(FileNotFoundError, match=r"DATASET.ROOT \(--root\) is empty"):
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
