"""The built-in demo datasets (coloured shapes) and their on-disk layout: ``demo_shapes/`` and
``demo_shapes_hard/``, each holding ``images/<colour_shape>/<i>.png`` + ``split_zhou_<Name>.json``, written by
``python -m demo.shapes --root DATA``."""
from __future__ import annotations

import os

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, make_split_data, read_split

IMAGE_DIR = "images"
DATASET_DIRS: dict[str, str] = {"DemoShapes": "demo_shapes", "DemoShapesHard": "demo_shapes_hard"}
"""Registered dataset name -> its folder under the data root. Each folder holds its own copy of the images, so the
few-shot caches (``<folder>/split_fewshot/``, keyed by shots and seed) of the two label orders never collide."""


def split_file(dataset_name: str) -> str:
    """File name of the CoOp split JSON of ``dataset_name`` (inside its folder, ``DATASET_DIRS``)."""
    return f"split_zhou_{dataset_name}.json"


class _DemoShapesBase(ProtocolDataset):
    """Reader shared by the two demo datasets; they differ only in the folder and the split file (label order)."""

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = os.path.join(dataset_dir, IMAGE_DIR)
        split_path = os.path.join(dataset_dir, split_file(name))
        for path in (image_dir, split_path):
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} not found; generate the demo data with "
                                        f"`python -m demo.shapes --root {os.path.dirname(dataset_dir)}`")
        return make_split_data(name, dataset_dir, split_path, *read_split(split_path, image_dir, name))

    @classmethod
    def read_root(cls, root: str) -> SplitData:
        """Read the dataset under ``root`` (DATASET.ROOT)."""
        return cls.read(os.path.join(os.path.abspath(os.path.expanduser(root)), cls.dataset_dir))


@DATASET_REGISTRY.register()
class DemoShapes(_DemoShapesBase):
    """48 coloured shapes; base/novel is a checkerboard over colour x shape (every attribute in both halves)."""

    dataset_dir = DATASET_DIRS["DemoShapes"]


@DATASET_REGISTRY.register()
class DemoShapesHard(_DemoShapesBase):
    """The same images; base = every shape in red, orange, yellow, green; novel = every shape in the other colours."""

    dataset_dir = DATASET_DIRS["DemoShapesHard"]
