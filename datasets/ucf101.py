"""UCF101 middle frames (101 actions): ``ucf101/UCF-101-midframes/<Camel_Case>/v_<Action>_gXX_cXX.jpg`` +
``split_zhou_UCF101.json``."""
from __future__ import annotations

import os
import random

from engine.dataset_base import Datum
from engine.errors import InvalidInputError
from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .split_files import open_list
from .splits import (
    SplitData,
    make_datum,
    native_file,
    read_or_create_split,
    require_dir,
    split_camel_case,
    split_trainval,
)


@DATASET_REGISTRY.register()
class UCF101(ProtocolDataset):
    """UCF101 reader; a missing split is made from ``ucfTrainTestlist/`` split 1 (20% of train → val); class and
    folder names are the CamelCase action split by underscores."""

    dataset_dir = "ucf101"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = require_dir(os.path.join(dataset_dir, "UCF-101-midframes"), name)
        split_path = os.path.join(dataset_dir, "split_zhou_UCF101.json")
        list_dir = os.path.join(dataset_dir, "ucfTrainTestlist")

        def read_list(fname: str, cname2lab: dict[str, int]) -> list[Datum]:
            path = native_file(os.path.join(list_dir, fname), split_path, name)
            items = []
            with open_list(path) as f:
                for line in f:
                    if line.strip():
                        action, filename = line.split()[0].split("/")
                        if action not in cname2lab:
                            raise InvalidInputError(f"{name}: {path} lists action {action!r}, missing in classInd.txt")
                        folder = split_camel_case(action)
                        impath = os.path.join(image_dir, folder, filename.replace(".avi", ".jpg"))
                        items.append(make_datum(impath, cname2lab[action], folder, path, name))
            return items

        def create(rng: random.Random):
            cname2lab = {}
            with open_list(native_file(os.path.join(list_dir, "classInd.txt"), split_path, name)) as f:
                for line in f:
                    if line.strip():
                        label, action = line.split()
                        cname2lab[action] = int(label) - 1
            trainval, test = read_list("trainlist01.txt", cname2lab), read_list("testlist01.txt", cname2lab)
            return (*split_trainval(trainval, rng, name), test)

        return read_or_create_split(name, dataset_dir, split_path, image_dir, create)
