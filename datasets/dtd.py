"""Describable Textures (47 classes): ``dtd/images/<texture>/<texture>_<id>.jpg`` +
``split_zhou_DescribableTextures.json``."""
from __future__ import annotations

import os

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, read_or_create_split, require_dir, split_class_folders


@DATASET_REGISTRY.register()
class DescribableTextures(ProtocolDataset):
    """DTD reader; a missing split is created 50/20/30 per class."""

    dataset_dir = "dtd"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "images"), name)
        return read_or_create_split(
            name, dataset_dir, os.path.join(dataset_dir, "split_zhou_DescribableTextures.json"), image_dir,
            lambda rng: split_class_folders(image_dir, rng, name))
