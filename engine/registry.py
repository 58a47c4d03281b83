"""Name-to-class registries with Dassl's semantics, plus the "did you mean" availability check."""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

from .errors import ConfigError


def check_availability(requested: str, available: Iterable[str], kind: str = "name") -> None:
    """Raise ConfigError (a ValueError) naming ``requested`` and the closest available names when it is unknown."""
    available = list(available)
    if requested in available:
        return
    close = difflib.get_close_matches(requested, available, n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(
        f"Unknown {kind} {requested!r}.{hint} Available: {', '.join(sorted(available))}"
    )


class Registry:
    """Maps class names to objects; usable as ``@REG.register()`` or ``REG.register(obj)``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._obj_map: dict[str, Any] = {}

    def _do_register(self, name: str, obj: Any, force: bool = False) -> None:
        if name in self._obj_map and not force:
            raise KeyError(f'An object named "{name}" was already registered in "{self._name}" registry')
        self._obj_map[name] = obj

    def register(self, obj: Any = None, force: bool = False) -> Callable | None:
        if obj is None:
            def wrapper(fn_or_class: Any) -> Any:
                self._do_register(fn_or_class.__name__, fn_or_class, force=force)
                return fn_or_class
            return wrapper
        self._do_register(obj.__name__, obj, force=force)
        return None

    def get(self, name: str) -> Any:
        if name not in self._obj_map:
            raise KeyError(f'Object name "{name}" does not exist in "{self._name}" registry')
        return self._obj_map[name]

    def registered_names(self) -> list[str]:
        return list(self._obj_map.keys())

    def __contains__(self, name: str) -> bool:
        return name in self._obj_map

    def __repr__(self) -> str:
        return f"Registry({self._name!r}, {sorted(self._obj_map)})"


TRAINER_REGISTRY = Registry("TRAINER")
DATASET_REGISTRY = Registry("DATASET")
EVALUATOR_REGISTRY = Registry("EVALUATOR")
