"""The built-in demo end to end: data → tiny CLIPs → teachers → students over seeds → tables, effects and a plot.

Three protocols, each through the commands a researcher types (printed before they run):
* base-to-novel on ``DemoShapesHard``: ``python train.py ...`` runs in the CoOp layout
  ``<output>/base2new/{train_base,test_new}/<dataset>/shots_<K>/<TRAINER>/demo/seed<S>`` (docs/ARCHITECTURE.md), for
  seeds 1–3; the PromptSRC teacher and zero-shot CLIP are run once (seed 1) and shared, as PromptKD's published
  teachers are;
* cross-dataset and domain generalisation with ``DemoNet`` (the toy ImageNet) as source: ``scripts/teacher``,
  ``scripts/zsclip``, ``scripts/promptkd`` and ``scripts/petr`` xd/dg scripts with ``SOURCE=demonet``
  (``<output>/xd``, ``<output>/dg``, ``<output>/ZeroshotCLIP``).
Runs go several at once on the protocol runner's CPU slots (``runner.schedule.run_plan`` on a
``runner.local.LocalExecutor``: ``train.py`` runs in warm worker processes, scripts as subprocesses); a run whose
results exist is skipped, so a rerun only does what is missing, and a failed run stops only the runs that need it.
The summary: ``parse_test_res.py b2n``, mean ± std over seeds, PETR − PromptKD per seed, routing, the paper's effects
over seeds, the cross-dataset and DG tables, the routing-score plot and per-stage times.

Command line: ``python -m demo.pipeline [--quick] [--workdir DIR] [--data DIR] [--output DIR] [--cache DIR]
[--seeds S ...] [--transfer-seeds S ...] [--threads N] [--jobs N]``. Environment: ``DEMO_DATA``, ``DEMO_OUTPUT``,
``DEMO_CACHE`` (flags win).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

if __name__ == "__main__":  # process-wide, so only as a program; read when torch loads, hence before the imports below
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import parse_test_res
from analysis.dumps import find_units, unit_scores
from demo import report
from demo.pretrain import PretrainParams, default_params, default_path, pretrained_path
from demo.shapes import DATASET_DIRS, DEFAULT_PARAMS, GenParams, generate
from engine.runs import RESULTS_FILE as RESULTS
from engine.runs import run_dir
from engine.utils import read_json
from runner.jobs import Job, check_graph
from runner.local import LocalExecutor
from runner.schedule import Report, run_plan
from units.call import TrainCall, UnitCall

CONFIG = "demo"
"""Name of the demo configs: ``configs/trainers/<TRAINER>/demo.yaml``."""
PROMPT_LEARNERS = ("CoCoOp", "MaPLe", "IVLP")
"""The prompt learners beside CoOp in the base-to-novel table, each also under PETR's routing as PETR+X."""
TABLE_METHODS = ("ZeroshotCLIP", "CoOp", *PROMPT_LEARNERS, "PromptKD", "PETR", "PETRCoOp",
                 *(f"PETR+{x}" for x in PROMPT_LEARNERS))
"""The base-to-novel table's methods: trainer names, and PETR+X for trainer PETRX on X's run (``method_run``)."""
NO_CHECKPOINT = ("ZeroshotCLIP", "PETRX")
"""Trainers whose runs save no model: their novel evaluation reads the base run's folder without --load-epoch."""
SHARED = ("ZeroshotCLIP", "PromptSRC")
"""Methods run once (seed 1) and shared by every seed: zero-shot is deterministic, the teacher is published once."""
SOURCE = "demonet"
XD_TARGETS = ("democool", "demosoft", "demofancy")
DG_TARGETS = ("demonetv2", "demonet_sketch", "demonet_a", "demonet_r")
TRANSFER_METHODS = ("ZeroshotCLIP", "PromptKD", "PETR")
KINDS = {"ZeroshotCLIP": "zero-shot", "PromptSRC": "teacher", "PETRCoOp": "plug-in", "PETRX": "plug-in"}
"""Runner job kind of a trainer's training run (others: ``train``; evaluations of a saved model: ``test``)."""
PRETRAIN_THREADS = 2
"""Torch threads of the tiny CLIPs' pretraining (it runs alone, in this process). Fixed, because the float sums and
so the cached CLIPs (and every number after them) depend on the thread count; OMP_WAIT_POLICY=PASSIVE (set when this
module runs as a program) keeps the two threads from spinning on a busy machine (docs/demo.md, "Time")."""


