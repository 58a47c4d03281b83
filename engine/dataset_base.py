"""Dassl's dataset containers: ``Datum`` (one image record) and ``DatasetBase`` (the splits of a dataset), and the
data-role contract between datasets and trainers: ``DATA_ROLES`` and ``RoleSplits``."""
from __future__ import annotations

import os
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from .registry import DATASET_REGISTRY, check_availability

UNLABELED = -1
"""Label of a ``Datum`` whose label is withheld (unlabelled training roles)."""

DATA_ROLES = ("standard", "distill_all", "seen_unseen")
"""What a trainer learns from (a trainer's ``DATA_ROLE``; docs/ARCHITECTURE.md, "Data roles"): ``standard`` =
CoOp's few-shot dataset; ``distill_all`` = every train image of all classes, for label-free distillation;
``seen_unseen`` = labelled seen-class images + unlabelled unseen-class images (and the router's images)."""

PROTOCOLS = ("base2novel", "cross", "dg")
"""The evaluation protocols (``TRAINER.MODAL``): base-to-novel, cross-dataset, domain generalisation."""
SUBSAMPLES = ("all", "base", "new")
"""The class halves a split keeps (``DATASET.SUBSAMPLE_CLASSES``)."""


class Datum:
    """One image record; ``impath`` must be an existing file, as in Dassl."""

    __slots__ = ("_impath", "_label", "_domain", "_classname")

    def __init__(self, impath: str = "", label: int = 0, domain: int = 0, classname: str = "") -> None:
        if not isinstance(impath, str):
            raise TypeError(f"Datum.impath must be a str, got {type(impath).__name__}")
        if not os.path.isfile(impath):
            raise FileNotFoundError(f"Image listed in the split does not exist: {impath}")
        self._impath = impath
        self._label = int(label)
        self._domain = int(domain)
        self._classname = classname

    @property
    def impath(self) -> str:
        return self._impath

    @property
    def label(self) -> int:
        return self._label

    @property
    def domain(self) -> int:
        return self._domain

    @property
    def classname(self) -> str:
        return self._classname

    def __repr__(self) -> str:
        return f"Datum(impath={self._impath!r}, label={self._label}, classname={self._classname!r})"


@dataclass
class RoleSplits:
    """The splits of one data role and what trainers need to know about them (set by the project's readers).

    ``eval_labels``: labels (in ``lab2cname``'s space) of the evaluated classes; ``base_labels``: those of the base
    classes in base2novel ([] in cross/dg); ``router_x``: seen_unseen only, the labelled images the router is fitted
    on; ``source_lab2cname``: seen_unseen cross/dg only, the source classes that train_x labels index;
    ``all_lab2cname``: every class of the dataset as read, whatever subset the role keeps.
    """

    train_x: list[Datum]
    train_u: list[Datum] | None
    val: list[Datum] | None
    test: list[Datum]
    lab2cname: dict[int, str]
    eval_labels: list[int]
    base_labels: list[int]
    all_lab2cname: dict[int, str]
    protocol: str
    role: str
    subsample: str
    router_x: list[Datum] | None = None
    source_lab2cname: dict[int, str] | None = None


