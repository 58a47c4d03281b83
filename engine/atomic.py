"""Atomic file writes (standard library only, so the runner and the digest cache use them without torch): a
temporary file in the target's folder, renamed over the target when complete."""
from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import IO

from .run_files import make_folder


def atomic_write(fpath: str, write: Callable[[IO], None], binary: bool = False) -> None:
    """Call ``write(file)`` on a temporary file in ``fpath``'s folder, then rename it over ``fpath``.

    Readers never see half a file, and a failed write leaves the previous file (if any) untouched. The file gets the
    permissions ``open()`` gives a new file (0666 minus the umask), so results can be shared in a group. Nothing is
    written through a link: the folder is made by ``engine.run_files.make_folder`` (inside a run folder, no link is
    entered), the temporary file is new (never a link), and the rename replaces whatever was at ``fpath``.
    """
    dirname = os.path.dirname(os.path.abspath(fpath))
    make_folder(dirname)
    tmp = os.path.join(dirname, f".tmp-{uuid.uuid4().hex[:12]}{os.path.basename(fpath)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.replace(tmp, fpath)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise


def atomic_write_text(text: str, fpath: str) -> None:
    """Write ``text`` to ``fpath`` atomically (see :func:`atomic_write`)."""
    atomic_write(fpath, lambda f: f.write(text))
