"""Read pickled upstream checkpoints (Dassl, CoOp, PromptKD) without running any of their pickled code.

Upstream Dassl saves the scheduler's ``state_dict()``, which holds scheduler *objects*, so ``torch.load(...,
weights_only=True)`` rejects those files. Allow-listing the classes would still run their ``__setstate__``; instead a
restricted unpickler resolves only torch's tensor and storage rebuild functions, torch dtypes / ``Size`` / ``device``
and plain containers. Every other global becomes an inert placeholder class that records its name and pickled data:
it is never called as the original, and building it runs no code of the original class.
"""
from __future__ import annotations

import importlib
import pickle
import types
from typing import Any

import torch

# Globals resolved for real: torch's tensor rebuilding and the plain containers and values it uses.
ALLOWED_GLOBALS = frozenset({
    ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor_v3"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch.nn.parameter", "Parameter"),
    ("torch", "Tensor"),
    ("torch", "Size"),
    ("torch", "device"),
    ("torch", "UntypedStorage"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
})


class Opaque:
    """Stand-in for a pickled object of an untrusted class: keeps the pickled data, runs none of the class's code."""

    origin = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Opaque:
        obj = object.__new__(cls)
        obj.args, obj.state, obj.items = args, None, []
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items.append((key, value))

    def append(self, value: Any) -> None:
        self.items.append(value)

    def extend(self, values: Any) -> None:
        self.items.extend(values)

    def __repr__(self) -> str:
        return f"<opaque {self.origin}>"


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler resolving only ``ALLOWED_GLOBALS`` and torch dtypes; any other global becomes an ``Opaque`` type."""

    _placeholders: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED_GLOBALS:
            return getattr(importlib.import_module(module), name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        key = (module, name)
        if key not in self._placeholders:
            self._placeholders[key] = type(f"Opaque[{module}.{name}]", (Opaque,), {"origin": f"{module}.{name}"})
        return self._placeholders[key]


def _pickle_module() -> types.ModuleType:
    module = types.ModuleType("restricted_pickle")
    module.Unpickler = RestrictedUnpickler
    module.load = lambda f, **kwargs: RestrictedUnpickler(f, **kwargs).load()
    return module


def restricted_load(path: str) -> Any:
    """``torch.load`` of ``path`` on CPU through the restricted unpickler (placeholders where objects were)."""
    return torch.load(path, map_location="cpu", pickle_module=_pickle_module(), weights_only=False)


def opaque_names(obj: Any) -> set[str]:
    """Names of the untrusted globals (placeholders) anywhere inside ``obj``."""
    if isinstance(obj, Opaque):
        return {obj.origin}
    if isinstance(obj, type) and issubclass(obj, Opaque):
        return {obj.origin}
    if isinstance(obj, dict):
        return set().union(*(opaque_names(k) | opaque_names(v) for k, v in obj.items()))
    if isinstance(obj, (list, tuple, set, frozenset)):
        return set().union(*(opaque_names(v) for v in obj))
    return set()


def load_upstream_checkpoint(path: str) -> dict:
    """A checkpoint dict holding pickled objects, loaded without running them: entries free of objects are kept
    (``state_dict``, ``epoch``, ...), the others dropped and named in one log line."""
    checkpoint = restricted_load(path)
    if not isinstance(checkpoint, dict):
        names = ", ".join(sorted(opaque_names(checkpoint))) or type(checkpoint).__name__
        raise pickle.UnpicklingError(f"{path} holds a pickled {names} object, not a checkpoint dict (Dassl layout: "
                                     "state_dict, epoch, ...); nothing was run")
    kept, ignored = {}, {}
    for key, value in checkpoint.items():
        names = opaque_names(value)
        if names:
            ignored[key] = sorted(names)
        else:
            kept[key] = value
    if "state_dict" in ignored:
        names = ", ".join(ignored["state_dict"])
        raise pickle.UnpicklingError(f"{path}: its state_dict holds pickled objects ({names}), not only tensors; "
                                     "nothing was run")
    dropped = "; ".join(f"{key} ({', '.join(names)})" for key, names in ignored.items())
    print(f"Note: {path} holds pickled Python objects (an upstream Dassl checkpoint); loaded without running any: "
          f"kept {', '.join(map(str, kept))}; ignored {dropped}")
    return kept
