"""Readers of the built-in demo datasets, one registered class per entry of ``datasets.demo_specs.DEMO_DATASETS``.

The datasets differ only in their folder, split file and whether they are test-only, so their classes are made from
that table rather than written out.
"""
from __future__ import annotations

import os

from engine.registry import DATASET_REGISTRY

from .demo_specs import DEMO_DATASETS, IMAGE_DIR, split_file
from .protocols import ProtocolDataset
from .splits import SplitData, make_split_data, read_split


class DemoShapesReader(ProtocolDataset):
    """Reader of one demo dataset; the registered subclasses name it (``__name__``) and its folder (``dataset_dir``)."""

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        image_dir = os.path.join(dataset_dir, IMAGE_DIR)
        split_path = os.path.join(dataset_dir, split_file(name))
        for path in (image_dir, split_path):
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} not found; generate the demo data with "
                                        f"`python -m demo.shapes --data {os.path.dirname(dataset_dir)}`")
        train, val, test = read_split(split_path, image_dir, name)
        if DEMO_DATASETS[name].test_only:  # as the ImageNet variants: train = test, no val
            return make_split_data(name, dataset_dir, split_path, test, None, test, test_only=True)
        return make_split_data(name, dataset_dir, split_path, train, val, test)

    @classmethod
    def read_root(cls, root: str) -> SplitData:
        """Read the dataset under ``root`` (DATASET.ROOT)."""
        return cls.read(os.path.join(os.path.abspath(os.path.expanduser(root)), cls.dataset_dir))


def _reader(name: str) -> type[DemoShapesReader]:
    """The registered reader class ``name`` of ``DEMO_DATASETS[name]``."""
    spec = DEMO_DATASETS[name]
    doc = (f"The demo dataset ``{name}`` (kind {spec.kind}, style {spec.style}) under ``<root>/{spec.folder}``; "
           "datasets/demo_specs.py describes it.")
    cls = type(name, (DemoShapesReader,), {"__doc__": doc, "__module__": __name__, "__qualname__": name,
                                           "dataset_dir": spec.folder})
    return DATASET_REGISTRY.register()(cls)


DEMO_READERS: dict[str, type[DemoShapesReader]] = {name: _reader(name) for name in DEMO_DATASETS}
"""Registered name -> reader class of every demo dataset."""
globals().update(DEMO_READERS)  # module attributes, as a written-out class would be (pickle, `from ... import`)
