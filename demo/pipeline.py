"""The built-in demo: its preparation (toy data, tiny CLIPs), then protocol-runner sweeps of the unit commands a GPU
user types, then a report of tables and a figure next to the runs.

The sweeps are ``runner.protocols.Sweep``s planned by ``runner.protocols.Planner`` with the demo's data, configs
(``CFG=demo``) and tiny CLIPs as knobs, and run by ``runner.schedule.run_plan`` on a ``runner.local.LocalExecutor``
(``--jobs`` CPU slots, ``--threads`` torch threads each): finished jobs are skipped on a rerun, a failed one stops only
the jobs that need it. Sizes (:data:`SIZES`):

* ``demo`` (``make demo``): base-to-novel on DemoShapesHard, seed 1: zero-shot CLIP, CoOp, the PromptSRC teacher,
  PromptKD, PETR and PETR+CoOp;
* ``full`` (``make demo-full``): every method and baseline (CoCoOp, MaPLe, IVLP and PETR+X too), seeds 1–3, and the
  cross-dataset and domain-generalisation protocols from DemoNet;
* ``quick`` (the test suite): ``full``'s runs on smaller data, two seeds, one target per transfer protocol.

It prints the base-to-novel table, the routing rates and the paper's effects (the cross-dataset and DG tables too
when it ran them); ``<output>/report.md`` holds them as markdown with the stage times, ``<output>/report.png`` the
figure; the runner's lines and every command's log go to ``<output>/logs/``.

Command line: ``python -m demo.pipeline [--full | --quick] [--workdir DIR] [--data DIR] [--output-root DIR]
[--cache DIR] [--seeds S ...] [--threads N] [--jobs N]``. Environment: ``DEMO_DATA``, ``DEMO_OUTPUT``, ``DEMO_CACHE``
(flags win).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

if __name__ == "__main__":  # process-wide, so only as a program; read when torch loads, hence before the imports below
    from demo.kernels import set_process_env

    set_process_env()

from tqdm import tqdm

from analysis.dumps import find_units, unit_scores
from analysis.report import write_report
from demo import report
from demo.figure import report_figure
from demo.kernels import kernels_line, machine
from demo.pretrain import PRETRAIN_THREADS, SHIPPED, PretrainParams, default_params, default_path, pretrained_path
from demo.shapes import DATASET_DIRS, DEFAULT_PARAMS, GenParams, generate
from engine.errors import InvalidInputError, UserError, first_line
from runner.jobs import Job
from runner.local import LocalExecutor
from runner.protocols import Planner, Sweep, merge_plans
from runner.schedule import Report, run_plan, stopped, stopping_on_signals
from trainers.catalog import METHODS, TEACHER, find_method

CONFIG = "demo"
"""The demo's config family: ``configs/trainers/<TRAINER>/demo.yaml`` (PETR+X's runs: ``demo_<x>`` folders)."""
DATASET = "DemoShapesHard"
SOURCE = "demonet"
XD_TARGETS = ("democool", "demosoft", "demofancy")
DG_TARGETS = ("demonetv2", "demonet_sketch", "demonet_a", "demonet_r")
CORE_METHODS = tuple(m.name for m in METHODS.values() if m.demo == "core")
"""``make demo``'s methods (the catalog's rows with ``demo`` core)."""
ALL_METHODS = tuple(m.name for m in METHODS.values() if m.demo)
"""``make demo-full``'s methods (core and full)."""
TRANSFER_METHODS = tuple(name for name in ALL_METHODS if METHODS[name].xd_config and METHODS[name] is not TEACHER)
"""The demo's methods of the cross-dataset and DG protocols (those with a transfer config; the teacher is theirs)."""
TABLE_ORDER = tuple(METHODS)
"""Rows of the base-to-novel table (method names, ``demo.report.method_key``), in the catalog's order."""
KD_WEIGHT = "100.0"
"""α of the distilled students (the demo configs' value; the unit commands default to PromptKD's 1000)."""


