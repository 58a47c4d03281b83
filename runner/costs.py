"""Projected GPU time of a job: training steps from the dataset sizes and the trainer config, times measured or
estimated per step, plus evaluation and start-up.

Every number here says where it comes from. Step times are the H100 benchmark of docs/throughput.md
(``python tools/benchmark.py train --device cuda ...``, random-weight CLIPs of the real shapes, batch 8); CoOp's
step, evaluation and start-up are what ``tools/measure_costs.py`` measures (its printed block replaces the marked
lines); what no measurement covers is an estimate and marked as one. Besides the runner's profiles (paper, fast),
``upstream`` projects the same jobs at upstream's speed. Projections are for one H100 and ignore data loading (3-5 %
of a step there, docs/throughput.md).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cache

import yaml

from datasets.sizes import PUBLISHED_SIZES, Sizes
from runner.jobs import Job
from units.facts import REPO


@dataclass(frozen=True)
class StepTime:
    ms: float
    source: str
    per_class_ms: float = 0.0
    """Added per class of the job's dataset (upstream PromptKD's teacher text features, recomputed every step)."""

    def at(self, classes: int) -> float:
        """Milliseconds of one step on a dataset of ``classes`` classes."""
        return self.ms + self.per_class_ms * classes

    def describe(self) -> str:
        per_class = f" + {self.per_class_ms} ms per class" if self.per_class_ms else ""
        return f"{self.ms} ms{per_class} ({self.source})"


# Measured by ``python tools/measure_costs.py --device cuda --model vit_b16``: paste its block over these lines.
COOP_STEP = StepTime(20.0, "estimate, not measured: a ViT-B/16 forward of 32 images without gradients and the text "
                           "tower's forward and backward over the base classes")
EVAL_MS_PER_IMAGE = {"ViT-B/16": 0.3, "ViT-B/16 x2": 0.6, "ViT-L/14": 1.0}
EVAL_SOURCE = ("estimate, not measured: one test image's forward at batch 100, loading included (8 loader workers "
               "decode a 224 px JPEG in 1.6 ms of one core each, docs/throughput.md)")
JOB_OVERHEAD_S = 60.0
JOB_OVERHEAD_SOURCE = ("estimate, not measured: start-up of a run (imports, CLIP weights, dataset listing, text "
                       "features)")
# End of the measured block.

TEACHER_TEXT_MS_PER_CLASS = 0.047
"""Estimate, not measured: the ViT-L/14 teacher's prompted text tower over one class name, the forward upstream
PromptKD repeats for every class at every step. Derived from the bf16 ViT-L/14 image forward below (0.57 ms per
image) and the towers' FLOPs: 12 layers of 77 tokens at width 768 against 24 layers of 257 tokens at width 1024,
13.3 / 161.7 GFLOPs, so 0.57 x 0.082 ms."""
UPSTREAM_SOURCE = ("estimate, not measured: our {trainer} step at the paper profile ({ms} ms, docs/throughput.md) "
                   "plus the teacher's text features of every class, which upstream PromptKD recomputes each step "
                   "(runner/costs.py TEACHER_TEXT_MS_PER_CLASS)")

STEP_MS = {
    ("PETR", "paper"): StepTime(38.4, "docs/throughput.md GPU table: PETR 2 students (8 + 8), fp16, teacher cache off"),
    ("PETR", "fast"): StepTime(20.4, "docs/throughput.md GPU table: PETR 2 students (8 + 8), bf16 + compile, cache on"),
    ("PromptKD", "paper"): StepTime(31.5, "docs/throughput.md GPU table: PromptKD (8), fp16, teacher cache off"),
    ("PromptKD", "fast"): StepTime(10.3, "docs/throughput.md GPU table: PromptKD (8), bf16 + compile, cache on"),
    ("PromptSRC", "paper"): StepTime(43.3, "docs/throughput.md GPU table: PromptSRC teacher ViT-L/14 (8), fp16"),
    ("PromptSRC", "fast"): StepTime(43.3, "docs/throughput.md GPU table: PromptSRC teacher ViT-L/14 (8), fp16 (the "
                                          "fast profile keeps the teacher's step)"),
    ("CoOp", "paper"): COOP_STEP,
    ("CoOp", "fast"): StepTime(COOP_STEP.ms, f"as paper: CoOp is not compiled; {COOP_STEP.source}"),
}
"""Milliseconds per training step on one H100 at the shipped batch size, per trainer and profile."""
_KD_PAPER = STEP_MS["PromptKD", "paper"]
STEP_MS |= {
    ("PromptKD", "upstream"): StepTime(_KD_PAPER.ms, UPSTREAM_SOURCE.format(trainer="PromptKD", ms=_KD_PAPER.ms),
                                       TEACHER_TEXT_MS_PER_CLASS),
    ("PETR", "upstream"): StepTime(2 * _KD_PAPER.ms, "two upstream PromptKD steps (one per student): "
                                   + UPSTREAM_SOURCE.format(trainer="PromptKD", ms=_KD_PAPER.ms),
                                   2 * TEACHER_TEXT_MS_PER_CLASS),
    ("CoOp", "upstream"): StepTime(COOP_STEP.ms, f"the paper profile's step; {COOP_STEP.source}"),
    ("PromptSRC", "upstream"): StepTime(STEP_MS["PromptSRC", "paper"].ms, "the paper profile's step; "
                                        + STEP_MS["PromptSRC", "paper"].source),
}
"""``upstream``: the same jobs at upstream CoOp's, PromptSRC's and PromptKD's speed; PETR's upstream equivalent is
two upstream PromptKD steps per step."""
PROJECTED_PROFILES = ("paper", "fast", "upstream")
"""The columns of the plan's GPU-hours: the runner's two profiles and upstream's code."""
EVAL_MODEL = {"PETR": "ViT-B/16 x2", "PromptSRC": "ViT-L/14"}
"""Evaluation model per trainer (others: one ViT-B/16 forward); PETR runs its two prompt sets in one batched
forward."""
COMPILE_S = {"PETR": 39.0, "PromptKD": 16.0}
"""One-off compilation of the first step under ``TRAIN.COMPILE compile`` (docs/throughput.md, H100 measurement)."""
TEACHER_VIEW_MS = 0.57
"""Teacher (ViT-L/14) forward per image in bf16, derived from the docs/throughput.md GPU table: PromptKD at batch 64
without and with the cache, (65.0 - 28.5) ms / 64 images. A ``views`` cache runs it on 4 views of every cached image."""
CACHE_VIEWS = 4
CACHED_TRAINERS = ("PETR", "PromptKD")


