"""SLURM executor through submitit: one SLURM job per unit command, requeued on preemption.

Each job runs :class:`SlurmUnit` on its node, a submitit ``Checkpointable``: the unit command in the job's own
process (:func:`runner.unit.run_job`), output appended to the job's log (one header per attempt). Preemption:

* the preemption signal (``--signal=USR1@<delay>``, or ``scancel --signal=USR1``) reaches train.py, which saves its
  resume state and returns ``EXIT_PREEMPTED``; its signal handlers are then restored to submitit's, and the job
  raises the signal in itself: submitit calls :meth:`SlurmUnit.checkpoint`, which hands it the same command, and
  requeues the job (``scontrol requeue``); a unit command that returns ``EXIT_PREEMPTED`` on its own is requeued
  the same way;
* SIGTERM (``scontrol requeue``, preemption in REQUEUE mode, ``scancel``): train.py saves its state, and the job
  leaves without a result; SLURM itself requeues it unless it was cancelled.

The rerun of a requeued job runs the same command, which resumes the interrupted run. The runner waits for the jobs
(a job is submitted once its dependencies finished), reads their results from submitit's files and their state from
``squeue``, and records their ids so that a rerun of the runner reattaches to jobs still queued.
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

from engine.atomic import atomic_write_text
from engine.preemption import stopped_by
from runner import unit
from runner.jobs import Job, run_states
from runner.schedule import EXIT_PREEMPTED, Outcome, tail
from units.facts import REPO
from units.unit import FINISHED_STATES

PREEMPT_SIGNAL = "USR1"
"""The signal SLURM sends before a time limit or preemption, which train.py and submitit both handle."""
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                 "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}
"""squeue states of a job that is not over."""
LOST_AFTER_S = 60.0
LOST_AFTER_LOOKS = 3
"""A job that left no result is lost once squeue has answered :data:`LOST_AFTER_LOOKS` times in a row, over at least
:data:`LOST_AFTER_S`, that it is not active (a requeue passes through inactive states for a moment only). A look at
which squeue did not answer (slurmctld busy or restarting) says nothing and does not count."""
SQUEUE_TIMEOUT_S = 120.0
"""How long one squeue call may take before it counts as no answer (a hang guard)."""
RESUBMIT_STATES = {"PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "FAILED", "unknown to squeue"}
"""How a lost job may have ended for a rerun to go further: when its runs saved their resume state, it counts as
preempted and the runner submits it again (a cluster that cancels preempted jobs, a failed node, a requeue that did
not happen). A job cancelled by a user (CANCELLED) or out of memory is reported as failed."""


class UnitFailed(RuntimeError):
    """The unit command of a SLURM job exited with a non-zero status (the job fails, as sacct then shows)."""


class SlurmUnit(submitit.helpers.Checkpointable):
    """What a SLURM job runs: one unit command in the job's process, requeued through submitit when it is
    preempted."""

    def __init__(self, job: Job, log: str, threads: int | None = None):
        self.job, self.log, self.threads = job, log, threads

    def __call__(self) -> int:
        restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        attempt = f"SLURM job {os.environ.get('SLURM_JOB_ID', '?')}, attempt {restart + 1}"
        if self.threads:
            os.environ["OMP_NUM_THREADS"] = str(self.threads)
        code = unit.run_job(self.job, self.log, attempt)
        if code == EXIT_PREEMPTED and stopped_by() == "SIGTERM":
            with unit.append_to(self.log) as log:
                log.write("=== SLURM ended the job (SIGTERM): leaving without a result (SLURM requeues it unless it "
                          "was cancelled)\n")
            sys.exit(EXIT_PREEMPTED)
        if code == EXIT_PREEMPTED:
            with unit.append_to(self.log) as log:
                log.write(f"=== exit {EXIT_PREEMPTED} (preempted): requeueing through submitit\n")
            signal.raise_signal(preempt_signal())  # submitit's handler calls checkpoint() and requeues the job
        if code != 0:
            raise UnitFailed(f"{self.job.name}: exit status {code}; log {self.log}")
        return code

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        """Called by submitit on the preemption signal, once train.py saved its state: the same command again."""
        return submitit.helpers.DelayedSubmission(SlurmUnit(self.job, self.log, self.threads))


def preempt_signal() -> signal.Signals:
    """The signal submitit's handler requeues on (SUBMITIT_PREEMPT_SIGNAL, which every job exports)."""
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))


def squeue_states() -> dict[str, str] | None:
    """``{job id: state}`` of this user's jobs that SLURM still knows; None when squeue did not answer (an error or
    no reply within :data:`SQUEUE_TIMEOUT_S`), which says nothing about any job."""
    try:
        done = subprocess.run(["squeue", "-h", "-t", "all", "--me", "-o", "%i %T"], capture_output=True, text=True,
                              timeout=SQUEUE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    return dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if " " in line)


