"""Optional bridge to the real Dassl package: share our trainers/datasets with its registries and use its datasets.

Nothing here imports Dassl at module import time; when Dassl is absent every function is a cheap no-op. Importing
``trainers`` or ``datasets`` calls ``register_into_dassl(strict=False)``, so with Dassl importable
``dassl.engine.build_trainer(cfg)`` finds PETR and the other trainers of this project.
"""
from __future__ import annotations

import warnings

from .registry import DATASET_REGISTRY, TRAINER_REGISTRY

_dassl_registries: tuple | None = None
_dassl_checked = False


def _registries() -> tuple | None:
    """Dassl's (TRAINER_REGISTRY, DATASET_REGISTRY), or None when Dassl is not importable (result cached)."""
    global _dassl_registries, _dassl_checked
    if not _dassl_checked:
        _dassl_checked = True
        try:
            from dassl.data.datasets import DATASET_REGISTRY as dassl_datasets
            from dassl.engine import TRAINER_REGISTRY as dassl_trainers
        except ModuleNotFoundError as e:
            if e.name is None or not e.name.startswith("dassl"):
                warnings.warn(f"Dassl is installed but cannot be imported ({e}); continuing without it", stacklevel=2)
            return None
        except ImportError as e:
            warnings.warn(f"Dassl is installed but cannot be imported ({e}); continuing without it", stacklevel=2)
            return None
        _dassl_registries = (dassl_trainers, dassl_datasets)
    return _dassl_registries


def dassl_available() -> bool:
    """True when the real Dassl package can be imported."""
    return _registries() is not None


def register_into_dassl(strict: bool = True) -> list[str]:
    """Register our trainers and datasets into Dassl's registries (idempotent); returns the names added.

    A name Dassl already holds for another object (e.g. CoOp's own ``CoOp`` trainer) raises KeyError when
    ``strict``; otherwise theirs is kept and one warning names the skipped names (the automatic registration).
    """
    regs = _registries()
    if regs is None:
        return []
    added, skipped = [], []
    for ours, theirs in zip((TRAINER_REGISTRY, DATASET_REGISTRY), regs):
        for name in ours.registered_names():
            obj = ours.get(name)
            if name in theirs.registered_names():
                if theirs.get(name) is obj:
                    continue
                if strict:
                    raise KeyError(f"Dassl's registry already holds a different object named {name!r}; "
                                   "rename ours or do not import both implementations in one process")
                skipped.append(name)
                continue
            theirs.register(obj)
            added.append(name)
    if skipped:
        warnings.warn(f"Dassl's registries already hold other objects named {skipped}; kept those (this project's "
                      "train.py still uses its own)", stacklevel=2)
    return added


def dassl_dataset_class(name: str):
    """Dassl's dataset class ``name`` when only Dassl has it; None when Dassl is absent or lacks the name."""
    regs = _registries()
    if regs is None or name in DATASET_REGISTRY:
        return None
    dassl_datasets = regs[1]
    return dassl_datasets.get(name) if name in dassl_datasets.registered_names() else None
