"""The data roles in one place: which images a trainer learns from, routes on and is evaluated on.

Every dataset reader subclasses :class:`ProtocolDataset`: the reader only returns the full dataset
(:class:`datasets.splits.SplitData`); :func:`build_splits` turns it into the splits of the requested role
(``engine.dataset_base.RoleSplits``, stored as ``dataset.splits``). docs/ARCHITECTURE.md describes the roles.

* role = the trainer's ``DATA_ROLE``, passed down by ``DataManager(cfg, role=...)``; only Dassl's plain
  ``Dataset(cfg)`` call falls back to the ``DATA_ROLE`` of the trainer registered as ``TRAINER.NAME`` ("standard"
  when it has none or is not registered); protocol = ``TRAINER.MODAL`` ("base2novel" when the key is absent); the
  evaluated classes come from ``DATASET.SUBSAMPLE_CLASSES`` (base = first ceil(n/2) sorted labels, new = the rest).
* ``standard`` (CoOp, ZeroshotCLIP, PromptSRC teacher; any protocol): CoOp's dataset: few-shot train/val, then
  class subsampling with new classes relabelled from 0. ImageNet: val = test. ImageNet variants: train_x = test,
  no val, NUM_SHOTS ignored (as CoOp); SUBSAMPLE_CLASSES does apply to them (CoOp ignores it there).
* ``distill_all`` (PromptKD): train_x = the whole train split of all classes (labels kept in the all-class space
  but not meant to be used); in dg, the target's test images (transductive, as PromptKD).
* ``seen_unseen`` (PETR, PETRCoOp): base2novel: train_x = labelled base-class train images, train_u = novel-class
  train images with labels withheld (``UNLABELED``, empty class name). cross/dg: train_x = labelled source
  (ImageNet) train images, train_u = the target's train split (dg: the target's test images, transductive), both
  unlabelled for the target.
* distill_all and seen_unseen evaluate in the label space of all target classes: test/val keep only the evaluated
  classes, without relabelling; val is the real val split (None for ImageNet and its variants), never test data.
* ``DATASET.NUM_SHOTS`` >= 1 applies to every training role (per class, sampled before labels are withheld).

Besides DatasetBase's train_x, train_u, val, test, lab2cname, classnames and ``splits``, the instance holds
``dataset_dir`` (the absolute folder, as CoOp) and ``split_file`` (the file its splits came from).
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from functools import partial

from engine.dataset_base import DATA_ROLES, PROTOCOLS, SUBSAMPLES, UNLABELED, DatasetBase, Datum, RoleSplits
from engine.errors import ConfigError
from engine.registry import DATASET_REGISTRY, TRAINER_REGISTRY, check_availability

from .fewshot import check_all_classes, fewshot_splits, sample_per_class
from .splits import SplitData, dataset_folder

DEFAULT_SOURCE_DATASET = "ImageNet"


def resolve_role(cfg, role: str | None = None) -> str:
    """``role`` when given; else (Dassl's ``Dataset(cfg)`` call) the ``DATA_ROLE`` of the trainer registered as
    ``cfg.TRAINER.NAME``, "standard" when it has none."""
    name = cfg.TRAINER.NAME
    if role is None:
        trainer = TRAINER_REGISTRY.get(name) if name in TRAINER_REGISTRY else None
        role = getattr(trainer, "DATA_ROLE", "standard")
    if role not in DATA_ROLES:
        raise ValueError(f"Trainer {name} declares DATA_ROLE {role!r}; expected one of {', '.join(DATA_ROLES)}")
    return role


def resolve_protocol(cfg) -> str:
    """``cfg.TRAINER.MODAL`` (base2novel when the key is not declared)."""
    protocol = cfg.TRAINER.get("MODAL", "base2novel")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"TRAINER.MODAL is {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    return protocol


def resolve_subsample(cfg) -> str:
    """``cfg.DATASET.SUBSAMPLE_CLASSES`` (all when the key is not declared)."""
    subsample = cfg.DATASET.get("SUBSAMPLE_CLASSES", "all")
    if subsample not in SUBSAMPLES:
        raise ConfigError(f"DATASET.SUBSAMPLE_CLASSES is {subsample!r}; expected one of {', '.join(SUBSAMPLES)}")
    return subsample


def class_subset(labels: Sequence[int], subsample: str) -> list[int]:
    """CoOp's class halves: sorted labels, base = the first ceil(n/2), new = the rest, all = every label."""
    labels = sorted(set(labels))
    m = math.ceil(len(labels) / 2)
    return {"all": labels, "base": labels[:m], "new": labels[m:]}[subsample]


def subsample_classes(*sources: list[Datum] | None, subsample: str = "all") -> list[list[Datum] | None]:
    """CoOp's ``subsample_classes``: keep the subset chosen on ``sources[0]``'s labels and relabel it 0..k-1."""
    if subsample == "all":
        return list(sources)
    selected = class_subset([item.label for item in sources[0]], subsample)
    relabel = {old: new for new, old in enumerate(selected)}
    return [None if items is None else
            [Datum(impath=d.impath, label=relabel[d.label], domain=d.domain, classname=d.classname)
             for d in items if d.label in relabel] for items in sources]


def keep_classes(items: Sequence[Datum], labels: Sequence[int]) -> list[Datum]:
    """The items whose label is in ``labels``, labels unchanged."""
    wanted = set(labels)
    return [item for item in items if item.label in wanted]


def withhold_labels(items: Sequence[Datum]) -> list[Datum]:
    """Copies with label ``UNLABELED`` and no class name, for unlabelled training roles."""
    return [Datum(impath=d.impath, label=UNLABELED, domain=d.domain, classname="") for d in items]


Shots = Callable[[SplitData], tuple[list[Datum], list[Datum] | None]]
"""The few-shot train and val splits of a dataset (``fewshot_splits`` with the run's K, seed and folders)."""


def _standard(data: SplitData, shots: Shots, subsample: str, protocol: str) -> RoleSplits:
    # CoOp: the ImageNet variants train_x is their test data and ignores NUM_SHOTS.
    train, val = (data.train, None) if data.test_only else shots(data)
    train, val, test = subsample_classes(train, val, data.test, subsample=subsample)
    if val is None and not data.test_only:
        val = test  # ImageNet has no val split; CoOp validates on its test set
    lab2cname = DatasetBase.get_lab2cname(train)[0]
    base = {"all": class_subset(lab2cname, "base"), "base": list(lab2cname), "new": []}[subsample]
    return RoleSplits(train, None, val, test, lab2cname, list(lab2cname), base if protocol == "base2novel" else [],
                      data.lab2cname, protocol, "standard", subsample)


def _target_train(data: SplitData, shots: Shots, num_shots: int, seed: int, protocol: str
                  ) -> tuple[list[Datum], list | None]:
    """Target images for unlabelled training and the target's val split: train split, or test images for dg."""
    train, val = shots(data)
    if protocol == "dg" and not data.test_only:
        train = data.test
        if num_shots >= 1:
            train = sample_per_class(data.test, num_shots, random.Random(seed))
            check_all_classes(train, data.lab2cname, "dg target", f"sampled from {data.split_file}")
    return train, val


def _read_source(cfg) -> SplitData:
    name = cfg.DATASET.get("SOURCE_DATASET", DEFAULT_SOURCE_DATASET)
    check_availability(name, DATASET_REGISTRY.registered_names(), kind="dataset (DATASET.SOURCE_DATASET)")
    source_cls = DATASET_REGISTRY.get(name)
    if not issubclass(source_cls, ProtocolDataset):
        raise ConfigError(f"DATASET.SOURCE_DATASET {name} is not one of this project's dataset readers")
    source = source_cls.read_root(cfg.DATASET.ROOT)
    if source.test_only:
        raise ConfigError(f"DATASET.SOURCE_DATASET {name} has only a test set; use a dataset with a train split")
    return source


def build_splits(cfg, data: SplitData, role: str | None = None) -> RoleSplits:
    """The splits of data ``role`` (see ``resolve_role``) and the protocol configured in ``cfg`` from a reader's full
    dataset ``data``."""
    role, protocol, subsample = resolve_role(cfg, role), resolve_protocol(cfg), resolve_subsample(cfg)
    num_shots, seed = cfg.DATASET.NUM_SHOTS, cfg.SEED
    shots = partial(fewshot_splits, num_shots=num_shots, seed=seed, fewshot_dir=cfg.DATASET.get("FEWSHOT_DIR", ""),
                    output_dir=cfg.OUTPUT_DIR)
    if role == "standard":
        return _standard(data, shots, subsample, protocol)
    if protocol == "base2novel" and data.test_only:
        raise ConfigError(f"{data.name} has only a test set, so it has no base-to-novel training data for "
                          f"{cfg.TRAINER.NAME}; set TRAINER.MODAL dg (or cross)")
    if protocol == "base2novel":
        train, val = shots(data)
    else:
        train, val = _target_train(data, shots, num_shots, seed, protocol)
    eval_labels = class_subset(data.lab2cname, subsample)
    test = keep_classes(data.test, eval_labels)
    val = None if val is None else keep_classes(val, eval_labels)
    base = class_subset(data.lab2cname, "base") if protocol == "base2novel" else []
    splits = RoleSplits(train, None, val, test, data.lab2cname, eval_labels, base, data.lab2cname, protocol, role,
                        subsample)
    if role == "seen_unseen" and protocol == "base2novel":
        splits.train_x = keep_classes(train, base)
        splits.train_u = withhold_labels(keep_classes(train, class_subset(data.lab2cname, "new")))
        splits.router_x = list(splits.train_x)
    elif role == "seen_unseen":
        source = _read_source(cfg)
        splits.train_x = shots(source)[0]
        splits.train_u = withhold_labels(train)
        splits.router_x = list(splits.train_x)
        splits.source_lab2cname = source.lab2cname
    return splits


class ProtocolDataset(DatasetBase):
    """Base of the dataset readers: subclasses implement :meth:`read`; ``splits`` holds the requested role's splits.

    ``dataset_dir`` (class attribute) is the folder under ``DATASET.ROOT`` (CoOp's name); on the instance it becomes
    the absolute path, as in CoOp.
    """

    dataset_dir = ""

    def __init__(self, cfg, role: str | None = None) -> None:
        data = self.read_root(cfg.DATASET.ROOT)
        splits = build_splits(cfg, data, role)
        super().__init__(train_x=splits.train_x, train_u=splits.train_u, val=splits.val, test=splits.test,
                         lab2cname=splits.lab2cname)
        self.dataset_dir = data.dataset_dir
        self.split_file = data.split_file
        self.splits: RoleSplits = splits
        print(f"Data role {splits.role} ({splits.protocol}, SUBSAMPLE_CLASSES {splits.subsample}): "
              f"train_x {len(self.train_x):,}, train_u {len(self.train_u or []):,}, val {len(self.val or []):,}, "
              f"test {len(self.test):,}, evaluated classes {len(splits.eval_labels)}/{len(self.lab2cname)}")

    @classmethod
    def build(cls, cfg, role: str | None = None) -> ProtocolDataset:
        """The dataset with the splits of data ``role``."""
        return cls(cfg, role)

    @classmethod
    def read_root(cls, root: str) -> SplitData:
        """Read the dataset under ``root`` (its folder must exist)."""
        return cls.read(dataset_folder(root, cls.dataset_dir, cls.__name__))

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        """Read the full dataset from its folder; implemented by each reader."""
        raise NotImplementedError
