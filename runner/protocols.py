"""Protocols as jobs: base-to-novel, cross-dataset and domain generalisation expanded into unit commands.

Dependencies: teacher → distilled students; CoOp → PETR+CoOp (a plug-in on CoOp's run); training → its novel-class
test; the source-distilled PromptKD student → its DG evaluations. The tables come after every job (see
:mod:`runner.tables`). Each job calls one unit command (``units.call.UnitCall``: ``scripts/<method>/<command>.sh``)
with the knobs it reads set explicitly; its run folders are the ones the unit command writes
(``units.call.UnitCall.runs``), so the plan knows every run folder before anything runs.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from engine.published import expected_record
from runner.jobs import Job, check_graph
from runner.profiles import PAPER, Profile
from trainers.catalog import TEACHER, ZERO_SHOT, Method, find_method
from units.call import UnitCall
from units.facts import REPO, UnitError, teacher_folder
from units.planned import planned_config

PROTOCOLS = ("base2new", "xd", "dg")
PASSED_KNOBS = ("BACKBONE", "TEACHER_NAME", "KD_WEIGHT", "TEACHER_CKPT", "LOAD_EPOCH")
"""Script knobs taken from the runner's environment into every job (so the printed commands are complete)."""


@dataclass(frozen=True)
class Sweep:
    """What to run: a protocol over methods, datasets and seeds, and where."""

    protocol: str
    methods: tuple[Method, ...]
    datasets: tuple[str, ...]
    """Base-to-novel datasets, or the cross-dataset / DG targets."""
    seeds: tuple[int, ...]
    data: str
    output: str
    teacher_dir: str
    source: str = "imagenet"
    """Source dataset of the cross-dataset / DG protocols."""
    config: str = ""
    """One config family for every method (e.g. ``demo``: ``configs/trainers/<trainer>/demo.yaml``, PETR+X's
    ``demo.yaml`` too, whose runs keep ``demo_<x>`` folders); empty: each method's own."""
    shots: int = 0
    """Training images per class of the students that learn from every train image otherwise (0: all): PromptKD's
    and PETR's in base-to-novel (the few-shot methods keep their own shots), every student of cross-dataset / DG."""
    profile: Profile = PAPER
    extra_opts: str = ""
    """User ``KEY VALUE`` overrides for every run (EXTRA_OPTS), after the profile's (so they win)."""
    method_opts: Mapping[str, str] = field(default_factory=dict)
    """``KEY VALUE`` overrides of one method's runs (method name -> overrides, e.g. fewer epochs), after
    :attr:`extra_opts`."""
    knobs: Mapping[str, str] = field(default_factory=dict)
    """Other script knobs (:data:`PASSED_KNOBS`) passed to every job."""
    procs_per_job: int = 1
    """Processes per run (NPROC of the scripts: torchrun when > 1): one per GPU, or CPU processes (gloo)."""


def merge_plans(plans: Iterable[Sequence[Job]]) -> list[Job]:
    """The jobs of several plans in one (e.g. cross-dataset and DG from one source, each a ``Planner(sweep).plan()``):
    a job two plans share (the teacher, the source's runs) once; ValueError when two different jobs have one name."""
    jobs: dict[str, Job] = {}
    for plan in plans:
        for job in plan:
            if jobs.setdefault(job.name, job) != job:
                raise ValueError(f"two sweeps plan different jobs named {job.name!r}")
    return list(jobs.values())