class DatasetBase:
    """The train_x / train_u / val / test lists of a dataset plus its class names.

    Class names come from ``train_x`` (Dassl's rule) unless ``lab2cname`` is given, which protocols whose
    label space is wider than the labelled training set (all classes, base and novel) use. ``splits`` holds the
    data role's splits for datasets built for one (None for plain Dassl datasets).
    """

    dataset_dir = ""
    domains: list[str] = []
    splits: RoleSplits | None = None

    @classmethod
    def build(cls, cfg, role: str | None = None) -> DatasetBase:
        """The dataset for ``cfg`` (and data ``role``, which only role-aware readers use): Dassl's ``cls(cfg)``."""
        return cls(cfg)

    def __init__(
        self,
        train_x: list[Datum] | None = None,
        train_u: list[Datum] | None = None,
        val: list[Datum] | None = None,
        test: list[Datum] | None = None,
        lab2cname: dict[int, str] | None = None,
    ) -> None:
        self._train_x = train_x
        self._train_u = train_u
        self._val = val
        self._test = test
        if lab2cname is None:
            lab2cname = self.get_lab2cname(train_x or [])[0]
        self._lab2cname = dict(sorted(lab2cname.items()))
        self._classnames = list(self._lab2cname.values())
        self._num_classes = (max(self._lab2cname) + 1) if self._lab2cname else 0

    @property
    def train_x(self) -> list[Datum] | None:
        return self._train_x

    @property
    def train_u(self) -> list[Datum] | None:
        return self._train_u

    @property
    def val(self) -> list[Datum] | None:
        return self._val

    @property
    def test(self) -> list[Datum] | None:
        return self._test

    @property
    def lab2cname(self) -> dict[int, str]:
        return self._lab2cname

    @property
    def classnames(self) -> list[str]:
        return self._classnames

    @property
    def num_classes(self) -> int:
        return self._num_classes

    @staticmethod
    def get_num_classes(data_source: Sequence[Datum]) -> int:
        """``max(label) + 1`` over labelled items."""
        labels = [item.label for item in data_source if item.label != UNLABELED]
        return max(labels) + 1 if labels else 0

    @staticmethod
    def get_lab2cname(data_source: Sequence[Datum]) -> tuple[dict[int, str], list[str]]:
        """Label → class name over labelled items, and the names sorted by label."""
        mapping = {item.label: item.classname for item in data_source if item.label != UNLABELED}
        labels = sorted(mapping)
        return {lab: mapping[lab] for lab in labels}, [mapping[lab] for lab in labels]

    @staticmethod
    def split_dataset_by_label(data_source: Sequence[Datum]) -> dict[int, list[Datum]]:
        """Group items by label, keeping first-seen label order."""
        output: dict[int, list[Datum]] = defaultdict(list)
        for item in data_source:
            output[item.label].append(item)
        return output

    @staticmethod
    def split_dataset_by_domain(data_source: Sequence[Datum]) -> dict[int, list[Datum]]:
        """Group items by domain."""
        output: dict[int, list[Datum]] = defaultdict(list)
        for item in data_source:
            output[item.domain].append(item)
        return output

    def generate_fewshot_dataset(self, *data_sources: list[Datum], num_shots: int = -1, repeat: bool = False):
        """K items per label from each source (Python's global ``random``); ``num_shots < 1`` returns inputs."""
        if num_shots < 1:
            return data_sources[0] if len(data_sources) == 1 else list(data_sources)
        print(f"Creating a {num_shots}-shot dataset")
        output = []
        for data_source in data_sources:
            dataset: list[Datum] = []
            for items in self.split_dataset_by_label(data_source).values():
                if len(items) >= num_shots:
                    sampled = random.sample(items, num_shots)
                elif repeat:
                    sampled = random.choices(items, k=num_shots)
                else:
                    sampled = items
                dataset.extend(sampled)
            output.append(dataset)
        return output[0] if len(output) == 1 else output


def build_dataset(cfg, role: str | None = None) -> DatasetBase:
    """Instantiate ``cfg.DATASET.NAME`` for data ``role`` from our registry, or from Dassl's when only Dassl has it."""
    name = cfg.DATASET.NAME
    names = DATASET_REGISTRY.registered_names()
    if name not in names:
        from .dassl_bridge import dassl_dataset_class

        dassl_cls = dassl_dataset_class(name)
        if dassl_cls is not None:
            if cfg.VERBOSE:
                print(f"Loading dataset: {name} (from Dassl's registry)")
            return dassl_cls(cfg)
        check_availability(name, names, kind="dataset (DATASET.NAME)")
    if cfg.VERBOSE:
        print(f"Loading dataset: {name}")
    return DATASET_REGISTRY.get(name).build(cfg, role)
