"""Tiny image trees in the real layout of each of the 15 CoOp datasets, plus config/role helpers for tests.

``write_tree(name, root, mode)`` writes 8x8 images with the dataset's real folder and file names and either a
published-style split JSON (``mode="json"``) or only the dataset's native files (``mode="native"``, from which the
reader creates the split as CoOp does). The returned :class:`Tree` is the independent reference tests compare to:
expected class names in label order, per-class split sizes and the true label and split of every image.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image
from scipy.io import savemat

from engine.config import get_cfg_default
from trainers.config import extend_cfg

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
JSON_COUNTS = (3, 2, 2)
"""Images per class in train / val / test of a published-style split."""
TRAINVAL, TEST_PER_CLASS = 5, 2
"""Native official lists: 5 train(+val) and 2 test images per class → CoOp's split: 4 train, 1 val (round(0.2*5))."""
FOLDER_IMAGES = 5
"""Native class folders split 50/20/30 by CoOp: round(2.5)=2 train, round(1.0)=1 val, 2 test (Python rounding)."""

CREATES_SPLIT = {"Caltech101", "OxfordPets", "StanfordCars", "OxfordFlowers", "Food101", "SUN397",
                 "DescribableTextures", "EuroSAT", "UCF101"}
TEST_ONLY = {"ImageNetV2", "ImageNetSketch", "ImageNetA", "ImageNetR"}
ALL_DATASETS = ["ImageNet", "Caltech101", "OxfordPets", "StanfordCars", "OxfordFlowers", "Food101", "FGVCAircraft",
                "SUN397", "DescribableTextures", "EuroSAT", "UCF101", "ImageNetV2", "ImageNetSketch", "ImageNetA",
                "ImageNetR"]
DEFAULT_N = {"ImageNet": 4, "Caltech101": 5, "OxfordPets": 5, "StanfordCars": 4, "OxfordFlowers": 4, "Food101": 3,
             "FGVCAircraft": 5, "SUN397": 5, "DescribableTextures": 4, "EuroSAT": 5, "UCF101": 5, "ImageNetV2": 3,
             "ImageNetSketch": 3, "ImageNetA": 3, "ImageNetR": 4}
"""Classes per tiny tree (odd and even counts both occur)."""


@dataclass
class Tree:
    """What a tiny tree holds: the reference the readers are checked against."""

    name: str
    root: str
    folder: str
    classnames: list[str]
    counts: dict[str, list[int]]
    split_file: str | None = None
    created: bool = False
    truth: dict[str, tuple[int, str]] = field(default_factory=dict)
    """absolute image path → (true label, split tag: train|val|test|trainval|any)."""

    @property
    def dataset_dir(self) -> str:
        return os.path.join(self.root, self.folder)

    @property
    def n(self) -> int:
        return len(self.classnames)


def write_image(path: str, seed: int = 0, corrupt: bool = False) -> None:
    """An 8x8 noisy RGB image in the format of the extension (or garbage bytes when ``corrupt``)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if corrupt:
        with open(path, "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 not really a jpeg")
        return
    pixels = np.random.default_rng(seed).integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    fmt = "PNG" if path.lower().endswith(".png") else "JPEG"
    Image.fromarray(pixels).save(path, format=fmt)


def write_huge_png(path: str, side: int = 15_000) -> None:
    """A PNG declaring ``side`` x ``side`` 1-bit pixels (15,000: 225 Mpixels, past twice Pillow's default limit, a
    decompression bomb) whose pixel data is a few zero rows: the chunks are written here (structs and CRC-32), so no
    such image is ever built in memory."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)  # 1-bit grayscale, no interlacing
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                + chunk(b"IEND", b""))


