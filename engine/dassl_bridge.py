"""Optional bridge to the real Dassl package: share our trainers/datasets with its registries and use its datasets.

Nothing here imports Dassl at module import time; when Dassl is absent every function is a cheap no-op. Every
registration in ``TRAINER_REGISTRY`` / ``DATASET_REGISTRY`` goes through ``share_with_dassl``, so with Dassl
importable a class is in Dassl's registry as soon as its module is imported (``import trainers.petr``, or all of
them with ``trainers.catalog.register_trainers()``) and ``dassl.engine.build_trainer(cfg)`` finds it.
"""
from __future__ import annotations

import warnings
from typing import Any

from .registry import DATASET_REGISTRY, TRAINER_REGISTRY, Registry

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


def _put(theirs, name: str, obj: Any, strict: bool) -> str:
    """Register ``obj`` as ``name`` in Dassl's registry ``theirs``: "added", "same" (already there) or "skipped"
    (Dassl holds another object under the name: KeyError when ``strict``)."""
    if name in theirs.registered_names():
        if theirs.get(name) is obj:
            return "same"
        if strict:
            raise KeyError(f"Dassl's registry already holds a different object named {name!r}; "
                           "rename ours or do not import both implementations in one process")
        return "skipped"
    theirs.register(obj)
    return "added"


def _kept_theirs_warning(names: list[str]) -> None:
    warnings.warn(f"Dassl's registries already hold other objects named {names}; kept those (this project's "
                  "train.py still uses its own)", stacklevel=3)


def share_with_dassl(registry: Registry, name: str, obj: Any) -> None:
    """One registration of ``TRAINER_REGISTRY`` / ``DATASET_REGISTRY`` also made in Dassl's matching registry when
    Dassl is importable; a name Dassl holds for another object (e.g. CoOp's own ``CoOp``) keeps Dassl's, with a
    warning."""
    regs = _registries()
    if regs is None:
        return
    theirs = regs[0] if registry is TRAINER_REGISTRY else regs[1]
    if _put(theirs, name, obj, strict=False) == "skipped":
        _kept_theirs_warning([name])


def register_into_dassl(strict: bool = True) -> list[str]:
    """Register all our trainers and datasets into Dassl's registries (idempotent); returns the names added.

    A name Dassl already holds for another object raises KeyError when ``strict``; otherwise theirs is kept and one
    warning names the skipped names.
    """
    regs = _registries()
    if regs is None:
        return []
    outcomes: dict[str, list[str]] = {"added": [], "same": [], "skipped": []}
    for ours, theirs in zip((TRAINER_REGISTRY, DATASET_REGISTRY), regs):
        for name in ours.registered_names():
            outcomes[_put(theirs, name, ours.get(name), strict)].append(name)
    if outcomes["skipped"]:
        _kept_theirs_warning(outcomes["skipped"])
    return outcomes["added"]


def dassl_dataset_class(name: str):
    """Dassl's dataset class ``name`` when only Dassl has it; None when Dassl is absent or lacks the name."""
    regs = _registries()
    if regs is None or name in DATASET_REGISTRY:
        return None
    dassl_datasets = regs[1]
    return dassl_datasets.get(name) if name in dassl_datasets.registered_names() else None