class Planner:
    """Builds the jobs of a :class:`Sweep`."""

    def __init__(self, sweep: Sweep):
        self.sweep = sweep
        self.jobs: dict[str, Job] = {}

    def plan(self) -> list[Job]:
        """Every job of the sweep, dependencies first."""
        build = {"base2new": self.base2new, "xd": self.cross_dataset, "dg": self.domain_generalisation}
        build[self.sweep.protocol]()
        jobs = list(self.jobs.values())
        check_graph(jobs)
        return jobs

    # ----- building blocks ----------------------------------------------------------------------------------
    def cfg(self, method: Method, dataset: str) -> str:
        if self.sweep.config:
            return self.sweep.config
        return method.b2n_config(dataset) if self.sweep.protocol == "base2new" else method.xd_config

    def env(self, method: Method, config: str, shots: int, source: bool = False) -> dict[str, str]:
        sweep = self.sweep
        env = {"DATA": sweep.data, "OUTPUT_ROOT": sweep.output, "TEACHER_DIR": sweep.teacher_dir, "CFG": config,
               "SHOTS": str(shots), "PYTHON": sys.executable}
        if source:
            env["SOURCE"] = sweep.source
        if sweep.procs_per_job > 1:
            env["NPROC"] = str(sweep.procs_per_job)
        env.update(sweep.knobs)
        extra = " ".join(filter(None, [*sweep.profile.opts(method, sweep.output), sweep.extra_opts,
                                       sweep.method_opts.get(method.name, "")]))
        if extra:
            env["EXTRA_OPTS"] = extra
        return env

    def add(self, method: Method, kind: str, dataset: str, script: str, args: list[str], *, seed: int | None,
            config: str, shots: int, runs: tuple[str, ...] | None = None, files: tuple[str, ...] = (),
            deps: tuple[str, ...] = (), name: str = "") -> str:
        """Add one job (once: a job several methods need is shared); returns its name. Its run folders are the
        ones its unit command writes (``units.call.UnitCall.runs``) unless ``runs`` names them."""
        name = name or " ".join(filter(None, [method.name, kind, dataset, f"seed{seed}" if seed is not None else ""]))
        config_file = os.path.join(REPO, "configs", "trainers", method.trainer, f"{config}.yaml")
        if not os.path.isfile(config_file):
            raise ValueError(f"no config {os.path.relpath(config_file, REPO)} for {method.name}: check --config")
        if name not in self.jobs:
            env = self.env(method, config, shots, source=self.sweep.protocol != "base2new")
            call = UnitCall(method.scripts, script.removesuffix(".sh"), tuple(args), env)
            try:
                plan = call.steps()
            except UnitError as e:
                raise ValueError(f"{name}: {e}") from None
            runs = tuple(step["dir"] for step in plan) if runs is None else runs
            publishes = expected_record(planned_config(plan[0]["argv"])) if kind == "teacher" else {}
            self.jobs[name] = Job(
                name=name, kind=kind, method=method.name, dataset=dataset, call=call, runs=runs, files=files,
                deps=tuple(d for d in deps if d), seed=seed, config=config, trainer=method.trainer,
                bf16_ns=self.sweep.profile.bf16_ns(method), publishes=publishes)
        return name

    def teacher(self, dataset: str) -> str:
        """The teacher job of a base-to-novel dataset (or of the source, cross-dataset); "" when the students'
        teacher is given (TEACHER_CKPT) and nothing needs training."""
        sweep = self.sweep
        if "TEACHER_CKPT" in sweep.knobs and TEACHER not in sweep.methods:
            return ""
        seed, config = sweep.seeds[0], self.cfg(TEACHER, dataset)
        folder = teacher_folder(dataset, sweep.protocol, sweep.source)
        script, args = ("base2new_train.sh", [dataset, str(seed)]) if sweep.protocol == "base2new" else \
            ("xd_train.sh", [str(seed)])
        published = os.path.join(sweep.teacher_dir, folder, "VLPromptLearner", "checkpoint")
        runs = None if TEACHER in sweep.methods else ()  # a given teacher: only its published checkpoint counts
        return self.add(TEACHER, "teacher", dataset, script, args, seed=seed, config=config, shots=TEACHER.shots,
                        runs=runs, files=(published,), name=f"teacher {dataset}")

    # ----- base-to-novel ------------------------------------------------------------------------------------
    def base2new(self) -> None:
        sweep = self.sweep
        for dataset in sweep.datasets:
            for method in sweep.methods:
                if method is ZERO_SHOT:
                    self.b2n_zero_shot(dataset)
                elif method is TEACHER:
                    self.b2n_teacher_test(dataset)
                else:
                    for seed in sweep.seeds:
                        self.b2n_method(method, dataset, seed)

    def b2n_zero_shot(self, dataset: str) -> None:
        seed, config = self.sweep.seeds[0], self.cfg(ZERO_SHOT, dataset)
        self.add(ZERO_SHOT, "zero-shot", dataset, "base2new_test.sh", [dataset, str(seed)], seed=None, config=config,
                 shots=0)

    def b2n_teacher_test(self, dataset: str) -> None:
        seed, config = self.sweep.seeds[0], self.cfg(TEACHER, dataset)
        teacher = self.teacher(dataset)
        self.add(TEACHER, "test", dataset, "base2new_test.sh", [dataset, str(seed)], seed=None, config=config,
                 shots=TEACHER.shots, deps=(teacher,))

    def b2n_shots(self, method: Method) -> int:
        """The shots of ``method``'s base-to-novel runs: its own (the few-shot methods), else the sweep's."""
        return method.shots or self.sweep.shots

    def b2n_train(self, method: Method, dataset: str, seed: int) -> str:
        config = self.cfg(method, dataset)
        deps = (self.teacher(dataset),) if method.distilled else ()
        return self.add(method, "train", dataset, "base2new_train.sh", [dataset, str(seed)], seed=seed, config=config,
                        shots=self.b2n_shots(method), deps=deps)

    def b2n_method(self, method: Method, dataset: str, seed: int) -> None:
        config = self.cfg(method, dataset)
        if method.plugin_of:
            tuned = find_method(method.plugin_of)
            train = self.b2n_train(tuned, dataset, seed)
            args = [dataset, str(seed)]
            if method.commands == "petr_x":  # base2new.sh X DATASET SEED X_RUN_DIR: the tuned job's run
                args = [tuned.scripts, *args, self.jobs[train].runs[0]]
            self.add(method, "plug-in", dataset, method.plugin_script, args, seed=seed, config=config,
                     shots=method.shots, deps=(train,))
            return
        train = self.b2n_train(method, dataset, seed)
        self.add(method, "test", dataset, "base2new_test.sh", [dataset, str(seed)], seed=seed, config=config,
                 shots=self.b2n_shots(method), deps=(train,))

    # ----- cross-dataset and domain generalisation ----------------------------------------------------------
    def transfer_zero_shot(self, dataset: str) -> None:
        config = self.cfg(ZERO_SHOT, dataset)
        self.add(ZERO_SHOT, "zero-shot", dataset, "zeroshot.sh", [dataset, config], seed=None, config=config, shots=0)

    def xd_train(self, method: Method, dataset: str, seed: int) -> str:
        """``<method>/xd_train.sh DATASET SEED``: the student trained for DATASET (its source column when DATASET
        is the source)."""
        return self.add(method, "train", dataset, "xd_train.sh", [dataset, str(seed)], seed=seed,
                        config=self.cfg(method, dataset), shots=self.sweep.shots,
                        deps=(self.teacher(self.sweep.source),))

    def transfer_methods(self) -> None:
        """Refuse methods without cross-dataset scripts, in one line."""
        missing = [m.name for m in self.sweep.methods if not m.xd_config or m is TEACHER]
        if missing:
            raise ValueError(f"{', '.join(missing)}: no {self.sweep.protocol} scripts; the {self.sweep.protocol} "
                             f"protocol runs ZeroshotCLIP, PromptKD and PETR")

    def cross_dataset(self) -> None:
        """Every method on the source and on each target; PromptKD and PETR train a student per target."""
        self.transfer_methods()
        sweep = self.sweep
        for dataset in (sweep.source, *sweep.datasets):
            for method in sweep.methods:
                if method is ZERO_SHOT:
                    self.transfer_zero_shot(dataset)
                else:
                    for seed in sweep.seeds:
                        self.xd_train(method, dataset, seed)

    def domain_generalisation(self) -> None:
        """Source column as cross-dataset; PromptKD evaluates its source student on each target, PETR trains its
        unseen student on each target's images (dg_train.sh)."""
        self.transfer_methods()
        sweep = self.sweep
        for method in sweep.methods:
            if method is ZERO_SHOT:
                for dataset in (sweep.source, *sweep.datasets):
                    self.transfer_zero_shot(dataset)
                continue
            for seed in sweep.seeds:
                source = self.xd_train(method, sweep.source, seed)
                for dataset in sweep.datasets:
                    evaluates = method.dg_script.endswith("_test.sh")  # the source student on the target
                    self.add(method, "test" if evaluates else "train", dataset, method.dg_script,
                             [dataset, str(seed)], seed=seed, config=self.cfg(method, dataset), shots=sweep.shots,
                             deps=(source if evaluates else "", self.teacher(sweep.source)))
