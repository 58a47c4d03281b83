"""Runs the demo's ``train.py`` / script commands, several at once, in dependency order.

Each job is one command (a ``train.py`` run or a ``scripts/<method>/*.sh`` call) with the environment a user would
set; its output goes to ``<log_dir>/<job>.log`` and one line is printed when it starts and ends. A job whose
results file exists is skipped, so a rerun only does what is missing. ``python train.py ...`` jobs run as
``train.cli(argv)`` in warm worker processes that imported torch and the project once (a new Python process per
run would pay those imports every time, as long as a small demo run itself); scripts run as subprocesses. Torch
threads per job: the demo's ``--threads`` (``OMP_NUM_THREADS`` for subprocesses): on a small CPU, one thread per
run with one run per core keeps the machine responsive and is faster than one multi-threaded run (docs/demo.md, "Time").
"""
from __future__ import annotations

import multiprocessing
import os
import shlex
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from tqdm import tqdm


@dataclass(frozen=True)
class Job:
    """One command of the demo: ``argv`` run in the repository root with ``env`` added to the environment."""

    name: str
    """Unique, also the log file's name."""
    stage: str
    """Group of jobs whose times are reported together (e.g. "base-to-novel seed 2")."""
    argv: tuple[str, ...]
    result: str
    """File the job writes last; the job is skipped when it exists."""
    env: dict[str, str] = field(default_factory=dict)
    deps: tuple[str, ...] = ()
    """Names of the jobs that must finish first."""


@dataclass
class Timing:
    """When a job ran (seconds since the demo started) and whether it was skipped."""

    stage: str
    start: float
    end: float
    skipped: bool


class JobError(RuntimeError):
    """A job failed; the message names it, its log and the log's last lines."""


def command_line(job: Job) -> str:
    """The job as a shell line a user can paste (environment first, Python spelt ``python``)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in job.env.items())
    argv = ["python" if a == sys.executable else a for a in job.argv]
    return f"{env} {shlex.join(argv)}".strip()


def is_train_py(job: Job) -> bool:
    """Whether ``job`` is ``python train.py ...`` with no extra environment (run in a warm worker)."""
    return job.argv[:2] == (sys.executable, "train.py") and not job.env


def _warm_worker(threads: int, cwd: str) -> None:
    """Process-pool initializer: the working folder train.py's relative paths start from, the torch thread count,
    and train.py's imports paid once per worker."""
    os.chdir(cwd)
    import torch

    torch.set_num_threads(threads)
    import train

    train.register_project()


def _train_in_worker(args: Sequence[str], log: str) -> int:
    """``train.cli(args)`` with standard output and error (file descriptors too) sent to ``log``; its exit status."""
    import train

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "w") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        sys.argv = ["train.py", *args]  # as the command line has it (argparse's program name)
        try:
            return train.cli(list(args))
        except SystemExit as e:  # argparse (--help, a bad flag)
            return e.code if isinstance(e.code, int) else 1
        except Exception:  # a bug, not a user error: its traceback goes to the log
            traceback.print_exc()
            return 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def run_jobs(jobs: Sequence[Job], workers: int, threads: int, log_dir: str, clock: Callable[[], float],
             cwd: str) -> dict[str, Timing]:
    """Run ``jobs`` in ``cwd`` with up to ``workers`` at once (each with ``threads`` torch threads); returns their
    timings.

    ``clock()`` gives the seconds since the demo started (for the printed times). Stops at the first failure
    (running jobs are finished first) with a :class:`JobError`.
    """
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError("job names must be unique")
    by_name = {j.name: j for j in jobs}
    for job in jobs:
        missing = [d for d in job.deps if d not in by_name]
        if missing:
            raise ValueError(f"job {job.name!r} depends on unknown jobs {missing}")
    os.makedirs(log_dir, exist_ok=True)
    timings: dict[str, Timing] = {}
    pending = list(jobs)
    running: dict[Future, tuple[Job, str, float]] = {}
    failed: list[str] = []
    bar = tqdm(total=len(jobs), desc="Demo runs", unit="run", dynamic_ncols=True)

    def stamp() -> str:
        t = clock()
        return f"[{int(t // 60):02d}:{int(t % 60):02d}]"

    def launch(job: Job) -> None:
        log = os.path.join(log_dir, f"{job.name.replace(' ', '_').replace('/', '-')}.log")
        tqdm.write(f"{stamp()} start {job.name}\n  $ {command_line(job)}")
        start = clock()
        if is_train_py(job):
            future = warm.submit(_train_in_worker, job.argv[2:], log)
        else:
            env = {**os.environ, **job.env, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}

            def call() -> int:
                with open(log, "w") as out:
                    return subprocess.run(job.argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode

            future = shell.submit(call)
        running[future] = (job, log, start)

    workers = max(1, workers)
    with ThreadPoolExecutor(max_workers=workers) as shell, ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_warm_worker,
            initargs=(threads, cwd)) as warm:
        while pending or running:
            done_names = set(timings)
            for job in list(pending):
                if failed or len(running) >= workers:
                    break
                if not all(d in done_names for d in job.deps):
                    continue
                pending.remove(job)
                if os.path.isfile(job.result):
                    now = clock()
                    timings[job.name] = Timing(job.stage, now, now, True)
                    tqdm.write(f"{stamp()} finished before, skipped: {job.name}")
                    bar.update(1)
                    done_names.add(job.name)
                    continue
                launch(job)
            if not running:
                if pending and not failed:  # every pending job waits on one that cannot run
                    raise JobError(f"jobs {[j.name for j in pending]} wait on jobs that never ran")
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                job, log, start = running.pop(future)
                code = future.result()
                end = clock()
                if code != 0 or not os.path.isfile(job.result):
                    failed.append(f"{job.name} (exit {code}; log {log}):\n{_tail(log)}")
                    tqdm.write(f"{stamp()} FAILED {job.name} after {end - start:.0f} s; log: {log}")
                    continue
                timings[job.name] = Timing(job.stage, start, end, False)
                tqdm.write(f"{stamp()} done {job.name} in {end - start:.0f} s")
                bar.update(1)
    bar.close()
    if failed:
        raise JobError("demo run failed: " + "\n".join(failed))
    return timings


def stage_times(timings: dict[str, Timing]) -> list[list]:
    """Per stage: runs done, runs skipped, wall time (first start to last end) and the summed run time, in seconds."""
    stages: dict[str, list[Timing]] = {}
    for t in timings.values():
        stages.setdefault(t.stage, []).append(t)
    rows = []
    for stage, items in stages.items():
        ran = [t for t in items if not t.skipped]
        wall = max(t.end for t in ran) - min(t.start for t in ran) if ran else 0.0
        rows.append([stage, len(ran), len(items) - len(ran), wall, sum(t.end - t.start for t in ran)])
    return rows
