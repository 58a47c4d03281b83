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


def scripted_slurm(tmp_path, answers: list[str]) -> dict[str, str]:
    """A PATH whose ``squeue`` gives ``answers`` one per call (``fail``: exit 1, as when slurmctld does not answer;
    else the lines, ``;``-separated) and whose ``sbatch`` fails the test if called; the environment to use."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "answers").write_text("\n".join(answers) + "\n")
    (bin_dir / "squeue").write_text(
        f'#!/bin/bash\nanswer=$(head -n 1 {tmp_path}/answers)\nsed -i 1d {tmp_path}/answers\n'
        'echo "$answer" >> ' f'{tmp_path}/asked\n'
        '[ "$answer" = fail ] && exit 1\necho "$answer" | tr ";" "\\n"\n')
    (bin_dir / "sbatch").write_text("#!/bin/bash\necho 'sbatch was called' >&2\nexit 1\n")
    (bin_dir / "scontrol").write_text("#!/bin/bash\nexit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_look_squeue_does_not_answer_is_no_evidence(tmp_path, monkeypatch):
    """Under load slurmctld may not answer for a while: those looks neither make a queued job lost (it would be
    submitted a second time) nor make a rerun of the runner submit a job it should follow. A job is lost only after
    squeue answered three times in a row that it is not active."""
    import runner.slurm as slurm
    from runner.jobs import Job

    env = scripted_slurm(tmp_path, ["fail", "fail", "fail", "fail", "41 PENDING", "fail", "41 PREEMPTED",
                                    "41 PREEMPTED", "fail", "41 PREEMPTED", "fail", "fail", "41 PREEMPTED"])
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setattr(slurm, "LOST_AFTER_S", 0.0)
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.txt").write_text("epoch [1/20]\n")
    (run / "resume.pth.tar").write_bytes(b"state")
    job = Job(name="PETR train d seed1", kind="train", method="PETR", dataset="d", call=None, runs=(str(run),))
    executor = slurm.SlurmExecutor(str(tmp_path / "slurm"), gpus_per_job=0, poll_s=0.01)
    executor.jobs["41"] = job
    handle = slurm.submitit.SlurmJob(folder=str(tmp_path / "slurm" / "%j"), job_id="41")
    looks = [executor.poll([handle]) for _ in range(10)]
    assert looks[:9] == [{}] * 9  # four unanswered, one active, then two inactive answers among unanswered looks
    outcome = looks[9][handle]  # the third inactive answer in a row
    assert outcome.status == 75 and outcome.reason.startswith("SLURM job 41 ended (PREEMPTED) without a result")
    # a rerun of the runner: two unanswered looks, then the job listed in an inactive state (a requeue passes through
    # one): it follows the job, whose looks decide whether it is lost, instead of submitting it a second time
    rerun = slurm.SlurmExecutor(str(tmp_path / "slurm"), gpus_per_job=0, poll_s=0.01)
    rerun.record[job.name] = "41"
    followed = rerun.start(job, str(tmp_path / "job.log"))
    assert followed.job_id == "41" and (tmp_path / "asked").read_text().splitlines()[-3:] == ["fail", "fail",
                                                                                            "41 PREEMPTED"]
    assert "41" in executor.lost  # the runner that found it lost submits the job anew when it runs it again
