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
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field

from tabulate import tabulate

from clip.weights import MODELS, candidate_paths, find_weights, open_clip_by_hand, open_clip_name
from datasets.check import check_dataset
from datasets.sizes import PUBLISHED_SIZES
from engine.errors import ConfigError
from engine.published import TEACHER_RECORD
from runner.costs import trainer_config
from runner.jobs import Job, dependents, publication_differences, published_folder
from runner.protocols import Sweep
from trainers.catalog import find_method
from units.facts import REPO

OFFLINE_KNOBS = ("PETR_OFFLINE", "HF_HUB_OFFLINE")
"""Either set to 1 (or true / yes) says this node cannot download: no network probe, missing weights are missing."""
PROBE_TIMEOUT_S = 5.0
"""How long the one HEAD request per missing weight file waits for OpenAI's server before calling the node offline."""
DEFAULT_BACKBONE, DEFAULT_TEACHER = "ViT-B/16", "ViT-L/14"
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


def offline() -> bool:
    """Whether an offline knob (:data:`OFFLINE_KNOBS`) is set."""
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes") for k in OFFLINE_KNOBS)


def reachable(url: str) -> bool:
    """Whether ``url`` answers a HEAD request within :data:`PROBE_TIMEOUT_S`."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=PROBE_TIMEOUT_S):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def job_setting(job: Job, key: str, knob: str, default: str) -> str:
    """The value of config ``key`` the job's script passes: its EXTRA_OPTS, then the knob (``BACKBONE`` /
    ``TEACHER_NAME``), then the trainer config file, then ``default``."""
    opts = job.knobs.get("EXTRA_OPTS", "").split()
    given = [opts[i + 1] for i in range(len(opts) - 1) if opts[i] == key]
    if given:
        return given[-1]
    if job.knobs.get(knob):
        return job.knobs[knob]
    node = trainer_config(job.trainer, job.config)
    for part in key.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node if isinstance(node, str) and node else default


def job_weights(job: Job) -> list[str]:
    """The CLIP weights ``job`` loads: its backbone, and a distilled student's teacher CLIP."""
    names = [job_setting(job, "MODEL.BACKBONE.NAME", "BACKBONE", DEFAULT_BACKBONE)]
    method = find_method(job.method)
    if method.distilled and job.kind == "train":
        names.append(job_setting(job, f"TRAINER.{method.ns}.TEACHER_NAME", "TEACHER_NAME", DEFAULT_TEACHER))
    return names


def check_weights(item: Input) -> None:
    """``cached`` (the file clip.load_model reads), ``will download here`` or ``missing (offline)``; OpenAI's names,
    weight files and open_clip's names (``clip.weights``) alike."""
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
    elif offline() or not reachable(MODELS[item.name] if spec is None else spec.pretrained.page()):
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


def preflight(args: argparse.Namespace, sweep: Sweep, jobs: list[Job]) -> tuple[list[Job], int]:
    """Print the preflight table and decide: the jobs to run and 0, or the plan's jobs and exit status 2 (one
    ``error:`` line per problem) when an input is missing and ``--skip-missing`` was not given."""
    report = run_preflight(sweep, jobs, full=args.check_images, other_splits=args.other_splits)
    if args.executor == "slurm" and not args.dry_run:
        fetch_weights(report)
    print(f"Preflight (data root {sweep.data}):")
    print(report.table())
    problems = report.problems
    if not problems:
        print("Every input is present.\n")
        return jobs, 0
    if not args.skip_missing:
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        print(f"error: {len(problems)} problem(s) with the sweep's inputs; fix them, or pass --skip-missing to run "
              "only the jobs whose inputs are present", file=sys.stderr)
        return jobs, EXIT_MISSING
    left_out = report.left_out(jobs)
    for line in problems:
        print(f"missing: {line}")
    print(f"Left out ({len(left_out)} of {len(jobs)} jobs, --skip-missing):")
    for name, why in left_out.items():
        print(f"  {name}: {why}")
    kept = [job for job in jobs if job.name not in left_out]
    if not kept:
        print("error: no job has all its inputs; fix the problems above", file=sys.stderr)
        return kept, EXIT_MISSING
    print()
    return kept, 0
