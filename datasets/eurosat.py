"""EuroSAT (RGB, 10 land-use classes): ``eurosat/2750/<Class>/<Class>_<i>.jpg`` + ``split_zhou_EuroSAT.json``."""
from __future__ import annotations

import os

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import EUROSAT_NEW_CNAMES, SplitData, read_or_create_split, require_dir, split_class_folders


@DATASET_REGISTRY.register()
class EuroSAT(ProtocolDataset):
    """EuroSAT reader; a missing split is created 50/20/30 per class with CoOp's expanded class names."""

    dataset_dir = "eurosat"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "2750"), name)
        return read_or_create_split(
            name, dataset_dir, os.path.join(dataset_dir, "split_zhou_EuroSAT.json"), image_dir,
            lambda rng: split_class_folders(image_dir, rng, name, new_cnames=EUROSAT_NEW_CNAMES))
