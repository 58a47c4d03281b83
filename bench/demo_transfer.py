"""How much of the teacher's lead over zero-shot CLIP PromptKD's student recovers in the toy world, per design of the
tiny CLIPs (docs/demo.md, "Why distillation transfers little here").

A variant is one design: how the two tiny CLIPs are pretrained, and PromptKD's settings. Each is measured on the
*validation* split only (every val image; no test image is looked at): zero-shot CLIP and the PromptSRC teacher on
the base and novel classes, PromptKD's student per seed, the teacher's lead over zero-shot and the share of it the
student recovers. Two feature-space checks go with it, logistic regressions on the student CLIP's *frozen* image
features of the distillation images, scored on the novel val images: fitted to the teacher's decisions (how much of
the lead the frozen features can express) and to the true labels (what they separate at all; at real scale a linear
probe on ViT-B/16's features is far above its zero-shot accuracy). Variants with the same tiny CLIPs share
their teacher and zero-shot runs. Output: ``<output>/transfer/<CLIPs digest>/``.

Command line: ``python -m bench.demo_transfer [--variants NAME ...] [--seeds 1 2 3] [--jobs N] [--threads N]
[--no-probes]``.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from tabulate import tabulate

from bench.demo_novel_gap import ALL_VAL, VAL, run_key
from demo import report
from demo.pipeline import Paths, failures
from demo.pretrain import SHIPPED, PretrainParams, default_params
from demo.shapes import PRETRAIN, PRETRAIN_RELIT
from demo.study import FULL, RESULTS, Demo, DemoPlan, add_study_options, study_paths
from engine.digests import file_digest
from engine.runs import evaluated_files
from engine.utils import read_json, write_json
from runner.jobs import Job
from units.call import TrainCall

EVAL = (*VAL, *ALL_VAL)
"""Evaluations read every val image (NUM_SHOTS >= 1 would sample CoOp's min(K, 4) per class)."""
PARTS = (("base", "base"), ("novel", "new"))
"""(result name, DATASET.SUBSAMPLE_CLASSES) of the two evaluations of every model."""
PROBES_FILE = "probes-{shots}.json"
"""Probe results per number of distillation images per class."""


def clips(student_steps: int, teacher_steps: int, student_relit: bool = False, teacher_relit: bool = True,
          student: str = "student", seed: int = 1) -> tuple[PretrainParams, PretrainParams]:
    """Student and teacher pretraining with the given steps, each on the neutral or the relit stream, both from
    ``seed`` (another seed: another draw of the same design)."""
    return (PretrainParams(size=student, steps=student_steps, seed=seed,
                           style=PRETRAIN_RELIT if student_relit else PRETRAIN),
            PretrainParams(size="teacher", steps=teacher_steps, seed=seed,
                           style=PRETRAIN_RELIT if teacher_relit else PRETRAIN))


@dataclass(frozen=True)
class Variant:
    """One design: the tiny CLIPs' pretraining and PromptKD's overrides of its demo config."""

    name: str
    what: str
    student: PretrainParams = field(default_factory=lambda: default_params("student"))
    teacher: PretrainParams = field(default_factory=lambda: default_params("teacher"))
    promptkd: tuple[str, ...] = ()

    def plan(self, seeds: Sequence[int]) -> DemoPlan:
        """The demo plan of this design."""
        return replace(FULL, seeds=tuple(seeds), student=self.student, teacher=self.teacher)

    def world(self) -> str:
        """Digest of what the teacher and zero-shot runs depend on (the two tiny CLIPs)."""
        return hashlib.sha256(repr((self.student.digest(), self.teacher.digest())).encode()).hexdigest()[:10]

    def student_key(self) -> str:
        """Folder name of PromptKD's settings within the world (identical settings share runs)."""
        return run_key(self.promptkd)

    def shots(self, plan: DemoPlan) -> int:
        """Distillation images per class: this variant's ``DATASET.NUM_SHOTS``, else the demo's."""
        opts = dict(zip(self.promptkd[::2], self.promptkd[1::2]))
        return int(opts.get("DATASET.NUM_SHOTS", plan.student_shots))


NARROW = clips(400, 500)
WIDE = "student_wide"
WIDE_CLIPS = clips(400, 500, student=WIDE)
ALL_IMAGES = ("DATASET.NUM_SHOTS", "200")
STUDY_EPOCHS = ("OPTIM.MAX_EPOCH", "10")
"""PromptKD's length in a variant that does not set its own: the 32-images-per-class distillation the study started
from (the demo config's 2 epochs are for every train image)."""
VARIANTS: tuple[Variant, ...] = (
    Variant("shipped", "the shipped tiny CLIPs (demo/weights: the wide student and the teacher of 'wide student') "
            "distilled as the demo distils, on every train image for 2 epochs (600 steps)",
            SHIPPED["student"], SHIPPED["teacher"], promptkd=(*ALL_IMAGES, "OPTIM.MAX_EPOCH", "2")),
    Variant("narrow student", "the demo: student vision tower 128 wide (its 8x8x3 patches hold 192 values), "
            "400 steps, neutral stream; teacher 500 steps, relit; PromptKD 10 epochs on 32 images per class", *NARROW),
    Variant("narrow, 20 epochs", "training length: PromptKD 20 epochs (960 steps)", *NARROW,
            promptkd=("OPTIM.MAX_EPOCH", "20")),
    Variant("narrow, 16 tokens", "prompt capacity: 16 visual prompt tokens per block instead of 4", *NARROW,
            promptkd=("TRAINER.PROMPTKD.N_CTX_VISION", "16")),
    Variant("narrow, all images", "distillation data: all 200 train images per class (as PromptKD uses the whole "
            "train set), 2 epochs (600 steps)", *NARROW, promptkd=("DATASET.NUM_SHOTS", "200", "OPTIM.MAX_EPOCH", "2")),
    Variant("wide student", "patch embedding: the student's vision tower 192 wide, as wide as its patch holds values "
            "(else as the demo)", *WIDE_CLIPS),
    Variant("wide, all images, 4 epochs", "the same, 1,200 steps", *WIDE_CLIPS,
            promptkd=(*ALL_IMAGES, "OPTIM.MAX_EPOCH", "4")),
    Variant("wide, 96 images per class", "the wide student distilled on 96 train images per class, 10 epochs "
            "(1,440 steps)", *WIDE_CLIPS, promptkd=("DATASET.NUM_SHOTS", "96", "OPTIM.MAX_EPOCH", "10")),
    Variant("wide, same stream", "the wide student pretrained on the teacher's relit stream, as ViT-B/16 and ViT-L/14 "
            "saw the same data", *clips(400, 500, student_relit=True, student=WIDE)),
    Variant("wide, neutral teacher", "the wide student; the teacher pretrained on the neutral stream too (its lead "
            "then owes nothing to lighting)", *clips(400, 500, teacher_relit=False, student=WIDE)),
    Variant("wide, all images, 10 epochs", "the wide student distilled as PromptKD does at real scale, on every "
            "train image, 10 epochs (3,000 steps)", *WIDE_CLIPS, promptkd=(*ALL_IMAGES, "OPTIM.MAX_EPOCH", "10")),
    Variant("narrow, pretraining seed 2", "the demo's design, both tiny CLIPs pretrained from seed 2 (another draw)",
            *clips(400, 500, seed=2)),
    Variant("wide, pretraining seed 2", "the wide student's design, both tiny CLIPs pretrained from seed 2",
            *clips(400, 500, student=WIDE, seed=2)),
    Variant("wide, seed 2, all images, 2 epochs", "the closest design of seed 1 (all 200 images per class, 2 epochs) "
            "on the seed-2 CLIPs", *clips(400, 500, student=WIDE, seed=2),
            promptkd=(*ALL_IMAGES, "OPTIM.MAX_EPOCH", "2")),
    Variant("wide S800 / T1500", "the wide student pretrained 800 steps (neutral), the teacher 1,500 (relit)",
            *clips(800, 1500, student=WIDE)),
    Variant("wide S800 / T1500, all images, 2 epochs", "the same CLIPs, distilled on all 200 train images per class",
            *clips(800, 1500, student=WIDE), promptkd=(*ALL_IMAGES, "OPTIM.MAX_EPOCH", "2")),
    Variant("wide S800 / neutral T1500, all images, 2 epochs", "a teacher that leads by capacity on the student's "
            "stream: both neutral, the teacher 1,500 steps", *clips(800, 1500, teacher_relit=False, student=WIDE),
            promptkd=(*ALL_IMAGES, "OPTIM.MAX_EPOCH", "2")),
    Variant("narrow S400 / T1500", "a longer-trained teacher only", *clips(400, 1500)),
    Variant("narrow S800 / T1500", "longer pretraining of both (student on the neutral stream)",
            *clips(800, 1500)),
    Variant("narrow S800 / T1500, same stream", "both longer, both on the relit stream",
            *clips(800, 1500, student_relit=True)),
    Variant("narrow S800 / T800, same stream", "same stream and steps (as ViT-B/16 and ViT-L/14 saw the same "
            "samples)", *clips(800, 800, student_relit=True)),
    Variant("narrow S1200 / T2000, same stream", "same stream, much longer",
            *clips(1200, 2000, student_relit=True)),
)


class TransferStudy:
    """Jobs, feature-space checks and table of the variants."""

    def __init__(self, variants: Sequence[Variant], seeds: Sequence[int], paths: Paths, threads: int, workers: int):
        self.variants, self.seeds, self.paths = variants, seeds, paths
        self.threads, self.workers = threads, workers
        self.root = os.path.join(paths.output, "transfer")
        self.demos: dict[str, Demo] = {}

    def demo(self, v: Variant) -> Demo:
        """The prepared demo of ``v``'s tiny CLIPs (the demo's data; runs under ``<output>/transfer/<world>``)."""
        key = v.world()
        if key not in self.demos:
            demo = Demo(v.plan(self.seeds), Paths(self.paths.data, os.path.join(self.root, key), self.paths.cache),
                        self.threads, self.workers)
            demo.prepare()
            self.demos[key] = demo
        return self.demos[key]

    def teacher_dir(self, v: Variant) -> str:
        demo = self.demo(v)
        return demo.run_dir("train_base", demo.plan.teacher_shots, "PromptSRC", self.seeds[0])

    def student_dir(self, v: Variant, seed: int) -> str:
        return os.path.join(self.root, v.world(), "PromptKD", v.student_key(), f"seed{seed}")

    def shared_dir(self, v: Variant, name: str) -> str:
        return os.path.join(self.root, v.world(), "val", name)

    def jobs(self) -> list[Job]:
        """Per pair of CLIPs: the teacher (trained on base) and the val evaluations of zero-shot CLIP and the teacher;
        per variant and seed: PromptKD's student and its val evaluations."""
        jobs: dict[str, Job] = {}

        def add(demo: Demo, stage: str, name: str, kind: str, trainer: str, call: TrainCall, out: str,
                deps: tuple[str, ...] = (), seed: int | None = None) -> None:
            if name not in jobs:
                jobs[name] = demo.job(stage, name=name, kind=kind, method=trainer, dataset=demo.short, call=call,
                                      runs=(out,), deps=deps, seed=seed, trainer=trainer)

        first = self.seeds[0]
        for v in self.variants:
            demo, world = self.demo(v), v.world()
            teacher = f"{world} teacher"
            teacher_run = self.teacher_dir(v)
            add(demo, v.name, teacher, "teacher", "PromptSRC",
                demo.train_call("PromptSRC", teacher_run, first, "base", ("MODEL.BACKBONE.NAME", demo.teacher_clip)),
                teacher_run)
            for part, subsample in PARTS:
                out = self.shared_dir(v, f"zeroshot_{part}")
                add(demo, v.name, f"{world} zero-shot {part}", "zero-shot", "ZeroshotCLIP", demo.train_call(
                    "ZeroshotCLIP", out, first, subsample, ("MODEL.BACKBONE.NAME", demo.student_clip, *EVAL)), out)
                out = self.shared_dir(v, f"teacher_{part}")
                add(demo, v.name, f"{teacher} {part}", "test", "PromptSRC", demo.train_call(
                    "PromptSRC", out, first, subsample, ("MODEL.BACKBONE.NAME", demo.teacher_clip, *EVAL),
                    model_dir=teacher_run), out, (teacher,))
            distill = (*demo.distill_opts("PromptKD"), *STUDY_EPOCHS, *v.promptkd)
            for seed in self.seeds:
                run = self.student_dir(v, seed)
                name = f"{world} PromptKD {v.student_key()} seed{seed}"
                train = os.path.join(run, "train")
                add(demo, v.name, name, "train", "PromptKD",
                    demo.train_call("PromptKD", train, seed, "base", (*distill, *VAL)), train, (teacher,), seed)
                for part, subsample in PARTS:
                    out = os.path.join(run, f"val_{part}")
                    add(demo, v.name, f"{name} {part}", "test", "PromptKD", demo.train_call(
                        "PromptKD", out, seed, subsample, (*distill, *EVAL), model_dir=train), out, (name,), seed)
        return list(jobs.values())

    def accuracy(self, folder: str) -> float:
        return read_json(os.path.join(folder, RESULTS))["accuracy"]

    def probe_inputs(self, v: Variant) -> dict:
        """What the probes of ``v`` read: both CLIP files, the teacher's checkpoints, the data and the images per
        class (digests)."""
        demo = self.demo(v)
        return {"student_clip": file_digest(demo.student_clip), "teacher_clip": file_digest(demo.teacher_clip),
                "teacher": [file_digest(f) for f in evaluated_files(self.teacher_dir(v), "last")],
                "data": demo.plan.data.digest(), "shots": v.shots(demo.plan)}

    def probes(self, v: Variant) -> dict[str, float]:
        """Novel val accuracy (%) of the two linear probes of ``v``'s student CLIP on its distillation images, cached
        in the world's folder per number of images with the digests of what they read; fitted again (and said so)
        when those differ."""
        inputs = self.probe_inputs(v)
        path = os.path.join(self.root, v.world(), "val", PROBES_FILE.format(shots=inputs["shots"]))
        cached = read_json(path) if os.path.isfile(path) else None
        if cached is not None and cached.get("inputs") == inputs:
            return cached["accuracy"]
        if cached is not None:
            print(f"{path} was fitted on other CLIPs, teacher checkpoints or data: fitting the probes again")
        demo = self.demo(v)
        accuracy = linear_probes(demo.student_clip, demo.teacher_clip, self.teacher_dir(v),
                                 replace(demo.plan, student_shots=inputs["shots"]))
        write_json({"inputs": inputs, "accuracy": accuracy}, path)
        return accuracy

    def row(self, v: Variant, probes: bool) -> list:
        """One table row: val accuracies, the teacher's lead and the recovered shares."""
        zs = {p: self.accuracy(self.shared_dir(v, f"zeroshot_{p}")) for p, _ in PARTS}
        teacher = {p: self.accuracy(self.shared_dir(v, f"teacher_{p}")) for p, _ in PARTS}
        kd = {p: [self.accuracy(os.path.join(self.student_dir(v, s), f"val_{p}")) for s in self.seeds]
              for p, _ in PARTS}
        lead = {p: teacher[p] - zs[p] for p, _ in PARTS}
        recovered = {p: [100 * (a - zs[p]) / lead[p] for a in kd[p]] for p, _ in PARTS}
        row = [v.name, f"{zs['base']:.2f} / {zs['novel']:.2f}", f"{teacher['base']:.2f} / {teacher['novel']:.2f}",
               f"{lead['novel']:.2f}", report.mean_std(kd["novel"]), f"{report.mean_std(recovered['novel'])} %",
               f"{report.mean_std(recovered['base'])} %"]
        if probes:
            p = self.probes(v)
            row += [f"{100 * (p['teacher_labels'] - zs['novel']) / lead['novel']:.0f} %", f"{p['true_labels']:.2f}"]
        return row

    def table(self, probes: bool = True) -> str:
        headers = ["variant", "zero-shot base / novel", "teacher base / novel", "teacher lead (novel)",
                   "PromptKD novel", "recovered (novel)", "recovered (base)"]
        if probes:
            headers += ["linear on teacher (novel)", "linear on labels (novel)"]
        notes = "\n".join(f"{v.name}: {v.what}" for v in self.variants)
        return (tabulate([self.row(v, probes) for v in self.variants], headers=headers)
                + f"\nval split (every image), seeds {', '.join(map(str, self.seeds))}, mean ± sample std; recovered ="
                  " (PromptKD − zero-shot) / (teacher − zero-shot) per seed; linear on teacher = a logistic regression"
                  " on the frozen student features of the distillation images fitted to the teacher's decisions, its"
                  " novel gain as a share of the lead; linear on labels = the same fitted to the true labels, its"
                  f" novel accuracy.\n{notes}")


def linear_probes(student_clip: str, teacher_clip: str, teacher_run: str, plan: DemoPlan) -> dict[str, float]:
    """Novel val accuracy (%) of logistic regressions on the frozen student CLIP's image features of the
    distillation images (PromptKD's ``student_shots`` train images per class), fitted to the teacher's decisions
    and to the true labels; scored as the trainers score novel classes (argmax over the novel classes only)."""
    import torch
    import torch.nn.functional as F
    from sklearn.linear_model import LogisticRegression

    import clip
    from demo.shapes import CLASSNAMES, label_order, render_split, to_model_input
    from trainers.distillation.teacher import build_teacher

    order = label_order(plan.dataset)
    to_label = np.empty(len(order), dtype=int)
    to_label[order] = np.arange(len(order))
    train, train_canonical = render_split("train", plan.data, plan.student_shots, plan.dataset)
    val, val_canonical = render_split("val", plan.data, None, plan.dataset)
    student = clip.load_model(student_clip)
    teacher = build_teacher(teacher_clip, teacher_run, [CLASSNAMES[k] for k in order], "cpu")

    @torch.no_grad()
    def encode(fn, images: np.ndarray) -> torch.Tensor:
        return torch.cat([fn(to_model_input(images[i:i + 256])).float() for i in range(0, len(images), 256)])

    features = F.normalize(encode(student.encode_image, train), dim=-1).numpy()
    val_features = F.normalize(encode(student.encode_image, val), dim=-1).numpy()
    labels = to_label[val_canonical]
    novel = np.arange((len(order) + 1) // 2, len(order))
    keep = np.isin(labels, novel)

    def novel_accuracy(targets: np.ndarray) -> float:
        probe = LogisticRegression(max_iter=3000, C=10.0).fit(features, targets)
        scores = np.full((len(val), len(order)), -np.inf)
        scores[:, probe.classes_] = probe.decision_function(val_features)
        predicted = novel[scores[keep][:, novel].argmax(axis=1)]
        return 100.0 * float(np.mean(predicted == labels[keep]))

    teacher_labels = (encode(teacher.encode_image, train) @ teacher.text_features.t()).argmax(dim=1).numpy()
    return {"teacher_labels": novel_accuracy(teacher_labels), "true_labels": novel_accuracy(to_label[train_canonical])}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the study."""
    parser = argparse.ArgumentParser(description="How much of the teacher's lead PromptKD's student recovers in the "
                                                 "toy world, per design (docs/demo.md).")
    parser.add_argument("--variants", nargs="+", choices=[v.name for v in VARIANTS], metavar="NAME",
                        help="variants to run (default: shipped, the demo's design): "
                             + "; ".join(v.name for v in VARIANTS))
    add_study_options(parser)
    parser.add_argument("--no-probes", action="store_true", help="leave out the two linear-probe columns")
    args = parser.parse_args(argv)
    paths = study_paths(args.workdir)
    chosen = args.variants or ["shipped"]
    variants = [v for v in VARIANTS if v.name in chosen]
    study = TransferStudy(variants, args.seeds, paths, args.threads, args.jobs)
    jobs = study.jobs()
    outcome = study.demo(variants[0]).run_jobs(jobs, os.path.join(study.root, "logs"))
    if not outcome.ok:
        print(failures(outcome))
        return 1
    print(study.table(not args.no_probes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
