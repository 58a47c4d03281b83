"""Tee ``sys.stdout`` to a run's ``log.txt`` (Dassl's ``setup_logger``); a rerun appends to it, so one file keeps
every attempt of a run (an interrupted one and its resumption, a failed one and its retry)."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import TextIO

from .errors import UserError, output_dir_error
from .run_files import open_run_file
from .runs import LOG_FILE
from .utils import mkdir_if_missing


class Logger:
    """Writes everything printed to the console and to ``fpath``; ``close()`` restores the previous stdout."""

    def __init__(self, fpath: str | None = None, console: TextIO | None = None) -> None:
        self.console = console if console is not None else sys.stdout
        self.file = None
        self.fpath = fpath
        if fpath is not None:
            mkdir_if_missing(os.path.dirname(os.path.abspath(fpath)))
            earlier = os.path.isfile(fpath) and os.path.getsize(fpath) > 0
            self.file = os.fdopen(open_run_file(fpath, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a")
            if earlier:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                self.file.write(f"\n===== {stamp}: new attempt (earlier ones above) =====\n")

    def write(self, msg: str) -> None:
        if self.console is not None:
            try:
                self.console.write(msg)
            except OSError:  # the terminal is gone (SIGHUP): the run goes on, logging to the file only
                self.console = None
        if self.file is not None:
            self.file.write(msg)
            if "\n" in msg:  # whole lines reach the file at once, so a killed run's log ends where it stopped
                self.file.flush()

    def write_file(self, msg: str) -> None:
        """Write ``msg`` to the log file only (e.g. an error the caller reports on stderr)."""
        if self.file is not None:
            self.file.write(msg)
            self.flush()

    def flush(self) -> None:
        if self.console is not None:
            with contextlib.suppress(OSError):
                self.console.flush()
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        """Close the file and, if this logger is the current stdout, put the previous stream back."""
        if sys.stdout is self:
            sys.stdout = self.console if self.console is not None else sys.__stdout__
        if self.file is not None:
            self.file.close()
            self.file = None

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, *args) -> None:
        self.close()


def setup_logger(output: str | None = None) -> Logger | None:
    """Tee stdout to ``<output>/log.txt`` (or ``output`` if it ends in .txt/.log), appending; returns the Logger.

    A folder that cannot hold the log (a file, under a file, not writable) raises ConfigError naming it."""
    if output is None:
        return None
    fpath = output if output.endswith((".txt", ".log")) else os.path.join(output, LOG_FILE)
    try:
        logger = Logger(fpath)
    except UserError:  # log.txt is a link or no regular file
        raise
    except OSError as e:
        raise output_dir_error(os.path.dirname(fpath) or ".", e) from None
    sys.stdout = logger
    return logger