RUN_SECONDS: Mapping[tuple[str, str], float] = {
    ("ZeroshotCLIP", "zero-shot"): 9, ("CoOp", "train"): 35, ("CoOp", "test"): 3, ("PromptSRC", "teacher"): 22,
    ("PromptSRC", "test"): 3, ("PromptKD", "train"): 55, ("PromptKD", "test"): 4, ("PETR", "train"): 115,
    ("PETR", "test"): 5, ("PETR+CoOp", "plug-in"): 8}
"""Seconds each run of ``make demo`` (method, job kind) takes on an idle 2-core AMD EPYC, one torch thread a run: an
estimate from which the runner starts the longest chain first (the teacher, then PETR's training) and shows an ETA
before any run has ended (:func:`expected_seconds`)."""


def expected_seconds(job: Job) -> float | None:
    """:data:`RUN_SECONDS` of a base-to-novel job on :data:`DATASET`; None for the others (the runner's mean)."""
    return RUN_SECONDS.get((job.method, job.kind)) if job.dataset == DATASET_DIRS[DATASET] else None


@dataclass(frozen=True)
class Size:
    """One size of the demo: its methods, seeds, transfer targets, data, tiny CLIPs and per-method overrides."""

    name: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    xd_targets: tuple[str, ...] = ()
    dg_targets: tuple[str, ...] = ()
    """Cross-dataset / DG targets of DemoNet (none: that protocol is not run)."""
    data: GenParams = DEFAULT_PARAMS
    student: PretrainParams = SHIPPED["student"]
    teacher: PretrainParams | None = SHIPPED["teacher"]
    """None: the teacher's PromptSRC prompts are learned on the student CLIP itself (one pretraining). The shipped
    pair (``demo.pretrain.SHIPPED``) is read from ``demo/weights``; any other is pretrained into the cache."""
    method_opts: Mapping[str, str] = field(default_factory=dict)
    """``KEY VALUE`` overrides per method after the demo config (``Sweep.method_opts``), e.g. fewer epochs."""
    student_shots: int = 0
    """Train images per class that PromptKD and PETR distil on in base-to-novel (``Sweep.shots``; 0: every one)."""


STUDENT_SHOTS = 120
"""Train images per class (of 200) that PromptKD and PETR distil on in ``make demo`` and ``make demo-full``: with all
200, PETR's training alone took most of the demo's time budget (docs/demo.md, "Time")."""
DEMO = Size("demo", CORE_METHODS, (1,), student_shots=STUDENT_SHOTS)
FULL = Size("full", ALL_METHODS, (1, 2, 3), XD_TARGETS, DG_TARGETS, student_shots=STUDENT_SHOTS)
QUICK = Size(
    "quick", ALL_METHODS, (1, 2), ("democool",), ("demonet_sketch",),
    data=replace(DEFAULT_PARAMS, train_per_class=40, val_per_class=2, test_per_class=20, xd_train_per_class=16,
                 xd_val_per_class=2, xd_test_per_class=20),
    student=replace(default_params("student"), steps=150), teacher=None,
    method_opts={"PromptSRC": "OPTIM.MAX_EPOCH 3", "CoOp": "OPTIM.MAX_EPOCH 10", "PromptKD": "OPTIM.MAX_EPOCH 1",
                 "PETR": "OPTIM.MAX_EPOCH 4", "CoCoOp": "OPTIM.MAX_EPOCH 3", "MaPLe": "OPTIM.MAX_EPOCH 3",
                 "IVLP": "OPTIM.MAX_EPOCH 3"})
"""The reduced demo of the test suite: fewer images, two seeds, a short pretraining shared by teacher and students."""
SIZES = {s.name: s for s in (DEMO, FULL, QUICK)}


@dataclass(frozen=True)
class Paths:
    """Where the demo reads and writes."""

    data: str
    output: str
    cache: str

    @property
    def logs(self) -> str:
        return os.path.join(self.output, "logs")

    @property
    def teachers(self) -> str:
        return os.path.join(self.output, "teachers")


