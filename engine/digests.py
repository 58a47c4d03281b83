"""SHA-256 of files, cached by what a user cannot set back: a run's identity names every file it read by content (the
inputs ledger, engine/inputs.py, and the images of its splits), and so do the caches made from images; a weight file
of hundreds of MB, or the thousands of images of a dataset, are hashed once per machine. Standard library only.

The machine's cache is one small JSON file per folder of hashed files, under ``$XDG_CACHE_HOME/petr/digests``
(default ``~/.cache``), naming each file of that folder with its digest. What is trusted: a cached digest answers
only for the same file (device and inode), of the same size, modification *and* status-change time
(``st_ctime_ns``, which the kernel sets on every write, rename into place or ``touch -r`` and no user call can set
back). Any change of the bytes, however its timestamps are restored (``touch -r``, ``cp -p``, ``rsync -t``), changes
that key, so the file is hashed again; a cache entry written for another key, forged or stale, is never the answer. A
file changed less than :data:`RACY_S` seconds ago is hashed every time and never cached, since two writes inside one
timestamp tick would share a key. A cache that cannot be read or written is passed over; the folders hashed least
recently are dropped beyond :data:`MAX_FOLDERS`.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import BinaryIO

from .atomic import atomic_write_text
from .errors import CorruptFileError
from .run_files import file_kind

DISK_CACHE_MIN_BYTES = 1 << 20
"""A file looked up alone (:func:`file_digest`) that is smaller than this is hashed each time (faster than reading its
folder's cache); files looked up together (:func:`file_digests`: a split's images) are all cached."""
RACY_S = 2.0
"""A file whose status changed this recently may still be changing within the same timestamp tick: not cached."""
MAX_FOLDERS = 4096
"""Folders whose digests the machine's cache keeps; beyond, those written least recently are dropped."""
_HEX = re.compile(r"[0-9a-f]{64}")
_MEMO: dict[tuple[int, ...], str] = {}
"""Digests of the large files looked up alone in this process, by :func:`stat_key`."""


def digest_cache_dir() -> str:
    """The machine's digest cache: ``$XDG_CACHE_HOME/petr/digests`` (default ``~/.cache``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "petr", "digests")


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


def _settled(st: os.stat_result) -> bool:
    """Whether a file's timestamps tell its versions apart (its status changed :data:`RACY_S` or more ago)."""
    return time.time() - st.st_ctime_ns / 1e9 >= RACY_S


class _FolderCache:
    """The machine's cached digests of the files of one folder (its real path): ``{name: [*stat_key, sha256]}``."""

    def __init__(self, folder: str) -> None:
        self.folder, self.changed = folder, False
        self.path = os.path.join(digest_cache_dir(), hashlib.sha256(folder.encode()).hexdigest()[:32] + ".json")
        self.entries: dict = {}
        with contextlib.suppress(OSError, ValueError, RecursionError):
            with open(self.path, encoding="utf-8") as f:
                stored = json.load(f)
            if isinstance(stored, dict) and stored.get("folder") == folder and isinstance(stored.get("files"), dict):
                self.entries = stored["files"]

    def get(self, name: str, key: tuple[int, ...]) -> str | None:
        entry = self.entries.get(name)
        if isinstance(entry, list) and len(entry) == 6 and tuple(entry[:5]) == key and isinstance(entry[5], str) \
                and _HEX.fullmatch(entry[5]):
            return entry[5]
        return None

    def put(self, name: str, key: tuple[int, ...], digest: str) -> None:
        self.entries[name] = [*key, digest]
        self.changed = True

    def save(self) -> None:
        """Write the folder's entries (atomically) if they changed; an OSError skips it."""
        if not self.changed:
            return
        new = not os.path.exists(self.path)
        with contextlib.suppress(OSError):
            atomic_write_text(json.dumps({"folder": self.folder, "files": self.entries}), self.path)
            if new:
                _drop_oldest(os.path.dirname(self.path))


