"""A job: one call (a unit command, ``units.call.UnitCall``, or ``python train.py``, ``units.call.TrainCall``) and
what it must leave.

A job is finished when each of its run folders is finished (the scripts' run states) and each of its files
exists. The runner skips a finished job only when the same job finished those runs on the same inputs: each run
folder's ``run.json`` holds, beside the run's identity (under ``engine.runs.RUNNER_KEY``), the job's command line,
the digests of the config, split and weight files and of what it read from the jobs it needs, written when the job
finished, and every job it needs is skipped too. Any other job starts, and its script resumes an interrupted run, or
leaves a finished one to train.py, which skips it when its recorded config and data (the identity in ``run.json``)
are this job's and stops with the differences when they are not.
"""
from __future__ import annotations

import json
import os
import shlex
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from datasets.files import split_files
from datasets.layouts import LAYOUTS
from engine.atomic import atomic_write_text
from engine.run_identity import evaluated_files, file_digest
from engine.runs import IDENTITY_FILE, POINTER_FILE, RUNNER_KEY, pointed_checkpoint, read_run_json, run_state
from units.facts import REPO
from units.unit import FINISHED_STATES

KINDS = ("teacher", "zero-shot", "train", "test", "plug-in")
"""Job kinds, in the order the plan counts them."""
WEIGHT_KNOBS = ("BACKBONE", "TEACHER_NAME", "TEACHER_CKPT")
"""Script knobs that may name a weight file (a CLIP model or a teacher checkpoint): its digest is recorded."""


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
    """Digests of inputs its command line does not name (the demo's generated data), kept in its record."""

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
    """``job``'s runs are all finished (``states``: run folder -> state) and its files all exist."""
    return all(states[r] in FINISHED_STATES for r in job.runs) and all(os.path.exists(f) for f in job.files)


def config_files(job: Job) -> list[str]:
    """The trainer and dataset config files of ``job`` that exist (their contents change what it runs)."""
    files = [os.path.join(REPO, "configs", "trainers", job.trainer, f"{job.config}.yaml"),
             os.path.join(REPO, "configs", "datasets", f"{job.dataset}.yaml")]
    return [f for f in files if os.path.isfile(f)]


def data_files(job: Job) -> list[str]:
    """The split files (``datasets.files.split_files``) of the datasets ``job`` reads under its ``DATA``: its
    dataset and, for a cross-dataset or DG job, the source; the few-shot file of its ``SHOTS`` and seed."""
    data = job.knobs.get("DATA")
    if not data:
        return []
    shots = int(job.knobs.get("SHOTS") or 0)
    files = []
    for short in dict.fromkeys(filter(None, (job.knobs.get("SOURCE"), job.dataset))):
        if short in LAYOUTS:
            files += split_files(data, short, shots, job.seed)
    return files


def upstream_files(dep: Job) -> list[str]:
    """What a job reads from a job it needs: the checkpoints of ``dep``'s runs (those an evaluation of them loads)
    and the checkpoints its files point to (a published teacher)."""
    files = [path for run in dep.runs for path in evaluated_files(run, "last")]
    pointed = (pointed_checkpoint(os.path.dirname(f)) for f in dep.files if os.path.basename(f) == POINTER_FILE)
    return files + [path for path in pointed if path and os.path.isfile(path)]


def job_record(job: Job, needs: Sequence[Job] = ()) -> dict:
    """What the runner can see of what ``job`` runs: its command line (less ``DATA``: where the data lies no more
    changes a run than ``DATASET.ROOT`` does its identity), the digests of its config files, of its datasets' split
    files (relative to ``DATA``), of the weight files its knobs name, of what it :attr:`Job.reads` and of what it
    reads from the jobs it ``needs`` (:func:`upstream_files`)."""
    weights = [os.path.join(REPO, job.knobs[k]) for k in WEIGHT_KNOBS if job.knobs.get(k)]
    return {"command": command_line(job, hidden=("DATA",)),
            "configs": {os.path.relpath(f, REPO): file_digest(f) for f in config_files(job)}, "reads": dict(job.reads),
            "data": {os.path.relpath(f, job.knobs["DATA"]): file_digest(f) for f in data_files(job)},
            "weights": {path: file_digest(path) for path in weights if os.path.isfile(path)},
            "upstream": {dep.name: {path: file_digest(path) for path in upstream_files(dep)} for dep in needs}}


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


def is_recorded(job: Job, needs: Sequence[Job] = ()) -> bool:
    """Each of ``job``'s runs was finished by this job with its present record (:func:`job_record`)."""
    record = job_record(job, needs)
    return all(_records(run).get(job.name) == record for run in job.runs)


def record_job(job: Job, needs: Sequence[Job] = ()) -> None:
    """Write ``job``'s record (``needs``: the jobs of its :attr:`Job.deps`) into each of its run folders' ``run.json``
    under ``RUNNER_KEY`` (atomically; the run's identity and other jobs' records are kept; train.py's next claim of
    the folder writes a new identity without them)."""
    record = job_record(job, needs)
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
    by_name = {j.name: j for j in jobs}
    states = run_states(sorted({r for j in jobs for r in j.runs}))
    out: dict[str, str] = {}
    for job in jobs:
        runs = [states[r] for r in job.runs]
        if is_finished(job, states):
            current = all(out.get(d) == "finished" for d in job.deps)
            out[job.name] = "finished" if current and is_recorded(job, needs(job, by_name)) else "check"
        elif "resumable" in runs:
            out[job.name] = "resume"
        elif "failed" in runs:
            out[job.name] = "retry"
        else:
            out[job.name] = "new"
    return out


def needs(job: Job, by_name: Mapping[str, Job]) -> list[Job]:
    """The jobs ``job`` depends on (``by_name``: the plan's jobs by name)."""
    return [by_name[d] for d in job.deps]


def dependents(jobs: Sequence[Job], name: str) -> list[str]:
    """Every job that depends on ``name``, directly or through others, in plan order."""
    out: set[str] = {name}
    for job in jobs:
        if any(d in out for d in job.deps):
            out.add(job.name)
    return [j.name for j in jobs if j.name in out and j.name != name]
