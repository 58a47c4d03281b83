"""Opening a run folder's own files (run.lock, log.txt) safely: never through a symbolic link (a link would make the
run write outside its folder) and only when they are regular files (a FIFO would block the run). Standard library
only.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat

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
