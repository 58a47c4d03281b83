"""FGVC-Aircraft (100 variants): ``fgvc_aircraft/images/<id>.jpg``, ``variants.txt`` and
``images_variant_{train,val,test}.txt`` (the dataset's own split; no JSON)."""
from __future__ import annotations

import os

from engine.dataset_base import Datum
from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .split_files import read_variants, variant_entries
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
        cname2lab = read_variants(variants_path)

        def read_list(split: str) -> list[Datum]:
            path = require_file(os.path.join(dataset_dir, f"images_variant_{split}.txt"), name, "Split file")
            return [make_datum(os.path.join(image_dir, imname), label, classname, path, name)
                    for imname, label, classname in variant_entries(path, cname2lab, variants_path, name)]

        split_file = os.path.join(dataset_dir, "images_variant_*.txt")
        return make_split_data(name, dataset_dir, split_file, read_list("train"), read_list("val"), read_list("test"))
