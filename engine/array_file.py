"""Memory-mapped array files: the decoded images a run stores once and reads in every later epoch (the teacher cache's
decoded views, ``trainers/distillation/teacher_cache.py``; the decoded training images, ``engine/image_cache.py``).

One file holds a header (its magic line, the byte length of a JSON object: the cache key, what the writer records
about it, and each array's dtype, shape and offset) and the arrays, each at an offset aligned to 4096 bytes. Reading
maps the file: an array costs nothing until an element is used, every loader worker shares the pages, and nothing
is unpickled. A file is written in place of a temporary one that is renamed over the target when complete
(``engine.atomic.atomic_write``); its rows may come in any order (:meth:`ArrayWriter.put`), and the last array may
grow as it is written (:meth:`ArrayWriter.append`, images of different sizes). Opening checks the magic, the key and
that the file holds every byte the header promises.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Callable, Mapping
from typing import IO, Any

import numpy as np

from .atomic import atomic_write
from .inputs import open_input

MAGIC = b"PETR-ARRAYS-1\n"
HEADER_BYTES = 1 << 16
"""Room for the header at the start of the file (the JSON object must fit)."""
ALIGN = 4096
DTYPES = ("uint8", "int64")


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class ArrayWriter:
    """Writes the arrays of ``specs`` (``{name: (dtype, shape)}``, in file order; the last one's first dimension may
    be None: it grows by :meth:`append`) into the open binary file ``f``."""

    def __init__(self, f: IO[bytes], specs: Mapping[str, tuple[str, tuple]]) -> None:
        self.f, self.specs, self.offsets = f, dict(specs), {}
        offset = HEADER_BYTES
        for name, (dtype, shape) in self.specs.items():
            if dtype not in DTYPES:
                raise ValueError(f"array {name}: dtype {dtype} is not one of {DTYPES}")
            self.offsets[name] = offset = _aligned(offset)
            if shape[0] is not None:
                offset += int(np.prod(shape)) * np.dtype(dtype).itemsize
        self.end = offset
        self.grown = 0

    def put(self, name: str, index: int, row: np.ndarray) -> None:
        """Row ``index`` of the fixed-size array ``name``."""
        dtype, shape = self.specs[name]
        value = np.ascontiguousarray(row, dtype=dtype)
        if value.shape != tuple(shape[1:]):
            raise ValueError(f"array {name}: a row of shape {value.shape}, expected {tuple(shape[1:])}")
        self.f.seek(self.offsets[name] + index * value.nbytes)
        self.f.write(value.tobytes())

    def append(self, value: np.ndarray) -> int:
        """Add ``value`` to the end of the growing last array; returns its element offset there."""
        name = next(reversed(self.specs))
        dtype, _ = self.specs[name]
        data = np.ascontiguousarray(value, dtype=dtype).reshape(-1)
        start = self.grown
        self.f.seek(self.offsets[name] + start * data.itemsize)
        self.f.write(data.tobytes())
        self.grown += data.size
        return start

    def finish(self, key: str, meta: Mapping[str, Any]) -> None:
        """Write the header (after every row: it names the final shapes) and size the file to its last byte."""
        arrays, end = {}, self.end
        for name, (dtype, shape) in self.specs.items():
            if shape[0] is None:
                shape = (self.grown, *shape[1:])
                end = self.offsets[name] + self.grown * np.dtype(dtype).itemsize
            arrays[name] = {"dtype": dtype, "shape": list(shape), "offset": self.offsets[name]}
        header = json.dumps({"key": key, "meta": dict(meta), "arrays": arrays}).encode()
        if len(MAGIC) + 8 + len(header) > HEADER_BYTES:
            raise ValueError(f"array file header of {len(header)} bytes does not fit in {HEADER_BYTES}")
        self.f.truncate(end)
        self.f.seek(0)
        self.f.write(MAGIC + struct.pack("<Q", len(header)) + header)


def write_arrays(path: str, key: str, meta: Mapping[str, Any], specs: Mapping[str, tuple[str, tuple]],
                 fill: Callable[[ArrayWriter], None]) -> None:
    """Write the array file ``path`` atomically: ``fill(writer)`` puts every row, then the header is written."""

    def write(f: IO[bytes]) -> None:
        writer = ArrayWriter(f, specs)
        fill(writer)
        writer.finish(key, meta)

    atomic_write(path, write, binary=True)


class ArrayFile:
    """An array file opened for reading (``f``: the open file, e.g. from ``engine.inputs.open_input``): ``key``,
    ``meta`` and ``arrays`` (read-only NumPy views of the mapped file). Pickled (a spawned loader worker) it keeps
    only its path and maps the file again."""

    def __init__(self, path: str, f: IO[bytes]) -> None:
        self.path = path
        self._map(f)

    def _map(self, f: IO[bytes]) -> None:
        size = os.fstat(f.fileno()).st_size
        if size < len(MAGIC) + 8:
            raise ValueError(f"{size} bytes: no array file header")
        self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self._mmap[:len(MAGIC)] != MAGIC:
            raise ValueError("not an array file (its first line differs)")
        (length,) = struct.unpack("<Q", self._mmap[len(MAGIC):len(MAGIC) + 8])
        if length > HEADER_BYTES:
            raise ValueError(f"a header of {length} bytes")
        header = json.loads(self._mmap[len(MAGIC) + 8:len(MAGIC) + 8 + length])
        self.key, self.meta, self.arrays = header["key"], header["meta"], {}
        for name, spec in header["arrays"].items():
            dtype, shape, offset = np.dtype(spec["dtype"]), tuple(spec["shape"]), int(spec["offset"])
            if spec["dtype"] not in DTYPES:
                raise ValueError(f"array {name} of dtype {dtype}")
            end = offset + int(np.prod(shape)) * dtype.itemsize
            if end > size:
                raise ValueError(f"array {name} ends at byte {end:,}, the file at {size:,} (truncated)")
            self.arrays[name] = np.frombuffer(self._mmap, dtype=dtype, count=int(np.prod(shape)),
                                              offset=offset).reshape(shape)

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]
        with open(self.path, "rb") as f:
            self._map(f)


def open_keyed(path: str, key: str, made_from: Mapping[str, Any], what: str) -> ArrayFile | None:
    """The array file ``path`` (read through the inputs ledger as a ``cache``) when it was written with ``key``;
    None when it is missing or was made from something else (said, naming which entries of ``made_from``, the
    writer's ``meta``, changed). An unreadable or truncated file is one ValueError naming it."""
    if not os.path.isfile(path):
        return None
    try:
        with open_input(path, "cache") as f:
            stored = ArrayFile(path, f)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same one-line advice
        raise corrupt_cache(what, path, e) from None
    if stored.key != key:
        changed = [name for name in made_from if stored.meta.get(name) != made_from[name]]
        print(f"{what} {path} is stale ({', '.join(changed) or 'its key'} changed); writing it again")
        return None
    return stored


def corrupt_cache(what: str, path: str, error: Exception) -> ValueError:
    """The one-line error of a cache file that cannot be read: what it is, why, and to delete it."""
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return ValueError(f"{what} {path} is corrupt or unreadable ({reason}); delete it to rebuild it")
