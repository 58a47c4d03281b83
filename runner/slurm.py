"""SLURM executor through submitit: one SLURM job per unit command, requeued on preemption.

Each job runs :class:`UnitJob` on its node, a submitit ``Checkpointable``: the unit command in a process group of
its own, output appended to the job's log (one header per attempt). Preemption:

* the preemption signal (``--signal=USR1@<delay>``, or ``scancel --signal=USR1``) reaches every process of the job:
  train.py saves its resume state and exits with ``EXIT_PREEMPTED``; submitit calls :meth:`UnitJob.checkpoint`,
  which waits for the command's processes to end and hands submitit the same command, and submitit requeues the
  job (``scontrol requeue``);
* SIGTERM (``scontrol requeue``, preemption in REQUEUE mode, ``scancel``): SLURM itself ends the job and, unless it
  was cancelled, requeues it; the job waits for its processes and leaves without a result;
* the unit command exits with ``EXIT_PREEMPTED`` on its own: the job raises the preemption signal in itself, so
  submitit checkpoints and requeues it as above.

The rerun of a requeued job runs the same command, whose script resumes the interrupted run. The runner waits for
the jobs (a job is submitted once its dependencies finished), reads their results from submitit's files and their
state from ``squeue``, and records their ids so that a rerun of the runner reattaches to jobs still queued.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import submitit
from tqdm import tqdm

from runner import unit
from runner.jobs import Job
from runner.layout import FINISHED_STATES, REPO, run_states, write_text
from runner.profiles import launch_env
from runner.schedule import EXIT_PREEMPTED, Outcome

PREEMPT_SIGNAL = "USR1"
"""The signal SLURM sends before a time limit or preemption, which train.py and submitit both handle."""
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                 "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}
"""squeue states of a job that is not over."""
SIGNAL_WAIT_S = 10.0
"""When the unit command was stopped by a signal, how long the job waits for the signal SLURM sends the job's own
process at the same moment (its handler, not the command's exit status, says whether SLURM ends or requeues the
job)."""
LOST_AFTER_S = 60.0
"""A job that SLURM has not run for this long and that left no result is lost (a requeue passes through
inactive states for a moment only)."""
RESUBMIT_STATES = {"PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "FAILED", "unknown to squeue"}
"""How a lost job may have ended for a rerun to go further: when its runs saved their resume state, it counts as
preempted and the runner submits it again (a cluster that cancels preempted jobs, a failed node, a requeue that did
not happen). A job cancelled by a user (CANCELLED) or out of memory is reported as failed."""


class UnitFailed(RuntimeError):
    """The unit command of a SLURM job exited with a non-zero status (the job fails, as sacct then shows)."""


class UnitJob(submitit.helpers.Checkpointable):
    """What a SLURM job runs: one unit command, requeued through submitit when it is preempted."""

    def __init__(self, job: Job, log: str, threads: int | None = None, grace_s: float = 60.0):
        self.job, self.log, self.threads, self.grace_s = job, log, threads, grace_s
        self.proc: subprocess.Popen | None = None
        self.ending = False

    def __call__(self) -> int:
        restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        attempt = f"SLURM job {os.environ.get('SLURM_JOB_ID', '?')}, attempt {restart + 1}"
        env = launch_env(self.job.env, self.job.bf16_ns)
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        signal.signal(signal.SIGTERM, self._slurm_ends_job)
        with unit.open_log(self.log, self.job, attempt) as log:
            self.proc = unit.start(self.job, env, log, new_group=True)
            code = self.proc.wait()
            if code < 0 or code == EXIT_PREEMPTED:  # a signal stopped it: the job's own may still be on its way
                deadline = time.monotonic() + SIGNAL_WAIT_S
                while not self.ending and time.monotonic() < deadline:
                    time.sleep(0.1)
            if self.ending:
                unit.wait_group(self.proc, self.grace_s)
                log.write(f"=== SLURM ended the job (SIGTERM) after exit {unit.exit_status(code)}: leaving without "
                          "a result (SLURM requeues it unless it was cancelled)\n")
                sys.exit(EXIT_PREEMPTED)
            code = unit.exit_status(code)
            if code == EXIT_PREEMPTED:
                log.write(f"=== exit {EXIT_PREEMPTED} (preempted): requeueing through submitit\n")
        if code == EXIT_PREEMPTED:
            signal.raise_signal(preempt_signal())  # submitit's handler calls checkpoint() and requeues the job
        if code != 0:
            raise UnitFailed(f"{self.job.name}: exit status {code}; log {self.log}")
        return code

    def _slurm_ends_job(self, signum: int, frame: Any) -> None:
        """SIGTERM: SLURM is ending the job (its processes got the signal too); note it, the job leaves when they
        have ended."""
        self.ending = True

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        """Called by submitit on the preemption signal: wait for the command's processes (train.py writes its
        resume state), then resubmit the same command."""
        if self.proc is not None:
            unit.wait_group(self.proc, self.grace_s)
        return submitit.helpers.DelayedSubmission(UnitJob(self.job, self.log, self.threads, self.grace_s))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "proc": None, "ending": False}  # a process handle does not travel


def preempt_signal() -> signal.Signals:
    """The signal submitit's handler requeues on (SUBMITIT_PREEMPT_SIGNAL, which every job exports)."""
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))


