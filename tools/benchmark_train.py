"""Training throughput for ``benchmark.py train``: full steps, an end-to-end train.py epoch, an ImageNet projection.

* steps: PETR's full step (two students, 8 labelled + 8 unlabelled images, α·KD + CE + α·KD, SGD), PromptKD's (one
  student, 8 images) and the PromptSRC teacher's (deep V+L prompts, gradients through the text tower for all C
  classes), for each precision of ``engine.precision.PRECISIONS``, each ``TRAIN.COMPILE`` mode asked for and the
  teacher cache off / on (on: the teacher's features are looked up, as ``TEACHER_CACHE`` fixed/views do), with
  the first step (compilation included), the median step, images/s and peak GPU memory. Models are random-weight
  CLIPs of the real shapes, built on the target device.
* epoch: ``train.py`` (PETR, the paper's config) on a generated 224 px EuroSAT-layout JPEG tree, timed per epoch
  with its data-loading share (train.py's ``data`` meter against its ``time`` meter), with the data loader's
  persistent workers off and on (the default).
* projection: one ImageNet base-to-novel epoch (every train image: PromptKD distils all 1,281,167, PETR steps over
  the ~640,584 labelled base images, each step also taking 8 unlabelled novel ones) from the measured step times.
"""
from __future__ import annotations

import contextlib
import datetime
import io
import os
import re
import tempfile
import time
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from tabulate import tabulate

from clip.classifier import class_prompt_tokens
from engine.compile import compile_clip
from engine.precision import PRECISIONS, autocast, make_grad_scaler, resolve_precision, weight_dtype
from tools.benchmark import SPECS, ModelSpec, random_clip, time_calls
from trainers.losses import kd_loss
from trainers.promptsrc import VLPromptLearner, promptsrc_loss_terms
from trainers.student import VisualPromptStudent
from trainers.teacher import Teacher

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGENET_TRAIN = 1_281_167
EUROSAT_CLASSES = ("AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial", "Pasture",
                   "PermanentCrop", "Residential", "River", "SeaLake")
STEP_HEADERS = ["step", "prec", "compile", "teacher cache", "first step s", "ms/step", "images/s", "peak GiB"]


def _peak_memory(device: torch.device, fn) -> str:
    """Peak GPU memory (GiB) of one call of ``fn``; "-" on the CPU."""
    if device.type != "cuda":
        fn()
        return "-"
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f}"


def _first_call(device: torch.device, fn) -> float:
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


class _Stepper:
    """Optimiser update with the run's grad scaler, as ``TrainerBase.model_backward_and_update``."""

    def __init__(self, params, prec: str, device: torch.device):
        self.optim = torch.optim.SGD(params, lr=0.005, momentum=0.9)
        self.scaler = make_grad_scaler(prec, device)

    def update(self, loss: torch.Tensor) -> float:
        self.optim.zero_grad()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optim)
        self.scaler.update()
        return loss.item()


