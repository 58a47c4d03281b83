"""The built-in demo end to end: data → tiny CLIPs → teacher → students → routed evaluation → tables and a plot.

Every training and evaluation stage is a ``train.py`` run with the command line a researcher would type (printed
before it runs; executed in this process through ``train.main`` so the imports are paid once), written in the
CoOp layout ``<output>/base2new/{train_base,test_new}/<dataset>/shots_<K>/<TRAINER>/<cfg>/seed<S>``
(docs/ARCHITECTURE.md).
A stage whose ``results.json`` exists is skipped, so a rerun only does what is missing. The summary is
``parse_test_res.py b2n`` (Base / Novel / HM), a routing table read from the PETR runs' ``results.json``, a list of
the effects the PETR paper describes with the measured numbers, and ``tools/plot_routing_scores.py`` on the PETR run.

Command line: ``python -m demo.pipeline [--quick] [--workdir DIR] [--data DIR] [--output DIR] [--cache DIR]``.
Environment: ``DEMO_DATA``, ``DEMO_OUTPUT``, ``DEMO_CACHE`` (the same as the flags; flags win).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from tabulate import tabulate

import parse_test_res
from analysis.dumps import find_units, unit_scores
from analysis.stats import harmonic_mean
from demo.pretrain import PretrainParams, default_params, default_path, pretrained_path
from demo.shapes import DATASET_DIRS, DEFAULT_PARAMS, GenParams, generate
from engine.checkpoint import pointed_checkpoint
from engine.utils import read_json

CONFIG = "demo"
"""Name of the demo configs: ``configs/trainers/<TRAINER>/demo.yaml``."""
TABLE_METHODS = ("ZeroshotCLIP", "CoOp", "PromptKD", "PETR", "PETRCoOp")
ROUTED = ("PETR", "PETRCoOp")
RESULTS = "results.json"


@dataclass(frozen=True)
class DemoPlan:
    """What the demo builds: data and tiny-CLIP parameters, shots per stage, per-trainer config overrides."""

    dataset: str = "DemoShapesHard"
    seed: int = 1
    data: GenParams = DEFAULT_PARAMS
    student: PretrainParams = field(default_factory=lambda: default_params("student"))
    teacher: PretrainParams | None = field(default_factory=lambda: default_params("teacher"))
    """None: the teacher's PromptSRC prompts are learned on the student CLIP itself (one pretraining)."""
    teacher_shots: int = 16
    coop_shots: int = 16
    student_shots: int = 32
    """Images per class for PromptKD (all classes, unlabelled) and PETR (labelled base, unlabelled novel)."""
    opts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Extra ``KEY VALUE`` overrides per trainer, appended after the demo config (e.g. fewer epochs)."""


FULL = DemoPlan()
QUICK = DemoPlan(
    data=GenParams(train_per_class=40, val_per_class=2, test_per_class=20),
    student=replace(default_params("student"), steps=150),
    teacher=None,
    teacher_shots=8, coop_shots=8, student_shots=16,
    opts={"PromptSRC": ("OPTIM.MAX_EPOCH", "3"), "CoOp": ("OPTIM.MAX_EPOCH", "10"),
          "PromptKD": ("OPTIM.MAX_EPOCH", "3"), "PETR": ("OPTIM.MAX_EPOCH", "5")},
)
"""The reduced demo of the test suite: fewer images, a short pretraining shared by teacher and students."""


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


class Demo:
    """Runs the stages of a :class:`DemoPlan`, printing a header with the elapsed time before each."""

    def __init__(self, plan: DemoPlan, paths: Paths):
        if plan.dataset not in DATASET_DIRS:
            raise ValueError(f"unknown demo dataset {plan.dataset!r}; choose one of {', '.join(DATASET_DIRS)}")
        self.plan, self.paths = plan, paths
        self.short = DATASET_DIRS[plan.dataset]  # its folder = the stem of its yaml, as scripts name datasets
        self.dataset_yaml = f"configs/datasets/{self.short}.yaml"
        self.start = time.time()
        self.student_clip = self.teacher_clip = ""

    # ----- bookkeeping ----------------------------------------------------------------------------------
    def header(self, text: str) -> None:
        elapsed = time.time() - self.start
        print(f"\n==> [{int(elapsed // 60):02d}:{int(elapsed % 60):02d}] {text}", flush=True)

    def run_dir(self, role: str, shots: int, trainer: str) -> str:
        """``<output>/base2new/<role>/<dataset>/shots_<K>/<trainer>/demo/seed<S>`` (docs/ARCHITECTURE.md)."""
        return os.path.join(self.paths.base2new, role, self.short, f"shots_{shots}", trainer, CONFIG,
                            f"seed{self.plan.seed}")

    def train_py(self, trainer: str, run_dir: str, subsample: str, shots: int, opts: Sequence[str] = (),
                 model_dir: str = "") -> dict:
        """One ``train.py`` run (skipped when its results.json exists); returns its results.json."""
        result = os.path.join(run_dir, RESULTS)
        if os.path.isfile(result):
            print(f"Finished before, skipping: {run_dir}")
            return read_json(result)
        argv = ["--root", self.paths.data, "--seed", str(self.plan.seed), "--trainer", trainer,
                "--dataset-config-file", self.dataset_yaml,
                "--config-file", f"configs/trainers/{trainer}/{CONFIG}.yaml", "--output-dir", run_dir]
        if model_dir:
            argv += ["--eval-only", "--model-dir", model_dir, *load_epoch_args(model_dir)]
        argv += ["DATASET.NUM_SHOTS", str(shots), "DATASET.SUBSAMPLE_CLASSES", subsample,
                 "TRAINER.MODAL", "base2novel", *opts, *self.plan.opts.get(trainer, ())]
        print(f"$ python train.py {shlex.join(argv)}", flush=True)
        import train

        train.main(argv)
        if not os.path.isfile(result):
            raise RuntimeError(f"train.py finished without writing {result}; see {run_dir}/log.txt")
        return read_json(result)

    def base_and_novel(self, title: str, trainer: str, shots: int, opts: Sequence[str] = (),
                       train_opts: Sequence[str] = ()) -> tuple[dict, dict]:
        """Train (or evaluate) on the base classes, then evaluate the saved model on the novel classes."""
        self.header(f"{title}: base classes")
        base_dir = self.run_dir("train_base", shots, trainer)
        base = self.train_py(trainer, base_dir, "base", shots, [*opts, *train_opts])
        self.header(f"{title}: novel classes")
        novel_dir = self.run_dir("test_new", shots, trainer)
        novel = self.train_py(trainer, novel_dir, "new", shots, opts, model_dir=base_dir)
        print(f"{title}: base {base['accuracy']:.2f}%, novel {novel['accuracy']:.2f}%")
        return base, novel

    # ----- stages ---------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Write the dataset and pretrain (or find cached) the tiny CLIPs."""
        self.header(f"Demo data ({self.plan.dataset}) under {self.paths.data}")
        generate(self.paths.data, self.plan.data)
        self.header("Tiny CLIP for the students")
        self.student_clip = clip_file(self.plan.student, self.paths.cache)
        if self.plan.teacher is None:
            self.teacher_clip = self.student_clip
            print("The teacher's prompts are learned on the same tiny CLIP")
        else:
            self.header("Tiny CLIP for the teacher")
            self.teacher_clip = clip_file(self.plan.teacher, self.paths.cache)

    def run(self) -> None:
        """Every stage, then the summary."""
        self.prepare()
        plan = self.plan
        student = ("MODEL.BACKBONE.NAME", self.student_clip)
        self.base_and_novel("Zero-shot CLIP", "ZeroshotCLIP", 0, student)
        self.base_and_novel("Teacher: PromptSRC on the teacher CLIP", "PromptSRC", plan.teacher_shots,
                            ("MODEL.BACKBONE.NAME", self.teacher_clip))
        teacher_run = self.run_dir("train_base", plan.teacher_shots, "PromptSRC")
        self.base_and_novel("CoOp", "CoOp", plan.coop_shots, student)
        for trainer, title in (("PromptKD", "PromptKD student"), ("PETR", "PETR (seen + unseen students)")):
            distill = (*student, f"TRAINER.{trainer.upper()}.TEACHER_NAME", self.teacher_clip,
                       f"TRAINER.{trainer.upper()}.TEACHER_CKPT", teacher_run)
            self.base_and_novel(title, trainer, plan.student_shots, distill)
        coop_run = self.run_dir("train_base", plan.coop_shots, "CoOp")
        self.base_and_novel("PETR+CoOp (CoOp context plugged in, router only)", "PETRCoOp", plan.coop_shots,
                            student, ("TRAINER.PETRCOOP.COOP_MODEL_DIR", coop_run))
        self.summary()

    def summary(self) -> None:
        """The base-to-novel table (parse_test_res.py), the routing table, the effects and the plot."""
        self.header("Base-to-novel results (parse_test_res.py b2n)")
        parse_test_res.main(["b2n", self.paths.base2new, "--methods", *TABLE_METHODS, "--baseline", TABLE_METHODS[0]])
        rows = self.collect()
        self.header("Routing of PETR and PETR+CoOp (results.json and the saved logits)")
        auroc = {}
        for trainer in ROUTED:
            base = rows[trainer]["base"]
            auroc[trainer] = router_auroc(self.method_dirs(trainer), base["lambda"], base["percentile"])
        print(routing_table(rows, auroc))
        self.header("The paper's effects in this run")
        print(effects_table(rows))
        self.header("Routing-score plot (tools/plot_routing_scores.py)")
        from tools import plot_routing_scores

        plot_routing_scores.main([*self.method_dirs("PETR"), "--out", self.paths.figures])
        self.header(f"Done in {time.time() - self.start:.0f} s; outputs under {self.paths.output}")

    def shots(self, trainer: str) -> int:
        """The shots folder of a method's runs."""
        return {"ZeroshotCLIP": 0, "PromptSRC": self.plan.teacher_shots, "CoOp": self.plan.coop_shots,
                "PromptKD": self.plan.student_shots, "PETR": self.plan.student_shots,
                "PETRCoOp": self.plan.coop_shots}[trainer]

    def method_dirs(self, trainer: str) -> list[str]:
        """The base and novel run folders of a method."""
        return [self.run_dir(role, self.shots(trainer), trainer) for role in ("train_base", "test_new")]

    def collect(self) -> dict[str, dict[str, dict]]:
        """``{trainer: {"base": results.json, "novel": results.json}}`` of the table's methods."""
        return {trainer: {split: read_json(os.path.join(path, RESULTS))
                          for split, path in zip(("base", "novel"), self.method_dirs(trainer))}
                for trainer in TABLE_METHODS}


