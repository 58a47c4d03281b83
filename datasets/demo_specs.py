"""The built-in demo datasets (coloured shapes) as data, and their on-disk layout (standard library only).

One folder per dataset (``DEMO_DATASETS``), each holding ``images/<colour_shape>/<i>.png`` + ``split_zhou_<Name>.json``,
written by ``python -m demo.shapes --data DATA``; ``datasets/demo_shapes.py`` makes one registered reader per entry.

Base-to-novel: ``DemoShapes`` and ``DemoShapesHard`` (48 classes, the same images in two label orders). Cross-dataset
and domain generalisation, the toy counterparts of ImageNet and its targets: ``DemoNet`` (source, 24 classes),
``DemoCool`` / ``DemoSoft`` / ``DemoFancy`` (other classes) and the test-only shifted renderings of DemoNet's classes
``DemoNetV2`` / ``DemoNetSketch`` / ``DemoNetA`` / ``DemoNetR``.
"""
from __future__ import annotations

from dataclasses import dataclass

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
    # 48 coloured shapes; base/novel is a checkerboard over colour x shape (every attribute in both halves)
    "DemoShapes": DemoDataset("demo_shapes", "b2n", 0),
    # the DemoShapes images; base = every shape in red, orange, yellow, green; novel = the other colours
    "DemoShapesHard": DemoDataset("demo_shapes_hard", "b2n", 0),
    # the toy ImageNet (cross-dataset / DG source): every shape in the warm colours
    "DemoNet": DemoDataset("demonet", "source", 1, colours=WARM),
    # cross-dataset targets: other colours, or three shapes in every colour (half of them DemoNet classes)
    "DemoCool": DemoDataset("democool", "xd", 2, colours=("blue", "purple")),
    "DemoSoft": DemoDataset("demosoft", "xd", 3, colours=("pink", "brown")),
    "DemoFancy": DemoDataset("demofancy", "xd", 4, shapes=("star", "cross", "heart")),
    # DG targets (test only): DemoNet's classes as a fresh draw, outlines on a light background, small striped
    # shapes on busy backgrounds, a cold randomly varying light
    "DemoNetV2": DemoDataset("demonetv2", "dg", 5, colours=WARM),
    "DemoNetSketch": DemoDataset("demonet_sketch", "dg", 6, colours=WARM, style="sketch"),
    "DemoNetA": DemoDataset("demonet_a", "dg", 7, colours=WARM, style="texture"),
    "DemoNetR": DemoDataset("demonet_r", "dg", 8, colours=WARM, style="relit"),
}
"""Registered dataset name -> how it is drawn and read; the single table of the demo datasets (a new entry is a new
registered dataset)."""

DATASET_DIRS: dict[str, str] = {name: spec.folder for name, spec in DEMO_DATASETS.items()}
"""Registered dataset name -> its folder under the data root. Each folder holds its own copy of its images, so the
few-shot caches (``<folder>/split_fewshot/``, keyed by shots and seed) of two label orders never collide."""


def split_file(dataset_name: str) -> str:
    """File name of the CoOp split JSON of ``dataset_name`` (inside its folder, ``DATASET_DIRS``)."""
    return f"split_zhou_{dataset_name}.json"
