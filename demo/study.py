"""The ``python train.py`` jobs of the demo's studies (``bench.demo_transfer``, ``bench.demo_novel_gap``,
``bench.demo_profiles``): variants of the demo's base-to-novel runs with their own run folders and overrides, which no
protocol sweep plans.

A :class:`Demo` holds the demo's data and tiny CLIPs (:class:`DemoPlan`), builds one run's ``train.py`` command line
and the runner job around it, and runs such jobs on the protocol runner's CPU slots.
"""
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from demo.pipeline import CONFIG, DATASET, Paths, Size, default_paths, tiny_clips
from demo.pretrain import SHIPPED, PretrainParams, default_params
from demo.shapes import DATASET_DIRS, DEFAULT_PARAMS, GenParams, generate
from engine.runs import RESULTS_FILE as RESULTS
from engine.runs import run_dir
from runner.jobs import Job, check_graph
from runner.local import LocalExecutor
from runner.schedule import Report, run_plan
from units.call import TrainCall
from units.facts import REPO
from units.unit import train_argv

__all__ = ["FULL", "PLAN", "RESULTS", "Demo", "DemoPlan", "add_study_options", "study_paths"]


@dataclass(frozen=True)
class DemoPlan:
    """The demo's data and tiny-CLIP parameters, seeds and shots of the studies' runs."""

    dataset: str = DATASET
    seeds: tuple[int, ...] = (1, 2, 3)
    data: GenParams = DEFAULT_PARAMS
    student: PretrainParams = field(default_factory=lambda: default_params("student"))
    teacher: PretrainParams | None = field(default_factory=lambda: default_params("teacher"))
    teacher_shots: int = 16
    student_shots: int = 32
    """Images per class for PromptKD (all classes, unlabelled) and PETR (labelled base, unlabelled novel)."""


FULL = DemoPlan()
ALL_TRAIN = 0
"""``DATASET.NUM_SHOTS`` of every train image, as the unit commands distil in the demo."""
PLAN = replace(FULL, student=SHIPPED["student"], teacher=SHIPPED["teacher"], student_shots=ALL_TRAIN)
"""The demo's world: the shipped tiny CLIPs, distillation on every train image."""


class Demo:
    """Builds and runs ``train.py`` jobs of a :class:`DemoPlan` on the demo's data and tiny CLIPs."""

    def __init__(self, plan: DemoPlan, paths: Paths, threads: int = 1, workers: int = 2):
        self.plan, self.paths = plan, paths
        self.threads, self.workers = threads, workers
        self.short = DATASET_DIRS[plan.dataset]
        self.student_clip = self.teacher_clip = ""

    def run_dir(self, role: str, shots: int, trainer: str, seed: int) -> str:
        """``<output>/base2new/<role>/<dataset>/shots_<K>/<trainer>/demo/seed<S>`` (``engine.runs.run_dir``)."""
        return run_dir(self.paths.output, "base2new", role, self.short, shots, trainer, CONFIG, seed)

    def shots(self, trainer: str) -> int:
        return {"ZeroshotCLIP": 0, "PromptSRC": self.plan.teacher_shots}.get(trainer, self.plan.student_shots)

    def train_call(self, trainer: str, out: str, seed: int, subsample: str, opts: Sequence[str] = (),
                   model_dir: str = "") -> TrainCall:
        """``python train.py`` on the demo dataset (base-to-novel): training, or evaluating ``model_dir``."""
        flags = []
        if model_dir:
            flags = ["--eval-only", "--model-dir", model_dir, *(["--load-epoch", "last"] * (trainer != "ZeroshotCLIP"))]
        opts = ["DATASET.NUM_SHOTS", str(self.shots(trainer)), "DATASET.SUBSAMPLE_CLASSES", subsample,
                "TRAINER.MODAL", "base2novel", *opts]
        argv = train_argv(self.paths.data, trainer, self.short, CONFIG, out, seed, [*flags, *opts])
        return TrainCall(tuple(argv[1:]))

    def job(self, stage: str, **fields: Any) -> Job:
        """A runner job (``runner.jobs.Job`` fields; ``stage`` names the study variant) that reads the demo's data
        (its digest goes into the job's record, so that regenerated data is not taken for the old)."""
        return Job(**{"reads": {"demo data": self.plan.data.digest()}, **fields})

    def distill_opts(self, trainer: str) -> tuple[str, ...]:
        """The student CLIP, the teacher CLIP and the shared base-to-novel teacher run of PromptKD / PETR."""
        ns = trainer.upper()
        return ("MODEL.BACKBONE.NAME", self.student_clip, f"TRAINER.{ns}.TEACHER_NAME", self.teacher_clip,
                f"TRAINER.{ns}.TEACHER_CKPT", self.teacher_run())

    def teacher_run(self) -> str:
        return self.run_dir("train_base", self.plan.teacher_shots, "PromptSRC", self.plan.seeds[0])

    def teacher_job(self, opts: Sequence[str] = ()) -> Job:
        """The PromptSRC teacher's training on the base classes (first seed), which the students distil from;
        ``opts`` after the teacher CLIP."""
        call = self.train_call("PromptSRC", self.teacher_run(), self.plan.seeds[0], "base",
                               ("MODEL.BACKBONE.NAME", self.teacher_clip, *opts))
        return self.job("teacher", name="b2n PromptSRC base", kind="teacher", method="PromptSRC", dataset=self.short,
                        call=call, runs=(self.teacher_run(),), trainer="PromptSRC", config=CONFIG)

    def prepare(self) -> None:
        """Write the datasets and find (or pretrain) the tiny CLIPs."""
        start = time.time()
        generate(self.paths.data, self.plan.data)
        size = Size("study", (), self.plan.seeds, data=self.plan.data, student=self.plan.student,
                    teacher=self.plan.teacher)
        self.student_clip, self.teacher_clip = tiny_clips(size, self.paths.cache)
        print(f"Data and tiny CLIPs ready in {time.time() - start:.0f} s")

    def run_jobs(self, jobs: Sequence[Job], log_dir: str) -> Report:
        """Run ``jobs`` on the runner's CPU slots (``workers`` at once, ``threads`` torch threads each), skipping
        finished ones; a failed job is reported with its log's tail and only the jobs that need it are not run."""
        check_graph(jobs)
        executor = LocalExecutor([], cpu_jobs=max(1, self.workers), threads=self.threads)
        print(f"{len(jobs)} runs on {executor.describe()} (logs in {log_dir})", flush=True)
        try:
            return run_plan(jobs, executor, log_dir)
        finally:
            executor.close()


def add_study_options(parser: argparse.ArgumentParser) -> None:
    """The options every demo study takes: its seeds, the folder its data and runs go under, threads per run and runs
    at once."""
    parser.add_argument("--seeds", nargs="+", type=int, default=list(FULL.seeds),
                        help=f"the seeds of every run (default {' '.join(map(str, FULL.seeds))})")
    parser.add_argument("--workdir", default=".", help="folder under which data/demo, output/demo, demo_cache go")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per run (default 1)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="runs at once")


def study_paths(workdir: str) -> Paths:
    """The demo's folders under ``workdir`` (absolute), once the repository root is the working folder (where the
    studies' train.py runs start)."""
    paths = default_paths(os.path.abspath(workdir), None, None, None)
    os.chdir(REPO)
    return paths
