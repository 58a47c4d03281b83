"""The inputs ledger: every file a run reads is opened through :func:`open_input`, which records the file's role, path
and SHA-256 in the ledger of the run being made. A run's identity is its config plus that ledger
(``engine/run_identity.py``): a finished run is skipped only while every file it read still holds the bytes it read,
whichever config key, folder or record led to the file. Standard library only.

Outside a run (no :func:`recording` active) :func:`open_input` only opens the file. Files inside the run's own folder
(its resume state, its checkpoints) are its outputs, not inputs, and are not recorded. A file under a root the run
names by a config key that is no part of its identity (``DATASET.ROOT``) is recorded relative to it
(``${DATASET.ROOT}/eurosat/split_zhou_EuroSAT.json``), so a moved data root keeps finished runs valid. Images are
not opened here: they count through the split file that lists them (recorded here) and the run's data digest (their
paths and labels). A run writes only inside its folder and the caches it declares (:func:`declare_cache`).
"""
from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from .digests import file_digest, open_digest
from .errors import CorruptFileError, InputNotFoundError
from .json_text import parse_json
from .run_files import file_kind, inside

REGENERABLE = ("fewshot", "cache")
"""Roles of files a run makes again, the same, when they are gone (a few-shot sample of its split, a cache)."""
BY_VALUE = ("config", "run-record")
"""Roles of files recorded for the record but compared by what the run took from them, not by their bytes: a config
file's values are the merged config of the identity (a comment edit changes no run), and another run's records
(its log, run.json, results.json) grow as that run is rerun or the runner adds its job record, while what the run
used them for is the checkpoint of theirs it read, compared by its bytes."""
ROLES = {
    "config": "a config file (trainer or dataset yaml)",
    "clip": "CLIP weights (the backbone, or a distilling trainer's teacher CLIP)",
    "teacher": "a teacher's checkpoint, pointer file or record",
    "split": "a dataset's split or class-list file",
    "fewshot": "a few-shot sample file",
    "checkpoint": "a checkpoint or pointer file of another run (evaluated, resumed from, plugged in)",
    "run-record": "what another run records about itself (results.json, run.json, log.txt)",
    "router": "a routed run's fitted router",
    "cache": "a cache the run reads (the teacher cache, its decoded views, the decoded training images)",
}
"""The roles a file can be read in, and what each means."""


@dataclass
class Ledger:
    """The files one run read, ``{path: {"role": ..., "sha256": ...}}``, and the cache folders it may write in."""

    run_dir: str
    roots: dict[str, str] = field(default_factory=dict)
    """``{config key: folder}``: inputs under one are recorded relative to it (:func:`root_key`)."""
    inputs: dict[str, dict[str, str]] = field(default_factory=dict)
    caches: dict[str, str] = field(default_factory=dict)
    on_commit: Callable[[], None] | None = None
    """Writes the ledger where the run keeps it (train.py: ``run.json``); set once the run has claimed its folder."""

    def owns(self, path: str) -> bool:
        """Whether ``path`` lies in the run's own folder (its outputs, never inputs)."""
        return bool(self.run_dir) and inside(path, self.run_dir)

    def add(self, role: str, path: str, digest: str, name: str = "") -> None:
        """Record the file ``path`` read as ``role`` with its SHA-256 and, when it was found by resolving a ``name``
        (a CLIP model name), that name: what the name resolves to is compared again later."""
        if role not in ROLES:
            raise ValueError(f"unknown input role {role!r}; one of {', '.join(ROLES)}")
        self.inputs[root_key(path, self.roots)] = {"role": role, "sha256": digest, **({"name": name} if name else {})}


_ACTIVE: list[Ledger] = []


def root_key(path: str, roots: Mapping[str, str]) -> str:
    """How the ledger names ``path``: ``${KEY}/<path relative to roots[KEY]>`` under one of ``roots``, else absolute."""
    for key, folder in roots.items():
        if folder and inside(path, folder) and not inside(folder, path):
            return f"${{{key}}}/" + os.path.relpath(os.path.abspath(path), os.path.abspath(folder))
    return os.path.abspath(path)


def expand_key(name: str, roots: Mapping[str, str]) -> str:
    """The path a ledger name stands for with ``roots`` as they are now (inverse of :func:`root_key`)."""
    for key, folder in roots.items():
        prefix = f"${{{key}}}/"
        if name.startswith(prefix):
            return os.path.join(folder, name[len(prefix):])
    return name


@contextlib.contextmanager
def recording(run_dir: str) -> Iterator[Ledger]:
    """Record every input opened while the block runs into a new ledger for the run in ``run_dir``."""
    ledger = Ledger(os.path.abspath(run_dir) if run_dir else "")
    _ACTIVE.append(ledger)
    try:
        yield ledger
    finally:
        _ACTIVE.remove(ledger)