class DistillSteps:
    """PETR's and PromptKD's training steps on a frozen student CLIP and a frozen prompted teacher."""

    def __init__(self, spec: ModelSpec, classes: int, device: torch.device, prec: str, compile_mode: str,
                 batch: int, seed: int = 0):
        self.device, self.prec, self.batch = device, prec, batch
        self.clip_model = random_clip(spec.student, device, seed, weight_dtype(prec))
        teacher_clip = random_clip(spec.teacher, device, seed + 1, weight_dtype(prec))
        torch.manual_seed(seed + 2)
        prompts = VLPromptLearner.build(teacher_clip, spec.n_ctx, spec.n_ctx, spec.depth, spec.depth).to(device)
        self.teacher = Teacher(teacher_clip, [f"category number {i}" for i in range(classes)], prompts=prompts)
        for model in (self.clip_model, teacher_clip):
            compile_clip(model, compile_mode)
        out_dim = spec.teacher["embed_dim"]
        self.students = [VisualPromptStudent(self.clip_model, spec.n_ctx, spec.depth, out_dim).to(device).train()
                         for _ in range(2)]
        self.stepper = _Stepper([p for s in self.students for p in s.parameters()], prec, device)
        self.text = self.teacher.text_features.float()
        self.scale = float(self.clip_model.logit_scale.exp())
        size = spec.student["image_resolution"]
        self.images_x = torch.randn(batch, 3, size, size, device=device)
        self.images_u = torch.randn(batch, 3, size, size, device=device)
        self.labels = torch.randint(classes, (batch,), device=device)
        # the cache as a run holds it: every image's features in CPU memory, a batch looked up by index
        self.cache = F.normalize(torch.randn(16 * batch, out_dim), dim=-1)
        self.index_x, self.index_u = torch.arange(batch), torch.arange(batch, 2 * batch)

    def teacher_features(self, cached: bool, unlabelled: bool = True) -> list[torch.Tensor]:
        """Teacher features of the labelled (and unlabelled) batch: looked up, or one online forward."""
        if cached:
            indexes = (self.index_x, self.index_u) if unlabelled else (self.index_x,)
            return [self.cache[i].to(self.device, non_blocking=True) for i in indexes]
        images = torch.cat([self.images_x, self.images_u]) if unlabelled else self.images_x
        with torch.no_grad():
            return list(self.teacher.encode_image(images).float().split(self.batch))

    def teacher_logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.teacher.logit_scale * features @ self.text.t()

    def petr(self, cached: bool) -> float:
        """θ_s on the labelled batch (KD + CE), θ_u on the unlabelled one (KD), one backward of the sum."""
        with autocast(self.prec, self.device):
            teacher_x, teacher_u = self.teacher_features(cached)
            features_x = self.students[0](self.clip_model, self.images_x)
            features_u = self.students[1](self.clip_model, self.images_u)
        logits_x = self.scale * features_x.float() @ self.text.t()
        logits_u = self.scale * features_u.float() @ self.text.t()
        loss = (kd_loss(logits_x, self.teacher_logits(teacher_x), 1.0) + F.cross_entropy(logits_x, self.labels)
                + kd_loss(logits_u, self.teacher_logits(teacher_u), 1.0))
        return self.stepper.update(loss)

    def promptkd(self, cached: bool) -> float:
        """One student distilled on the labelled batch (labels unused)."""
        with autocast(self.prec, self.device):
            teacher_x, = self.teacher_features(cached, unlabelled=False)
            features = self.students[0](self.clip_model, self.images_x)
        logits = self.scale * features.float() @ self.text.t()
        return self.stepper.update(kd_loss(logits, self.teacher_logits(teacher_x), 1.0))

    @torch.no_grad()
    def teacher_forward(self) -> torch.Tensor:
        """The teacher's image forward on one batch: the unit of building a teacher cache."""
        with autocast(self.prec, self.device):
            return self.teacher.encode_image(self.images_x)


class PromptSRCStep:
    """The PromptSRC teacher's step: prompted image and text features with gradients, frozen image features."""

    def __init__(self, spec: ModelSpec, classes: int, device: torch.device, prec: str, compile_mode: str,
                 batch: int, seed: int = 0):
        self.device, self.prec = device, prec
        self.clip_model = random_clip(spec.teacher, device, seed + 1, weight_dtype(prec))
        torch.manual_seed(seed + 2)
        self.prompts = VLPromptLearner.build(self.clip_model, spec.n_ctx, spec.n_ctx, spec.depth, spec.depth)
        self.prompts.to(device)
        compile_clip(self.clip_model, compile_mode)
        names = [f"category number {i}" for i in range(classes)]
        self.tokens = class_prompt_tokens(names, spec.n_ctx, self.clip_model.context_length).to(device)
        self.frozen_text = F.normalize(torch.randn(classes, spec.teacher["embed_dim"], device=device), dim=-1)
        self.stepper = _Stepper(self.prompts.parameters(), prec, device)
        size = spec.teacher["image_resolution"]
        self.images = torch.randn(batch, 3, size, size, device=device)
        self.labels = torch.randint(classes, (batch,), device=device)
        self.scale = float(self.clip_model.logit_scale.exp())

    def step(self) -> float:
        with autocast(self.prec, self.device):
            image = self.clip_model.encode_image(self.images, self.prompts.vision_prompts())
            text = self.clip_model.encode_text(self.tokens, self.prompts.text_prompts())
        image, text = F.normalize(image.float(), dim=-1), F.normalize(text.float(), dim=-1)
        with torch.no_grad(), autocast(self.prec, self.device):
            frozen_image = F.normalize(self.clip_model.encode_image(self.images).float(), dim=-1)
        logits = self.scale * image @ text.t()
        terms = promptsrc_loss_terms(logits, self.labels, text, self.frozen_text, image, frozen_image,
                                     self.scale * frozen_image @ self.frozen_text.t(), 25.0, 10.0)
        return self.stepper.update(sum(terms.values()))