def clip_file(params: PretrainParams, cache: str) -> str:
    """The cached tiny CLIP of ``params`` under ``cache``, pretrained first when missing."""
    return pretrained_path(params, default_path(params, cache))


def load_epoch_args(run_dir: str) -> list[str]:
    """``["--load-epoch", "last"]`` when the run saved a checkpoint (none for ZeroshotCLIP, which saves nothing)."""
    if any(pointed_checkpoint(os.path.join(run_dir, name)) for name in os.listdir(run_dir)):
        return ["--load-epoch", "last"]
    return []


def routing_table(rows: dict[str, dict[str, dict]], auroc: dict[str, float]) -> str:
    """Per routed method: routing accuracy on base and novel test samples, the AUROC of its router's scores, and
    each branch alone (Base / Novel / HM) beside the routed HM."""
    table = []
    for trainer in ROUTED:
        base, novel = rows[trainer]["base"], rows[trainer]["novel"]
        table.append([trainer, base.get("route_acc_seen"), novel.get("route_acc_unseen"), auroc.get(trainer),
                      *branch_scores(base, novel, "acc_seen_branch"), *branch_scores(base, novel, "acc_unseen_branch"),
                      harmonic_mean(base["accuracy"], novel["accuracy"])])
    headers = ["method", "route base", "route novel", "AUROC", "θ_s Base", "θ_s Novel", "θ_s HM", "θ_u Base",
               "θ_u Novel", "θ_u HM", "routed HM"]
    return tabulate(table, headers=headers, floatfmt=".2f") + (
        "\nroute base / novel: % of base / novel test samples sent to the seen / unseen branch (threshold λ·P99); "
        "AUROC: how well the router's score separates novel from base test samples whatever the threshold "
        "(100 = perfectly, 50 = not at all); θ_s, θ_u: one branch answering every sample.")