def active() -> Ledger | None:
    """The ledger of the run being made in this process; None outside a run."""
    return _ACTIVE[-1] if _ACTIVE else None


def commit() -> None:
    """Write the active ledger where its run keeps it, now: the engine calls it before a run's results are written,
    so no results file exists whose run.json lacks a file the results came from."""
    ledger = active()
    if ledger is not None and ledger.on_commit is not None:
        ledger.on_commit()


def declare_cache(folder: str, what: str) -> None:
    """Say that the run may write in ``folder``, a cache outside its own folder (``what`` it holds)."""
    ledger = active()
    if ledger is not None:
        ledger.caches[os.path.abspath(folder)] = what


def open_input(path: str, role: str, text: bool = False, errors: str = "strict", name: str = "") -> IO:
    """Open the input file ``path`` for reading (binary, or UTF-8 text with ``text``) and record it in the active
    ledger as ``role`` (:data:`ROLES`) with the SHA-256 of the file being read (and the ``name`` it was found by, if
    any: :meth:`Ledger.add`). Anything but a regular file is refused without blocking (a FIFO); a missing file is an
    InputNotFoundError naming it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputNotFoundError(f"{ROLES.get(role, role)} not found: {path}") from None
    kind = file_kind(os.fstat(fd).st_mode)
    if kind != "a regular file":
        os.close(fd)
        raise CorruptFileError(f"{path} is {kind}, not a regular file; give {ROLES.get(role, role)} as a regular file")
    os.set_blocking(fd, True)
    f = os.fdopen(fd, "rb")
    ledger = active()
    if ledger is not None and not ledger.owns(path):
        try:
            ledger.add(role, path, open_digest(f, path), name)
        except BaseException:
            f.close()
            raise
    return io.TextIOWrapper(f, encoding="utf-8", errors=errors) if text else f


def record_input(path: str, role: str) -> None:
    """Record the file ``path`` as ``role`` without reading it for the run: one the run has just written and uses
    from memory (a split file it created), so a later change of the file still shows."""
    open_input(path, role).close()


def read_input_text(path: str, role: str, errors: str = "strict") -> str:
    """The text of the input file ``path`` (UTF-8), recorded as ``role``."""
    with open_input(path, role, text=True, errors=errors) as f:
        return f.read()


def read_input_json(path: str, role: str) -> Any:
    """The JSON value the input file ``path`` holds, recorded as ``role``; malformed JSON is one error naming it."""
    try:
        return parse_json(read_input_text(path, role))
    except ValueError as e:
        raise CorruptFileError(f"Malformed JSON in {path} ({e}); restore the file or write it again") from None


Resolver = Callable[[str], "str | None"]
"""What a weight name resolves to now (``clip.weights.find_weights``; None: no file yet), for the inputs a run found
by a name."""


def input_changes(recorded: Mapping[str, Any] | None, roots: Mapping[str, str],
                  resolve: Resolver | None = None) -> tuple[list[str], list[str]]:
    """What changed since a run recorded its ``inputs`` ledger (names expanded with ``roots`` as they are now): one
    ``ROLE PATH content sha256 OLD → NEW`` line per file that holds other bytes now (or cannot be read), and a note
    per file that is gone. A gone file contradicts nothing the run computed (a cleared download cache, a deleted
    training run whose test is kept): it is noted, not counted as a change. A file the run found by a name (a CLIP
    model name) is the one ``resolve(name)`` finds now (``clip.weights.find_weights``; None: none there, the
    recorded file is compared), so weights placed elsewhere since, that the name now finds, count too."""
    changes, gone = [], []
    for key, entry in sorted((recorded or {}).items()):
        entry = entry if isinstance(entry, dict) else {}
        role, digest, name = entry.get("role", "input"), entry.get("sha256"), entry.get("name")
        path = expand_key(key, roots)
        if role in BY_VALUE:
            continue
        found = resolve(name) if resolve is not None and isinstance(name, str) and name else None
        if found and os.path.abspath(found) != os.path.abspath(path):
            try:
                now = file_digest(found)
            except OSError as e:
                changes.append(f"{role} {name} now resolves to {found}, which cannot be read ({e.strerror or e})")
                continue
            if now != digest:
                changes.append(f"{role} {name} now resolves to {found}, not {path}: content sha256 "
                               f"{str(digest)[:12]} → {now[:12]}")
            continue
        try:
            now = file_digest(path)
        except FileNotFoundError:
            if role not in REGENERABLE:
                gone.append(f"{role} {path}")
            continue
        except OSError as e:
            changes.append(f"{role} {path} can no longer be read ({e.strerror or e})")
            continue
        if now != digest:
            changes.append(f"{role} {path} content sha256 {str(digest)[:12]} → {now[:12]}")
    return changes, gone
