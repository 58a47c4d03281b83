"""SUN397 (397 scenes): ``sun397/SUN397/<letter>/<scene>[/<sub>]/sun_<id>.jpg`` + ``split_zhou_SUN397.json``."""
from __future__ import annotations

import os
import random

from engine.dataset_base import Datum
from engine.errors import InvalidInputError
from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .split_files import layout_hint, listed_path, open_list
from .splits import (
    SplitData,
    make_datum,
    native_file,
    read_or_create_split,
    require_dir,
    split_trainval,
    sun397_classname,
)


@DATASET_REGISTRY.register()
class SUN397(ProtocolDataset):
    """SUN397 reader; a missing split is made from ``ClassName.txt``, ``Training_01.txt`` and ``Testing_01.txt``
    (20% of the training list → val); class names drop the letter folder and put qualifiers first."""

    dataset_dir = "sun397"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "SUN397"), name)
        split_path = os.path.join(dataset_dir, "split_zhou_SUN397.json")

        def read_list(fname: str, cname2lab: dict[str, int]) -> list[Datum]:
            path = native_file(os.path.join(dataset_dir, fname), split_path, name)
            items = []
            with open_list(path) as f:
                for line in f:
                    imname = line.strip().lstrip("/")
                    if imname:
                        listed_path(imname, path, f"fix it ({layout_hint(name)})")
                        class_dir = os.path.dirname(imname)
                        if class_dir not in cname2lab:
                            raise InvalidInputError(f"{name}: {path} lists {imname}, whose class is not in "
                                                    "ClassName.txt")
                        items.append(make_datum(os.path.join(image_dir, imname), cname2lab[class_dir],
                                                sun397_classname(class_dir), path, name))
            return items

        def create(rng: random.Random):
            with open_list(native_file(os.path.join(dataset_dir, "ClassName.txt"), split_path, name)) as f:
                classes = [line.strip().lstrip("/") for line in f if line.strip()]
            cname2lab = {c: i for i, c in enumerate(classes)}
            trainval, test = read_list("Training_01.txt", cname2lab), read_list("Testing_01.txt", cname2lab)
            return (*split_trainval(trainval, rng, name), test)

        return read_or_create_split(name, dataset_dir, split_path, image_dir, create)