def tiny_clips(size: Size, cache: str) -> tuple[str, str]:
    """The (student, teacher) tiny CLIP files of ``size`` under ``cache``: the shipped ones (checked and expanded by
    ``demo.shipped``), or pretrained first when missing."""
    if (size.student, size.teacher) == (SHIPPED["student"], SHIPPED["teacher"]):
        from demo.shipped import clip_files

        return clip_files(cache)
    import torch

    torch.set_num_threads(PRETRAIN_THREADS)
    student = pretrained_path(size.student, default_path(size.student, cache))
    teacher = student if size.teacher is None else pretrained_path(size.teacher, default_path(size.teacher, cache))
    return student, teacher


def datasets(size: Size) -> list[str]:
    """The demo datasets ``size`` runs on (names of ``DATASET_DIRS``): :data:`DATASET`, and :data:`SOURCE` with the
    targets when it runs the transfer protocols; the others are not drawn."""
    folders = {DATASET_DIRS[DATASET]}
    if size.xd_targets or size.dg_targets:
        folders |= {SOURCE, *size.xd_targets, *size.dg_targets}
    return [name for name, folder in DATASET_DIRS.items() if folder in folders]


def sweeps(size: Size, paths: Paths, clips: tuple[str, str]) -> list[Sweep]:
    """The demo's sweeps: base-to-novel on :data:`DATASET`, then cross-dataset and DG from :data:`SOURCE` when
    ``size`` has targets; every job gets the tiny CLIPs (BACKBONE, TEACHER_NAME) and the demo's α."""
    knobs = {"BACKBONE": clips[0], "TEACHER_NAME": clips[1], "KD_WEIGHT": KD_WEIGHT}
    common = {"data": paths.data, "output": paths.output, "teacher_dir": paths.teachers, "config": CONFIG,
              "knobs": knobs, "method_opts": dict(size.method_opts)}
    out = [Sweep("base2new", tuple(map(find_method, size.methods)), (DATASET_DIRS[DATASET],), size.seeds,
                 shots=size.student_shots, **common)]
    transfer = tuple(map(find_method, TRANSFER_METHODS))
    out += [Sweep(protocol, transfer, targets, size.seeds, source=SOURCE, **common)
            for protocol, targets in (("xd", size.xd_targets), ("dg", size.dg_targets)) if targets]
    return out


