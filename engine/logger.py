"""Tee ``sys.stdout`` to a run's ``log.txt`` (Dassl's ``setup_logger``); an existing log is never overwritten."""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from .utils import mkdir_if_missing


class Logger:
    """Writes everything printed to the console and to ``fpath``; ``close()`` restores the previous stdout."""

    def __init__(self, fpath: str | None = None, console: TextIO | None = None) -> None:
        self.console = console if console is not None else sys.stdout
        self.file = None
        self.fpath = fpath
        if fpath is not None:
            mkdir_if_missing(os.path.dirname(os.path.abspath(fpath)))
            self.file = open(fpath, "w")

    def write(self, msg: str) -> None:
        self.console.write(msg)
        if self.file is not None:
            self.file.write(msg)

    def flush(self) -> None:
        self.console.flush()
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        """Close the file and, if this logger is the current stdout, put the previous stream back."""
        if sys.stdout is self:
            sys.stdout = self.console
        if self.file is not None:
            self.file.close()
            self.file = None

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, *args) -> None:
        self.close()


def setup_logger(output: str | None = None) -> Logger | None:
    """Tee stdout to ``<output>/log.txt`` (or ``output`` if it ends in .txt/.log); returns the Logger."""
    if output is None:
        return None
    fpath = output if output.endswith((".txt", ".log")) else os.path.join(output, "log.txt")
    if os.path.exists(fpath):
        fpath += time.strftime("-%Y-%m-%d-%H-%M-%S")
    logger = Logger(fpath)
    sys.stdout = logger
    return logger
