"""Oxford-IIIT Pets (37 breeds): ``oxford_pets/images/<Breed>_<i>.jpg``, ``annotations/`` +
``split_zhou_OxfordPets.json``."""
from __future__ import annotations

import os
import random

from engine.dataset_base import Datum
from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .split_files import layout_hint, listed_path, open_list
from .splits import (
    SplitData,
    make_datum,
    native_file,
    pet_breed,
    read_or_create_split,
    require_dir,
    split_trainval,
)


@DATASET_REGISTRY.register()
class OxfordPets(ProtocolDataset):
    """Oxford Pets reader; a missing split is made from ``annotations/{trainval,test}.txt`` (20% of trainval → val)."""

    dataset_dir = "oxford_pets"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "images"), name)
        split_path = os.path.join(dataset_dir, "split_zhou_OxfordPets.json")

        def read_list(fname: str) -> list[Datum]:
            path = native_file(os.path.join(dataset_dir, "annotations", fname), split_path, name)
            items = []
            with open_list(path) as f:
                for line in f:
                    if line.strip() and not line.startswith("#"):
                        imname, label = line.split()[:2]
                        relpath = listed_path(imname + ".jpg", path, f"fix it ({layout_hint(name)})")
                        items.append(make_datum(os.path.join(image_dir, relpath), int(label) - 1, pet_breed(imname),
                                                path, name))
            return items

        def create(rng: random.Random):
            trainval, test = read_list("trainval.txt"), read_list("test.txt")
            return (*split_trainval(trainval, rng, name), test)

        return read_or_create_split(name, dataset_dir, split_path, image_dir, create)