def router_auroc(run_dirs: Sequence[str], lam: float, percentile: float) -> float:
    """AUROC (%) of the Mahalanobis scores of novel vs base test samples, from the dumps of a routed method's runs."""
    from sklearn.metrics import roc_auc_score

    (unit,) = find_units(run_dirs)
    base, novel, _ = unit_scores(unit, "mahalanobis", lam, percentile)
    labels = [0] * len(base) + [1] * len(novel)
    return 100.0 * float(roc_auc_score(labels, [*base.tolist(), *novel.tolist()]))


def branch_scores(base: dict, novel: dict, key: str) -> tuple[float, float, float]:
    """Base, Novel and HM accuracy of one branch answering every sample."""
    b, n = base[key], novel[key]
    return b, n, harmonic_mean(b, n)


def effects(rows: dict[str, dict[str, dict]], chance_novel: float) -> list[tuple[str, bool, str]]:
    """The effects the PETR paper describes, each as (claim, holds, the numbers behind it)."""
    zs, coop, petr = rows["ZeroshotCLIP"], rows["CoOp"], rows["PETR"]
    seen_branch_base = petr["base"]["acc_seen_branch"]
    best_single = max(harmonic_mean(*[petr[s][key] for s in ("base", "novel")])
                      for key in ("acc_seen_branch", "acc_unseen_branch"))
    petr_hm = harmonic_mean(petr["base"]["accuracy"], petr["novel"]["accuracy"])
    route = (petr["base"]["route_acc_seen"], petr["novel"]["route_acc_unseen"])
    return [
        ("zero-shot novel accuracy well above chance", zs["novel"]["accuracy"] > 3 * chance_novel,
         f"{zs['novel']['accuracy']:.2f}% vs chance {chance_novel:.2f}%"),
        ("the seen branch gains on base over zero-shot", seen_branch_base > zs["base"]["accuracy"],
         f"θ_s {seen_branch_base:.2f}% vs zero-shot {zs['base']['accuracy']:.2f}%"),
        ("a base-tuned prompt (CoOp) loses on novel", coop["novel"]["accuracy"] < zs["novel"]["accuracy"],
         f"CoOp {coop['novel']['accuracy']:.2f}% vs zero-shot {zs['novel']['accuracy']:.2f}%"),
        ("PETR routes most base and novel samples right", min(route) >= 80.0,
         f"base {route[0]:.2f}%, novel {route[1]:.2f}%"),
        ("PETR's HM at least that of its better branch", petr_hm >= best_single,
         f"PETR {petr_hm:.2f} vs best single branch {best_single:.2f}"),
    ]


