"""A job: one call (a unit command, ``units.call.UnitCall``, or ``python train.py``, ``units.call.TrainCall``) and
what it must leave.

A job is finished when each of its run folders is finished (the scripts' run states) and each of its files
exists. The runner skips a finished job only when the same job finished those runs on the same inputs: each run
folder's ``run.json`` holds, beside the run's identity (under ``engine.runs.RUNNER_KEY``), the job's command line,
written when the job finished; every file each run read (its inputs ledger, ``engine.inputs``: config, split,
few-shot, CLIP and teacher files, the checkpoints of the jobs it needs) still holds the bytes it read; and every job
it needs is skipped too. Any other job starts, and its script resumes an interrupted run, or leaves a finished one to
train.py, which skips it when its recorded config, inputs and data are this job's and stops with the differences
when they are not.
"""
from __future__ import annotations

import json
import os
import shlex
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from clip.weights import find_weights
from engine.atomic import atomic_write_text
from engine.errors import UserError, first_line
from engine.inputs import input_changes
from engine.published import read_record, record_differences
from engine.runs import IDENTITY_FILE, RUNNER_KEY, read_run_json, run_state
from units.unit import FINISHED_STATES

KINDS = ("teacher", "zero-shot", "train", "test", "plug-in")
"""Job kinds, in the order the plan counts them."""


class Call(Protocol):
    """What a job runs: a picklable callable, called from the repository root in the executor's process (a warm
    worker, a SLURM job), that returns its exit status (75: preempted, its state saved)."""

    @property
    def knobs(self) -> Mapping[str, str]:
        """Its knobs (a unit command's DATA, OUTPUT_ROOT, CFG, SHOTS, EXTRA_OPTS, ...)."""

    @property
    def argv(self) -> tuple[str, ...]:
        """The command a user runs for the same call, from the repository root, its knobs set in the environment."""

    def __call__(self) -> int: ...


@dataclass(frozen=True)
class Job:
    """One call with its outputs and dependencies."""

    name: str
    """Unique; also the name of its log file."""
    kind: str
    """One of :data:`KINDS`."""
    method: str
    dataset: str
    call: Call
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
    reads: Mapping[str, str] = field(default_factory=dict)
    """Digests of what its runs use but read through no file of their ledger (the pixels of the demo's generated
    images, which its split files only list), kept in its record."""
    publishes: Mapping[str, Any] = field(default_factory=dict)
    """What the teacher it publishes must record (``engine.published``): a published teacher recording another
    backbone, config or dataset is not this job's, so the job is not finished."""

    @property
    def knobs(self) -> Mapping[str, str]:
        """Its call's knobs."""
        return self.call.knobs