@dataclass(frozen=True)
class DemoPlan:
    """What the demo builds: data and tiny-CLIP parameters, seeds, shots per stage, per-trainer config overrides."""

    dataset: str = "DemoShapesHard"
    seeds: tuple[int, ...] = (1, 2, 3)
    transfer_seeds: tuple[int, ...] = (1,)
    """Seeds of the cross-dataset and domain-generalisation runs (empty: skip those protocols); one by default, as
    three would take the demo past its time budget on 2 cores (``--transfer-seeds 1 2 3``)."""
    xd_targets: tuple[str, ...] = XD_TARGETS
    dg_targets: tuple[str, ...] = DG_TARGETS
    data: GenParams = DEFAULT_PARAMS
    student: PretrainParams = field(default_factory=lambda: default_params("student"))
    teacher: PretrainParams | None = field(default_factory=lambda: default_params("teacher"))
    """None: the teacher's PromptSRC prompts are learned on the student CLIP itself (one pretraining)."""
    teacher_shots: int = 16
    coop_shots: int = 16
    student_shots: int = 32
    """Images per class for PromptKD (all classes, unlabelled) and PETR (labelled base, unlabelled novel)."""
    kd_weight: str = "100.0"
    """α of the xd/dg scripts (KD_WEIGHT), the demo configs' value (the scripts default to PromptKD's 1000)."""
    opts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Extra ``KEY VALUE`` overrides per trainer, appended after the demo config (e.g. fewer epochs)."""


FULL = DemoPlan()
QUICK = DemoPlan(
    seeds=(1, 2),
    transfer_seeds=(1,),
    xd_targets=("democool",),
    dg_targets=("demonet_sketch",),
    data=replace(DEFAULT_PARAMS, train_per_class=40, val_per_class=2, test_per_class=20, xd_train_per_class=16,
                 xd_val_per_class=2, xd_test_per_class=20),
    student=replace(default_params("student"), steps=150),
    teacher=None,
    teacher_shots=8, coop_shots=8, student_shots=16,
    opts={"PromptSRC": ("OPTIM.MAX_EPOCH", "3"), "CoOp": ("OPTIM.MAX_EPOCH", "10"),
          "PromptKD": ("OPTIM.MAX_EPOCH", "3"), "PETR": ("OPTIM.MAX_EPOCH", "5"), "CoCoOp": ("OPTIM.MAX_EPOCH", "3"),
          "MaPLe": ("OPTIM.MAX_EPOCH", "3"), "IVLP": ("OPTIM.MAX_EPOCH", "3")},
)
"""The reduced demo of the test suite: fewer images and seeds, a short pretraining shared by teacher and students."""


@dataclass(frozen=True)
class Paths:
    """Where the demo reads and writes."""

    data: str
    output: str
    cache: str

    @property
    def base2new(self) -> str:
        return os.path.join(self.output, "base2new")

    @property
    def figures(self) -> str:
        return os.path.join(self.output, "figures")

    @property
    def logs(self) -> str:
        return os.path.join(self.output, "logs")

    @property
    def teachers(self) -> str:
        return os.path.join(self.output, "teachers")


class Demo:
    """Builds the jobs of a :class:`DemoPlan`, runs them and prints the summary."""

    def __init__(self, plan: DemoPlan, paths: Paths, threads: int = 1, workers: int = 2):
        if plan.dataset not in DATASET_DIRS:
            raise ValueError(f"unknown demo dataset {plan.dataset!r}; choose one of {', '.join(DATASET_DIRS)}")
        self.plan, self.paths = plan, paths
        self.threads, self.workers = threads, workers
        self.short = DATASET_DIRS[plan.dataset]  # its folder = the stem of its yaml, as scripts name datasets
        self.start = time.time()
        self.student_clip = self.teacher_clip = ""
        self.prepare_times: list[list] = []
        self.stages: dict[str, str] = {}
        """Job name -> the stage whose times are reported together (e.g. "base-to-novel: seed 2")."""

    # ----- bookkeeping ----------------------------------------------------------------------------------
    def clock(self) -> float:
        return time.time() - self.start

    def header(self, text: str) -> None:
        elapsed = self.clock()
        print(f"\n==> [{int(elapsed // 60):02d}:{int(elapsed % 60):02d}] {text}", flush=True)

    def run_dir(self, role: str, shots: int, trainer: str, seed: int, config: str = CONFIG) -> str:
        """``<output>/base2new/<role>/<dataset>/shots_<K>/<trainer>/<config>/seed<S>`` (``engine.runs.run_dir``)."""
        return run_dir(self.paths.output, "base2new", role, self.short, shots, trainer, config, seed)

    def shots(self, method: str) -> int:
        """The shots folder of a method's base-to-novel runs (PETR+X: X's, the router is fitted on X's images)."""
        if method.startswith("PETR+"):
            return self.shots(method.removeprefix("PETR+"))
        few_shot = {name: self.plan.coop_shots for name in ("CoOp", "PETRCoOp", *PROMPT_LEARNERS)}
        return {"ZeroshotCLIP": 0, "PromptSRC": self.plan.teacher_shots, "PromptKD": self.plan.student_shots,
                "PETR": self.plan.student_shots, **few_shot}[method]

    def seed_of(self, method: str, seed: int) -> int:
        """The seed whose run a method uses (shared methods: seed 1's)."""
        return self.plan.seeds[0] if method in SHARED else seed

    def method_dirs(self, method: str, seed: int) -> list[str]:
        """The base and novel run folders of a method and seed."""
        trainer, config = method_run(method)
        return [self.run_dir(role, self.shots(method), trainer, self.seed_of(method, seed), config)
                for role in ("train_base", "test_new")]

    # ----- jobs -----------------------------------------------------------------------------------------
    def train_call(self, method: str, out: str, seed: int, subsample: str, opts: Sequence[str] = (),
                   model_dir: str = "") -> TrainCall:
        """``python train.py`` on the demo dataset (base-to-novel): training, or evaluating ``model_dir``."""
        trainer, config = method_run(method)
        argv = ["--root", self.paths.data, "--seed", str(seed), "--trainer", trainer,
                "--dataset-config-file", f"configs/datasets/{self.short}.yaml",
                "--config-file", f"configs/trainers/{trainer}/{config}.yaml", "--output-dir", out]
        if model_dir:
            argv += ["--eval-only", "--model-dir", model_dir]
            if trainer not in NO_CHECKPOINT:
                argv += ["--load-epoch", "last"]
        argv += ["DATASET.NUM_SHOTS", str(self.shots(method)), "DATASET.SUBSAMPLE_CLASSES", subsample,
                 "TRAINER.MODAL", "base2novel", *opts, *self.plan.opts.get(method, ())]
        return TrainCall(tuple(argv))

    def job(self, stage: str, **fields: Any) -> Job:
        """A runner job (``runner.jobs.Job`` fields), recorded under ``stage`` for the time table; it reads the demo's
        data (its digest goes into the job's record, so that regenerated data is not taken for the old)."""
        job = Job(**{"reads": {"demo data": self.plan.data.digest()}, **fields})
        self.stages[job.name] = stage
        return job

    def train_py(self, method: str, role: str, seed: int, stage: str, extra: Sequence[str] = (),
                 model_dir: str = "", deps: Sequence[str] = ()) -> Job:
        """One base-to-novel run in the CoOp layout (training on base, or evaluating ``model_dir`` on novel); finished
        when its run folder is."""
        trainer, config = method_run(method)
        out = self.run_dir(role, self.shots(method), trainer, seed, config)
        subsample, part = ("base", "base") if role == "train_base" else ("new", "novel")
        return self.job(stage, name=f"b2n {method} seed{seed} {part}",
                        kind="test" if model_dir else KINDS.get(trainer, "train"), method=method, dataset=self.short,
                        call=self.train_call(method, out, seed, subsample, extra, model_dir), runs=(out,),
                        deps=tuple(deps), seed=seed, config=config, trainer=trainer)

    def base_and_novel(self, method: str, seed: int, stage: str, extra: Sequence[str] = (),
                       deps: Sequence[str] = ()) -> list[Job]:
        """Train (or evaluate) on the base classes, then evaluate the saved model on the novel classes."""
        base = self.train_py(method, "train_base", seed, stage, extra, deps=deps)
        return [base, self.train_py(method, "test_new", seed, stage, extra, model_dir=base.runs[0], deps=(base.name,))]

    def distill_opts(self, trainer: str) -> tuple[str, ...]:
        """The student CLIP, the teacher CLIP and the shared base-to-novel teacher run of PromptKD / PETR."""
        teacher_run = self.run_dir("train_base", self.plan.teacher_shots, "PromptSRC", self.plan.seeds[0])
        return ("MODEL.BACKBONE.NAME", self.student_clip, f"TRAINER.{trainer.upper()}.TEACHER_NAME", self.teacher_clip,
                f"TRAINER.{trainer.upper()}.TEACHER_CKPT", teacher_run)

    def b2n_jobs(self) -> list[Job]:
        """Zero-shot and teacher once, then CoOp, PromptKD, PETR, PETR+CoOp and each prompt learner X with PETR+X
        (PETRX on X's finished run) for every seed."""
        plan, first = self.plan, self.plan.seeds[0]
        student = ("MODEL.BACKBONE.NAME", self.student_clip)
        jobs = self.base_and_novel("ZeroshotCLIP", first, "base-to-novel: zero-shot", student)
        teacher = self.base_and_novel("PromptSRC", first, "base-to-novel: teacher",
                                      ("MODEL.BACKBONE.NAME", self.teacher_clip))
        jobs += teacher
        for seed in plan.seeds:
            stage = f"base-to-novel: seed {seed}"
            coop = self.base_and_novel("CoOp", seed, stage, student)
            jobs += coop
            for trainer in ("PromptKD", "PETR"):
                jobs += self.base_and_novel(trainer, seed, stage, self.distill_opts(trainer), deps=(teacher[0].name,))
            coop_run = self.run_dir("train_base", plan.coop_shots, "CoOp", seed)
            jobs += self.base_and_novel("PETRCoOp", seed, stage,
                                        (*student, "TRAINER.PETRCOOP.COOP_MODEL_DIR", coop_run), deps=(coop[0].name,))
            for x in PROMPT_LEARNERS:
                learner = self.base_and_novel(x, seed, stage, student)
                jobs += learner
                jobs += self.base_and_novel(f"PETR+{x}", seed, stage, (*student, "TRAINER.PETRX.TUNED_MODEL_DIR",
                                                                       learner[0].runs[0]),
                                            deps=(learner[0].name,))
        return jobs

    def script_env(self) -> dict[str, str]:
        """What a GPU user sets for the xd/dg scripts, pointed at the demo's data, tiny CLIPs and folders."""
        return {"DATA": self.paths.data, "OUTPUT_ROOT": self.paths.output, "CFG": CONFIG, "SOURCE": SOURCE,
                "BACKBONE": self.student_clip, "TEACHER_NAME": self.teacher_clip, "TEACHER_DIR": self.paths.teachers,
                "KD_WEIGHT": self.plan.kd_weight, "PYTHON": sys.executable}

    def script(self, name: str, stage: str, path: str, args: Sequence[str], runs: Sequence[str] = (),
               files: Sequence[str] = (), deps: Sequence[str] = (), env: dict[str, str] | None = None) -> Job:
        """A ``bash scripts/<method>/...`` job with the demo's script environment (the plan's overrides of the
        script's trainer as EXTRA_OPTS); finished when its run folders are and its files exist."""
        trainer = {"teacher": "PromptSRC", "zsclip": "ZeroshotCLIP", "promptkd": "PromptKD", "petr": "PETR"}[
            path.split("/")[1]]
        extra = {"EXTRA_OPTS": " ".join(self.plan.opts[trainer])} if trainer in self.plan.opts else {}
        return self.job(stage, name=name, kind="test" if path.endswith("_test.sh") else KINDS.get(trainer, "train"),
                        method=trainer, dataset=args[0] if trainer != "PromptSRC" else SOURCE,
                        call=UnitCall(path.split("/")[1], os.path.basename(path).removesuffix(".sh"), tuple(args),
                                      {**self.script_env(), **extra, **(env or {})}),
                        runs=tuple(runs), files=tuple(files), deps=tuple(deps), config=CONFIG, trainer=trainer)

    def zeroshot_dir(self, dataset: str) -> str:
        return os.path.join(self.paths.output, "ZeroshotCLIP", CONFIG, dataset)

    def transfer_jobs(self) -> list[Job]:
        """Cross-dataset (DemoNet → DemoCool, DemoSoft, DemoFancy) and DG (DemoNet → V2, Sketch, A, R) runs.

        PETR's test scripts (xd_test.sh / dg_test.sh: the saved model and router evaluated again) run for the first
        seed; they reproduce the training runs' own final evaluation, which the tables read for every seed.
        """
        plan = self.plan
        if not plan.transfer_seeds:
            return []
        teacher_name = "xd teacher"
        source_name = next(name for name, folder in DATASET_DIRS.items() if folder == SOURCE)
        teacher_file = os.path.join(self.paths.teachers, f"{source_name}-xd", "VLPromptLearner", "checkpoint")
        jobs = [self.script(teacher_name, "cross-dataset / DG: teacher", "scripts/teacher/xd_train.sh",
                            [str(plan.transfer_seeds[0])], files=[teacher_file],
                            env={"SHOTS": str(plan.teacher_shots)})]
        for ds in (SOURCE, *plan.xd_targets, *plan.dg_targets):
            jobs.append(self.script(f"zero-shot {ds}", "cross-dataset / DG: zero-shot", "scripts/zsclip/zeroshot.sh",
                                    [ds, CONFIG], runs=[self.zeroshot_dir(ds)]))
        for seed in plan.transfer_seeds:
            stage = f"cross-dataset / DG: seed {seed}"
            retest = seed == plan.transfer_seeds[0]
            for ds in (SOURCE, *plan.xd_targets):
                jobs.append(self.script(f"PromptKD xd {ds} seed{seed}", stage, "scripts/promptkd/xd_train.sh",
                                        [ds, str(seed)], runs=[self.transfer_run("xd/train", ds, "PromptKD", seed)],
                                        deps=(teacher_name,)))
                jobs += self.petr_transfer("xd", ds, seed, stage, teacher_name, retest)
            for ds in plan.dg_targets:
                jobs.append(self.script(f"PromptKD dg {ds} seed{seed}", stage, "scripts/promptkd/xd_test.sh",
                                        [ds, str(seed)], runs=[self.transfer_run("xd/test", ds, "PromptKD", seed)],
                                        deps=(f"PromptKD xd {SOURCE} seed{seed}",)))
                jobs += self.petr_transfer("dg", ds, seed, stage, teacher_name, retest)
        return jobs

    def petr_transfer(self, protocol: str, dataset: str, seed: int, stage: str, teacher_job: str,
                      retest: bool) -> list[Job]:
        """PETR's ``<protocol>_train.sh`` run, and its ``<protocol>_test.sh`` re-evaluation when ``retest``."""
        train = f"PETR {protocol} {dataset} seed{seed}"
        jobs = [self.script(train, stage, f"scripts/petr/{protocol}_train.sh", [dataset, str(seed)],
                            runs=[self.transfer_run(f"{protocol}/train", dataset, "PETR", seed)], deps=(teacher_job,))]
        if retest:
            jobs.append(self.script(f"PETR {protocol} test {dataset} seed{seed}", stage,
                                    f"scripts/petr/{protocol}_test.sh", [dataset, str(seed)],
                                    runs=[self.transfer_run(f"{protocol}/test", dataset, "PETR", seed)], deps=(train,)))
        return jobs

    def transfer_run(self, protocol_role: str, dataset: str, trainer: str, seed: int) -> str:
        """Folder of an xd/dg script run (SHOTS 0): ``<output>/<xd|dg>/<train|test>/<dataset>/shots_0/<T>/demo/
        seed<S>``."""
        protocol, role = protocol_role.split("/")
        return run_dir(self.paths.output, protocol, role, dataset, 0, trainer, CONFIG, seed)

    def result(self, protocol_role: str, dataset: str, trainer: str, seed: int) -> str:
        """results.json of an xd/dg script run (:meth:`transfer_run`)."""
        return os.path.join(self.transfer_run(protocol_role, dataset, trainer, seed), RESULTS)

    # ----- stages ---------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Write the datasets and pretrain (or find cached) the tiny CLIPs."""
        start = self.clock()
        self.header(f"Demo data under {self.paths.data}")
        generate(self.paths.data, self.plan.data)
        self.prepare_times.append(["data", "", "", self.clock() - start, ""])
        start = self.clock()
        import torch

        torch.set_num_threads(PRETRAIN_THREADS)
        self.header("Tiny CLIP for the students")
        self.student_clip = clip_file(self.plan.student, self.paths.cache)
        if self.plan.teacher is None:
            self.teacher_clip = self.student_clip
            print("The teacher's prompts are learned on the same tiny CLIP")
        else:
            self.header("Tiny CLIP for the teacher")
            self.teacher_clip = clip_file(self.plan.teacher, self.paths.cache)
        self.prepare_times.append(["tiny CLIPs", "", "", self.clock() - start, ""])

    def run_jobs(self, jobs: Sequence[Job], log_dir: str) -> Report:
        """Run ``jobs`` on the runner's CPU slots (``workers`` at once, ``threads`` torch threads each), skipping
        finished ones; a failed job is reported with its log's tail and only the jobs that need it are not run."""
        check_graph(jobs)
        executor = LocalExecutor([], cpu_jobs=max(1, self.workers), threads=self.threads)
        self.header(f"{len(jobs)} runs on {executor.describe()} (logs in {log_dir})")
        try:
            return run_plan(jobs, executor, log_dir)
        finally:
            executor.close()

    def run(self) -> bool:
        """Every stage, then the summary; False (after the failures and the time table) when a run failed."""
        self.prepare()
        outcome = self.run_jobs(self.b2n_jobs() + self.transfer_jobs(), self.paths.logs)
        if outcome.ok:
            self.summary()
        self.header("Time per stage (wall: first start to last end; run s: summed over runs that ran at once)")
        print(report.stage_table(self.prepare_times + stage_times(self.stages, outcome)))
        if not outcome.ok:
            print(failures(outcome))
            return False
        self.header(f"Done in {self.clock():.0f} s; outputs under {self.paths.output}")
        return True

    def collect(self) -> dict[int, report.SeedRows]:
        """``{seed: {trainer: {"base": results.json, "novel": results.json}}}`` of the base-to-novel methods."""
        return {seed: {trainer: {part: read_json(os.path.join(path, RESULTS))
                                 for part, path in zip(("base", "novel"), self.method_dirs(trainer, seed))}
                       for trainer in TABLE_METHODS}
                for seed in self.plan.seeds}

    def summary(self) -> None:
        """The base-to-novel tables, routing, effects and plot; then the cross-dataset and DG tables."""
        self.header("Base-to-novel results (parse_test_res.py b2n; seed means)")
        # Δ relative to the first method (zero-shot CLIP), whatever label parse_test_res gives it
        parse_test_res.main(["b2n", self.paths.base2new, "--methods", *map(method_pattern, TABLE_METHODS)])
        per_seed = self.collect()
        self.header(f"Base-to-novel over seeds {', '.join(map(str, self.plan.seeds))}")
        print(report.b2n_stats_table(per_seed, TABLE_METHODS))
        print("Zero-shot CLIP is deterministic and the teacher is shared: both ran once (seed "
              f"{self.plan.seeds[0]}).\n")
        print(report.difference_table(per_seed))
        self.header("Routing of PETR, PETR+CoOp and PETR+X (results.json and the saved logits)")
        auroc = {m: [router_auroc(self.method_dirs(m, s), per_seed[s][m]["base"]["lambda"],
                                  per_seed[s][m]["base"]["percentile"]) for s in per_seed]
                 for m in report.ROUTED if m in TABLE_METHODS}
        print(report.routing_table(per_seed, auroc))
        self.header("The paper's effects over seeds")
        chance = 100.0 / per_seed[self.plan.seeds[0]]["ZeroshotCLIP"]["novel"].get("num_eval_classes", 24)
        print(report.effects_table(per_seed, chance))
        self.header("Routing-score plot (tools/plot_routing_scores.py)")
        from tools import plot_routing_scores

        plot_routing_scores.main([*self.method_dirs("PETR", self.plan.seeds[0]), "--out", self.paths.figures])
        if self.plan.transfer_seeds:
            self.transfer_summary()

    def transfer_values(self, targets: Sequence[str], protocol: str, key: str = "accuracy",
                        methods: Sequence[str] = TRANSFER_METHODS) -> dict[str, dict[str, list[float]]]:
        """Per method and dataset (source first), ``key`` of the results over the transfer seeds. The source column
        is the cross-dataset run on the source itself (PromptKD's ImageNet row); PETR's numbers are its training
        runs' final evaluation (the test scripts reproduce them, checked in :meth:`transfer_summary`)."""
        seeds = self.plan.transfer_seeds
        values: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
        for ds in (SOURCE, *targets):
            xd = ds == SOURCE or protocol == "xd"
            runs = {"ZeroshotCLIP": [os.path.join(self.zeroshot_dir(ds), RESULTS)] * len(seeds),
                    "PromptKD": [self.result("xd/train" if xd else "xd/test", ds, "PromptKD", s) for s in seeds],
                    "PETR": [self.result("xd/train" if xd else "dg/train", ds, "PETR", s) for s in seeds]}
            for m in methods:
                values[m][ds] = [read_json(path)[key] for path in runs[m]]
        return values

    def transfer_summary(self) -> None:
        """The cross-dataset and DG tables in the paper's layout, and where PETR's router sent the target images."""
        plan = self.plan
        seeds = ", ".join(map(str, plan.transfer_seeds))
        self.header(f"Cross-dataset transfer (source {SOURCE}; seeds {seeds})")
        print(report.transfer_table("cross-dataset", SOURCE, plan.xd_targets,
                                    self.transfer_values(plan.xd_targets, "xd")))
        self.header(f"Domain generalisation (source {SOURCE}; seeds {seeds})")
        print(report.transfer_table("domain generalisation", SOURCE, plan.dg_targets,
                                    self.transfer_values(plan.dg_targets, "dg")))
        self.header("Share of target test images PETR's router sent to the seen (source-trained) branch")
        share = {**self.transfer_values(plan.xd_targets, "xd", "share_seen", ["PETR"])["PETR"],
                 **self.transfer_values(plan.dg_targets, "dg", "share_seen", ["PETR"])["PETR"]}
        print(report.transfer_table("% to θ_s", SOURCE, (*plan.xd_targets, *plan.dg_targets), {"PETR": share}))
        first = plan.transfer_seeds[0]
        same = all(read_json(self.result(f"{p}/test", ds, "PETR", first))["accuracy"]
                   == read_json(self.result(f"{p}/train", ds, "PETR", first))["accuracy"]
                   for p, targets in (("xd", (SOURCE, *plan.xd_targets)), ("dg", plan.dg_targets)) for ds in targets)
        print(f"xd_test.sh / dg_test.sh (seed {first}) reproduce the training runs' accuracies: "
              f"{'yes' if same else 'NO'}")


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


