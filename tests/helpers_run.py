"""Running train.py and the scripts as subprocesses in tests."""
from __future__ import annotations

import os
import signal
import subprocess

# Subprocess timeouts only guard against hangs: far above any expected run, even on a slow, busy 2-core machine.
HANG_GUARD_S = 1800



def run_until(cmd: list[str], marker: str | None, sig: int, cwd: str, env: dict) -> tuple[int, str, bool]:
    """Run ``cmd`` in its own process group, reading its output (stdout and stderr) line by line, and send ``sig`` to
    the group at the first line containing ``marker``; returns (exit status, output, whether the signal was sent)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
