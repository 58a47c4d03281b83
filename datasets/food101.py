"""Food-101 (101 dishes): ``food-101/images/<dish>/<id>.jpg`` + ``split_zhou_Food101.json``."""
from __future__ import annotations

import os

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, read_or_create_split, require_dir, split_class_folders


@DATASET_REGISTRY.register()
class Food101(ProtocolDataset):
    """Food-101 reader; a missing split is created 50/20/30 per class (as CoOp does)."""

    dataset_dir = "food-101"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "images"), name)
        return read_or_create_split(
            name, dataset_dir, os.path.join(dataset_dir, "split_zhou_Food101.json"), image_dir,
            lambda rng: split_class_folders(image_dir, rng, name))
