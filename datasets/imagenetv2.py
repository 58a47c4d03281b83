"""ImageNetV2 matched-frequency (test only, 1000 classes):
``imagenetv2/imagenetv2-matched-frequency-format-val/<label>/*.jpeg`` + ``classnames.txt``."""
from __future__ import annotations

import os

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import (
    SplitData,
    make_split_data,
    read_class_folders,
    read_wnid_classnames,
    require_dir,
    require_file,
)


@DATASET_REGISTRY.register()
class ImageNetV2(ProtocolDataset):
    """ImageNetV2 reader: folder ``i`` holds class ``i``, named by line ``i`` of ``classnames.txt`` (which must be
    ImageNet's file, in sorted-wnid order)."""

    dataset_dir = "imagenetv2"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        classnames_path = require_file(os.path.join(dataset_dir, "classnames.txt"), name, "Class-name file")
        names = list(read_wnid_classnames(classnames_path).values())
        image_dir = require_dir(os.path.join(dataset_dir, "imagenetv2-matched-frequency-format-val"), name)
        data = read_class_folders(image_dir, [str(label) for label in range(len(names))], names, name)
        return make_split_data(name, dataset_dir, classnames_path, data, None, data, test_only=True)