class Demo:
    """Prepares, runs and reports one :class:`Size` of the demo."""

    def __init__(self, size: Size, paths: Paths, threads: int = 1, workers: int = 2):
        self.size, self.paths = size, paths
        self.threads, self.workers = threads, workers
        self.start = time.time()
        self.times: list[list] = []
        """Rows of the stage-time table."""
        self.where = f"{kernels_line()}; {machine()}"
        """The CPU kernels the runs use (their workers inherit this process's environment) and the machine."""

    def say(self, text: str) -> None:
        elapsed = time.time() - self.start
        print(f"==> [{int(elapsed // 60):02d}:{int(elapsed % 60):02d}] {text}", flush=True)

    def timed(self, stage: str, start: float) -> None:
        self.times.append([stage, "", "", time.time() - start, ""])

    def prepare(self) -> tuple[str, str]:
        """Write the datasets and find (or pretrain) the tiny CLIPs; their lines go to ``<logs>/prepare.txt``."""
        os.makedirs(self.paths.logs, exist_ok=True)
        log = os.path.join(self.paths.logs, "prepare.txt")
        with open(log, "a") as f, contextlib.redirect_stdout(f):
            start = time.time()
            generate(self.paths.data, self.size.data, names=datasets(self.size))
            self.timed("data", start)
            start = time.time()
            clips = tiny_clips(self.size, self.paths.cache)
            self.timed("tiny CLIPs", start)
        self.say(f"Data under {self.paths.data}, tiny CLIPs in {self.paths.cache} (log {log})")
        return clips

    def run_jobs(self, planned: Sequence[Sweep]) -> Report:
        """Run the sweeps' jobs on the CPU slots; the runner's lines go to ``<logs>/runner.txt``, and one line per run
        that starts or ends, with the counts and the ETA, to the terminal."""
        try:
            plans = {sweep.protocol: Planner(sweep).plan() for sweep in planned}
        except ValueError as e:  # a run's record contradicts this demo's files (a demo folder copied from another)
            out = self.paths.output
            raise InvalidInputError(f"{str(e).split('; ')[0]}: the runs under {out} were made with other tiny CLIP "
                                    "files or teachers than this demo's (copied from another folder, or weights "
                                    f"regenerated); move {out} away, or give the demo another --output-root") from None
        jobs = merge_plans(plans.values())
        executor = LocalExecutor([], cpu_jobs=max(1, self.workers), threads=self.threads)
        log = os.path.join(self.paths.logs, "runner.txt")
        self.say(f"{len(jobs)} runs on {executor.describe()} (commands and logs: {log}, {self.paths.logs}/)")
        terminal = sys.stdout
        try:
            with open(log, "a", buffering=1) as f, contextlib.redirect_stdout(f):
                outcome = run_plan(jobs, executor, self.paths.logs, projected=expected_seconds,
                                   echo=lambda line: tqdm.write(f"    {line}", file=terminal))
        finally:
            executor.close()
        stages: dict[str, str] = {}
        for protocol, plan in plans.items():
            for job in plan:
                stages.setdefault(job.name, protocol)
        self.times += stage_times(stages, outcome)
        return outcome

    def run(self) -> bool:
        """Say where it runs, prepare, run the sweeps, then print and write the report; False (after the failures)
        when a run failed."""
        self.say(self.where)
        clips = self.prepare()
        outcome = self.run_jobs(sweeps(self.size, self.paths, clips))
        if not outcome.ok:
            print(failures(outcome))
            return False
        self.report()
        return True

    def transfer_runs(self) -> list[tuple[str, tuple[str, ...], dict[str, dict[str, list[float]]]]]:
        """(title, targets, per-seed accuracies per method and dataset) of the cross-dataset and DG protocols that
        ran, read from their results once."""
        return [(title, targets,
                 report.transfer_values(self.paths.output, protocol, SOURCE, targets, TRANSFER_METHODS))
                for protocol, title, targets in (("xd", "cross-dataset", self.size.xd_targets),
                                                 ("dg", "domain generalisation", self.size.dg_targets)) if targets]

    def sections(self, runs: Mapping[str, Mapping[int, report.Results]], transfer: Sequence[tuple], fmt: str
                 ) -> list[tuple[str, str]]:
        """The report's (heading, table) sections in tabulate's ``fmt`` (``simple``: the terminal; ``github``:
        markdown): base-to-novel, routing, effects, and the cross-dataset and DG tables (``transfer``, from
        :meth:`transfer_runs`)."""
        size, seeds = self.size, ", ".join(map(str, self.size.seeds))
        chance = 100.0 / runs["PETR"][size.seeds[0]]["novel"]["num_eval_classes"]
        out = [(f"Base-to-novel on {DATASET} (seeds {seeds}; mean ± sample std)",
                report.b2n_table(runs, TABLE_ORDER, fmt)),
               ("Routing: test images sent to the right branch", report.routing_table(runs, fmt)),
               ("The paper's effects", report.effects_table(report.per_seed_rows(runs), chance, fmt))]
        out += [(f"{title.capitalize()} from {SOURCE} (seeds {seeds})",
                 report.transfer_table(title, SOURCE, targets, values, fmt)) for title, targets, values in transfer]
        return out

    def report(self) -> None:
        """Print the tables and write ``report.md`` and ``report.png`` next to the runs."""
        out, first = self.paths.output, self.size.seeds[0]
        runs, transfer = report.collect_b2n(out), self.transfer_runs()
        for heading, table in self.sections(runs, transfer, "simple"):
            self.say(heading)
            print(table)
        self.times.append(["total", "", "", time.time() - self.start, ""])
        figure = os.path.join(out, "report.png")
        (unit,) = [u for u in find_units([os.path.join(out, "base2new")])
                   if u.method == f"PETR/{CONFIG}" and u.seed == str(first)]
        seeds = ", ".join(map(str, self.size.seeds))
        which = f"seed {seeds}" if len(self.size.seeds) == 1 else f"mean over seeds {seeds}"
        report_figure(report.seed_means(runs, TABLE_ORDER), unit_scores(unit, "mahalanobis"),
                      f"Base-to-novel on {DATASET}, test split, {which}",
                      f"PETR's Mahalanobis scores, {DATASET} test split, seed {first}", figure)
        times = f"{self.where}\n\n{report.stage_table(self.times, 'github')}"
        write_report(os.path.join(out, "report.md"), f"PETR demo ({self.size.name})",
                     [*self.sections(runs, transfer, "github"), ("Time per stage (s)", times)], figure)
        self.say(f"Done in {time.time() - self.start:.0f} s; report: {os.path.join(out, 'report.md')}, {figure}")


