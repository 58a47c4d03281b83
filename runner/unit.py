"""Running one unit command as a child process: its log, and waiting for all of its processes after a signal.

Every attempt appends to the job's log under a header line (time, host, attempt), so a requeued or restarted job
keeps the output of each attempt. A script's processes form one process group: when a signal stops the job (a
preemption), ``bash`` may end at once while ``train.py`` still writes its resume state, so the caller waits for
the whole group, not only for its direct child.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from datetime import datetime
from typing import IO

from runner.jobs import Job, command_line
from runner.layout import REPO


def open_log(path: str, job: Job, attempt: str) -> IO[str]:
    """``path`` opened for appending, after a header naming the attempt and the command."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    log = open(path, "a", buffering=1)
    log.write(f"=== {datetime.now():%Y-%m-%d %H:%M:%S} on {socket.gethostname()}: {attempt}\n"
              f"$ {command_line(job)}\n")
    return log


def start(job: Job, env: Mapping[str, str], log: IO[str], new_group: bool = False) -> subprocess.Popen:
    """Start ``job.argv`` in the repository root with ``env`` (added to this process's environment), standard
    output and error to ``log``; ``new_group`` puts its processes in a process group of their own."""
    return subprocess.Popen(job.argv, cwd=REPO, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=new_group)


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