def effects_table(rows: dict[str, dict[str, dict]]) -> str:
    """:func:`effects` as a table (chance level from the number of novel classes)."""
    chance = 100.0 / rows["ZeroshotCLIP"]["novel"].get("num_eval_classes", 24)
    lines = [[claim, "yes" if holds else "NO", numbers] for claim, holds, numbers in effects(rows, chance)]
    return tabulate(lines, headers=["effect", "seen", "numbers"])


def default_paths(workdir: str, data: str | None, output: str | None, cache: str | None) -> Paths:
    """Flags, then DEMO_DATA / DEMO_OUTPUT / DEMO_CACHE, then <workdir>/data/demo, output/demo, demo_cache."""
    def pick(flag: str | None, env: str, default: str) -> str:
        return os.path.abspath(flag or os.environ.get(env) or os.path.join(workdir, default))

    return Paths(pick(data, "DEMO_DATA", os.path.join("data", "demo")),
                 pick(output, "DEMO_OUTPUT", os.path.join("output", "demo")),
                 pick(cache, "DEMO_CACHE", "demo_cache"))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the demo."""
    parser = argparse.ArgumentParser(description="Run the built-in PETR demo on CPU (see README, 'Demo').")
    parser.add_argument("--quick", action="store_true",
                        help="the reduced demo of the test suite (smaller data, short pretraining, 2-4 epochs)")
    parser.add_argument("--workdir", default=".", help="folder under which data/demo, output/demo, demo_cache go")
    parser.add_argument("--data", help="dataset root (default $DEMO_DATA or <workdir>/data/demo)")
    parser.add_argument("--output", help="output root (default $DEMO_OUTPUT or <workdir>/output/demo)")
    parser.add_argument("--cache", help="tiny CLIP cache (default $DEMO_CACHE or <workdir>/demo_cache)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    args = parser.parse_args(argv)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = default_paths(os.path.abspath(args.workdir), args.data, args.output, args.cache)
    os.chdir(repo)  # configs/ paths are relative to the repository root, as for train.py
    if repo not in sys.path:
        sys.path.insert(0, repo)
    torch.set_num_threads(args.threads)
    Demo(QUICK if args.quick else FULL, paths).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
