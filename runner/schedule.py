"""Runs a plan's jobs on an executor in dependency order, with a live status line and an ETA.

A job starts when every job it depends on has finished. A job this very command finished before (its runs, files
and record, see :func:`runner.jobs.job_states`) is skipped; one whose finished runs another command or config
made runs again, and train.py skips or stops on each of its runs after comparing their recorded config.
A job that fails (non-zero exit, or exit 0 without its runs finished) is reported with the tail of its log; only the
jobs that depend on it are skipped, the others go on. A job that exits with ``EXIT_PREEMPTED`` (train.py was stopped
by a signal after saving its state) starts again and resumes, up to :data:`MAX_REQUEUES` times (under SLURM the job
requeues itself first, see :mod:`runner.slurm`).

While the jobs run, SIGTERM and SIGHUP stop the runner as Ctrl-C does (:class:`Stopped`, a KeyboardInterrupt): the
executor passes the signal on to what it runs (:meth:`Executor.stop`) and the caller exits with 128 + the signal.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm import tqdm

from engine.preemption import signal_handlers
from runner.jobs import Job, command_line, dependents, is_finished, job_states, log_name, record_job, run_states
from units.facts import EXIT_PREEMPTED as EXIT_PREEMPTED

MAX_REQUEUES = 3
TAIL_LINES = 15


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that stop the runner as SIGINT (Ctrl-C) does."""


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached the runner while its jobs ran: it stops them as on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def stop_signal(interrupt: KeyboardInterrupt) -> int:
    """The signal that interrupted the runner: a :class:`Stopped`'s, else SIGINT (Ctrl-C)."""
    return interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT


def stopped(interrupt: KeyboardInterrupt) -> tuple[str, int]:
    """The line that ends a runner stopped by ``interrupt`` (Ctrl-C, or a :class:`Stopped`) and its exit status, 128 +
    the signal (the shells' rule)."""
    signum = stop_signal(interrupt)
    return (f"interrupted ({signal.Signals(signum).name}): rerun the same command to continue (finished runs are "
            "skipped, interrupted ones resume)", 128 + signum)


def stopping_on_signals() -> AbstractContextManager[None]:
    """While the block runs in the main thread, SIGTERM and SIGHUP raise :class:`Stopped` there (the previous
    handlers come back after it)."""

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    return signal_handlers(STOP_SIGNALS, stop)


@dataclass(frozen=True)
class Outcome:
    """How a job ended: its exit status (0: success) and, when it did not exit by itself, why."""

    status: int
    reason: str = ""


class Executor(Protocol):
    """Where jobs run: the local machine's GPU / CPU slots, or SLURM."""

    slots: int
    """Jobs running at once."""
    poll_s: float
    """Seconds between two looks at the running jobs, at most."""

    def start(self, job: Job, log: str) -> Any:
        """Start ``job`` (output appended to ``log``); returns a handle for :meth:`poll`."""

    def wait(self, handles: Sequence[Any], timeout: float) -> None:
        """Return when one of ``handles`` may have ended, or after ``timeout`` seconds."""

    def poll(self, handles: Sequence[Any]) -> dict[Any, Outcome]:
        """The handles that ended since the last call, with how."""

    def stop(self, signum: int) -> None:
        """The runner was interrupted by ``signum``: stop or release what runs (each executor says which)."""

    def close(self) -> None:
        """The sweep is over: release what the executor holds."""

    def describe(self) -> str:
        """One line saying where jobs run."""


