"""ImageNet-A (test only, 200 classes): ``imagenet-adversarial/imagenet-a/<wnid>/*.jpg`` + ``classnames.txt``."""
from __future__ import annotations

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, read_wnid_folder_dataset


@DATASET_REGISTRY.register()
class ImageNetA(ProtocolDataset):
    """ImageNet-A reader: labels 0..199 index the sorted wnid folders present (README.txt is skipped)."""

    dataset_dir = "imagenet-adversarial"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        return read_wnid_folder_dataset(cls.__name__, dataset_dir, "imagenet-a")
