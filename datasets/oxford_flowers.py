"""Oxford Flowers-102: ``oxford_flowers/jpg/image_<00001>.jpg``, ``imagelabels.mat``, ``cat_to_name.json`` +
``split_zhou_OxfordFlowers.json``."""
from __future__ import annotations

import os
import random
from collections import defaultdict

from engine.errors import InvalidInputError
from engine.inputs import open_input, read_input_json
from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, native_file, read_or_create_split, require_dir, split_by_label_group


@DATASET_REGISTRY.register()
class OxfordFlowers(ProtocolDataset):
    """Oxford Flowers reader; a missing split is made 50/20/30 per class from ``imagelabels.mat`` with the names of
    ``cat_to_name.json``."""

    dataset_dir = "oxford_flowers"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "jpg"), name)
        split_path = os.path.join(dataset_dir, "split_zhou_OxfordFlowers.json")

        def create(rng: random.Random):
            from scipy.io import loadmat  # only for the native-file fallback (no split file)

            label_file = native_file(os.path.join(dataset_dir, "imagelabels.mat"), split_path, name)
            with open_input(label_file, "split") as f:
                labels = loadmat(f)["labels"][0]
            names = read_input_json(native_file(os.path.join(dataset_dir, "cat_to_name.json"), split_path, name),
                                    "split")
            groups: dict[int, list[str]] = defaultdict(list)
            for i, label in enumerate(labels):
                groups[int(label) - 1].append(os.path.join(image_dir, f"image_{i + 1:05d}.jpg"))
            unnamed = [lab + 1 for lab in groups if str(lab + 1) not in names]
            if unnamed:
                raise InvalidInputError(f"{name}: cat_to_name.json has no name for class id(s) {unnamed[:5]}")
            return split_by_label_group(groups, {lab: names[str(lab + 1)] for lab in groups}, rng, label_file, name)

        return read_or_create_split(name, dataset_dir, split_path, image_dir, create)