def _text(path: str, lines: list[str]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _json_split(tree: Tree, prefix: str, files: list[list[str]], split_name: str) -> None:
    """Write images for a published-style split (first 3 train, 2 val, 2 test per class) and its JSON."""
    split: dict[str, list] = {"train": [], "val": [], "test": []}
    for label, rels in enumerate(files):
        tags = ["train"] * JSON_COUNTS[0] + ["val"] * JSON_COUNTS[1] + ["test"] * JSON_COUNTS[2]
        for i, (rel, tag) in enumerate(zip(rels, tags)):
            path = os.path.join(tree.dataset_dir, prefix, rel)
            write_image(path, seed=label * 100 + i)
            tree.truth[path] = (label, tag)
            split[tag].append([rel, label, tree.classnames[label]])
    tree.split_file = os.path.join(tree.dataset_dir, split_name)
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    tree.counts = {s: [c] * tree.n for s, c in zip(("train", "val", "test"), JSON_COUNTS)}


def _folder_classes(tree: Tree, prefix: str, files: list[list[str]], split_name: str) -> None:
    """Native class folders of FOLDER_IMAGES images each; the reader is expected to create the split 2/1/2."""
    for label, rels in enumerate(files):
        for i, rel in enumerate(rels[:FOLDER_IMAGES]):
            path = os.path.join(tree.dataset_dir, prefix, rel)
            write_image(path, seed=label * 100 + i)
            tree.truth[path] = (label, "any")
    tree.split_file, tree.created = os.path.join(tree.dataset_dir, split_name), True
    tree.counts = {"train": [2] * tree.n, "val": [1] * tree.n, "test": [2] * tree.n}


def _trainval_counts(tree: Tree, split_name: str) -> None:
    tree.split_file, tree.created = os.path.join(tree.dataset_dir, split_name), True
    tree.counts = {"train": [TRAINVAL - 1] * tree.n, "val": [1] * tree.n, "test": [TEST_PER_CLASS] * tree.n}


def _register(tree: Tree, path: str, label: int, tag: str, seed: int) -> None:
    write_image(path, seed=seed)
    tree.truth[path] = (label, tag)


# ---------------------------------------------------------------- folder-per-class datasets (50/20/30 creation)

EUROSAT = [("AnnualCrop", "Annual Crop Land"), ("Forest", "Forest"),
           ("HerbaceousVegetation", "Herbaceous Vegetation Land"), ("Highway", "Highway or Road"),
           ("Industrial", "Industrial Buildings")]
CALTECH = [("accordion", "accordion"), ("airplanes", "airplane"), ("Faces", "face"), ("Leopards", "leopard"),
           ("anchor", "anchor")]
FOOD = ["apple_pie", "baby_back_ribs", "baklava", "beef_carpaccio", "beef_tartare"]
DTD = ["banded", "blotchy", "braided", "bubbly", "bumpy"]


def _folder_dataset(tree: Tree, mode: str, classes: list[tuple[str, str]], prefix: str, split_name: str,
                    filename) -> None:
    classes = sorted(classes)  # CoOp labels the sorted folder names (upper case first)
    tree.classnames = [name for _, name in classes]
    files = [[f"{key}/{filename(key, i)}" for i in range(7)] for key, _ in classes]
    if mode == "json":
        _json_split(tree, prefix, files, split_name)
    else:
        _folder_classes(tree, prefix, files, split_name)


def _eurosat(tree: Tree, mode: str, n: int) -> None:
    _folder_dataset(tree, mode, EUROSAT[:n], "2750", "split_zhou_EuroSAT.json", lambda k, i: f"{k}_{i + 1}.jpg")


def _caltech(tree: Tree, mode: str, n: int) -> None:
    _folder_dataset(tree, mode, CALTECH[:n], "101_ObjectCategories", "split_zhou_Caltech101.json",
                    lambda k, i: f"image_{i + 1:04d}.jpg")
    for ignored in ("BACKGROUND_Google", "Faces_easy"):  # real folders that are not classes
        for i in range(FOLDER_IMAGES):
            write_image(os.path.join(tree.dataset_dir, "101_ObjectCategories", ignored, f"image_{i + 1:04d}.jpg"))


def _food(tree: Tree, mode: str, n: int) -> None:
    _folder_dataset(tree, mode, [(c, c) for c in FOOD[:n]], "images", "split_zhou_Food101.json",
                    lambda k, i: f"{100000 + 37 * i}.jpg")


def _dtd(tree: Tree, mode: str, n: int) -> None:
    _folder_dataset(tree, mode, [(c, c) for c in DTD[:n]], "images", "split_zhou_DescribableTextures.json",
                    lambda k, i: f"{k}_{i + 1:04d}.jpg")


# ---------------------------------------------------------------- official train(+val)/test lists

PETS = ["Abyssinian", "american_bulldog", "american_pit_bull_terrier", "basset_hound", "Bengal"]
CARS = ["AM General Hummer SUV 2000", "Acura RL Sedan 2012", "Acura TL Sedan 2012", "Acura TL Type-S 2008",
        "Acura TSX Sedan 2012"]
CARS_YEAR_FIRST = ["2000 AM General Hummer SUV", "2012 Acura RL Sedan", "2012 Acura TL Sedan",
                   "2008 Acura TL Type-S", "2012 Acura TSX Sedan"]
SUN = [("a/abbey", "abbey"), ("a/apartment_building/outdoor", "outdoor apartment_building"),
       ("b/bakery/shop", "shop bakery"), ("b/balcony/exterior", "exterior balcony"), ("c/campus", "campus")]
UCF = [("ApplyEyeMakeup", "Apply_Eye_Makeup"), ("Archery", "Archery"), ("BlowDryHair", "Blow_Dry_Hair"),
       ("PlayingDaf", "Playing_Daf"), ("YoYo", "Yo_Yo")]


def _pets(tree: Tree, mode: str, n: int) -> None:
    tree.classnames = [b.lower() for b in PETS[:n]]
    files = [[f"{breed}_{i + 1}.jpg" for i in range(7)] for breed in PETS[:n]]
    if mode == "json":
        return _json_split(tree, "images", files, "split_zhou_OxfordPets.json")
    lists: dict[str, list[str]] = {"trainval.txt": [], "test.txt": []}
    for label, breed in enumerate(PETS[:n]):
        species = 1 if breed[0].isupper() else 2  # cats are capitalised
        for i in range(TRAINVAL + TEST_PER_CLASS):
            tag = "trainval" if i < TRAINVAL else "test"
            _register(tree, os.path.join(tree.dataset_dir, "images", f"{breed}_{i + 1}.jpg"), label, tag, i)
            lists[f"{tag}.txt"].append(f"{breed}_{i + 1} {label + 1} {species} {i + 1}")
    for fname, lines in lists.items():
        _text(os.path.join(tree.dataset_dir, "annotations", fname), lines)
    _trainval_counts(tree, "split_zhou_OxfordPets.json")


def _cars(tree: Tree, mode: str, n: int) -> None:
    tree.classnames = CARS_YEAR_FIRST[:n]
    if mode == "json":
        files, idx = [], {"train": 0, "test": 0}
        for _ in range(n):
            rels = []
            for j in range(sum(JSON_COUNTS)):
                part = "train" if j < JSON_COUNTS[0] + JSON_COUNTS[1] else "test"
                idx[part] += 1
                rels.append(f"cars_{part}/{idx[part]:05d}.jpg")
            files.append(rels)
        return _json_split(tree, "", files, "split_zhou_StanfordCars.json")
    annos: dict[str, list[tuple[str, int]]] = {"train": [], "test": []}
    for label in range(n):
        for i in range(TRAINVAL + TEST_PER_CLASS):
            part = "train" if i < TRAINVAL else "test"
            fname = f"{len(annos[part]) + 1:05d}.jpg"
            annos[part].append((fname, label + 1))
            _register(tree, os.path.join(tree.dataset_dir, f"cars_{part}", fname), label,
                      "trainval" if part == "train" else "test", i)

    def struct(rows: list[tuple[str, int]]) -> np.ndarray:
        arr = np.zeros((1, len(rows)), dtype=[("bbox_x1", "O"), ("fname", "O"), ("class", "O")])
        for i, (fname, cls) in enumerate(rows):
            arr[0, i] = (np.array([[1]]), np.array([fname]), np.array([[cls]], dtype=np.uint8))
        return arr

    os.makedirs(os.path.join(tree.dataset_dir, "devkit"), exist_ok=True)
    savemat(os.path.join(tree.dataset_dir, "devkit", "cars_train_annos.mat"), {"annotations": struct(annos["train"])})
    savemat(os.path.join(tree.dataset_dir, "cars_test_annos_withlabels.mat"), {"annotations": struct(annos["test"])})
    names = np.empty((1, n), dtype=object)
    for i, name in enumerate(CARS[:n]):
        names[0, i] = np.array([name])
    savemat(os.path.join(tree.dataset_dir, "devkit", "cars_meta.mat"), {"class_names": names})
    _trainval_counts(tree, "split_zhou_StanfordCars.json")


def _sun(tree: Tree, mode: str, n: int) -> None:
    tree.classnames = [name for _, name in SUN[:n]]
    files = [[f"{d}/sun_{'abcdefg'[label]}{i:09d}.jpg" for i in range(7)] for label, (d, _) in enumerate(SUN[:n])]
    if mode == "json":
        return _json_split(tree, "SUN397", files, "split_zhou_SUN397.json")
    lists: dict[str, list[str]] = {"Training_01.txt": [], "Testing_01.txt": []}
    for label, rels in enumerate(files):
        for i, rel in enumerate(rels):
            tag = "trainval" if i < TRAINVAL else "test"
            _register(tree, os.path.join(tree.dataset_dir, "SUN397", rel), label, tag, i)
            lists["Training_01.txt" if tag == "trainval" else "Testing_01.txt"].append(f"/{rel}")
    _text(os.path.join(tree.dataset_dir, "ClassName.txt"), [f"/{d}" for d, _ in SUN[:n]])
    for fname, lines in lists.items():
        _text(os.path.join(tree.dataset_dir, fname), lines)
    _trainval_counts(tree, "split_zhou_SUN397.json")


def _ucf(tree: Tree, mode: str, n: int) -> None:
    tree.classnames = [name for _, name in UCF[:n]]
    files = [[f"{folder}/v_{action}_g{i + 1:02d}_c01.jpg" for i in range(7)] for action, folder in UCF[:n]]
    if mode == "json":
        return _json_split(tree, "UCF-101-midframes", files, "split_zhou_UCF101.json")
    train_lines, test_lines = [], []
    for label, (action, _) in enumerate(UCF[:n]):
        for i in range(TRAINVAL + TEST_PER_CLASS):
            tag = "trainval" if i < TRAINVAL else "test"
            _register(tree, os.path.join(tree.dataset_dir, "UCF-101-midframes", files[label][i]), label, tag, i)
            video = f"{action}/v_{action}_g{i + 1:02d}_c01.avi"
            (train_lines if tag == "trainval" else test_lines).append(
                f"{video} {label + 1}" if tag == "trainval" else video)
    list_dir = os.path.join(tree.dataset_dir, "ucfTrainTestlist")
    _text(os.path.join(list_dir, "classInd.txt"), [f"{i + 1} {a}" for i, (a, _) in enumerate(UCF[:n])])
    _text(os.path.join(list_dir, "trainlist01.txt"), train_lines)
    _text(os.path.join(list_dir, "testlist01.txt"), test_lines)
    _trainval_counts(tree, "split_zhou_UCF101.json")


# ---------------------------------------------------------------- Oxford Flowers (imagelabels.mat)

FLOWERS = ["pink primrose", "hard-leaved pocket orchid", "canterbury bells", "sweet pea", "english marigold"]


def _flowers(tree: Tree, mode: str, n: int) -> None:
    tree.classnames = FLOWERS[:n]
    if mode == "json":
        files = [[f"image_{label * 7 + i + 1:05d}.jpg" for i in range(7)] for label in range(n)]
        return _json_split(tree, "jpg", files, "split_zhou_OxfordFlowers.json")
    # interleaved labels, starting with the last class, as image ids are not grouped by class in the real file
    labels = [(n - 1 + i) % n for i in range(FOLDER_IMAGES * n)]
    for idx, label in enumerate(labels):
        _register(tree, os.path.join(tree.dataset_dir, "jpg", f"image_{idx + 1:05d}.jpg"), label, "any", idx)
    savemat(os.path.join(tree.dataset_dir, "imagelabels.mat"), {"labels": np.array([labels]) + 1})
    with open(os.path.join(tree.dataset_dir, "cat_to_name.json"), "w") as f:
        json.dump({str(i + 1): name for i, name in enumerate(FLOWERS)}, f)
    tree.split_file, tree.created = os.path.join(tree.dataset_dir, "split_zhou_OxfordFlowers.json"), True
    tree.counts = {"train": [2] * n, "val": [1] * n, "test": [2] * n}


# ---------------------------------------------------------------- FGVC-Aircraft (native lists only)

FGVC = ["A300B4", "707-320", "Cessna 172", "F/A-18", "727-200"]
"""Deliberately not sorted: labels must follow the order of variants.txt."""


def _fgvc(tree: Tree, mode: str, n: int) -> None:
    tree.classnames = FGVC[:n]
    lines: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for label, variant in enumerate(FGVC[:n]):
        tags = ["train"] * JSON_COUNTS[0] + ["val"] * JSON_COUNTS[1] + ["test"] * JSON_COUNTS[2]
        for i, tag in enumerate(tags):
            image_id = f"{1000000 + 100 * label + i:07d}"
            _register(tree, os.path.join(tree.dataset_dir, "images", f"{image_id}.jpg"), label, tag, i)
            lines[tag].append(f"{image_id} {variant}")
    _text(os.path.join(tree.dataset_dir, "variants.txt"), FGVC[:n])
    for tag, rows in lines.items():
        _text(os.path.join(tree.dataset_dir, f"images_variant_{tag}.txt"), rows)
    tree.counts = {s: [c] * n for s, c in zip(("train", "val", "test"), JSON_COUNTS)}


# ---------------------------------------------------------------- ImageNet family

WNIDS = [("n01440764", "tench"), ("n01443537", "goldfish"), ("n01484850", "great white shark"),
         ("n01491361", "tiger shark"), ("n01494475", "hammerhead shark"), ("n01496331", "electric ray"),
         ("n01498041", "stingray")]


def _imagenet(tree: Tree, mode: str, n: int) -> None:
    used = WNIDS[:n]
    tree.classnames = [name for _, name in used]
    # classnames.txt lists more classes than the tree holds, in reverse order: labels follow the sorted folders
    _text(os.path.join(tree.dataset_dir, "classnames.txt"), [f"{w} {c}" for w, c in reversed(WNIDS)])
    val_idx = 0
    for label, (wnid, _) in enumerate(used):
        for i in range(JSON_COUNTS[0]):
            _register(tree, os.path.join(tree.dataset_dir, "images", "train", wnid, f"{wnid}_{1000 + i}.JPEG"),
                      label, "train", i)
        for i in range(JSON_COUNTS[2]):
            val_idx += 1
            _register(tree, os.path.join(tree.dataset_dir, "images", "val", wnid,
                                         f"ILSVRC2012_val_{val_idx:08d}.JPEG"), label, "test", i)
    tree.counts = {"train": [JSON_COUNTS[0]] * n, "test": [JSON_COUNTS[2]] * n}


def _variant(tree: Tree, used: list[tuple[str, str]], image_folder: str, filename) -> None:
    tree.classnames = [name for _, name in used]
    _text(os.path.join(tree.dataset_dir, "classnames.txt"), [f"{w} {c}" for w, c in WNIDS])
    for label, (wnid, name) in enumerate(used):
        for i in range(3):
            _register(tree, os.path.join(tree.dataset_dir, image_folder, wnid, filename(name, i)), label, "test", i)
    tree.counts = {"test": [3] * len(used)}


def _sketch(tree: Tree, mode: str, n: int) -> None:
    _variant(tree, WNIDS[:n], "images", lambda name, i: f"sketch_{i + 1}.JPEG")


def _imagenet_a(tree: Tree, mode: str, n: int) -> None:
    _variant(tree, WNIDS[2:2 + n], "imagenet-a", lambda name, i: f"0.{i:06d}_{name} _ {name}_0.{i}5.jpg")
    _text(os.path.join(tree.dataset_dir, "imagenet-a", "README.txt"), ["ImageNet-A: 200 classes"])


def _imagenet_r(tree: Tree, mode: str, n: int) -> None:
    _variant(tree, WNIDS[1:1 + n], "imagenet-r", lambda name, i: f"art_{i}.jpg")
    _text(os.path.join(tree.dataset_dir, "imagenet-r", "README.txt"), ["ImageNet-R: 200 classes"])


def _imagenetv2(tree: Tree, mode: str, n: int) -> None:
    tree.classnames = [name for _, name in WNIDS[:n]]
    _text(os.path.join(tree.dataset_dir, "classnames.txt"), [f"{w} {c}" for w, c in WNIDS[:n]])  # sorted wnids
    for label in range(n):
        for i in range(3):
            path = os.path.join(tree.dataset_dir, "imagenetv2-matched-frequency-format-val", str(label),
                                f"{label:02d}{i}7e4b1c0a9d.jpeg")
            _register(tree, path, label, "test", i)
    tree.counts = {"test": [3] * n}


WRITERS = {
    "ImageNet": ("imagenet", _imagenet), "Caltech101": ("caltech-101", _caltech),
    "OxfordPets": ("oxford_pets", _pets), "StanfordCars": ("stanford_cars", _cars),
    "OxfordFlowers": ("oxford_flowers", _flowers), "Food101": ("food-101", _food),
    "FGVCAircraft": ("fgvc_aircraft", _fgvc), "SUN397": ("sun397", _sun),
    "DescribableTextures": ("dtd", _dtd), "EuroSAT": ("eurosat", _eurosat), "UCF101": ("ucf101", _ucf),
    "ImageNetV2": ("imagenetv2", _imagenetv2), "ImageNetSketch": ("imagenet-sketch", _sketch),
    "ImageNetA": ("imagenet-adversarial", _imagenet_a), "ImageNetR": ("imagenet-rendition", _imagenet_r),
}
"""Registry name → (folder under the root, writer)."""

MODES = {name: (("json", "native") if name in CREATES_SPLIT else ("native",)) for name in ALL_DATASETS}
"""Tree modes per dataset: published split JSON and/or the native files only."""


def write_tree(name: str, root: str, mode: str = "native", n: int | None = None) -> Tree:
    """Write the tiny tree of dataset ``name`` under ``root`` and return its reference description."""
    folder, writer = WRITERS[name]
    tree = Tree(name, str(root), folder, [], {})
    writer(tree, mode, n or DEFAULT_N[name])
    return tree


def load_images(tree: Tree, tag: str, classes: list[int], size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of one split tag and classes with CLIP's test preprocessing (torchvision), and their labels."""
    preprocess = T.Compose([T.Resize(size, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(size),
                            T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)])
    items = sorted((path, label) for path, (label, t) in tree.truth.items() if t == tag and label in classes)
    images = torch.stack([preprocess(Image.open(path).convert("RGB")) for path, _ in items])
    return images, torch.tensor([label for _, label in items])


def make_cfg(root: str, name: str, trainer: str = "", **opts):
    """The real default config (``get_cfg_default`` + ``extend_cfg``) for dataset ``name`` under ``root``."""
    cfg = extend_cfg(get_cfg_default())
    cfg.DATASET.ROOT = str(root)
    cfg.DATASET.NAME = name
    cfg.TRAINER.NAME = trainer
    cfg.SEED = 1
    cfg.VERBOSE = False
    for key, value in opts.items():
        node = cfg
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    return cfg
