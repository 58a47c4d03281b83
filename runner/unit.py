"""Running one job in the process that calls it (a slot's warm worker, a SLURM job): its log, and its call.

The job's call (``units.call.UnitCall``, ``units.call.TrainCall``) runs in the calling process, so a preemption
signal reaches train.py directly and no shell stands between them. Every attempt appends to the job's log under a
header line (time, host, attempt), so a requeued or restarted job keeps the output of each attempt.
"""
from __future__ import annotations

import os
import socket
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import IO

from engine.run_files import open_run_file
from runner.jobs import Job, command_line
from runner.profiles import launch_env


def append_to(path: str) -> IO[str]:
    """The job log ``path`` (in the log folder the runner made) opened for appending, line-buffered; never through a
    symbolic link (it would write outside the output) nor on a FIFO (it would block): anything but a regular file is
    ``engine.errors.CorruptFileError`` naming it."""
    return os.fdopen(open_run_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", buffering=1)


def open_log(path: str, job: Job, attempt: str) -> IO[str]:
    """``path`` opened for appending (:func:`append_to`), after a header naming the attempt and the command."""
    log = append_to(path)
    log.write(f"=== {datetime.now():%Y-%m-%d %H:%M:%S} on {socket.gethostname()}: {attempt}\n"
              f"$ {command_line(job)}\n")
    return log


@contextmanager
def output_to(log: IO[str]) -> Iterator[None]:
    """Standard output and error of this process, file descriptors included (C code and child processes write
    there too), sent to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved):
            os.dup2(old, fd)
            os.close(old)


def run_job(job: Job, log_path: str, attempt: str, has_bf16: bool | None = None) -> int:
    """Call ``job``'s call in this process (the bf16 override of the fast profile decided for this machine's card,
    see ``runner.profiles.launch_env``), its output appended to ``log_path`` under the ``attempt`` header; its exit
    status (75: preempted, its state saved)."""
    call = job.call
    if job.bf16_ns:
        call = replace(call, knobs=launch_env(dict(job.knobs), job.bf16_ns, has_bf16))
    with open_log(log_path, job, attempt) as log, output_to(log):
        try:
            return call()
        except SystemExit as e:  # argparse: --help or a bad flag
            return e.code if isinstance(e.code, int) else 1
        except Exception:  # a bug: its traceback goes to the log
            traceback.print_exc()
            return 1
