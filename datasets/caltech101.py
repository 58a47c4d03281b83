"""Caltech-101 (100 object classes): ``caltech-101/101_ObjectCategories/<class>/image_<i>.jpg`` +
``split_zhou_Caltech101.json``."""
from __future__ import annotations

import os

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import (
    CALTECH_IGNORED,
    CALTECH_NEW_CNAMES,
    SplitData,
    read_or_create_split,
    require_dir,
    split_class_folders,
)


@DATASET_REGISTRY.register()
class Caltech101(ProtocolDataset):
    """Caltech-101 reader; a missing split is created 50/20/30 per class without the background/easy-faces
    folders and with CoOp's singular class names."""

    dataset_dir = "caltech-101"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "101_ObjectCategories"), name)
        return read_or_create_split(
            name, dataset_dir, os.path.join(dataset_dir, "split_zhou_Caltech101.json"), image_dir,
            lambda rng: split_class_folders(image_dir, rng, name, ignored=CALTECH_IGNORED,
                                            new_cnames=CALTECH_NEW_CNAMES))
