"""Read pickled upstream checkpoints (Dassl, CoOp, PromptKD) without running any of their pickled code or changing
anything in the loading process.

Upstream Dassl saves the scheduler's ``state_dict()``, which holds scheduler *objects*, so ``torch.load(...,
weights_only=True)`` rejects those files. Allow-listing the classes would still run their ``__setstate__``; instead a
restricted unpickler resolves only torch's tensor and storage rebuild functions, torch dtypes / ``Size`` / ``device``
and plain containers. Every other global becomes an inert placeholder class that records its name and pickled data:
it is never called as the original, and building it runs no code of the original class. pickle's BUILD opcode (set
an object's state) is allowed only on objects this unpickler created while loading, never on a resolved global (a
function, a class, a module), so a file cannot rewrite, say, a torch function's defaults.
"""
from __future__ import annotations

import importlib
import pickle
import types
from collections.abc import Callable
from typing import Any, BinaryIO

import torch

from .errors import CorruptFileError, InvalidInputError, first_line

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
_PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.Size, torch.dtype, torch.device)
_SHARED = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType)


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


def _creating(load: Callable) -> Callable:
    """An opcode handler that also records the object it leaves on the stack as created by this load."""
    def handler(self: RestrictedUnpickler) -> None:
        load(self)
        obj = self.stack[-1]
        if id(obj) not in self._globals and not isinstance(obj, _SHARED):
            self._created[id(obj)] = obj
    return handler


