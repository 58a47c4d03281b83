"""ImageNet-Sketch (test only, 1000 classes): ``imagenet-sketch/images/<wnid>/*.JPEG`` + ``classnames.txt``."""
from __future__ import annotations

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, read_wnid_folder_dataset


@DATASET_REGISTRY.register()
class ImageNetSketch(ProtocolDataset):
    """ImageNet-Sketch reader: labels index the sorted wnid folders; train_x is the test data (CoOp)."""

    dataset_dir = "imagenet-sketch"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        return read_wnid_folder_dataset(cls.__name__, dataset_dir, "images")
