"""Downloaded files: their SHA-256, safe unpacking of zip / tar archives (every member must be a plain file or folder
inside the destination) and the matching of their names to dataset names.

Used by the fetch commands (datasets, teachers), which unpack into a temporary folder and rename it into place, so
an archive that is refused or cut off leaves nothing where the data is read from. Standard library only.
"""
from __future__ import annotations

import os
import re
import shutil
import tarfile
import zipfile
import zlib
from pathlib import PurePosixPath

from .errors import CorruptFileError, InvalidInputError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")


def archive_stem(name: str) -> str | None:
    """``name`` without its archive suffix (``eurosat.zip`` -> ``eurosat``); None when it is not an archive (Dassl's
    ``*.pth.tar`` checkpoints are torch files, not tar archives)."""
    lower = name.lower()
    if lower.endswith(".pth.tar"):
        return None
    return next((name[: -len(s)] for s in ARCHIVE_SUFFIXES if lower.endswith(s)), None)


def name_key(text: str) -> str:
    """Lower-case letters and digits only: how fetched file names are matched to dataset names, so ``food-101``,
    ``Food101`` and ``food101.zip``'s stem are one name."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def safe_parts(name: str, source: str, kind: str = "archive") -> tuple[str, ...]:
    """The path parts of ``name``, a member of the archive (``kind``) or a file of the repository listing ``source``;
    an absolute name or one with ``..`` is refused: it would be written outside the folder it is placed in."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        member = "the member" if kind == "archive" else "the file"
        raise InvalidInputError(f"{source} holds {member} {name!r}, which would be written outside the folder it is "
                                f"placed in; refused (the {kind} is not the expected one)")
    return tuple(p for p in path.parts if p not in ("", "."))


def _members(archive: str):
    """(path parts, is folder, opener) of each member; links and special files are refused."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            if zf.infolist() and min(info.header_offset for info in zf.infolist()) != 0:
                # the directory found belongs to a zip stored inside (a torch file): the archive's own end is missing
                raise zipfile.BadZipFile("its central directory is not the archive's own")
            for info in zf.infolist():
                yield safe_parts(info.filename, archive), info.is_dir(), lambda info=info: zf.open(info)
        return
    with tarfile.open(archive) as tf:
        for info in tf:
            if not (info.isfile() or info.isdir()):
                raise InvalidInputError(f"{archive} holds {info.name!r}, a link or special file; refused (only "
                                        "plain files and folders are unpacked)")
            yield safe_parts(info.name, archive), info.isdir(), lambda info=info: tf.extractfile(info)


def unpack(archive: str, dest: str) -> int:
    """Unpack ``archive`` (zip or tar, compressed or not) into the folder ``dest``; returns the number of files.

    Unsafe members raise InvalidInputError, unreadable archives CorruptFileError; ``dest`` may then hold part of the
    archive, so callers unpack into a temporary folder.
    """
    count = 0
    try:
        for parts, is_dir, opener in _members(archive):
            if not parts:
                continue
            target = os.path.join(dest, *parts)
            if is_dir:
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with opener() as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            count += 1
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as e:
        raise CorruptFileError(f"{archive} cannot be unpacked ({type(e).__name__}: {e}); it is cut off or not an "
                               "archive: delete it and fetch it again") from None
    return count