def _time_rows(fns: dict, images: dict, prec: str, mode: str, device: torch.device, iters: int,
               warmup: int) -> list[list]:
    """First call (compilation included), median of ``iters`` after ``warmup``, images/s and peak memory."""
    first = {key: _first_call(device, fn) for key, fn in fns.items()}
    median = time_calls(fns, iters, warmup, device)
    rows = []
    for (step, cache), fn in fns.items():
        key = (step, cache)
        rows.append([step, prec, mode, cache, f"{first[key]:.2f}", f"{1e3 * median[key]:.1f}",
                     f"{images[step] / median[key]:.1f}", _peak_memory(device, fn)])
    return rows


def step_report(spec: ModelSpec, classes: int, device: torch.device, precisions: list[str], modes: list[str],
                batch: int, iters: int, warmup: int, seed: int = 0) -> tuple[list, list]:
    """Rows of the step table and notes on precisions that do not run on this device."""
    rows, notes = [], []
    images = {"PETR (2 students)": 2 * batch, "PromptKD": batch, "teacher forward": batch,
              "PromptSRC teacher": batch}
    for prec in precisions:
        with contextlib.redirect_stdout(io.StringIO()):
            resolved = resolve_precision(prec, device)
        if resolved != prec:
            notes.append(f"{prec}: not run on {device.type} (it falls back to {resolved} there)")
            continue
        for mode in modes:
            distill = DistillSteps(spec, classes, device, prec, mode, batch, seed)
            fns = {}
            for cache in ("off", "on"):
                fns[("PETR (2 students)", cache)] = partial(distill.petr, cache == "on")
                fns[("PromptKD", cache)] = partial(distill.promptkd, cache == "on")
            fns[("teacher forward", "-")] = distill.teacher_forward
            rows += _time_rows(fns, images, prec, mode, device, iters, warmup)
            del distill, fns
            src = PromptSRCStep(spec, classes, device, prec, mode, batch, seed)
            rows += _time_rows({("PromptSRC teacher", "-"): src.step}, images, prec, mode, device, iters, warmup)
            del src
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows, notes


def format_steps(rows: list) -> str:
    return tabulate(rows, headers=STEP_HEADERS)


def write_jpeg_tree(root: str, per_class: int, size: int = 224, seed: int = 0) -> str:
    """``<root>/eurosat/2750/<Class>/<Class>_<i>.jpg``: smooth random ``size`` px JPEGs (train.py makes the split)."""
    rng = np.random.default_rng(seed)
    for name in EUROSAT_CLASSES:
        folder = os.path.join(root, "eurosat", "2750", name)
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            image = Image.fromarray(coarse).resize((size, size), Image.BICUBIC)
            image.save(os.path.join(folder, f"{name}_{i + 1}.jpg"), quality=90)
    return root


_LOG_LINE = re.compile(r"time [\d.]+ \(([\d.]+)\) data [\d.]+ \(([\d.]+)\)")


def epoch_report(spec: ModelSpec, device: torch.device, prec: str, per_class: int, epochs: int,
                 workers: int | None, work_dir: str | None = None) -> tuple[list[list], float]:
    """Per-epoch rows of a PETR ``train.py`` run on a generated tree (persistent workers off, then on) and the
    milliseconds one process needs to load one training image."""
    import train

    rows = []
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        write_jpeg_tree(os.path.join(tmp, "data"), per_class, spec.student["image_resolution"])
        files = {}
        for role, sizes, seed in (("student", spec.student, 0), ("teacher", spec.teacher, 1)):
            files[role] = os.path.join(tmp, f"{role}.pt")
            torch.save(random_clip(sizes, "cpu", seed).state_dict(), files[role])
        for persistent in (False, True):
            size = spec.student["image_resolution"]
            argv = ["--root", os.path.join(tmp, "data"), "--seed", "1", "--trainer", "PETR", "--no-train",
                    "--dataset-config-file", os.path.join(REPO, "configs/datasets/eurosat.yaml"),
                    "--config-file", os.path.join(REPO, "configs/trainers/PETR/vit_b16_ep40_batch8_4ctx.yaml"),
                    "--output-dir", os.path.join(tmp, f"out_{persistent}"),
                    "INPUT.SIZE", f"({size}, {size})", "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "base",
                    "MODEL.BACKBONE.NAME", files["student"], "TRAINER.PETR.TEACHER_NAME", files["teacher"],
                    "TRAINER.PETR.N_CTX_VISION", str(spec.n_ctx), "TRAINER.PETR.PROMPT_DEPTH_VISION",
                    str(spec.depth), "TRAINER.PETR.PREC", prec, "USE_CUDA", str(device.type == "cuda"),
                    "OPTIM.MAX_EPOCH", str(epochs), "TRAIN.PRINT_FREQ", "1",
                    "DATALOADER.PERSISTENT_WORKERS", str(persistent)]
            if workers is not None:
                argv += ["DATALOADER.NUM_WORKERS", str(workers)]
            with contextlib.redirect_stdout(io.StringIO()):
                trainer = train.main(argv)
            n_workers = trainer.cfg.DATALOADER.NUM_WORKERS
            if not persistent:
                load_ms = loading_cost(trainer.train_loader_x.dataset)
            for epoch in range(epochs):
                trainer.epoch = epoch
                log = io.StringIO()
                with contextlib.redirect_stdout(log):
                    start = time.perf_counter()
                    trainer.run_epoch()
                    elapsed = time.perf_counter() - start
                step_s, data_s = (float(v) for v in _LOG_LINE.findall(log.getvalue())[-1])
                n_images = 2 * trainer.num_batches * trainer.cfg.DATALOADER.TRAIN_X.BATCH_SIZE
                rows.append([epoch + 1, n_workers, "on" if persistent else "off", trainer.num_batches, n_images,
                             f"{elapsed:.2f}", f"{n_images / elapsed:.1f}", f"{1e3 * step_s:.1f}",
                             f"{1e3 * data_s:.1f}", f"{100 * data_s / step_s:.0f}%"])
            del trainer
    return rows, load_ms


