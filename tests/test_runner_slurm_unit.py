"""The SLURM executor's decisions that need no cluster: how a job SLURM lost counts, and the runner's one error line
on a machine without SLURM's commands."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from runner.slurm import failure_outcome, lost_outcome
from tests.helpers_run import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("state,saved,expected", [
    ("PREEMPTED", True, 75), ("FAILED", True, 75), ("NODE_FAIL", True, 75), ("unknown to squeue", True, 75),
    ("CANCELLED", True, 1), ("OUT_OF_MEMORY", True, 1), ("PREEMPTED", False, 1),
])
def test_lost_job_is_resubmitted_only_when_a_rerun_can_resume(tmp_path, state, saved, expected):
    """A job SLURM no longer lists as running, without a result: preempted (exit 75, the runner submits it again)
    when it ended as a preemption or a failure and its run saved a resume state; a user's ``scancel``, an
    out-of-memory kill or a run with nothing saved is a failure, reported with the last line SLURM wrote."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.txt").write_text("epoch [1/20]\n")
    if saved:
        (run / "resume.pth.tar").write_bytes(b"state")
    stdout = tmp_path / "41_0_log.out"
    stdout.write_text("srun: error: task 0 launch failed\n\n")
    outcome = lost_outcome("41", state, str(stdout), [str(run)])
    assert outcome.status == expected
    assert outcome.reason.startswith(f"SLURM job 41 ended ({state}) without a result (its last line: srun: error: "
                                     "task 0 launch failed)")


def test_slurm_executor_without_slurm_is_one_error_line(tmp_path):
    """``--executor slurm`` on a machine whose PATH has no sbatch: exit 2 with one ``error:`` line naming what is
    missing, before anything is submitted or written."""
    data = tmp_path / "data"
    data.mkdir()
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash",):
        (bare / tool).symlink_to(shutil.which(tool))
    env = {**os.environ, "PATH": str(bare)}
    done = subprocess.run([sys.executable, "-m", "runner", "base2new", "--methods", "CoOp", "--datasets", "eurosat",
                           "--seeds", "1", "--data", str(data), "--output", str(tmp_path / "out"), "--executor",
                           "slurm"], cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --executor slurm: sbatch, squeue, scontrol not found"), \
        done.stderr
    assert not (tmp_path / "out" / "logs" / "base2new" / "slurm").exists()


def test_a_failed_jobs_status_is_read_from_its_error_negative_ones_too():
    """A unit killed by a signal (torchrun dead of SIGUSR1: -10) is reported with that status, not as a garbled
    line; an error that names no status is a failure (1) with its last line."""
    killed = failure_outcome("7", "Traceback (most recent call last):\nrunner.slurm.UnitFailed: PETR train dtd seed1: "
                                  "exit status -10; log /out/logs/PETR_train_dtd_seed1.log\n")
    assert (killed.status, killed.reason) == (-10, "SLURM job 7: exit status -10")
    failed = failure_outcome("8", "Traceback (most recent call last):\nMemoryError: out of memory\n")
    assert (failed.status, failed.reason) == (1, "SLURM job 8 failed: MemoryError: out of memory")
