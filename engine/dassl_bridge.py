"""Optional bridge to the real Dassl package: share our trainers/datasets with its registries and use its datasets.

Nothing here imports Dassl at module import time; when Dassl is absent every function is a cheap no-op. Every
registration in ``TRAINER_REGISTRY`` / ``DATASET_REGISTRY`` (``engine/registry.py``, which calls this module; this
module imports none of the project) goes through ``share_with_dassl``, so with Dassl importable a class is in Dassl's
registry as soon as its module is imported (``import trainers.petr``, or all of them with
``trainers.catalog.register_trainers()``) and ``dassl.engine.build_trainer(cfg)`` finds it.
"""
from __future__ import annotations

import warnings
from typing import Any

_dassl_registries: dict[str, Any] | None = None
_dassl_checked = False


def _registries() -> dict[str, Any] | None:
    """Dassl's registries by kind ("TRAINER", "DATASET"), or None when Dassl is not importable (result cached)."""
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
        _dassl_registries = {"TRAINER": dassl_trainers, "DATASET": dassl_datasets}
    return _dassl_registries


def share_with_dassl(kind: str, name: str, obj: Any) -> None:
    """One registration of our ``kind`` registry ("TRAINER" or "DATASET") also made in Dassl's registry of that kind
    when Dassl is importable; a name Dassl holds for another object (e.g. CoOp's own ``CoOp``) keeps Dassl's, with a
    warning."""
    regs = _registries()
    if regs is None:
        return
    theirs = regs[kind]
    if name not in theirs.registered_names():
        theirs.register(obj)
    elif theirs.get(name) is not obj:
        warnings.warn(f"Dassl's {kind} registry already holds another object named {name!r}; kept Dassl's (this "
                      "project's train.py still uses its own)", stacklevel=3)


def dassl_dataset_class(name: str):
    """Dassl's dataset class ``name``; None when Dassl is absent or lacks the name (asked for names we lack)."""
    regs = _registries()
    if regs is None:
        return None
    dassl_datasets = regs["DATASET"]
    return dassl_datasets.get(name) if name in dassl_datasets.registered_names() else None
