"""A job: one unit command (a ``scripts/<method>/*.sh`` call, or ``python train.py``) and what it must leave.

A job is finished when each of its run folders is finished (the scripts' run states) and each of its files
exists; the runner skips finished jobs and starts the others, whose scripts resume interrupted runs.
"""
from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from runner.layout import FINISHED_STATES, run_states

KINDS = ("teacher", "zero-shot", "train", "test", "plug-in")
"""Job kinds, in the order the plan counts them."""


@dataclass(frozen=True)
class Job:
    """One unit command with its environment, outputs and dependencies."""

    name: str
    """Unique; also the name of its log file."""
    kind: str
    """One of :data:`KINDS`."""
    method: str
    dataset: str
    argv: tuple[str, ...]
    """Run in the repository root."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the environment (the scripts' knobs: DATA, OUTPUT_ROOT, CFG, SHOTS, EXTRA_OPTS, ...)."""
    runs: tuple[str, ...] = ()
    """Run folders that must be finished."""
    files: tuple[str, ...] = ()
    """Files that must exist (a published teacher)."""
    deps: tuple[str, ...] = ()
    """Names of the jobs that must finish first."""
    seed: int | None = None
    config: str = ""
    """Trainer config the job runs (its cost is read from it)."""
    trainer: str = ""
    bf16_ns: str = ""
    """Config namespace whose PREC becomes bf16 on cards that have it (the fast profile), else empty."""


def command_line(job: Job) -> str:
    """The job as a shell line to paste in the repository root (environment first, Python spelt ``python``)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in job.env.items() if k != "PYTHON")
    argv = ["python" if a == sys.executable else a for a in job.argv]
    return f"{env} {shlex.join(argv)}".strip()


def log_name(job: Job) -> str:
    """File name of the job's log: its name with spaces and slashes replaced."""
    return job.name.replace(" ", "_").replace("/", "-").replace("+", "-") + ".log"


def check_graph(jobs: Sequence[Job]) -> None:
    """ValueError unless names are unique and every dependency names an earlier job (so the graph has no cycle)."""
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise ValueError(f"two jobs are named {job.name!r}")
        missing = [d for d in job.deps if d not in seen]
        if missing:
            raise ValueError(f"job {job.name!r} depends on {missing}, which are not earlier jobs of the plan")
        seen.add(job.name)


def is_finished(job: Job, states: dict[str, str]) -> bool:
    """``job``'s runs are all finished (``states``: run folder -> state) and its files all exist."""
    return all(states[r] in FINISHED_STATES for r in job.runs) and all(os.path.exists(f) for f in job.files)


def finished_jobs(jobs: Iterable[Job]) -> set[str]:
    """Names of the jobs whose runs are all finished and whose files all exist (one state query for all)."""
    jobs = list(jobs)
    states = run_states(sorted({r for j in jobs for r in j.runs}))
    return {j.name for j in jobs if is_finished(j, states)}


def dependents(jobs: Sequence[Job], name: str) -> list[str]:
    """Every job that depends on ``name``, directly or through others, in plan order."""
    out: set[str] = {name}
    for job in jobs:
        if any(d in out for d in job.deps):
            out.add(job.name)
    return [j.name for j in jobs if j.name in out and j.name != name]
