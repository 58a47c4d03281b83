"""Where each dataset lies under the data root and how its splits are listed (standard library only), for the
data-root check and the runner's preflight; DATASETS.md describes the same layouts for people.

Keys are the dataset short names (``configs/datasets/<name>.yaml``); the readers in ``datasets/<name>.py`` read these
layouts, and ``tests/test_datasets_check.py`` checks that the check lists what each reader reads.
"""
from __future__ import annotations

from dataclasses import dataclass

from .demo_specs import DEMO_DATASETS, IMAGE_DIR, split_file

KINDS = ("split", "variants", "imagenet", "wnid", "numbered")
"""How the splits are listed: a split JSON; FGVC-Aircraft's ``variants.txt`` and ``images_variant_<split>.txt``;
ImageNet's ``images/{train,val}/<wnid>/`` folders; a test set in ``<wnid>/`` folders, or in ``0/ .. 999/``
folders (ImageNetV2), named by ``classnames.txt``."""
CLASSNAMES = "classnames.txt"


@dataclass(frozen=True)
class Layout:
    """One dataset under the data root."""

    name: str
    """Its DATASET.NAME (registered reader)."""
    folder: str
    """Its folder under the data root."""
    kind: str
    """One of :data:`KINDS`."""
    image_dir: str
    """The folder (inside ``folder``) the listed image paths are relative to ("" = ``folder`` itself)."""
    split_file: str = ""
    """The split JSON (kind ``split``)."""
    test_only: bool = False
    """Only a test split (the readers train on it)."""


def _json(name: str, folder: str, image_dir: str) -> Layout:
    return Layout(name, folder, "split", image_dir, f"split_zhou_{name}.json")


LAYOUTS: dict[str, Layout] = {
    "imagenet": Layout("ImageNet", "imagenet", "imagenet", "images"),
    "caltech101": _json("Caltech101", "caltech-101", "101_ObjectCategories"),
    "oxford_pets": _json("OxfordPets", "oxford_pets", "images"),
    "stanford_cars": _json("StanfordCars", "stanford_cars", ""),
    "oxford_flowers": _json("OxfordFlowers", "oxford_flowers", "jpg"),
    "food101": _json("Food101", "food-101", "images"),
    "fgvc_aircraft": Layout("FGVCAircraft", "fgvc_aircraft", "variants", "images"),
    "sun397": _json("SUN397", "sun397", "SUN397"),
    "dtd": _json("DescribableTextures", "dtd", "images"),
    "eurosat": _json("EuroSAT", "eurosat", "2750"),
    "ucf101": _json("UCF101", "ucf101", "UCF-101-midframes"),
    "imagenetv2": Layout("ImageNetV2", "imagenetv2", "numbered", "imagenetv2-matched-frequency-format-val",
                         test_only=True),
    "imagenet_sketch": Layout("ImageNetSketch", "imagenet-sketch", "wnid", "images", test_only=True),
    "imagenet_a": Layout("ImageNetA", "imagenet-adversarial", "wnid", "imagenet-a", test_only=True),
    "imagenet_r": Layout("ImageNetR", "imagenet-rendition", "wnid", "imagenet-r", test_only=True),
    **{spec.folder: Layout(name, spec.folder, "split", IMAGE_DIR, split_file(name), spec.test_only)
       for name, spec in DEMO_DATASETS.items()},
}
"""Short name -> layout of every dataset (CoOp's fifteen, then the demo datasets)."""
PAPER_DATASETS = tuple(list(LAYOUTS)[:15])
"""CoOp's fifteen (what ``all`` names in the check)."""


def find_layout(name: str) -> str:
    """The short name of ``name`` (a short name or a DATASET.NAME, any case); ValueError listing the names."""
    for short, layout in LAYOUTS.items():
        if name.lower() in (short, layout.name.lower()):
            return short
    raise ValueError(f"unknown dataset {name!r}; use one of: {', '.join(LAYOUTS)} (or their DATASET.NAME)")
