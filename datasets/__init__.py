"""The 15 CoOp datasets, registered in ``engine.registry.DATASET_REGISTRY`` under CoOp's names on import (and in
Dassl's registry when Dassl is importable).

Readers (one module per dataset) only read; data roles are in ``datasets/protocols.py``, shared split handling in
``datasets/splits.py`` and the few-shot JSON cache in ``datasets/fewshot.py``.
"""
from engine.dassl_bridge import register_into_dassl

from . import (  # noqa: F401  (imported for registration)
    caltech101,
    demo_shapes,
    dtd,
    eurosat,
    fgvc_aircraft,
    food101,
    imagenet,
    imagenet_a,
    imagenet_r,
    imagenet_sketch,
    imagenetv2,
    oxford_flowers,
    oxford_pets,
    stanford_cars,
    sun397,
    ucf101,
)

register_into_dassl(strict=False)