def _drop_oldest(cache_dir: str) -> None:
    """Remove the folder caches written least recently beyond :data:`MAX_FOLDERS`."""
    with os.scandir(cache_dir) as entries:
        caches = [(e.stat().st_mtime_ns, e.path) for e in entries if e.name.endswith(".json")]
    for _, path in sorted(caches)[:max(0, len(caches) - MAX_FOLDERS)]:
        with contextlib.suppress(OSError):
            os.remove(path)


def _where(path: str, folders: dict[str, _FolderCache]) -> tuple[_FolderCache, str]:
    """The cache of ``path``'s folder (read once into ``folders``) and the file's name in it."""
    parent, name = os.path.split(os.path.abspath(path))
    if parent not in folders:
        folders[parent] = _FolderCache(os.path.realpath(parent))
    return folders[parent], name


def _hash_open(f: BinaryIO, path: str, folders: dict[str, _FolderCache], cached: bool) -> str:
    """SHA-256 of the open file ``f`` (named ``path``), from or into its folder's cache when ``cached``; ``f`` is left
    at its start. The key is taken from ``f`` itself, so the digest is of the file being read."""
    st = os.fstat(f.fileno())
    key = stat_key(st)
    folder, name = _where(path, folders) if cached else (None, "")
    digest = folder.get(name, key) if folder is not None else None
    if digest is None:
        digest = sha256_stream(f)
        if folder is not None and stat_key(os.fstat(f.fileno())) == key and _settled(st):
            folder.put(name, key, digest)  # not while it changed during the read, nor too recently to tell versions
    return digest


def open_digest(f: BinaryIO, path: str) -> str:
    """SHA-256 of the open file ``f`` (named ``path``), from the caches while its :func:`stat_key` is unchanged;
    ``f`` is left at its start."""
    st = os.fstat(f.fileno())
    key = stat_key(st)
    if key in _MEMO:
        return _MEMO[key]
    folders: dict[str, _FolderCache] = {}
    digest = _hash_open(f, path, folders, cached=st.st_size >= DISK_CACHE_MIN_BYTES)
    for folder in folders.values():
        folder.save()
    if _settled(st) and stat_key(os.fstat(f.fileno())) == key:
        _MEMO[key] = digest
    return digest


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (hex), through the caches of :func:`open_digest`."""
    with open(path, "rb") as f:
        return open_digest(f, path)


def file_digests(paths: Iterable[str]) -> dict[str, str]:
    """``{path: SHA-256}`` of every file of ``paths`` (a split's images), each folder's cache read and written once:
    a file whose :func:`stat_key` the cache holds costs a ``stat``, any other is read. Anything but a regular file
    is refused (a FIFO is not waited on); a missing file is FileNotFoundError."""
    folders: dict[str, _FolderCache] = {}
    digests: dict[str, str] = {}
    try:
        for path in paths:
            if path in digests:
                continue
            key = stat_key(os.stat(path))
            folder, name = _where(path, folders)
            digest = folder.get(name, key)
            if digest is None:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                kind = file_kind(os.fstat(fd).st_mode)
                if kind != "a regular file":
                    os.close(fd)
                    raise CorruptFileError(f"{path} is {kind}, not a regular file; give images as regular files")
                with os.fdopen(fd, "rb") as f:
                    digest = _hash_open(f, path, folders, cached=True)
            digests[path] = digest
    finally:
        for folder in folders.values():
            folder.save()
    return digests


def files_digest(paths: Sequence[str], known: Mapping[str, str] | None = None) -> str:
    """One SHA-256 of the bytes of the files ``paths``, in order (of their :func:`file_digests`, or of ``known``, their
    digests already taken): what a cache made from images, or a run's identity, keeps of them; any changed file
    changes it."""
    digests = file_digests(paths) if known is None else known
    return hashlib.sha256("\n".join(digests[path] for path in paths).encode()).hexdigest()