def method_run(method: str) -> tuple[str, str]:
    """The trainer and config of a table method: PETR+X is PETRX with ``configs/trainers/PETRX/demo_<x>.yaml``."""
    if method.startswith("PETR+"):
        return "PETRX", f"{CONFIG}_{method.removeprefix('PETR+').lower()}"
    return method, CONFIG


def method_pattern(method: str) -> str:
    """The ``parse_test_res.py --methods`` pattern of a table method (``PETRX/demo_<x>`` for PETR+X)."""
    trainer, config = method_run(method)
    return trainer if config == CONFIG else f"{trainer}/{config}"


def clip_file(params: PretrainParams, cache: str) -> str:
    """The cached tiny CLIP of ``params`` under ``cache``, pretrained first when missing."""
    return pretrained_path(params, default_path(params, cache))


def router_auroc(run_dirs: Sequence[str], lam: float, percentile: float) -> float:
    """AUROC (%) of the Mahalanobis scores of novel vs base test images, from the dumps of a routed method's runs."""
    from sklearn.metrics import roc_auc_score

    (unit,) = find_units(run_dirs)
    base, novel, _ = unit_scores(unit, "mahalanobis", lam, percentile)
    labels = [0] * len(base) + [1] * len(novel)
    return 100.0 * float(roc_auc_score(labels, [*base.tolist(), *novel.tolist()]))


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
    parser.add_argument("--quick", action="store_true",
                        help="the reduced demo of the test suite (smaller data, 2 seeds, short pretraining)")
    parser.add_argument("--workdir", default=".", help="folder under which data/demo, output/demo, demo_cache go")
    parser.add_argument("--data", help="dataset root (default $DEMO_DATA or <workdir>/data/demo)")
    parser.add_argument("--output", help="output root (default $DEMO_OUTPUT or <workdir>/output/demo)")
    parser.add_argument("--cache", help="tiny CLIP cache (default $DEMO_CACHE or <workdir>/demo_cache)")
    parser.add_argument("--seeds", type=int, nargs="+", help="base-to-novel seeds (default 1 2 3; --quick: 1 2)")
    parser.add_argument("--transfer-seeds", type=int, nargs="*",
                        help="cross-dataset / DG seeds (default 1; none: skip those protocols)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per run (default 1)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="runs at once (default: 2, or 1 on a one-core machine)")
    args = parser.parse_args(argv)
    paths = default_paths(os.path.abspath(args.workdir), args.data, args.output, args.cache)
    plan = QUICK if args.quick else FULL
    if args.seeds:
        plan = replace(plan, seeds=tuple(args.seeds))
    if args.transfer_seeds is not None:
        plan = replace(plan, transfer_seeds=tuple(args.transfer_seeds))
    return 0 if Demo(plan, paths, args.threads, args.jobs).run() else 1


if __name__ == "__main__":
    sys.exit(main())
