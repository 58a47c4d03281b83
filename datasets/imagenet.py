"""ImageNet-1k: ``imagenet/images/{train,val}/<wnid>/*.JPEG`` + ``classnames.txt`` (CLIP's clean class names).

The official val images serve as the test set (they must be sorted into wnid folders first).
"""
from __future__ import annotations

import os

from engine.errors import InvalidInputError
from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import (
    SplitData,
    layout_hint,
    make_split_data,
    read_class_folders,
    read_wnid_classnames,
    require_dir,
    require_file,
    sorted_subdirs,
    wnid_names,
)


@DATASET_REGISTRY.register()
class ImageNet(ProtocolDataset):
    """ImageNet reader: labels index the sorted wnid folders of ``images/train``; no val split (CoOp)."""

    dataset_dir = "imagenet"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        classnames_path = require_file(os.path.join(dataset_dir, "classnames.txt"), name, "Class-name file")
        classnames = read_wnid_classnames(classnames_path)
        train_dir = require_dir(os.path.join(dataset_dir, "images", "train"), name)
        val_dir = require_dir(os.path.join(dataset_dir, "images", "val"), name)
        folders = sorted_subdirs(train_dir)
        if sorted_subdirs(val_dir) != folders:
            raise InvalidInputError(f"{name}: {val_dir} must hold the same {len(folders)} wnid folders as {train_dir} "
                                    f"(sort the val images into class folders; {layout_hint(name)})")
        names = wnid_names(folders, classnames, classnames_path, name)
        train = read_class_folders(train_dir, folders, names, name)
        test = read_class_folders(val_dir, folders, names, name)
        return make_split_data(name, dataset_dir, classnames_path, train, None, test)
