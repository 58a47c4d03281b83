"""SHA-256 of files, cached by what a user cannot set back: a run's identity names every file it read by content (the
inputs ledger, engine/inputs.py), and a weight file of hundreds of MB is hashed once per process and, through a small
JSON file under ``$XDG_CACHE_HOME/petr`` (default ``~/.cache/petr``), once per machine. Standard library only.

What is trusted: a cached digest answers only for the same file (device and inode), of the same size, modification
*and* status-change time (``st_ctime_ns``, which the kernel sets on every write, rename into place or ``touch -r`` and
no user call can set back). Any change of the bytes, however its timestamps are restored (``touch -r``, ``cp -p``,
``rsync -t``), changes that key, so the file is hashed again; a cache entry written for another key, forged or stale,
is never the answer. A file changed less than :data:`RACY_S` seconds ago is hashed every time and never cached, since
two writes inside one timestamp tick would share a key. A cache that cannot be read or written is passed over.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from typing import BinaryIO

from .atomic import atomic_write_text

DISK_CACHE_MIN_BYTES = 1 << 20
"""Files smaller than this are hashed each time (faster than reading and rewriting the cache file)."""
RACY_S = 2.0
"""A file whose status changed this recently may still be changing within the same timestamp tick: not cached."""
_HEX = re.compile(r"[0-9a-f]{64}")
_MEMO: dict[tuple[int, ...], str] = {}


def digest_cache_file() -> str:
    """The machine's digest cache: ``$XDG_CACHE_HOME/petr/file_digests.json`` (default ``~/.cache``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "petr", "file_digests.json")


def sha256_stream(f: BinaryIO) -> str:
    """SHA-256 (hex) of what ``f`` holds from its start, read in 1 MiB chunks; ``f`` is left at its start."""
    f.seek(0)
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    f.seek(0)
    return h.hexdigest()


def sha256_of(path: str) -> str:
    """SHA-256 of a file's bytes (hex)."""
    with open(path, "rb") as f:
        return sha256_stream(f)


def stat_key(st: os.stat_result) -> tuple[int, ...]:
    """What identifies one version of a file: device, inode, size, modification and status-change times (ns)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read_cache(cache: str) -> dict:
    try:
        with open(cache, encoding="utf-8") as f:
            entries = json.load(f)
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _write_cache(cache: str, real: str, entry: dict) -> None:
    """Add ``real: entry`` to the cache file (atomically); an OSError skips it."""
    with contextlib.suppress(OSError):
        entries = _read_cache(cache)
        entries[real] = entry
        atomic_write_text(json.dumps(entries), cache)


def _cached(cache: str, real: str, key: tuple[int, ...]) -> str | None:
    entry = _read_cache(cache).get(real)
    if isinstance(entry, dict) and entry.get("stat") == list(key):
        digest = entry.get("sha256")
        if isinstance(digest, str) and _HEX.fullmatch(digest):
            return digest
    return None


def open_digest(f: BinaryIO, path: str) -> str:
    """SHA-256 of the open file ``f`` (named ``path``), from the caches while its :func:`stat_key` is unchanged;
    ``f`` is left at its start. The key is taken from ``f`` itself, so the digest is of the file being read."""
    st = os.fstat(f.fileno())
    key = stat_key(st)
    if key in _MEMO:
        return _MEMO[key]
    real = os.path.realpath(path)
    cache = digest_cache_file() if st.st_size >= DISK_CACHE_MIN_BYTES else ""
    digest = _cached(cache, real, key) if cache else None
    if digest is None:
        digest = sha256_stream(f)
        if stat_key(os.fstat(f.fileno())) != key or time.time() - st.st_ctime_ns / 1e9 < RACY_S:
            return digest  # changing while read, or too recently for its timestamps to tell versions apart
        if cache:
            _write_cache(cache, real, {"stat": list(key), "sha256": digest})
    _MEMO[key] = digest
    return digest


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (hex), through the caches of :func:`open_digest`."""
    with open(path, "rb") as f:
        return open_digest(f, path)