def last_line(path: str) -> str:
    """The last non-empty line of a text file ("" when there is none), e.g. srun's error in a job's output."""
    if not os.path.isfile(path):
        return ""
    with open(path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else ""


def squeue_states() -> dict[str, str]:
    """``{job id: state}`` of this user's jobs that SLURM still knows."""
    done = subprocess.run(["squeue", "-h", "-t", "all", "--me", "-o", "%i %T"], capture_output=True, text=True)
    if done.returncode != 0:
        return {}
    return dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if " " in line)


def lost_outcome(job_id: str, state: str, stdout: str, runs: Sequence[str]) -> Outcome:
    """How a job that SLURM no longer runs and that left no result ended: preempted when a rerun can resume it (see
    :data:`RESUBMIT_STATES`), else failed; either way with the last line of its output file ``stdout``."""
    said = last_line(stdout)
    where = f"SLURM job {job_id} ended ({state}) without a result" + (f" (its last line: {said})" if said else "")
    states = run_states(runs).values()
    if state in RESUBMIT_STATES and states and all(s == "resumable" or s in FINISHED_STATES for s in states):
        return Outcome(EXIT_PREEMPTED, f"{where}; its runs saved their resume state")
    return Outcome(1, f"{where}: cancelled, out of time or memory, or its node failed")


def require_slurm() -> None:
    """ValueError with one line when this machine cannot submit SLURM jobs (no ``sbatch`` / ``squeue``)."""
    missing = [b for b in ("sbatch", "squeue", "scontrol") if shutil.which(b) is None]
    if missing:
        raise ValueError(f"--executor slurm: {', '.join(missing)} not found on this machine; run the runner on a "
                         "SLURM login node, or use --executor local")


