"""Projected GPU time of a job: training steps from the dataset sizes and the trainer config, times measured or
estimated per step, plus evaluation and start-up, each bounded by the data loader that feeds it.

Every number here says where it comes from. Step times are the H100 benchmark of docs/throughput.md
(``python -m bench.benchmark train --device cuda ...``, random-weight CLIPs of the real shapes, batch 8); CoOp's
step, evaluation and start-up are what ``python -m bench.measure_costs`` measures (its printed block replaces the
marked lines); what no measurement covers is an estimate and marked as one. Besides the runner's profiles (paper,
fast), ``upstream`` projects the same jobs at upstream's speed. Projections are for one H100 fed by ``cpus_per_gpu``
loader processes: a training step takes the longer of the GPU step and the time those cores need to load its images
(the per-core rates of ``python -m bench.benchmark loader``, :data:`LOADER_RATES`, on the job's dataset's typical image
size and its profile's decoder), and so does an evaluated image. The decoded caches (``TEACHER_CACHE_IMAGES``,
``DATALOADER.IMAGE_CACHE_SIDE``) are the user's choice, not a profile's, and load an image in a fraction of the
decoders' time (docs/throughput.md): a projection without them is an upper bound.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cache

import yaml
from tabulate import tabulate

from datasets.sizes import PUBLISHED_SIZES, Sizes
from runner.jobs import Job
from trainers.catalog import METHODS
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


# Measured by ``python -m bench.measure_costs --device cuda --model vit_b16``: paste its block over these lines.
COOP_STEP = StepTime(20.0, "estimate, not measured: a ViT-B/16 forward of 32 images without gradients and the text "
                           "tower's forward and backward over the base classes")
EVAL_MS_PER_IMAGE = {"ViT-B/16": 0.3, "ViT-B/16 x2": 0.6, "ViT-L/14": 1.0}
EVAL_SOURCE = ("estimate, not measured: one test image's forward at batch 100 (its loading is bounded apart, "
               "LOADER_RATES)")
JOB_OVERHEAD_S = 60.0
JOB_OVERHEAD_SOURCE = ("estimate, not measured: start-up of a run (imports, CLIP weights, dataset listing, text "
                       "features)")
# End of the measured block.

# Measured by ``python -m bench.benchmark loader``: paste its block over these lines.
LOADER_SOURCE = "measured: python -m bench.benchmark loader, AMD EPYC, 2 cores, CPU, 1 threads"
LOADER_RATES = {
    "64x64": {"pil": 332, "tensor": 601, "pil test": 440, "tensor test": 709,
              "views build": 143},
    "224x224": {"pil": 330, "tensor": 621, "pil test": 712, "tensor test": 727,
                "views build": 168},
    "500x375": {"pil": 196, "tensor": 335, "pil test": 170, "tensor test": 342,
                "views build": 159},
    "800x600": {"pil": 107, "tensor": 160, "pil test": 81, "tensor test": 139,
                "views build": 70},
    "1600x1200": {"pil": 36, "tensor": 66, "pil test": 28, "tensor test": 72,
                  "views build": 29},
}
# End of the loader block.
CPUS_PER_GPU = 8
"""Default of the runner's ``--cpus-per-gpu``: loader processes per GPU (a common GPU host: 8 to 16 cores per card)."""
IMAGE_SIZES = {
    "imagenet": "500x375", "imagenetv2": "500x375", "imagenet_sketch": "500x375", "imagenet_a": "500x375",
    "imagenet_r": "500x375", "caltech101": "224x224", "oxford_pets": "500x375", "stanford_cars": "800x600",
    "oxford_flowers": "800x600", "food101": "500x375", "fgvc_aircraft": "800x600", "sun397": "800x600",
    "dtd": "500x375", "eurosat": "64x64", "ucf101": "224x224",
}
"""Estimate, not measured on the datasets: the measured size (LOADER_RATES, measured on a shared 2-core machine whose
cores may be slower than a GPU host's: the projection errs towards the loader) nearest each dataset's typical image
(EuroSAT's 64 px tiles; Caltech101 about 300 x 200, UCF101's frames 320 x 240; ImageNet and its variants, Oxford
Pets, Food-101 (512 px at most) and DTD about 500 x 375; Flowers-102 (shorter side 500), Stanford Cars, SUN397 and
FGVC-Aircraft (about 1000 x 700, so its rate is optimistic) about 800 x 600 or more)."""
LOADED_PER_STEP = {"PETR": 2}
"""Images a step loads per image of its batch: PETR loads a labelled and an unlabelled batch (others: 1). Like the
measured tables below, a fact of one trainer's step, kept by name."""

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
CACHED_TRAINERS = {m.trainer for m in METHODS.values() if "teacher_cache" in m.fast}
"""Trainers that build a teacher cache in the fast profile (their catalog rows' ``fast``)."""


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


FEW_SHOT_TRAINERS = {m.trainer for m in METHODS.values() if m.shots}
"""Trainers whose base-to-novel training reads SHOTS images per base class (their catalog rows' ``shots``)."""


def train_images(job: Job, protocol: str, shots: int) -> int:
    """Images per epoch of the job's training loop (the loader that counts the iterations)."""
    size = PUBLISHED_SIZES[job.dataset]
    if protocol == "base2new":
        base = math.ceil(size.classes / 2)
        if job.trainer in FEW_SHOT_TRAINERS:
            return shots * base
        if shots:  # PromptKD's student on SHOTS images of every class, PETR's θ_s on those of the base classes
            return shots * (size.classes if job.trainer == "PromptKD" else base)
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


