"""The built-in demo datasets (coloured shapes) and their on-disk layout: one folder per dataset (``DEMO_DATASETS``),
each holding ``images/<colour_shape>/<i>.png`` + ``split_zhou_<Name>.json``, written by
``python -m demo.shapes --root DATA``.

Base-to-novel: ``DemoShapes`` and ``DemoShapesHard`` (48 classes, the same images in two label orders). Cross-dataset
and domain generalisation, the toy counterparts of ImageNet and its targets: ``DemoNet`` (source, 24 classes),
``DemoCool`` / ``DemoSoft`` / ``DemoFancy`` (other classes) and the test-only shifted renderings of DemoNet's classes
``DemoNetV2`` / ``DemoNetSketch`` / ``DemoNetA`` / ``DemoNetR``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, make_split_data, read_split

IMAGE_DIR = "images"
KINDS = ("b2n", "source", "xd", "dg")
WARM = ("red", "orange", "yellow", "green")


@dataclass(frozen=True)
class DemoDataset:
    """One demo dataset: its folder under the data root, its role, its classes and how its images are drawn."""

    folder: str
    """Folder under DATASET.ROOT; also the stem of its configs/datasets/<folder>.yaml."""
    kind: str
    """b2n (base-to-novel), source (cross-dataset / DG source), xd (cross-dataset target), dg (test-only DG target)."""
    stream: int
    """Seed stream of its images: datasets of one stream share the same images (0: the base-to-novel draw)."""
    colours: tuple[str, ...] = ()
    """Colours of its classes (empty: all eight)."""
    shapes: tuple[str, ...] = ()
    """Shapes of its classes (empty: all six)."""
    style: str = "downstream"
    """Rendering style (demo.shapes.STYLES)."""

    @property
    def test_only(self) -> bool:
        """Whether it holds test images only (as the ImageNet variants: train = test, no val)."""
        return self.kind == "dg"


DEMO_DATASETS: dict[str, DemoDataset] = {
    "DemoShapes": DemoDataset("demo_shapes", "b2n", 0),
    "DemoShapesHard": DemoDataset("demo_shapes_hard", "b2n", 0),
    "DemoNet": DemoDataset("demonet", "source", 1, colours=WARM),
    "DemoCool": DemoDataset("democool", "xd", 2, colours=("blue", "purple")),
    "DemoSoft": DemoDataset("demosoft", "xd", 3, colours=("pink", "brown")),
    "DemoFancy": DemoDataset("demofancy", "xd", 4, shapes=("star", "cross", "heart")),
    "DemoNetV2": DemoDataset("demonetv2", "dg", 5, colours=WARM),
    "DemoNetSketch": DemoDataset("demonet_sketch", "dg", 6, colours=WARM, style="sketch"),
    "DemoNetA": DemoDataset("demonet_a", "dg", 7, colours=WARM, style="texture"),
    "DemoNetR": DemoDataset("demonet_r", "dg", 8, colours=WARM, style="relit"),
}
"""Registered dataset name -> how it is drawn and read; the single table of the demo datasets."""

DATASET_DIRS: dict[str, str] = {name: spec.folder for name, spec in DEMO_DATASETS.items()}
"""Registered dataset name -> its folder under the data root. Each folder holds its own copy of its images, so the
few-shot caches (``<folder>/split_fewshot/``, keyed by shots and seed) of two label orders never collide."""


def split_file(dataset_name: str) -> str:
    """File name of the CoOp split JSON of ``dataset_name`` (inside its folder, ``DATASET_DIRS``)."""
    return f"split_zhou_{dataset_name}.json"


class _DemoShapesBase(ProtocolDataset):
    """Reader shared by the demo datasets; they differ in the folder, the split file and whether they are test-only."""

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = os.path.join(dataset_dir, IMAGE_DIR)
        split_path = os.path.join(dataset_dir, split_file(name))
        for path in (image_dir, split_path):
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} not found; generate the demo data with "
                                        f"`python -m demo.shapes --root {os.path.dirname(dataset_dir)}`")
        train, val, test = read_split(split_path, image_dir, name)
        if DEMO_DATASETS[name].test_only:  # as the ImageNet variants: train = test, no val
            return make_split_data(name, dataset_dir, split_path, test, None, test, test_only=True)
        return make_split_data(name, dataset_dir, split_path, train, val, test)

    @classmethod
    def read_root(cls, root: str) -> SplitData:
        """Read the dataset under ``root`` (DATASET.ROOT)."""
        return cls.read(os.path.join(os.path.abspath(os.path.expanduser(root)), cls.dataset_dir))


@DATASET_REGISTRY.register()
class DemoShapes(_DemoShapesBase):
    """48 coloured shapes; base/novel is a checkerboard over colour x shape (every attribute in both halves)."""

    dataset_dir = DEMO_DATASETS["DemoShapes"].folder


@DATASET_REGISTRY.register()
class DemoShapesHard(_DemoShapesBase):
    """The DemoShapes images; base = every shape in red, orange, yellow, green; novel = the other colours."""

    dataset_dir = DEMO_DATASETS["DemoShapesHard"].folder


@DATASET_REGISTRY.register()
class DemoNet(_DemoShapesBase):
    """The toy ImageNet (cross-dataset / DG source): every shape in red, orange, yellow and green."""

    dataset_dir = DEMO_DATASETS["DemoNet"].folder


@DATASET_REGISTRY.register()
class DemoCool(_DemoShapesBase):
    """Cross-dataset target: every shape in blue and purple."""

    dataset_dir = DEMO_DATASETS["DemoCool"].folder


@DATASET_REGISTRY.register()
class DemoSoft(_DemoShapesBase):
    """Cross-dataset target: every shape in pink and brown."""

    dataset_dir = DEMO_DATASETS["DemoSoft"].folder


@DATASET_REGISTRY.register()
class DemoFancy(_DemoShapesBase):
    """Cross-dataset target: star, cross and heart in every colour (half of them DemoNet classes)."""

    dataset_dir = DEMO_DATASETS["DemoFancy"].folder


@DATASET_REGISTRY.register()
class DemoNetV2(_DemoShapesBase):
    """DG target (test only): DemoNet's classes, a fresh draw."""

    dataset_dir = DEMO_DATASETS["DemoNetV2"].folder


@DATASET_REGISTRY.register()
class DemoNetSketch(_DemoShapesBase):
    """DG target (test only): DemoNet's classes as outline drawings on a light background."""

    dataset_dir = DEMO_DATASETS["DemoNetSketch"].folder


@DATASET_REGISTRY.register()
class DemoNetA(_DemoShapesBase):
    """DG target (test only): DemoNet's classes as small striped shapes on busy backgrounds."""

    dataset_dir = DEMO_DATASETS["DemoNetA"].folder


@DATASET_REGISTRY.register()
class DemoNetR(_DemoShapesBase):
    """DG target (test only): DemoNet's classes under a cold, randomly varying light."""

    dataset_dir = DEMO_DATASETS["DemoNetR"].folder
