"""Why PETR's unseen student trailed PromptKD's student on the demo's novel classes: the experiments of docs/demo.md
(what was tried, numbers), reproducible.

Each variant changes settings that PromptKD and PETR share (applied to both) or the steps each student gets, and
is measured on the *validation* split only (the full val split, 20 images per class; no test image is looked at):
PromptKD's student and PETR's unseen branch alone on the novel classes, and Base / Novel / HM of both methods. The
teacher, tiny CLIPs and data are the demo's (run ``make demo`` first, or this module prepares them).
Runs with identical settings are shared between variants. Output: ``<output>/novel_gap/<trainer>/<key>/seed<S>``.

Command line: ``python -m bench.demo_novel_gap [--variants NAME ...] [--seeds 1 2 3] [--jobs N] [--threads N]``.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from tabulate import tabulate

from analysis.stats import harmonic_mean
from demo import report
from demo.pipeline import failures
from demo.study import PLAN, RESULTS, Demo, add_study_options, study_paths
from engine.utils import read_json
from runner.jobs import Job

VAL = ("TEST.SPLIT", "val")
ALL_VAL = ("DATASET.NUM_SHOTS", "0")
"""Evaluation runs read every val image (NUM_SHOTS >= 1 would sample CoOp's min(K, 4) per class)."""


@dataclass(frozen=True)
class Variant:
    """Overrides of PromptKD's and PETR's demo configs."""

    name: str
    what: str
    promptkd: tuple[str, ...]
    petr: tuple[str, ...]


def epochs(promptkd: int, petr: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """MAX_EPOCH of PromptKD and of PETR (an epoch of each PETR student walks its half of the train images)."""
    return ("OPTIM.MAX_EPOCH", str(promptkd)), ("OPTIM.MAX_EPOCH", str(petr))


def same_for_both(key: str, value: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """One setting for both methods, at the demo's epochs; ``key`` is a full config key, or a name in the trainers'
    own ``TRAINER.<NS>`` namespace."""
    if "." in key:
        return (key, value), (key, value)
    return (f"TRAINER.PROMPTKD.{key}", value), (f"TRAINER.PETR.{key}", value)


VARIANTS: tuple[Variant, ...] = (
    Variant("demo settings", "every train image, PromptKD 2 epochs (600 steps on 9,600 images), PETR 4 (each student "
            "600 steps on its 4,800, as the paper's ep40 vs ep20)", (), ()),
    Variant("half the steps", "PETR 2 epochs: θ_u 300 steps, half of PromptKD's", *epochs(2, 2)),
    Variant("KD temperature 2", "τ = 2 for both", *same_for_both("TEMPERATURE", "2.0")),
    Variant("KD weight 1000", "α = 1000 for both (PromptKD's)", *same_for_both("KD_WEIGHT", "1000.0")),
    Variant("LR 0.01", "learning rate 0.01 for both", *same_for_both("OPTIM.LR", "0.01")),
    Variant("LR 0.001", "learning rate 0.001 for both", *same_for_both("OPTIM.LR", "0.001")),
)
DEFAULT_VARIANTS = ("demo settings", "half the steps")
"""What a run without ``--variants`` measures (the others: about 4 min each on 2 cores)."""


def run_key(opts: Sequence[str]) -> str:
    """Folder name of a run's settings (identical settings share runs)."""
    return hashlib.sha256(repr(tuple(opts)).encode()).hexdigest()[:10]


class NovelGap:
    """Jobs and table of the variants."""

    def __init__(self, demo: Demo, variants: Sequence[Variant], seeds: Sequence[int]):
        self.demo, self.variants, self.seeds = demo, variants, seeds
        self.root = os.path.join(demo.paths.output, "novel_gap")

    def run_dir(self, trainer: str, opts: Sequence[str], seed: int) -> str:
        return os.path.join(self.root, trainer, run_key(opts), f"seed{seed}")

    def jobs(self, teacher_job: str) -> list[Job]:
        """Training (final evaluation on val) and two full-val evaluations (base, novel) per trainer, setting, seed."""
        jobs: dict[str, Job] = {}
        for v in self.variants:
            for trainer, opts in (("PromptKD", v.promptkd), ("PETR", v.petr)):
                for seed in self.seeds:
                    run = self.run_dir(trainer, opts, seed)
                    train = os.path.join(run, "train")
                    name = f"{trainer} {run_key(opts)} seed{seed}"
                    distill = (*self.demo.distill_opts(trainer), *VAL)
                    call = self.demo.train_call(trainer, train, seed, "base", (*distill, *opts))
                    jobs[name] = self.demo.job(v.name, name=name, kind="train", method=trainer,
                                               dataset=self.demo.short, call=call, runs=(train,), deps=(teacher_job,),
                                               seed=seed, trainer=trainer)
                    for part, subsample in (("val_base", "base"), ("val_new", "new")):
                        out = os.path.join(run, part)
                        call = self.demo.train_call(trainer, out, seed, subsample, (*distill, *opts, *ALL_VAL),
                                                    model_dir=train)
                        jobs[f"{name} {part}"] = self.demo.job(
                            v.name, name=f"{name} {part}", kind="test", method=trainer, dataset=self.demo.short,
                            call=call, runs=(out,), deps=(name,), seed=seed, trainer=trainer)
        return list(jobs.values())

    def read(self, trainer: str, opts: Sequence[str], seed: int) -> dict[str, dict]:
        run = self.run_dir(trainer, opts, seed)
        return {"base": read_json(os.path.join(run, "val_base", RESULTS)),
                "novel": read_json(os.path.join(run, "val_new", RESULTS))}

    def table(self) -> str:
        """Per variant, mean ± std over seeds on the val split: novel accuracy of PromptKD's student and of θ_u
        alone, their per-seed difference, and both methods' HM."""
        rows = []
        for v in self.variants:
            kd = [self.read("PromptKD", v.promptkd, s) for s in self.seeds]
            petr = [self.read("PETR", v.petr, s) for s in self.seeds]
            kd_novel = [r["novel"]["accuracy"] for r in kd]
            theta_u = [r["novel"]["acc_unseen_branch"] for r in petr]
            kd_hm = [harmonic_mean(r["base"]["accuracy"], r["novel"]["accuracy"]) for r in kd]
            petr_hm = [harmonic_mean(r["base"]["accuracy"], r["novel"]["accuracy"]) for r in petr]
            rows.append([v.name, report.mean_std(kd_novel), report.mean_std(theta_u),
                         report.mean_std([u - k for u, k in zip(theta_u, kd_novel)]), report.mean_std(kd_hm),
                         report.mean_std(petr_hm), report.mean_std([p - k for p, k in zip(petr_hm, kd_hm)])])
        headers = ["variant", "PromptKD novel", "θ_u novel", "Δ novel", "PromptKD HM", "PETR HM", "Δ HM"]
        notes = "\n".join(f"{v.name}: {v.what}" for v in self.variants)
        return (tabulate(rows, headers=headers) + f"\nval split (20 images per class), seeds "
                f"{', '.join(map(str, self.seeds))}, mean ± sample std; Δ = PETR − PromptKD per seed.\n{notes}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the experiments."""
    parser = argparse.ArgumentParser(description="Why the unseen student trails PromptKD on novel (docs/demo.md).")
    parser.add_argument("--variants", nargs="+", choices=[v.name for v in VARIANTS], metavar="NAME",
                        help=f"variants to run (default: {', '.join(DEFAULT_VARIANTS)}): "
                             + "; ".join(v.name for v in VARIANTS))
    add_study_options(parser)
    args = parser.parse_args(argv)
    paths = study_paths(args.workdir)
    demo = Demo(PLAN, paths, args.threads, args.jobs)
    demo.prepare()
    teacher = demo.teacher_job()
    variants = [v for v in VARIANTS if v.name in (args.variants or DEFAULT_VARIANTS)]
    gap = NovelGap(demo, variants, args.seeds)
    outcome = demo.run_jobs([teacher, *gap.jobs(teacher.name)], os.path.join(gap.root, "logs"))
    if not outcome.ok:
        print(failures(outcome))
        return 1
    print(gap.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