class RestrictedUnpickler(pickle._Unpickler):
    """Unpickler resolving only ``ALLOWED_GLOBALS`` and torch dtypes (any other global becomes an ``Opaque`` type);
    BUILD sets the state of objects it created itself only.

    Python's own unpickler, not the C one, so that BUILD can be checked; upstream checkpoints pickle few objects
    (their tensors' data is read by torch, not through this unpickler).
    """

    dispatch = dict(pickle._Unpickler.dispatch)
    for _op in (pickle.REDUCE, pickle.NEWOBJ, pickle.NEWOBJ_EX, pickle.INST, pickle.OBJ):
        dispatch[_op[0]] = _creating(pickle._Unpickler.dispatch[_op[0]])

    def __init__(self, file, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self._globals: dict[int, Any] = {}  # id -> what find_class resolved (kept alive, so ids stay unique)
        self._created: dict[int, Any] = {}  # id -> an object REDUCE / NEWOBJ / INST / OBJ made in this load
        self._placeholders: dict[tuple[str, str], type] = {}  # per load: nothing outlives it

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED_GLOBALS:
            obj = getattr(importlib.import_module(module), name)
        elif module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            obj = getattr(torch, name)
        else:
            key = (module, name)
            if key not in self._placeholders:
                self._placeholders[key] = type(f"Opaque[{module}.{name}]", (Opaque,), {"origin": f"{module}.{name}"})
            obj = self._placeholders[key]
        self._globals[id(obj)] = obj
        return obj

    def load(self) -> Any:
        try:
            return super().load()
        except KeyError as e:  # the opcode table has no entry for this byte (Python's unpickler lets it through)
            if e.args and isinstance(e.args[0], int):
                raise pickle.UnpicklingError(f"invalid load key, {bytes([e.args[0]])!r}") from None
            raise

    def load_build(self) -> None:
        target = self.stack[-2] if len(self.stack) > 1 else None
        if id(target) not in self._created:
            what = getattr(target, "__qualname__", None) or type(target).__qualname__
            raise pickle.UnpicklingError(f"BUILD would set the state of {what}, which this load did not create; "
                                         "refused")
        super().load_build()

    dispatch[pickle.BUILD[0]] = load_build


def _pickle_module() -> types.ModuleType:
    module = types.ModuleType("restricted_pickle")
    module.Unpickler = RestrictedUnpickler
    module.load = lambda f, **kwargs: RestrictedUnpickler(f, **kwargs).load()
    return module


def restricted_load(f: str | BinaryIO) -> Any:
    """``torch.load`` of the file ``f`` (a path or an open file) on CPU through the restricted unpickler
    (placeholders where objects were)."""
    return torch.load(f, map_location="cpu", pickle_module=_pickle_module(), weights_only=False)


def opaque_names(obj: Any) -> set[str]:
    """What ``obj`` holds besides plain data (containers of tensors, numbers and strings): the names of pickled
    objects (placeholders) and of anything else, e.g. a function or class the file named."""
    if isinstance(obj, Opaque) or (isinstance(obj, type) and issubclass(obj, Opaque)):
        return {obj.origin}
    if isinstance(obj, torch.Tensor):
        return opaque_names(vars(obj)) | opaque_names(obj._backward_hooks or {})
    if isinstance(obj, _PLAIN):
        return set()
    if isinstance(obj, dict):
        return set().union(*(opaque_names(k) | opaque_names(v) for k, v in obj.items()))
    if isinstance(obj, (list, tuple, set, frozenset)):
        return set().union(*(opaque_names(v) for v in obj))
    kind = obj if isinstance(obj, _SHARED) else type(obj)
    return {f"{getattr(kind, '__module__', None) or '?'}.{getattr(kind, '__qualname__', type(kind).__qualname__)}"}


def plain_entries(checkpoint: Any, path: str) -> tuple[dict, dict[Any, list[str]]]:
    """The entries of a loaded checkpoint dict that hold plain data only, and the others with the names of the
    objects they hold; a checkpoint that is no dict, whose state_dict holds objects or that nests containers beyond the
    recursion limit is refused in one line."""
    kept, ignored = {}, {}
    try:
        if not isinstance(checkpoint, dict):
            names = ", ".join(sorted(opaque_names(checkpoint))) or type(checkpoint).__name__
            raise InvalidInputError(f"{path} holds a pickled {names} object, not a checkpoint dict (Dassl layout: "
                                    "state_dict, epoch, ...); nothing was run")
        for key, value in checkpoint.items():
            names = opaque_names(value)
            if names or not isinstance(key, (str, int)):
                ignored[key] = sorted(names | opaque_names(key))
            else:
                kept[key] = value
    except RecursionError:
        raise CorruptFileError(f"{path} nests its containers deeper than Python's recursion limit (a checkpoint holds "
                               "flat dicts of tensors); refused, nothing was run: restore a good copy or point to "
                               "another file") from None
    if "state_dict" in ignored:
        names = ", ".join(ignored["state_dict"])
        raise InvalidInputError(f"{path}: its state_dict holds pickled objects ({names}), not only tensors; "
                                "refused, nothing was run")
    return kept, ignored


def dropped_entries(ignored: dict[Any, list[str]]) -> str:
    """``key (object names); ...`` of the entries ``plain_entries`` left out."""
    return "; ".join(f"{key} ({', '.join(names)})" for key, names in ignored.items())


def load_upstream_checkpoint(path: str, f: BinaryIO | None = None) -> dict:
    """A checkpoint dict holding pickled objects, loaded without running them: entries free of objects are kept
    (``state_dict``, ``epoch``, ...), the others dropped and named in one log line. A file that is not such a
    checkpoint is refused with one line. ``f``: the file ``path`` already open (read from its start)."""
    try:
        if f is not None:
            f.seek(0)
        checkpoint = restricted_load(path if f is None else f)
    except Exception as e:  # any failure of an untrusted file's unpickling: nothing of it ran
        why = f"{type(e).__name__}: {first_line(e)[:160]}"
        raise CorruptFileError(f"{path} cannot be read as a checkpoint ({why}); nothing in it was run: restore a "
                               "good copy or point to another file") from None
    kept, ignored = plain_entries(checkpoint, path)
    print(f"Note: {path} holds pickled Python objects (an upstream Dassl checkpoint); loaded without running any: "
          f"kept {', '.join(map(str, kept)) or 'nothing'}; ignored {dropped_entries(ignored) or 'nothing'}")
    return kept
