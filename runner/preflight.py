"""The runner's preflight: before a sweep starts, and in ``--dry-run``, check what every job will read.

Per dataset the data-root check of ``datasets/check.py`` (split file, counts against the published ones, every listed
image present, a fixed sample decoded; every image with ``--check-images``); per CLIP weight name, found as
``clip.load_model`` looks it up (``cached``: OpenAI's names and open_clip's alike, without torch), ``will download
here``, or ``missing (offline)``; per teacher,
``found``, ``trained by this sweep`` (a teacher job of the plan) or ``missing``. A table, then: everything present
runs; a problem stops the sweep (exit 2, one line per problem) unless ``--skip-missing`` leaves out the jobs that
lack an input, and those that need them. On SLURM the missing weights are fetched here, before any job is queued.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from tabulate import tabulate

from clip.weights import MODELS, candidate_paths, find_weights, open_clip_by_hand, open_clip_name
from datasets.check import check_dataset
from datasets.sizes import PUBLISHED_SIZES
from engine.errors import ConfigError
from engine.offline import unreachable
from engine.published import TEACHER_RECORD
from runner.jobs import Job, dependents, publication_differences, published_folder
from runner.protocols import Sweep
from trainers.catalog import find_method
from units.call import UnitCall
from units.facts import REPO
from units.planned import planned_config

DEFAULT_TEACHER = "ViT-L/14"
"""A distilled student's TEACHER_NAME when nothing sets it (``trainers.distillation.distill.TEACHER_KEYS``' default; a
test checks that they agree)."""
EXIT_MISSING = 2
KINDS = ("dataset", "weights", "teacher")


@dataclass
class Input:
    """One thing jobs read: its status, the problems that keep them from running, the jobs that read it."""

    kind: str
    """dataset, weights or teacher."""
    name: str
    status: str = ""
    problems: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)


@dataclass
class Preflight:
    """Every input of a plan, in the order the jobs first need them."""

    inputs: dict[tuple[str, str], Input] = field(default_factory=dict)
    needs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Job name -> the keys of its inputs."""

    @property
    def problems(self) -> list[str]:
        return [line for item in self.inputs.values() for line in item.problems]

    def left_out(self, jobs: Sequence[Job]) -> dict[str, str]:
        """Job name -> why it cannot run: an input with a problem, or a job it needs that cannot."""
        out: dict[str, str] = {}
        for job in jobs:
            lacking = [f"{kind} {name}" for kind, name in self.needs.get(job.name, ())
                       if self.inputs[(kind, name)].problems]
            if lacking:
                out[job.name] = "lacks " + ", ".join(lacking)
        for name in list(out):
            for dependent in dependents(jobs, name):
                out.setdefault(dependent, f"needs {name}")
        return {job.name: out[job.name] for job in jobs if job.name in out}

    def table(self) -> str:
        items = sorted(self.inputs.values(), key=lambda item: KINDS.index(item.kind))
        rows = [[item.kind, item.name, item.status, len(item.jobs)] for item in items]
        return tabulate(rows, headers=["input", "name", "status", "jobs"])


def planned_settings(job: Job) -> list[dict]:
    """What each run of ``job`` will be configured with, read from its planned train.py command line as train.py
    merges it (``units.planned``: config files, arguments, knobs, EXTRA_OPTS); keys no command line sets keep their
    defaults."""
    call = job.call
    argvs = [step["argv"] for step in call.steps()] if isinstance(call, UnitCall) else [list(call.argv[1:])]
    return [planned_config(argv) for argv in argvs]


def job_weights(job: Job) -> list[str]:
    """The CLIP weights ``job``'s runs load, as they will load them: each run's MODEL.BACKBONE.NAME ("" when nothing
    names one) and a distilled student's TEACHER_NAME (its trainer's default when nothing names one)."""
    method = find_method(job.method)
    names = []
    for config in planned_settings(job):
        names.append(str(config.get("MODEL.BACKBONE.NAME", "")))
        if method.distilled and job.kind == "train":
            names.append(str(config.get(f"TRAINER.{method.ns}.TEACHER_NAME", DEFAULT_TEACHER)))
    return list(dict.fromkeys(names))


