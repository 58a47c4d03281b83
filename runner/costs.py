"""Projected GPU time of a job: training steps from the dataset sizes and the trainer config, times measured or
estimated per step, plus evaluation and start-up.

Every number here says where it comes from. Step times are the H100 benchmark of docs/throughput.md
(``python tools/benchmark.py train --device cuda ...``, random-weight CLIPs of the real shapes, batch 8); what that
benchmark does not cover is an estimate and marked as one. Projections are for one H100 and ignore data loading
(3-5 % of a step there, docs/throughput.md).
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


STEP_MS = {
    ("PETR", "paper"): StepTime(38.4, "docs/throughput.md GPU table: PETR 2 students (8 + 8), fp16, teacher cache off"),
    ("PETR", "fast"): StepTime(20.4, "docs/throughput.md GPU table: PETR 2 students (8 + 8), bf16 + compile, cache on"),
    ("PromptKD", "paper"): StepTime(31.5, "docs/throughput.md GPU table: PromptKD (8), fp16, teacher cache off"),
    ("PromptKD", "fast"): StepTime(10.3, "docs/throughput.md GPU table: PromptKD (8), bf16 + compile, cache on"),
    ("PromptSRC", "paper"): StepTime(43.3, "docs/throughput.md GPU table: PromptSRC teacher ViT-L/14 (8), fp16"),
    ("PromptSRC", "fast"): StepTime(43.3, "docs/throughput.md GPU table: PromptSRC teacher ViT-L/14 (8), fp16 (the "
                                          "fast profile keeps the teacher's step)"),
    ("CoOp", "paper"): StepTime(20.0, "estimate, not measured: a ViT-B/16 forward of 32 images without gradients "
                                      "and the text tower's forward and backward over the base classes"),
    ("CoOp", "fast"): StepTime(20.0, "estimate, not measured (as paper: CoOp is not compiled)"),
}
"""Milliseconds per training step on one H100 at the shipped batch size, per trainer and profile."""
EVAL_MS_PER_IMAGE = {"ViT-B/16": 0.3, "ViT-B/16 x2": 0.6, "ViT-L/14": 1.0}
"""Estimates, not measured: one test image's forward at batch 100, loading included (8 loader workers decode a
224 px JPEG in 1.6 ms of one core each, docs/throughput.md). PETR runs its two prompt sets in one batched forward."""
EVAL_MODEL = {"PETR": "ViT-B/16 x2", "PromptSRC": "ViT-L/14"}
"""Evaluation model per trainer (others: one ViT-B/16 forward)."""
COMPILE_S = {"PETR": 39.0, "PromptKD": 16.0}
"""One-off compilation of the first step under ``TRAIN.COMPILE compile`` (docs/throughput.md, H100 measurement)."""
TEACHER_VIEW_MS = 0.57
"""Teacher (ViT-L/14) forward per image in bf16, derived from the docs/throughput.md GPU table: PromptKD at batch 64
without and with the cache, (65.0 - 28.5) ms / 64 images. A ``views`` cache runs it on 4 views of every cached image."""
CACHE_VIEWS = 4
JOB_OVERHEAD_S = 60.0
"""Estimate, not measured: start-up of a run (imports, CLIP weights, dataset listing, text features)."""
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
    """Projected seconds of ``job`` on one H100, or None when its dataset or trainer has no numbers here
    (:func:`missing_numbers`)."""
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
        seconds += epochs * math.ceil(images / batch) * step.ms / 1000
        if profile == "fast":
            seconds += COMPILE_S.get(job.trainer, 0.0)
            if job.trainer in CACHED_TRAINERS:
                seconds += CACHE_VIEWS * images * TEACHER_VIEW_MS / 1000
    return seconds
