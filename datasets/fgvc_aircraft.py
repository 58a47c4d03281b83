"""FGVC-Aircraft (100 variants): ``fgvc_aircraft/images/<id>.jpg``, ``variants.txt`` and
``images_variant_{train,val,test}.txt`` (the dataset's own split; no JSON)."""
from __future__ import annotations

import os

from engine.dataset_base import Datum
from engine.errors import InvalidInputError
from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, make_datum, make_split_data, require_dir, require_file


@DATASET_REGISTRY.register()
class FGVCAircraft(ProtocolDataset):
    """FGVC-Aircraft reader: labels follow the order of ``variants.txt``."""

    dataset_dir = "fgvc_aircraft"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "images"), name)
        variants_path = require_file(os.path.join(dataset_dir, "variants.txt"), name, "Class list")
        with open(variants_path) as f:
            cname2lab = {c: i for i, c in enumerate(line.strip() for line in f if line.strip())}

        def read_list(split: str) -> list[Datum]:
            path = require_file(os.path.join(dataset_dir, f"images_variant_{split}.txt"), name, "Split file")
            items = []
            with open(path) as f:
                for line in f:
                    if line.strip():
                        imname, classname = line.strip().split(" ", 1)
                        if classname not in cname2lab:
                            raise InvalidInputError(f"{name}: {path} names variant {classname!r}, "
                                                    f"missing in {variants_path}")
                        items.append(make_datum(os.path.join(image_dir, imname + ".jpg"), cname2lab[classname],
                                                classname, path, name))
            return items

        split_file = os.path.join(dataset_dir, "images_variant_*.txt")
        return make_split_data(name, dataset_dir, split_file, read_list("train"), read_list("val"), read_list("test"))
