"""Running one job in the process that calls it (a slot's warm worker, a SLURM job): its log, and its call.

A job of a unit command (``bash scripts/<method>/<command>.sh ARGS`` with its knobs) runs as ``units.call.UnitCall``
and a ``python train.py ARGS`` job as ``train.cli(ARGS)``, both in the calling process, so a preemption signal
reaches train.py directly and no shell stands between them. Every attempt appends to the job's log under a header
line (time, host, attempt), so a requeued or restarted job keeps the output of each attempt. Any other command line
(a test's or a user's ``bash -c``) runs as a child process whose processes form one process group: the caller waits
for the whole group after a signal, not only for its direct child.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import IO

from runner.jobs import Job, command_line
from runner.layout import REPO
from units.call import UnitCall

SCRIPT = re.compile(r"scripts/(\w+)/(\w+)\.sh")
"""A unit command's wrapper script, relative to the repository root."""


def unit_call(job: Job, knobs: Mapping[str, str]) -> UnitCall | None:
    """The unit command ``job`` runs (``bash scripts/<method>/<command>.sh ARGS``) with ``knobs``; None for any
    other command line."""
    found = SCRIPT.fullmatch(job.argv[1]) if len(job.argv) > 1 and job.argv[0] == "bash" else None
    call = found and UnitCall(found[1], found[2], tuple(job.argv[2:]), dict(knobs))
    return call if call and call.known() else None


def is_train_py(job: Job) -> bool:
    """Whether ``job`` is ``python train.py ...`` with no extra environment."""
    return job.argv[:2] in ((sys.executable, "train.py"), ("python", "train.py")) and not job.env


def in_process(job: Job) -> bool:
    """Whether ``job`` runs in the calling process (:func:`run_job`): a unit command or ``python train.py``."""
    return is_train_py(job) or unit_call(job, {}) is not None


def open_log(path: str, job: Job, attempt: str) -> IO[str]:
    """``path`` opened for appending, after a header naming the attempt and the command."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    log = open(path, "a", buffering=1)
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


def run_job(job: Job, log_path: str, attempt: str, knobs: Mapping[str, str]) -> int:
    """Run ``job`` (:func:`in_process`) in this process from the repository root, its output appended to
    ``log_path`` under the ``attempt`` header; its exit status (75: preempted, its state saved)."""
    with open_log(log_path, job, attempt) as log, output_to(log):
        try:
            call = unit_call(job, knobs)
            if call is not None:
                return call()
            import train

            sys.argv = ["train.py", *job.argv[2:]]  # argparse's program name, as on the command line
            return train.cli(list(job.argv[2:]))
        except SystemExit as e:  # argparse: --help or a bad flag
            return e.code if isinstance(e.code, int) else 1
        except Exception:  # a bug: its traceback goes to the log
            traceback.print_exc()
            return 1


def start(job: Job, env: Mapping[str, str], log: IO[str]) -> subprocess.Popen:
    """Start ``job.argv`` (not :func:`in_process`) in the repository root with ``env`` added to this process's
    environment, standard output and error to ``log``, its processes in a process group of their own."""
    return subprocess.Popen(job.argv, cwd=REPO, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def exit_status(returncode: int) -> int:
    """A shell's exit status: a child killed by signal N counts as 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, already ended, do not count); Linux /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def wait_group(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait until every process of ``proc``'s group has ended, at most ``timeout_s``; then kill what is left.
    Returns whether the group ended by itself."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proc.poll()
        if not group_alive(proc.pid):
            return True
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    return False
