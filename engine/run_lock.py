"""The exclusive lock of a run folder: an ``flock`` on ``<folder>/run.lock`` held while a run works there, released
by the OS when the process dies. The holder writes its pid, host, start time and command into the file, so a second
run on the folder stops with one line naming it. Under torchrun only rank 0 locks. Standard library only.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Mapping

from .errors import UserError, output_dir_error
from .json_text import parse_json
from .run_files import open_run_file

LOCK_FILE = "run.lock"
"""Locked (``flock``) by the process working in the folder; it names that process."""
LOCK_GRACE_S = 1.0
"""How long a run retries a held lock before reporting the holder: a :func:`lock_holder` probe holds it for a
moment."""


def lock_holder(path: str) -> dict | None:
    """What the process holding the run folder's lock wrote about itself (pid, host, started, command); None when no
    live process holds it."""
    lock_path = os.path.join(path, LOCK_FILE)
    try:
        fd = open_run_file(lock_path, os.O_RDONLY)
    except OSError:  # none, or not a lock a run could hold (a link, a FIFO)
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_record(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _holder_record(fd: int) -> dict:
    try:
        record = parse_json(os.pread(fd, 65536, 0).decode("utf-8", "replace") or "{}")
    except ValueError:
        record = {}
    return record if isinstance(record, dict) else {}


class RunLockedError(UserError):
    """Another live process works in the run folder."""


def describe_holder(record: Mapping) -> str:
    """One line about a lock holder: pid, host, start time and command."""
    if not record.get("pid"):
        return "a process that has not said who it is yet"
    command = str(record.get("command", ""))
    command = command if len(command) <= 100 else command[:97] + "..."
    return f"pid {record['pid']} on {record.get('host', '?')}, started {record.get('started', '?')}: {command}"


class RunLock:
    """An exclusive ``flock`` on ``<folder>/run.lock``, held while a run works there; the holder writes its pid,
    host, start time and command into the file. The OS releases the lock when the process dies; :meth:`release`
    removes the file."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.fd: int | None = None
        self.command = ""

    @property
    def path(self) -> str:
        return os.path.join(self.folder, LOCK_FILE)

    def acquire(self, command: str) -> RunLock:
        """Take the lock or raise :class:`RunLockedError` naming the holder (after retrying for
        :data:`LOCK_GRACE_S`, the most a state probe holds it)."""
        deadline = time.monotonic() + LOCK_GRACE_S
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder_record(fd)
                os.close(fd)
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise RunLockedError(
                    f"{self.folder} is in use by another run ({describe_holder(holder)}); wait for it to end or stop "
                    "it, or give this run another --output-dir") from None
            if self._same_file(fd):
                break
            os.close(fd)  # the previous holder removed the file after we opened it: lock the new one
        self.fd, self.command = fd, command
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "command": command}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        except OSError as e:  # a full disk: leave no empty lock file behind
            self.release()
            raise output_dir_error(self.folder, e) from None
        return self

    def _open(self) -> int:
        try:
            os.makedirs(self.folder, exist_ok=True)
            return open_run_file(self.path, os.O_RDWR | os.O_CREAT)
        except UserError:
            raise
        except OSError as e:
            raise output_dir_error(self.folder, e) from None

    def _same_file(self, fd: int) -> bool:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return False
        own = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)

    def moved(self, folder: str) -> None:
        """The locked folder was renamed to ``folder`` (the lock file moved with it)."""
        self.folder = folder

    def release(self) -> None:
        """Remove the lock file and release the lock (no-op when not held)."""
        if self.fd is None:
            return
        if self._same_file(self.fd):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
        fcntl.flock(self.fd, fcntl.LOCK_UN)  # for forked children (DataLoader workers) sharing the descriptor too
        os.close(self.fd)
        self.fd = None


def launched_world_size() -> int:
    """Number of processes torchrun started (``WORLD_SIZE``; 1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's rank as torchrun set it (``RANK``; 0 outside torchrun): only rank 0 claims the run folder."""
    return int(os.environ.get("RANK", "0"))