@dataclass
class Report:
    """What a sweep did."""

    done: list[str] = field(default_factory=list)
    finished_before: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Job name -> why, with the tail of its log."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Job name -> the failed job it depended on (blocked: not run)."""
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Start and end (seconds since the sweep started) of every job that ran to its end."""

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped


class Eta:
    """Remaining time from the run times measured in this sweep: a job is expected to take as long as the finished
    jobs of its method and kind did, else its projection scaled by how long finished jobs took against theirs."""

    def __init__(self, projected: Callable[[Job], float | None]):
        self.projected = projected
        self.measured: dict[tuple[str, str], list[float]] = {}
        self.ratio: list[tuple[float, float]] = []

    def observe(self, job: Job, seconds: float) -> None:
        self.measured.setdefault((job.method, job.kind), []).append(seconds)
        projected = self.projected(job)
        if projected:
            self.ratio.append((seconds, projected))

    def expected(self, job: Job) -> float | None:
        same = self.measured.get((job.method, job.kind))
        if same:
            return sum(same) / len(same)
        projected = self.projected(job)
        if projected is not None:
            scale = sum(s for s, _ in self.ratio) / sum(p for _, p in self.ratio) if self.ratio else 1.0
            return projected * scale
        every = [s for times in self.measured.values() for s in times]
        return sum(every) / len(every) if every else None

    def remaining(self, queued: Sequence[Job], running: dict[str, tuple[Job, float]], slots: int) -> float | None:
        """Seconds until the queued and running jobs are done with ``slots`` at once; None when unknown."""
        total = 0.0
        for job in queued:
            expected = self.expected(job)
            if expected is None:
                return None
            total += expected
        now = time.monotonic()
        for job, start in running.values():
            expected = self.expected(job)
            if expected is None:
                return None
            total += max(0.0, expected - (now - start))
        return total / max(1, min(slots, len(queued) + len(running)))


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def tail(path: str, lines: int = TAIL_LINES) -> str:
    """The last lines of a log (empty when there is none, or when it is no regular file: a link is not followed)."""
    if os.path.islink(path) or not os.path.isfile(path):
        return ""
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def critical_paths(jobs: Sequence[Job], cost: Callable[[Job], float | None]) -> dict[str, float]:
    """Per job, the expected seconds from its start to the end of the longest chain of jobs that wait on it: its own
    ``cost`` plus the longest such path of a job that needs it. A job without a cost counts as the mean of the known
    ones (as 1 when none is known, so that a plan without costs is ordered by the number of jobs in its chains)."""
    known = [c for c in map(cost, jobs) if c is not None]
    default = sum(known) / len(known) if known else 1.0
    needed_by: dict[str, list[str]] = {job.name: [] for job in jobs}
    for job in jobs:
        for dep in job.deps:
            needed_by.get(dep, []).append(job.name)
    by_name = {job.name: job for job in jobs}
    paths: dict[str, float] = {}

    def path(name: str) -> float:
        if name not in paths:
            own = cost(by_name[name])
            paths[name] = (default if own is None else own) + max(map(path, needed_by[name]), default=0.0)
        return paths[name]

    for job in jobs:
        path(job.name)
    return paths


def run_plan(jobs: Sequence[Job], executor: Executor, log_dir: str,
             projected: Callable[[Job], float | None] = lambda job: None,
             echo: Callable[[str], None] | None = None) -> Report:
    """Run every job of ``jobs`` (dependencies first) on ``executor``; returns what happened. Of the jobs that may
    start, the one heading the longest chain of jobs still to run starts first (:func:`critical_paths` on the
    ``projected`` seconds; ties in plan order), so that the chain that decides when the sweep ends is not left
    waiting behind short jobs. ``echo`` also gets one line per job that starts, ends or fails, with the counts and
    ETA (the demo prints them on the terminal while the detailed lines go to its log)."""
    os.makedirs(log_dir, exist_ok=True)
    report, eta = Report(), Eta(projected)
    states = job_states(jobs)
    finished = {name for name, state in states.items() if state == "finished"}
    check = [name for name, state in states.items() if state == "check"]
    longest = critical_paths(jobs, projected)
    pending = sorted((j for j in jobs if j.name not in finished), key=lambda j: -longest[j.name])  # ties: plan order
    report.finished_before = [j.name for j in jobs if j.name in finished]
    running: dict[Any, tuple[Job, float]] = {}  # executor handle -> (job, monotonic start)
    requeues: dict[str, int] = {}
    succeeded = set(finished)
    live = sys.stderr.isatty()  # a redrawn status line on a terminal; in a log file, one line per event
    bar = tqdm(total=len(jobs), initial=len(finished), desc="jobs", unit="job", dynamic_ncols=True, disable=not live,
               bar_format="{desc} {n_fmt}/{total_fmt} |{bar}| {elapsed} {postfix}")
    started = time.monotonic()

    def line() -> str:
        queued = [j for j in pending if j.name not in report.skipped]
        remaining = eta.remaining(queued, {j.name: (j, s) for j, s in running.values()}, executor.slots)
        return (f"done {len(report.done) + len(report.finished_before)}/{len(jobs)}, running {len(running)}, "
                f"queued {len(queued)}, failed {len(report.failed)}, blocked {len(report.skipped)}, "
                f"ETA {format_seconds(remaining)}")

    def say(text: str) -> None:
        elapsed = format_seconds(time.monotonic() - started)
        tqdm.write(f"[{elapsed}] {text}" + ("" if live else f"\n    ({line()})"))
        if echo is not None:
            echo(f"[{elapsed}] {text.splitlines()[0].split(' (log ')[0]} ({line()})")

    def status() -> None:
        bar.set_postfix_str(line())

    def launch(job: Job) -> None:
        log = os.path.join(log_dir, log_name(job))
        running[executor.start(job, log)] = (job, time.monotonic())
        say(f"started {job.name} (log {log})\n    $ {command_line(job)}")

    def finish(job: Job, outcome: Outcome, seconds: float) -> None:
        log = os.path.join(log_dir, log_name(job))
        if outcome.status == EXIT_PREEMPTED and requeues.get(job.name, 0) < MAX_REQUEUES:
            requeues[job.name] = requeues.get(job.name, 0) + 1
            say(f"preempted {job.name} ({outcome.reason or f'exit {EXIT_PREEMPTED}'}): starting it again to resume")
            launch(job)
            return
        if outcome.status == 0 and not is_finished(job, run_states(job.runs)):
            outcome = Outcome(1, "exited 0, but its runs are not finished")
        if outcome.status != 0:
            why = outcome.reason or f"exit status {outcome.status}"
            report.failed[job.name] = f"{why}; log {log}\n{tail(log)}"
            say(f"FAILED {job.name} after {format_seconds(seconds)}: {why}; log {log}\n"
                + "".join(f"    | {line}\n" for line in tail(log).splitlines()).rstrip("\n"))
            for name in dependents(jobs, job.name):
                report.skipped.setdefault(name, job.name)
            bar.update(1)
            return
        record_job(job)
        succeeded.add(job.name)
        report.done.append(job.name)
        end = time.monotonic() - started
        report.spans[job.name] = (end - seconds, end)
        eta.observe(job, seconds)
        bar.update(1)
        say(f"done {job.name} in {format_seconds(seconds)}")

    if check:
        say(f"{len(check)} job(s) have finished runs made by another command, config or data, or not by the runner, "
            f"or need a job that runs again ({', '.join(check[:3])}{', ...' if len(check) > 3 else ''}): running "
            "them; train.py skips each run whose recorded config and data (run.json) are the job's and stops with "
            "the differences on one that is not")

    def schedule() -> None:
        """Start what may start, collect what ended, until every job ran or was blocked."""
        while pending or running:
            for job in list(pending):
                if job.name in report.skipped:
                    pending.remove(job)
                    bar.update(1)
                elif len(running) < executor.slots and all(d in succeeded for d in job.deps):
                    pending.remove(job)
                    launch(job)
            status()
            if not running:
                if pending:  # unreachable for a checked graph; guards against waiting forever
                    raise RuntimeError(f"jobs {[j.name for j in pending]} wait on jobs that never ran")
                break
            handles = list(running)
            executor.wait(handles, executor.poll_s)
            for handle, outcome in executor.poll(handles).items():
                job, start = running.pop(handle)
                finish(job, outcome, time.monotonic() - start)
            status()

    try:
        with stopping_on_signals():
            schedule()
    except KeyboardInterrupt as e:
        bar.close()
        executor.stop(stop_signal(e))
        raise
    bar.close()
    return report