def check_weights(item: Input) -> None:
    """``cached`` (the file clip.load_model reads), ``will download here`` or ``missing (offline)``; OpenAI's names,
    weight files and open_clip's names (``clip.weights``) alike; ``no backbone`` for an empty name (a config that
    names none, such as the demo's, without --backbone)."""
    if not item.name:
        item.status = "no backbone"
        item.problems.append("no CLIP named: the jobs' config names no MODEL.BACKBONE.NAME (as the demo configs do): "
                             "give one with --backbone NAME|FILE (and the distilled students' teacher CLIP with "
                             "--teacher-name)")
        return
    try:
        path, spec = find_weights(item.name, cwd=REPO), open_clip_name(item.name)
    except ConfigError as e:
        item.status = "missing"
        item.problems.append(str(e))
        return
    if path:
        item.status = f"cached ({path})"
    elif spec is not None and spec.pretrained is None:
        item.status = "missing"
        item.problems.append(f"{item.name}: CLIP weights not found; {open_clip_by_hand(spec)}")
    elif spec is None and item.name not in MODELS:
        item.status = "missing"
        item.problems.append(f"{item.name}: CLIP weights not found (neither a file nor a CLIP model name); fix "
                             "BACKBONE / TEACHER_NAME or MODEL.BACKBONE.NAME in --extra-opts or the config")
    elif unreachable(MODELS[item.name] if spec is None else spec.pretrained.page()):
        item.status = "missing (offline)"
        item.problems.append(cannot_download(item.name))
    else:
        item.status = "will download here"


def cannot_download(name: str) -> str:
    """The problem line of CLIP weights this node lacks and cannot download: where they go, how to place them."""
    spec = open_clip_name(name)
    if spec is not None:
        return f"{name}: CLIP weights missing and this node cannot download them; {open_clip_by_hand(spec)}"
    return (f"{candidate_paths(name, cwd=REPO)[-1]}: CLIP weights {name} missing and this node cannot download them; "
            f"download {MODELS[name]} into $CLIP_WEIGHTS_DIR or ~/.cache/clip")


def teacher_of(job: Job, jobs: dict[str, Job]) -> tuple[str, str] | None:
    """The teacher ``job`` reads: ("teacher job", the teacher's dataset) or ("TEACHER_CKPT", path); None when it
    reads none (the teacher job itself makes it)."""
    teachers = [jobs[d] for d in job.deps if jobs[d].kind == "teacher"]
    if teachers:
        return "teacher job", teachers[0].dataset
    if find_method(job.method).distilled and job.kind == "train" and job.knobs.get("TEACHER_CKPT"):
        return "TEACHER_CKPT", job.knobs["TEACHER_CKPT"]
    return None


def check_teacher(item: Input, source: str, jobs: dict[str, Job], inputs: dict[tuple[str, str], Input]) -> None:
    if source == "teacher job":
        job = jobs[f"teacher {item.name}"]
        data = inputs.get(("dataset", job.dataset))
        other = publication_differences(job)
        if other:
            folder = published_folder(job.files[0])
            item.status = "found, another teacher"
            item.problems.append(f"{folder} holds a teacher trained on another setting ({'; '.join(other)}; "
                                 f"{os.path.join(folder, TEACHER_RECORD)}): move it away or give --teacher-dir "
                                 "another folder, so that this sweep trains its own")
        elif os.path.exists(job.files[0]):
            item.status = "found"
        elif data is not None and data.problems:
            item.status = f"not trainable here (dataset {job.dataset}: {data.status})"
        else:
            item.status = "trained by this sweep"
    elif item.name == "none":
        item.status = "none: plain CLIP teacher (TEACHER_CKPT=none)"
    elif os.path.exists(item.name):
        item.status = "found"
    else:
        item.status = "missing"
        item.problems.append(f"{item.name}: TEACHER_CKPT not found; set it to a teacher checkpoint or PromptSRC run "
                             "folder, or unset it so that the sweep trains the teacher")


def run_preflight(sweep: Sweep, jobs: Sequence[Job], full: bool = False, other_splits: bool = False) -> Preflight:
    """Check every input of ``jobs`` once (``full``: decode every image; ``other_splits``: counts are not compared
    with the published ones)."""
    by_name = {job.name: job for job in jobs}
    report = Preflight()
    for job in jobs:
        keys = [("dataset", job.dataset)]
        if sweep.protocol != "base2new" and job.kind == "train" and job.dataset != sweep.source:
            keys.append(("dataset", sweep.source))
        keys += [("weights", name) for name in job_weights(job)]
        teacher = teacher_of(job, by_name)
        if teacher:
            keys.append(("teacher", teacher[1]))
        for key in dict.fromkeys(keys):
            item = report.inputs.get(key)
            if item is None:
                item = report.inputs[key] = Input(*key)
                if key[0] == "dataset":
                    check = check_dataset(sweep.data, key[1], {} if other_splits else PUBLISHED_SIZES, full=full)
                    item.status = "ok" if check.ok else "missing" if not check.found else "problems"
                    item.problems = [f"{check.layout.name}: {line}" for line in check.problems]
                elif key[0] == "weights":
                    check_weights(item)
                else:
                    check_teacher(item, teacher[0], by_name, report.inputs)
            item.jobs.append(job.name)
        report.needs[job.name] = keys
    return report


