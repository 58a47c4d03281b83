"""Every registered dataset name and the module that defines it, used as ``trainers/catalog.py`` describes (``--help``
without torch, ``register_datasets()`` on demand): CoOp's fifteen under CoOp's names, then the built-in demo datasets
taken from their own table (``datasets.demo_specs``). A new dataset is its reader module plus one line here.
"""
from __future__ import annotations

from .demo_specs import DEMO_DATASETS

DATASETS: dict[str, str] = {
    "Caltech101": "datasets.caltech101",
    "DescribableTextures": "datasets.dtd",
    "EuroSAT": "datasets.eurosat",
    "FGVCAircraft": "datasets.fgvc_aircraft",
    "Food101": "datasets.food101",
    "ImageNet": "datasets.imagenet",
    "ImageNetA": "datasets.imagenet_a",
    "ImageNetR": "datasets.imagenet_r",
    "ImageNetSketch": "datasets.imagenet_sketch",
    "ImageNetV2": "datasets.imagenetv2",
    "OxfordFlowers": "datasets.oxford_flowers",
    "OxfordPets": "datasets.oxford_pets",
    "StanfordCars": "datasets.stanford_cars",
    "SUN397": "datasets.sun397",
    "UCF101": "datasets.ucf101",
    **dict.fromkeys(DEMO_DATASETS, "datasets.demo_shapes"),
}
"""Registered dataset name -> the module whose class registers it."""


def register_datasets() -> None:
    """Register every dataset of ``DATASETS`` in ``engine.DATASET_REGISTRY`` (and Dassl's, when importable)."""
    from engine.registry import DATASET_REGISTRY

    DATASET_REGISTRY.load(DATASETS)
