"""A real one-node SLURM cluster for the tests (``tests/slurm_cluster.sh``: Debian's slurmctld, slurmd, munge).

Without the binaries the SLURM tests are skipped on a developer machine, and fail under CI (``CI`` set), where
``.ci/run`` installs them first.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.helpers_run import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@contextmanager
def slurm_cluster(folder: str) -> Iterator[dict[str, str]]:
    """Start the cluster in ``folder`` and yield the environment its clients need (SLURM_CONF); stop it after."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        message = f"SLURM binaries missing ({', '.join(missing)}): apt-get install slurmctld slurmd slurm-client munge"
        if under_ci():
            pytest.fail(f"{message} (.ci/run installs them; the SLURM tests are not skipped in CI)")
        pytest.skip(message)
    script = os.path.join(REPO, "tests", "slurm_cluster.sh")
    start = time.monotonic()
    done = subprocess.run(["bash", script, "start", folder], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    conf = done.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF=")
    print(f"SLURM cluster started in {time.monotonic() - start:.1f} s ({folder})")
    try:
        yield {"SLURM_CONF": conf}
    finally:
        subprocess.run(["bash", script, "stop", folder], capture_output=True, timeout=HANG_GUARD_S)


def squeue_state(job_id: str, env: dict[str, str]) -> str:
    """``STATE|REASON`` of a job, or "" when SLURM no longer lists it."""
    done = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%r"], capture_output=True, text=True,
                          env=env)
    return done.stdout.strip()


class RequeueRelease:
    """Makes a requeued job eligible at once, as an admin would (``scontrol update StartTime=now``), after it has
    waited :data:`SETTLE_S`. SLURM holds a requeued job for about two minutes (reason BeginTime): a job started
    again within the second its previous run's credential was revoked is killed as "Job credential revoked"."""

    SETTLE_S = 5.0

    def __init__(self, job_id: str, env: dict[str, str]):
        self.job_id, self.env = job_id, env
        self.pending_since: float | None = None
        self.released = False

    def poll(self) -> None:
        if squeue_state(self.job_id, self.env) != "PENDING|BeginTime":
            self.pending_since = None
            return
        now = time.monotonic()
        self.pending_since = self.pending_since or now
        if now - self.pending_since >= self.SETTLE_S:
            subprocess.run(["scontrol", "update", f"JobId={self.job_id}", "StartTime=now"], check=True, env=self.env,
                           capture_output=True)
            self.released = True
