"""SHA-256 of files, cached by (path, size, mtime_ns): a run's identity names its CLIP weights and checkpoints by
content, and a weight file of hundreds of MB is hashed once per process and, through a small JSON file under
``$XDG_CACHE_HOME/petr`` (default ``~/.cache/petr``), once per machine. Standard library only.

A cached digest is used only while the file keeps its size and modification time; a cache that cannot be read or
written is passed over (the digest is then computed each time).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re

from .atomic import atomic_write_text

DISK_CACHE_MIN_BYTES = 1 << 20
"""Files smaller than this are hashed each time (faster than reading and rewriting the cache file)."""
_HEX = re.compile(r"[0-9a-f]{64}")
_MEMO: dict[tuple[str, int, int], str] = {}


def digest_cache_file() -> str:
    """The machine's digest cache: ``$XDG_CACHE_HOME/petr/file_digests.json`` (default ``~/.cache``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "petr", "file_digests.json")


def sha256_of(path: str) -> str:
    """SHA-256 of a file's bytes (hex), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_cache(cache: str) -> dict:
    try:
        with open(cache, encoding="utf-8") as f:
            entries = json.load(f)
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _write_cache(cache: str, real: str, entry: list) -> None:
    """Add ``real: entry`` to the cache file (atomically); an OSError skips it."""
    with contextlib.suppress(OSError):
        entries = _read_cache(cache)
        entries[real] = entry
        atomic_write_text(json.dumps(entries), cache)


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (hex); cached while the file keeps its path, size and modification time."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = (real, st.st_size, st.st_mtime_ns)
    if key in _MEMO:
        return _MEMO[key]
    on_disk = st.st_size >= DISK_CACHE_MIN_BYTES
    cache = digest_cache_file() if on_disk else ""
    entry = _read_cache(cache).get(real) if on_disk else None
    if (isinstance(entry, list) and len(entry) == 3 and entry[:2] == [st.st_size, st.st_mtime_ns]
            and isinstance(entry[2], str) and _HEX.fullmatch(entry[2])):
        digest = entry[2]
    else:
        digest = sha256_of(real)
        after = os.stat(real)
        if (after.st_size, after.st_mtime_ns) != key[1:]:  # changed while it was read: cache nothing
            return digest
        if on_disk:
            _write_cache(cache, real, [st.st_size, st.st_mtime_ns, digest])
    _MEMO[key] = digest
    return digest
