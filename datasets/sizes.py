"""The published sizes of the 15 CoOp datasets (standard library only): the one table that the data-root check
compares a root with and the runner projects GPU time from.

Keys are the dataset short names (``configs/datasets/<name>.yaml``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Classes and images per split of a published split; None where the dataset has no such split."""

    classes: int
    train: int | None
    val: int | None
    test: int


PUBLISHED_SIZES: dict[str, Sizes] = {
    "imagenet": Sizes(1000, 1_281_167, None, 50_000),
    "caltech101": Sizes(100, 4_128, 1_649, 2_465),
    "oxford_pets": Sizes(37, 2_944, 736, 3_669),
    "stanford_cars": Sizes(196, 6_509, 1_635, 8_041),
    "oxford_flowers": Sizes(102, 4_093, 1_633, 2_463),
    "food101": Sizes(101, 50_500, 20_200, 30_300),
    "fgvc_aircraft": Sizes(100, 3_334, 3_333, 3_333),
    "sun397": Sizes(397, 15_880, 3_970, 19_850),
    "dtd": Sizes(47, 2_820, 1_128, 1_692),
    "eurosat": Sizes(10, 13_500, 5_400, 8_100),
    "ucf101": Sizes(101, 7_639, 1_898, 3_783),
    "imagenetv2": Sizes(1000, None, None, 10_000),
    "imagenet_sketch": Sizes(1000, None, None, 50_889),
    "imagenet_a": Sizes(200, None, None, 7_500),
    "imagenet_r": Sizes(200, None, None, 30_000),
}
"""CoOp's dataset statistics table (its ``split_zhou_*.json`` files and FGVC-Aircraft's own lists); ImageNet: the
ILSVRC-2012 train set and its 50,000 val images, which are the test set (no val split). The four ImageNet variants
are test sets only (their readers train on the test images, CoOp's convention)."""