def stage_times(stages: Mapping[str, str], outcome: Report) -> list[list]:
    """Per stage (``stages``: job name -> stage, in plan order): runs done, runs finished before (skipped), wall time
    (first start to last end) and the summed run time, in seconds, from the runner's job spans."""
    rows: dict[str, list] = {}
    for name, stage in stages.items():
        row = rows.setdefault(stage, [stage, [], 0])
        if name in outcome.spans:
            row[1].append(outcome.spans[name])
        row[2] += name in outcome.finished_before
    return [[stage, len(spans), skipped, max(e for _, e in spans) - min(s for s, _ in spans) if spans else 0.0,
             sum(e - s for s, e in spans)] for stage, spans, skipped in rows.values()]


def failures(outcome: Report) -> str:
    """The failed runs with their log's tails and the runs left out because they need one; an ``error:`` line."""
    lines = [f"FAILED {name}: {why}" for name, why in outcome.failed.items()]
    if outcome.skipped:
        lines.append(f"Not run (they need a failed run): {', '.join(outcome.skipped)}")
    lines.append(f"error: {len(outcome.failed)} demo run(s) failed (logs above); fix the cause and rerun the same "
                 "command: finished runs are skipped")
    return "\n".join(lines)


def default_paths(workdir: str, data: str | None, output: str | None, cache: str | None) -> Paths:
    """Flags, then DEMO_DATA / DEMO_OUTPUT / DEMO_CACHE, then <workdir>/data/demo, output/demo, demo_cache."""
    def pick(flag: str | None, env: str, default: str) -> str:
        return os.path.abspath(flag or os.environ.get(env) or os.path.join(workdir, default))

    return Paths(pick(data, "DEMO_DATA", os.path.join("data", "demo")),
                 pick(output, "DEMO_OUTPUT", os.path.join("output", "demo")),
                 pick(cache, "DEMO_CACHE", "demo_cache"))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the demo."""
    parser = argparse.ArgumentParser(description="Run the built-in PETR demo on CPU (see docs/demo.md).")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--full", action="store_true", help="every method and protocol, seeds 1-3 (make demo-full)")
    which.add_argument("--quick", action="store_true", help="the reduced demo of the test suite")
    parser.add_argument("--workdir", default=".", help="folder under which data/demo, output/demo, demo_cache go")
    parser.add_argument("--data", "--root", dest="data",
                        help="the datasets folder (default $DEMO_DATA or <workdir>/data/demo)")
    parser.add_argument("--output-root", "--output", dest="output", metavar="DIR",
                        help="the output root (default $DEMO_OUTPUT or <workdir>/output/demo)")
    parser.add_argument("--cache", help="tiny CLIP cache (default $DEMO_CACHE or <workdir>/demo_cache)")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds of every protocol (default: the size's)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per run (default 1)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="runs at once (default: 2, or 1 on a one-core machine)")
    args = parser.parse_args(argv)
    paths = default_paths(os.path.abspath(args.workdir), args.data, args.output, args.cache)
    size = FULL if args.full else QUICK if args.quick else DEMO
    if args.seeds:
        size = replace(size, seeds=tuple(args.seeds))
    try:
        with stopping_on_signals():
            return 0 if Demo(size, paths, args.threads, args.jobs).run() else 1
    except UserError as e:  # a missing, damaged or swapped tiny CLIP file, ...: one line, as every user error
        print(f"error: {first_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM or SIGHUP: the runs stopped as the runner stops them
        line, status = stopped(e)
        print(line, file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