def fetch_weights(report: Preflight) -> None:
    """Download here every weight file that ``will download here`` (SLURM: before any job is queued, so that no
    compute node has to); one that fails becomes a problem."""
    for item in report.inputs.values():
        if item.kind != "weights" or item.status != "will download here":
            continue
        print(f"Fetching the CLIP weights {item.name} on this node")
        done = subprocess.run([sys.executable, "-m", "clip.download", item.name], cwd=REPO)
        if done.returncode == 0:
            item.status = "cached (fetched here)"
        else:
            item.status = "missing (download failed)"
            item.problems.append(f"the download failed (see above): {cannot_download(item.name)}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The preflight's options."""
    group = parser.add_argument_group("preflight (checked before anything runs, and by --dry-run)")
    group.add_argument("--skip-missing", action="store_true",
                       help="run only the jobs whose inputs (data, CLIP weights, teacher) are present, and say which "
                            "were left out; without it a missing input stops the sweep (exit 2)")
    group.add_argument("--check-images", action="store_true",
                       help="decode every listed image (default: a fixed sample per dataset)")
    group.add_argument("--other-splits", action="store_true",
                       help="accept splits whose classes or counts differ from the published ones (a created split, "
                            "a small test tree)")


SLURM_FIX = "run the runner on a SLURM login node (or set SLURM_CONF to its slurm.conf), or use --executor local"
SINFO_TIMEOUT_S = 120.0
"""How long SLURM may take to answer ``sinfo`` (a hang guard: a busy slurmctld answers in seconds)."""


def check_slurm() -> None:
    """ValueError with one line when this machine cannot submit SLURM jobs: a client binary missing
    (``runner.slurm.require_slurm``), or SLURM not answering ``sinfo`` (no slurm.conf, slurmctld unreachable), asked
    once before any job is planned on it."""
    from runner.slurm import require_slurm

    require_slurm()
    if shutil.which("sinfo") is None:
        raise ValueError(f"--executor slurm: sinfo not found on this machine; {SLURM_FIX}")
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ValueError(f"--executor slurm: SLURM does not answer here (`sinfo` gave no reply within "
                         f"{SINFO_TIMEOUT_S:g} s); {SLURM_FIX}") from None
    if done.returncode != 0:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        raise ValueError(f"--executor slurm: SLURM does not answer here (`sinfo` exited {done.returncode}"
                         f"{': ' + said[-1] if said else ''}); {SLURM_FIX}")


@dataclass
class Verdict:
    """What the preflight decided: the jobs to run, the exit status (2: stop) and the lines that close the output
    (problems last, where a reader looks)."""

    jobs: list[Job]
    status: int
    table: str
    """The preflight table (each input, its status and how many jobs read it) and its verdict line."""
    closing: list[str] = field(default_factory=list)
    """``error:`` lines (stderr) when the sweep stops; otherwise what --skip-missing left out (stdout)."""


def preflight(args: argparse.Namespace, sweep: Sweep, jobs: list[Job]) -> Verdict:
    """Check every input of ``jobs`` and decide: every job and 0, the jobs whose inputs are present with
    ``--skip-missing`` (2 when none is left), or the plan's jobs and exit status 2 with one ``error:`` line per
    problem."""
    report = run_preflight(sweep, jobs, full=args.check_images, other_splits=args.other_splits)
    if args.executor == "slurm" and not args.dry_run:
        fetch_weights(report)
    table = f"Preflight (data root {sweep.data}):\n{report.table()}"
    problems = report.problems
    if not problems:
        return Verdict(jobs, 0, f"{table}\nEvery input is present.")
    if not args.skip_missing:
        return Verdict(jobs, EXIT_MISSING, table, [*(f"error: {line}" for line in problems),
                                            f"error: {len(problems)} problem(s) with the sweep's inputs; fix them, or "
                                            "pass --skip-missing to run only the jobs whose inputs are present"])
    left_out = report.left_out(jobs)
    kept = [job for job in jobs if job.name not in left_out]
    closing = [*(f"missing: {line}" for line in problems), f"Left out ({len(left_out)} of {len(jobs)} jobs, "
               "--skip-missing):", *(f"  {name}: {why}" for name, why in left_out.items())]
    if not kept:
        closing.append("error: no job has all its inputs; fix the problems above")
        return Verdict(kept, EXIT_MISSING, table, closing)
    return Verdict(kept, 0, table, closing)
