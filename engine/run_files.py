"""Opening a run folder's own files (run.lock, log.txt) safely: never through a symbolic link (a link would make the
run write outside its folder) and only when they are regular files (a FIFO would block the run); and creating the
folders a run writes in (``<run>/<model>/``, ...) without entering a link. Standard library only.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator

from .errors import CorruptFileError

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO", ...); "a regular file" for one."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file")


def not_regular_error(path: str, kind: str) -> CorruptFileError:
    """The one-line error for a run file (or checkpoint) at ``path`` that is ``kind``, not a regular file."""
    return CorruptFileError(f"{path} is {kind}, not a regular file; a run reads and writes only regular files in its "
                            f"folder (nothing outside it is followed): remove it (rm {path}) and rerun")


def open_run_file(path: str, flags: int, mode: int = 0o666) -> int:
    """``os.open`` of a run folder's own file without following a final symbolic link and without blocking on a
    FIFO; anything but a regular file is refused with :func:`not_regular_error` (the descriptor is then blocking)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise
        try:
            kind = file_kind(os.lstat(path).st_mode)
        except OSError:
            raise e from None
        raise not_regular_error(path, kind) from None
    kind = file_kind(os.fstat(fd).st_mode)
    if kind != "a regular file":
        os.close(fd)
        raise not_regular_error(path, kind)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both made absolute, links not followed)."""
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


_WRITING_IN: list[str] = []
"""The run folders this process writes in (:func:`writing_in`), innermost last."""


@contextlib.contextmanager
def writing_in(run_dir: str) -> Iterator[None]:
    """Inside: the folders below ``run_dir`` (a run's own folder) that :func:`make_folder` creates or enters, and so
    every atomic write there (``engine.atomic``), never follow a symbolic link out of it."""
    _WRITING_IN.append(os.path.abspath(run_dir))
    try:
        yield
    finally:
        _WRITING_IN.pop()


def not_a_folder_error(path: str, kind: str) -> CorruptFileError:
    """The one-line error for a path inside a run folder where a folder is expected, which is ``kind``."""
    return CorruptFileError(f"{path} is {kind}, not a folder; a run writes only inside its own folder (a link there is "
                            f"not followed): remove it (rm {path}) and rerun")


def make_folder(path: str) -> None:
    """Create the folder ``path`` and its parents where missing (as ``os.makedirs``). Below a run folder being written
    (:func:`writing_in`) each folder is created or entered without following a symbolic link, and a link, a FIFO or a
    file where a folder is expected is refused with :func:`not_a_folder_error`, so nothing is written outside it."""
    path = os.path.abspath(path)
    run_dir = next((folder for folder in reversed(_WRITING_IN) if inside(path, folder)), None)
    if run_dir is None or path == run_dir:
        os.makedirs(path, exist_ok=True)
        return
    os.makedirs(run_dir, exist_ok=True)
    current = run_dir
    for part in os.path.relpath(path, run_dir).split(os.sep):
        current = os.path.join(current, part)
        try:
            os.mkdir(current)
        except FileExistsError:
            mode = os.lstat(current).st_mode
            if not stat.S_ISDIR(mode):
                raise not_a_folder_error(current, file_kind(mode)) from None
