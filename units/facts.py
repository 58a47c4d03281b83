"""The facts the unit commands share: dataset lists, dataset names, distillation weights and teacher folders.

Standard library only (the runner plans with them without importing torch). Dataset names come from
``configs/datasets/<short>.yaml``, so every dataset with a config works, the demo's included.
"""
from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from functools import cache

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE2NEW_DATASETS = ("imagenet", "caltech101", "oxford_pets", "stanford_cars", "oxford_flowers", "food101",
                     "fgvc_aircraft", "sun397", "dtd", "eurosat", "ucf101")
"""The papers' 11 base-to-novel datasets (short names), in the papers' order."""
XD_TARGETS = BASE2NEW_DATASETS[1:]
"""ImageNet's ten cross-dataset targets."""
DG_TARGETS = {"imagenet": ("imagenetv2", "imagenet_sketch", "imagenet_a", "imagenet_r"),
              "demonet": ("demonetv2", "demonet_sketch", "demonet_a", "demonet_r")}
"""The domain-generalisation targets of each source dataset."""
LOW_KD_WEIGHT = ("fgvc_aircraft", "oxford_flowers", "dtd")
"""Datasets PromptKD distils with α = 200 (1000 for the others)."""
EXIT_PREEMPTED = 75
"""train.py's exit status after a preemption signal: it saved a resume state; the same command continues the run."""
_NAME_LINE = re.compile(r'^ *NAME: *"?([^"]*?)"? *$', re.MULTILINE)


class UnitError(ValueError):
    """A user mistake or a missing prerequisite of a unit command: one ``error:`` line, exit status 2 (a ValueError,
    as the runner's argument checks raise)."""


def dataset_yaml(short: str) -> str:
    """The dataset config file of a short name (relative to the repository root)."""
    dataset_name(short)
    return f"configs/datasets/{short}.yaml"


@cache
def dataset_name(short: str) -> str:
    """``DATASET.NAME`` of a dataset short name, read from its configs/datasets yaml (e.g. eurosat -> EuroSAT)."""
    path = os.path.join(REPO, "configs", "datasets", f"{short}.yaml")
    match = None
    if re.fullmatch(r"[A-Za-z0-9_]+", short) and os.path.isfile(path):
        with open(path) as f:
            match = _NAME_LINE.search(f.read())
    if not match or not match.group(1):
        stems = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(REPO, "configs", "datasets", "*.yaml")))
        raise UnitError(f"unknown dataset '{short}'; use one of: {' '.join(stems)}")
    return match.group(1)


def dg_targets(source: str) -> tuple[str, ...]:
    """The domain-generalisation targets of ``source``."""
    if source not in DG_TARGETS:
        raise UnitError(f"no domain-generalisation targets for source '{source}'; use SOURCE=imagenet or "
                        "SOURCE=demonet")
    return DG_TARGETS[source]


def kd_weight(short: str, env: Mapping[str, str]) -> str:
    """The distillation weight α of a base-to-novel dataset as PromptKD's scripts set it, unless ``KD_WEIGHT`` is
    set; a float literal, because yacs refuses an int for a float key."""
    if env.get("KD_WEIGHT"):
        return env["KD_WEIGHT"]
    return "200.0" if short in LOW_KD_WEIGHT else "1000.0"


def teacher_folder(dataset: str, protocol: str, source: str = "imagenet") -> str:
    """The folder name of a student's teacher under TEACHER_DIR: the dataset's ``DATASET.NAME`` for base-to-novel,
    ``<source DATASET.NAME>-xd`` (e.g. ImageNet-xd) for the cross-dataset and DG protocols."""
    return dataset_name(dataset) if protocol == "base2new" else f"{dataset_name(source)}-xd"