@cache
def trainer_config(trainer: str, config: str) -> dict:
    """configs/trainers/<trainer>/<config>.yaml as read (an empty file: {})."""
    with open(os.path.join(REPO, "configs", "trainers", trainer, f"{config}.yaml")) as f:
        return yaml.safe_load(f) or {}


def config_schedule(trainer: str, config: str) -> tuple[int, int, str]:
    """``(MAX_EPOCH, TRAIN_X batch size, COUNT_ITER)`` of configs/trainers/<trainer>/<config>.yaml."""
    cfg = trainer_config(trainer, config)
    epochs = cfg.get("OPTIM", {}).get("MAX_EPOCH", 0)
    batch = cfg.get("DATALOADER", {}).get("TRAIN_X", {}).get("BATCH_SIZE", 32)
    return int(epochs), int(batch), cfg.get("TRAIN", {}).get("COUNT_ITER", "train_x")


def base_fraction(size: Sizes) -> float:
    """Share of a dataset's images in its base classes (the first ceil(n/2) labels), taken proportional."""
    return math.ceil(size.classes / 2) / size.classes


def train_images(job: Job, protocol: str, shots: int) -> int:
    """Images per epoch of the job's training loop (the loader that counts the iterations)."""
    size = PUBLISHED_SIZES[job.dataset]
    if protocol == "base2new":
        if job.trainer in ("CoOp", "PromptSRC"):
            return shots * math.ceil(size.classes / 2)
        return size.train if job.trainer == "PromptKD" else round(size.train * base_fraction(size))
    if job.trainer == "PromptSRC":  # the source's teacher: shots per class of all its classes
        return shots * size.classes
    target = size.train or size.test  # DG targets: their test images, unlabelled
    return shots * size.classes if shots else target


def eval_images(job: Job, protocol: str) -> int:
    """Test images the job evaluates (plus the router's fit images of a plug-in)."""
    size = PUBLISHED_SIZES[job.dataset]
    if protocol != "base2new":
        return size.test
    base = round(size.test * base_fraction(size))
    if job.kind == "zero-shot":
        return size.test
    if job.kind == "plug-in":
        return size.test + 16 * math.ceil(size.classes / 2)
    return base if job.kind in ("train", "teacher") else size.test - base


def missing_numbers(job: Job, profile: str) -> str:
    """Why ``job`` has no projection: its dataset has no published sizes, or it trains a trainer without a step
    time here; "" when it has one."""
    if job.dataset not in PUBLISHED_SIZES:
        return f"{job.dataset} (no sizes in datasets/sizes.py)"
    if job.kind in ("train", "teacher") and (job.trainer, profile) not in STEP_MS:
        return f"{job.trainer} (no step time in runner/costs.py)"
    return ""


def projected_seconds(job: Job, protocol: str, profile: str) -> float | None:
    """Projected seconds of ``job`` on one H100 in ``profile`` (:data:`PROJECTED_PROFILES`), or None when its
    dataset or trainer has no numbers here (:func:`missing_numbers`)."""
    if missing_numbers(job, profile):
        return None
    seconds = JOB_OVERHEAD_S
    eval_ms = EVAL_MS_PER_IMAGE[EVAL_MODEL.get(job.trainer, "ViT-B/16")]
    seconds += eval_images(job, protocol) * eval_ms / 1000
    if job.kind in ("train", "teacher"):
        step = STEP_MS[job.trainer, profile]
        epochs, batch, _ = config_schedule(job.trainer, job.config)
        shots = int(job.knobs.get("SHOTS", "0"))
        images = train_images(job, protocol, shots)
        classes = PUBLISHED_SIZES[job.dataset].classes
        seconds += epochs * math.ceil(images / batch) * step.at(classes) / 1000
        if profile == "fast":
            seconds += COMPILE_S.get(job.trainer, 0.0)
            if job.trainer in CACHED_TRAINERS:
                seconds += CACHE_VIEWS * images * TEACHER_VIEW_MS / 1000
    return seconds


def projected_hours(jobs: list[Job], protocol: str) -> list[float]:
    """GPU-hours of ``jobs`` in each of :data:`PROJECTED_PROFILES` (jobs without numbers count 0)."""
    return [sum(projected_seconds(j, protocol, p) or 0.0 for j in jobs) / 3600 for p in PROJECTED_PROFILES]