def lost_outcome(job_id: str, state: str, stdout: str, runs: Sequence[str]) -> Outcome:
    """How a job that SLURM no longer runs and that left no result ended: preempted when a rerun can resume it (see
    :data:`RESUBMIT_STATES`), else failed; either way with the last line of its output file ``stdout``."""
    said = next((line.strip() for line in reversed(tail(stdout).splitlines()) if line.strip()), "")
    where = f"SLURM job {job_id} ended ({state}) without a result" + (f" (its last line: {said})" if said else "")
    states = run_states(runs).values()
    if state in RESUBMIT_STATES and states and all(s == "resumable" or s in FINISHED_STATES for s in states):
        return Outcome(EXIT_PREEMPTED, f"{where}; its runs saved their resume state")
    return Outcome(1, f"{where}: cancelled, out of time or memory, or its node failed")


def failure_outcome(job_id: str, error: str) -> Outcome:
    """How a SLURM job that raised ``error`` (submitit's text of its exception) ended: the unit's exit status when
    :class:`UnitFailed` names it (negative: killed by that signal), else 1 with the error's last line."""
    found = re.search(r"exit status (-?\d+)", error)
    if found:
        return Outcome(int(found.group(1)), f"SLURM job {job_id}: exit status {found.group(1)}")
    lines = error.strip().splitlines()
    return Outcome(1, f"SLURM job {job_id} failed: {lines[-1] if lines else 'no error text'}")


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
        self.inactive: dict[str, tuple[float, int]] = {}
        """Job id -> (when squeue first said it is not active, how many answers in a row said so)."""
        self.lost: set[str] = set()
        """Jobs :meth:`poll` found lost: a job run again is submitted anew, never followed to one of these."""
        self.jobs: dict[str, Job] = {}

    def describe(self) -> str:
        return f"SLURM through submitit, up to {self.slots} jobs queued at once; submitit files in {self.folder}"

    def start(self, job: Job, log: str) -> submitit.SlurmJob:
        previous = self.record.get(job.name)
        # A job an earlier runner submitted is followed while SLURM still lists it, in any state but cancelled (a
        # user's scancel, after which a rerun means to submit it again): a requeue passes through inactive states for
        # a moment (under load, long enough for one look), and poll() tells a lost job by three answers over a minute.
        # One look at an inactive state made a rerun submit a requeued job a second time.
        state = self.answered_states().get(previous) if previous and previous not in self.lost else None
        if state not in (None, "CANCELLED"):
            tqdm.write(f"following SLURM job {previous} ({job.name}), submitted by an earlier run of the runner")
            self.jobs[previous] = job
            return submitit.SlurmJob(folder=os.path.join(self.folder, "%j"), job_id=previous)
        self.executor.update_parameters(job_name=re.sub(r"[^\w.+-]+", "_", job.name))
        submitted = self.executor.submit(SlurmUnit(job, log, self.threads))
        self.jobs[submitted.job_id] = job
        self.record[job.name] = submitted.job_id
        atomic_write_text(json.dumps(self.record, indent=1), self.record_path)
        return submitted

    def wait(self, handles: Sequence[submitit.SlurmJob], timeout: float) -> None:
        """SLURM says nothing by itself: the next look at the jobs is ``timeout`` seconds away."""
        time.sleep(timeout)

    def answered_states(self) -> dict[str, str]:
        """squeue's states, asked again every poll interval until SLURM answers: whether a job of an earlier runner
        is still queued decides between following it and submitting it again, so it is never guessed."""
        states = squeue_states()
        if states is None:
            tqdm.write(f"squeue did not answer; asking again every {self.poll_s:g} s")
        while states is None:
            time.sleep(self.poll_s)
            states = squeue_states()
        return states

    def poll(self, handles: Sequence[submitit.SlurmJob]) -> dict[submitit.SlurmJob, Outcome]:
        states = squeue_states()
        ended = {}
        for handle in handles:
            if handle.paths.result_pickle.exists():
                ended[handle] = self._outcome(handle)
                continue
            if states is None:  # no answer: no evidence either way
                continue
            state = states.get(handle.job_id, "unknown to squeue")
            if state in ACTIVE_STATES:
                self.inactive.pop(handle.job_id, None)
                continue
            since, looks = self.inactive.get(handle.job_id, (time.monotonic(), 0))
            self.inactive[handle.job_id] = since, looks + 1
            if looks + 1 >= LOST_AFTER_LOOKS and time.monotonic() - since >= LOST_AFTER_S:
                self.lost.add(handle.job_id)
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
            return failure_outcome(handle.job_id, str(e))

    def close(self) -> None:
        """Nothing to release: the jobs are SLURM's."""

    def stop(self, signum: int) -> None:
        """The runner is interrupted (by any signal): queued and running jobs stay in SLURM; a rerun of the runner
        reattaches."""
        states = squeue_states()
        if states is None:
            print(f"squeue did not answer: the SLURM jobs of this sweep ({' '.join(self.record.values())}) may keep "
                  "running; rerun the same command to follow them, or cancel them with scancel", file=sys.stderr)
            return
        active = [i for i in self.record.values() if states.get(i) in ACTIVE_STATES]
        if active:
            print(f"{len(active)} SLURM job(s) keep running ({' '.join(active)}); rerun the same command to follow "
                  f"them, or cancel them with: scancel {' '.join(active)}", file=sys.stderr)
