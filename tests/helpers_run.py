"""Running train.py and the scripts as subprocesses in tests."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator

# Subprocess timeouts only guard against hangs: far above any expected run, even on a slow, busy 2-core machine.
HANG_GUARD_S = 1800


def default_sigint() -> None:
    """In a child before it starts: SIGINT back to its default action. A suite started as a background job inherits
    SIGINT ignored, and an ignored signal stays ignored across exec (Python and bash then never see Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_until(cmd: list[str], marker: str | None, sig: int, cwd: str, env: dict) -> tuple[int, str, bool]:
    """Run ``cmd`` in its own process group, reading its output (stdout and stderr) line by line, and send ``sig`` to
    the group at the first line containing ``marker``; returns (exit status, output, whether the signal was sent).
    The child starts with SIGINT at its default, whatever this process inherited."""
    proc = subprocess.Popen(cmd, cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=default_sigint)
    lines, sent = [], False
    try:
        for line in proc.stdout:
            lines.append(line)
            if not sent and marker is not None and marker in line:
                os.killpg(proc.pid, sig)
                sent = True
        proc.wait(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, "".join(lines), sent


@contextlib.contextmanager
def read_only(folder: str) -> Iterator[list[str]]:
    """A command prefix under which ``folder`` cannot be written, as on a read-only mount.

    Root ignores file permissions, so for root the prefix runs the command in new user and mount namespaces with
    ``folder`` bind-mounted read-only (``unshare``; the test is skipped where that is not allowed); for other users
    the folder is made read-only (``chmod``) until the block ends and the prefix is empty.
    """
    import pytest

    if os.geteuid() != 0:
        mode = os.stat(folder).st_mode
        os.chmod(folder, mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        try:
            yield []
        finally:
            os.chmod(folder, mode)
        return
    mount = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    prefix = [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, "sh",
              folder]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=HANG_GUARD_S)
    if probe.returncode != 0:
        pytest.skip(f"running as root and no read-only mount possible ({probe.stderr.decode().strip()[:80]})")
    yield prefix