def command_line(job: Job, hidden: Collection[str] = ()) -> str:
    """The job as a shell line to paste in the repository root: its knobs but ``PYTHON`` and ``hidden`` first."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in job.knobs.items() if k != "PYTHON" and k not in hidden)
    return f"{env} {shlex.join(job.call.argv)}".strip()


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


def run_states(paths: Sequence[str]) -> dict[str, str]:
    """The state of each run folder (``engine.runs.run_state``: new, failed, resumable, running, finished,
    finished-upstream), as the unit commands decide."""
    return {path: run_state(path) for path in paths}


def is_finished(job: Job, states: dict[str, str]) -> bool:
    """``job``'s runs are all finished (``states``: run folder -> state), its files all exist and the teacher it
    publishes is its own (:func:`publication_differences`)."""
    return all(states[r] in FINISHED_STATES for r in job.runs) and all(os.path.exists(f) for f in job.files) \
        and not publication_differences(job)


def publication_differences(job: Job) -> list[str]:
    """How the published teacher of ``job`` differs from the one the job trains (``FIELD recorded (expected X)``, or
    that its record cannot be read); empty when it publishes none, none is there yet, or what is there records nothing
    (an upstream teacher)."""
    if not job.publishes or not job.files or not os.path.exists(job.files[0]):
        return []
    try:
        record = read_record(published_folder(job.files[0]))
    except UserError as e:  # malformed, nested too deep, no JSON object: no record of this job's teacher
        return [f"an unreadable record: {first_line(e)}"]
    return record_differences(record, job.publishes)


def published_folder(pointer: str) -> str:
    """The published teacher folder of its checkpoint pointer (``<folder>/VLPromptLearner/checkpoint``)."""
    return os.path.dirname(os.path.dirname(pointer))


def job_record(job: Job) -> dict:
    """What the runner can see of what ``job`` runs: its command line, less ``DATA`` (where the data lies no more
    changes a run than ``DATASET.ROOT`` does its identity), and what it :attr:`Job.reads`. The files the job's runs
    read are their inputs ledger."""
    return {"command": command_line(job, hidden=("DATA",)), "reads": dict(job.reads)}


def input_roots(job: Job) -> dict[str, str]:
    """The roots the runs of ``job`` name their inputs relative to (train.py's ``input_roots``: the data root)."""
    data = job.knobs.get("DATA")
    return {"DATASET.ROOT": os.path.abspath(data)} if data else {}


def _run_json(run: str) -> dict:
    """The run folder's ``run.json`` ({} when it has none or it is not a JSON object)."""
    try:
        recorded = read_run_json(run)
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _records(run: str) -> dict:
    """``{job name: record}`` of the runner jobs that finished the run in ``run``."""
    records = _run_json(run).get(RUNNER_KEY)
    return records if isinstance(records, dict) else {}


def is_recorded(job: Job) -> bool:
    """Each of ``job``'s runs was finished by this job with its present record (:func:`job_record`), and every file
    the run read still holds the bytes it read (``engine.inputs.input_changes`` of its ledger; a CLIP found by a
    name: the file the name finds now)."""
    record, roots = job_record(job), input_roots(job)
    return all(_records(run).get(job.name) == record
               and not input_changes(_run_json(run).get("inputs"), roots, find_weights)[0] for run in job.runs)


def record_job(job: Job) -> None:
    """Write ``job``'s record into each of its run folders' ``run.json`` under ``RUNNER_KEY`` (atomically; the run's
    identity and other jobs' records are kept; train.py's next claim of the folder writes a new identity without
    them)."""
    record = job_record(job)
    for run in job.runs:
        recorded = _run_json(run)
        recorded[RUNNER_KEY] = {**_records(run), job.name: record}
        atomic_write_text(json.dumps(recorded, indent=1), os.path.join(run, IDENTITY_FILE))


def job_states(jobs: Iterable[Job]) -> dict[str, str]:
    """Per job what running the plan does with it: ``finished`` (skipped: finished by this very job on the same
    inputs, and every job it needs is skipped too), ``check`` (finished, but by another command, config or data, or
    not by the runner, or a job it needs runs again: it runs, and train.py skips each run whose recorded config and
    data are the job's and stops on one that differs), ``resume``, ``retry`` (only a failed attempt's log) or
    ``new``."""
    jobs = list(jobs)
    states = run_states(sorted({r for j in jobs for r in j.runs}))
    out: dict[str, str] = {}
    for job in jobs:
        runs = [states[r] for r in job.runs]
        if is_finished(job, states):
            current = all(out.get(d) == "finished" for d in job.deps)
            out[job.name] = "finished" if current and is_recorded(job) else "check"
        elif "resumable" in runs:
            out[job.name] = "resume"
        elif "failed" in runs:
            out[job.name] = "retry"
        else:
            out[job.name] = "new"
    return out


def dependents(jobs: Sequence[Job], name: str) -> list[str]:
    """Every job that depends on ``name``, directly or through others, in plan order."""
    out: set[str] = {name}
    for job in jobs:
        if any(d in out for d in job.deps):
            out.add(job.name)
    return [j.name for j in jobs if j.name in out and j.name != name]
