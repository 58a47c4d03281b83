"""Name-to-class registries with Dassl's semantics, plus the "did you mean" availability check."""
from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .dassl_bridge import share_with_dassl
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
    """Maps class names to objects; usable as ``@REG.register()`` or ``REG.register(obj)``.

    ``shared_with_dassl``: every registration also goes to Dassl's registry of the same kind when Dassl is importable
    (``engine/dassl_bridge.py``), so a class is in Dassl's registry as soon as its module is imported.
    """

    def __init__(self, name: str, shared_with_dassl: bool = False) -> None:
        self._name = name
        self._obj_map: dict[str, Any] = {}
        self._shared_with_dassl = shared_with_dassl

    def _do_register(self, name: str, obj: Any, force: bool = False) -> None:
        if name in self._obj_map and not force:
            raise KeyError(f'An object named "{name}" was already registered in "{self._name}" registry')
        self._obj_map[name] = obj
        if self._shared_with_dassl:
            share_with_dassl(self._name, name, obj)

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

    def load(self, table: Mapping[str, str]) -> None:
        """Import the module of every name in ``table`` (name -> module), whose classes register themselves here.

        A name its module did not register raises ImportError, so a table entry cannot silently point nowhere.
        """
        for module in dict.fromkeys(table.values()):
            importlib.import_module(module)
        for name, module in table.items():
            if name not in self._obj_map:
                raise ImportError(f"{module} did not register {name!r} in the {self._name} registry; "
                                  "fix the name in the table or the module's @register() class")

    def registered_names(self) -> list[str]:
        return list(self._obj_map.keys())

    def __contains__(self, name: str) -> bool:
        return name in self._obj_map

    def __repr__(self) -> str:
        return f"Registry({self._name!r}, {sorted(self._obj_map)})"


TRAINER_REGISTRY = Registry("TRAINER", shared_with_dassl=True)
DATASET_REGISTRY = Registry("DATASET", shared_with_dassl=True)
EVALUATOR_REGISTRY = Registry("EVALUATOR")