def loader_path(profile: str, train: bool = True) -> str:
    """The LOADER_RATES path a job's loader runs in ``profile``: PIL (paper and upstream) or the tensor decoder
    (fast; the teacher cache's views are cut from the files too); ``train`` False: the test transform."""
    decoder = "tensor" if profile == "fast" else "pil"
    return decoder if train else f"{decoder} test"


def loader_rate(job: Job, path: str, cpus_per_gpu: int) -> float:
    """Images/s that ``cpus_per_gpu`` loader processes reach on ``path`` for the job's dataset."""
    rates = LOADER_RATES.get(IMAGE_SIZES.get(job.dataset, "500x375")) or next(iter(LOADER_RATES.values()))
    return rates[path] * cpus_per_gpu


@dataclass(frozen=True)
class Projection:
    """Projected seconds of one job and, of its training steps, the GPU's and the loader's shares."""

    seconds: float
    gpu_s: float = 0.0
    """Training steps at the GPU step time alone."""
    loader_s: float = 0.0
    """The same steps at the loader's rate alone."""


def projection(job: Job, protocol: str, profile: str, cpus_per_gpu: int = CPUS_PER_GPU) -> Projection | None:
    """The projection of ``job`` on one H100 fed by ``cpus_per_gpu`` loader processes in ``profile``
    (:data:`PROJECTED_PROFILES`), or None when its dataset or trainer has no numbers here
    (:func:`missing_numbers`). Each training step and evaluated image takes the longer of its GPU time and its
    loading time."""
    if missing_numbers(job, profile):
        return None
    seconds = JOB_OVERHEAD_S
    eval_ms = EVAL_MS_PER_IMAGE[EVAL_MODEL.get(job.trainer, "ViT-B/16")]
    test_ms = 1000 / loader_rate(job, loader_path(profile, train=False), cpus_per_gpu)
    seconds += eval_images(job, protocol) * max(eval_ms, test_ms) / 1000
    if job.kind not in ("train", "teacher"):
        return Projection(seconds)
    step = STEP_MS[job.trainer, profile]
    epochs, batch, _ = config_schedule(job.trainer, job.config)
    shots = int(job.knobs.get("SHOTS", "0"))
    images = train_images(job, protocol, shots)
    loaded = LOADED_PER_STEP.get(job.trainer, 1)
    steps = epochs * math.ceil(images / batch)
    gpu_s = steps * step.at(PUBLISHED_SIZES[job.dataset].classes) / 1000
    loader_s = steps * batch * loaded / loader_rate(job, loader_path(profile), cpus_per_gpu)
    seconds += max(gpu_s, loader_s)
    if profile == "fast":
        seconds += COMPILE_S.get(job.trainer, 0.0)
        if job.trainer in CACHED_TRAINERS:  # PETR caches train_u too, about as many images as train_x
            cached = images * loaded
            seconds += max(CACHE_VIEWS * cached * TEACHER_VIEW_MS / 1000,
                           cached / loader_rate(job, "views build", cpus_per_gpu))
    return Projection(seconds, gpu_s, loader_s)


def projected_seconds(job: Job, protocol: str, profile: str, cpus_per_gpu: int = CPUS_PER_GPU) -> float | None:
    """Projected seconds of ``job`` (:func:`projection`), or None when it has no numbers here."""
    found = projection(job, protocol, profile, cpus_per_gpu)
    return None if found is None else found.seconds


def projected_hours(jobs: list[Job], protocol: str, cpus_per_gpu: int = CPUS_PER_GPU) -> list[float]:
    """GPU-hours of ``jobs`` in each of :data:`PROJECTED_PROFILES` (jobs without numbers count 0)."""
    return [sum(projected_seconds(j, protocol, p, cpus_per_gpu) or 0.0 for j in jobs) / 3600
            for p in PROJECTED_PROFILES]


def bound(jobs: list[Job], protocol: str, profile: str, cpus_per_gpu: int = CPUS_PER_GPU) -> str:
    """What bounds the training steps of ``jobs`` in ``profile``: ``loader x.x`` (the loader needs that many times
    the GPU's time), ``GPU`` (the loader keeps up) or "" (no training step projected)."""
    found = [p for p in (projection(j, protocol, profile, cpus_per_gpu) for j in jobs) if p is not None]
    gpu, loader = sum(p.gpu_s for p in found), sum(p.loader_s for p in found)
    if not gpu:
        return ""
    return f"loader {loader / gpu:.1f}x" if loader > gpu else "GPU"


def method_table(jobs: list[Job], protocol: str, cpus_per_gpu: int = CPUS_PER_GPU) -> str:
    """Per method of ``jobs``: its GPU-hours and what bounds its training steps (:func:`bound`) in each profile."""
    methods = list(dict.fromkeys(j.method for j in jobs))
    rows = [[m, *projected_hours([j for j in jobs if j.method == m], protocol, cpus_per_gpu),
             *(bound([j for j in jobs if j.method == m], protocol, p, cpus_per_gpu) or "-" for p in PROJECTED_PROFILES)]
            for m in methods]
    return tabulate(rows, headers=["method", *(f"GPU-h {p}" for p in PROJECTED_PROFILES),
                                   *(f"bound {p}" for p in PROJECTED_PROFILES)], floatfmt=".1f")