class SlurmExecutor:
    """Submits each job through submitit and follows it until it leaves a result."""

    def __init__(self, folder: str, partition: str | None = None, account: str | None = None, time_min: int = 1440,
                 gpus_per_job: int = 1, cpus_per_job: int | None = None, threads: int | None = None,
                 max_jobs: int = 256, signal_delay_s: int = 120, extra: dict[str, str] | None = None,
                 poll_s: float = 5.0):
        require_slurm()
        self.folder = os.path.abspath(folder)
        self.poll_s = poll_s
        self.threads = threads
        self.slots = max_jobs
        self.grace_s = max(10.0, signal_delay_s - 15.0)
        self.executor = submitit.SlurmExecutor(folder=os.path.join(self.folder, "%j"))
        params: dict[str, Any] = dict(
            time=time_min, signal_delay_s=signal_delay_s, stderr_to_stdout=True,
            setup=[f"export SUBMITIT_PREEMPT_SIGNAL={PREEMPT_SIGNAL}",
                   f"export PYTHONPATH={shlex.quote(REPO)}${{PYTHONPATH:+:$PYTHONPATH}}"],
            additional_parameters={"signal": f"{PREEMPT_SIGNAL}@{signal_delay_s}", "chdir": REPO, **(extra or {})})
        if partition:
            params["partition"] = partition
        if account:
            params["account"] = account
        if gpus_per_job:
            params["gpus_per_node"] = gpus_per_job
        if cpus_per_job:
            params["cpus_per_task"] = cpus_per_job
        self.executor.update_parameters(**params)
        self.record_path = os.path.join(self.folder, "jobs.json")
        self.record: dict[str, str] = {}
        if os.path.isfile(self.record_path):
            with open(self.record_path) as f:
                self.record = json.load(f)
        self.inactive_since: dict[str, float] = {}
        self.jobs: dict[str, Job] = {}

    def describe(self) -> str:
        return f"SLURM through submitit, up to {self.slots} jobs queued at once; submitit files in {self.folder}"

    def start(self, job: Job, log: str) -> submitit.SlurmJob:
        previous = self.record.get(job.name)
        if previous and squeue_states().get(previous) in ACTIVE_STATES:
            tqdm.write(f"following SLURM job {previous} ({job.name}), submitted by an earlier run of the runner")
            self.jobs[previous] = job
            return submitit.SlurmJob(folder=os.path.join(self.folder, "%j"), job_id=previous)
        self.executor.update_parameters(job_name=re.sub(r"[^\w.+-]+", "_", job.name))
        submitted = self.executor.submit(UnitJob(job, log, self.threads, self.grace_s))
        self.jobs[submitted.job_id] = job
        self.record[job.name] = submitted.job_id
        write_text(json.dumps(self.record, indent=1), self.record_path)
        return submitted

    def poll(self, handles: Sequence[submitit.SlurmJob]) -> dict[submitit.SlurmJob, Outcome]:
        states = squeue_states()
        ended = {}
        for handle in handles:
            if handle.paths.result_pickle.exists():
                ended[handle] = self._outcome(handle)
                continue
            state = states.get(handle.job_id, "unknown to squeue")
            if state in ACTIVE_STATES:
                self.inactive_since.pop(handle.job_id, None)
                continue
            since = self.inactive_since.setdefault(handle.job_id, time.monotonic())
            if time.monotonic() - since >= LOST_AFTER_S:
                ended[handle] = self._lost(handle, state)
        return ended

    def _lost(self, handle: submitit.SlurmJob, state: str) -> Outcome:
        return lost_outcome(handle.job_id, state, str(handle.paths.stdout), self.jobs[handle.job_id].runs)

    @staticmethod
    def _outcome(handle: submitit.SlurmJob) -> Outcome:
        try:
            handle.result()
            return Outcome(0)
        except Exception as e:  # the job's exception, pickled by submitit
            found = re.search(r"exit status (\d+)", str(e))
            if found:
                return Outcome(int(found.group(1)), f"SLURM job {handle.job_id}: exit status {found.group(1)}")
            return Outcome(1, f"SLURM job {handle.job_id} failed: {str(e).strip().splitlines()[-1]}")

    def close(self) -> None:
        """Nothing to release: the jobs are SLURM's."""

    def stop(self, signum: int) -> None:
        """The runner is interrupted (by any signal): queued and running jobs stay in SLURM; a rerun of the runner
        reattaches."""
        active = [i for i in self.record.values() if squeue_states().get(i) in ACTIVE_STATES]
        if active:
            print(f"{len(active)} SLURM job(s) keep running ({' '.join(active)}); rerun the same command to follow "
                  f"them, or cancel them with: scancel {' '.join(active)}", file=sys.stderr)