def loading_cost(dataset, n: int = 32) -> float:
    """Milliseconds one process takes to read, decode and augment one training image (median of ``n``)."""
    times = []
    for i in range(min(n, len(dataset))):
        start = time.perf_counter()
        dataset[i]
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def format_epochs(rows: list) -> str:
    return tabulate(rows, headers=["epoch", "workers", "persistent workers", "steps", "images", "epoch s",
                                   "images/s (with loading)", "step ms", "data ms", "data share"])


def projection(rows: list, batch: int) -> list[list]:
    """Rows: one ImageNet base-to-novel epoch at each measured PETR/PromptKD setting, and the cache build."""
    steps = {"PETR (2 students)": IMAGENET_TRAIN // 2 // batch, "PromptKD": IMAGENET_TRAIN // batch}
    out = []
    for step, prec, mode, cache, _, ms, ips, _ in rows:
        if step in steps:
            seconds = steps[step] * float(ms) / 1e3
            out.append([step, prec, mode, cache, f"{steps[step]:,}", str(datetime.timedelta(seconds=round(seconds)))])
        elif step == "teacher forward":
            seconds = 4 * IMAGENET_TRAIN / float(ips)
            out.append(["teacher cache build (views, K = 4)", prec, mode, "-", f"{4 * IMAGENET_TRAIN:,} images",
                        str(datetime.timedelta(seconds=round(seconds)))])
    return out


def format_projection(rows: list) -> str:
    return tabulate(rows, headers=["ImageNet base-to-novel", "prec", "compile", "teacher cache", "steps", "epoch"])


def train_parts(args, spec: ModelSpec, device: torch.device) -> None:
    """Print the step table, the train.py epoch table and the ImageNet projection."""
    precisions = args.precisions or list(PRECISIONS)
    print(f"\n== Full training steps, batch {args.step_batch} (PETR: {args.step_batch} labelled + {args.step_batch} "
          f"unlabelled), C = {args.classes}: first step (compilation included), then the median of "
          f"{args.train_iters} after {args.warmup} warm-up; teacher cache on = features looked up by index")
    rows, notes = step_report(spec, args.classes, device, precisions, args.compile, args.step_batch,
                              args.train_iters, args.warmup, args.seed)
    print(format_steps(rows))
    for note in notes:
        print(f"Note: {note}")
    print(f"\n== ImageNet base-to-novel epoch projected on this device from the steps above ({spec.label}; "
          "data loading not included: see the train.py epoch table)")
    print(format_projection(projection(rows, args.step_batch)))
    if args.epochs > 0:
        espec, eprec = SPECS[args.epoch_model], "amp" if device.type == "cuda" else "fp32"
        print(f"\n== train.py epochs: PETR (paper config, batch 8 + 8, default workers unless --workers) on a "
              f"generated {espec.student['image_resolution']} px JPEG tree ({10 * args.epoch_images_per_class} "
              f"images, base classes trained), {espec.label}, {eprec}; data = train.py's data meter")
        rows, load_ms = epoch_report(espec, device, eprec, args.epoch_images_per_class, args.epochs, args.workers)
        print(format_epochs(rows))
        print(f"Loading one training image (read, decode, random resized crop, flip, normalise) takes {load_ms:.1f} ms "
              f"of one core: a PETR step (16 images) needs {16 * load_ms:.0f} ms of loader time, i.e. at least "
              f"{2 * load_ms:.1f} ms per step with 8 workers on 8 free cores")
