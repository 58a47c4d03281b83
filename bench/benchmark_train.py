"""Training throughput for ``benchmark.py train``: the trainers' real steps, an end-to-end train.py epoch, an ImageNet
projection.

* steps: PETR's (two students, 8 labelled + 8 unlabelled images) and PromptKD's (one student, 8 images)
  ``forward_backward`` exactly as train.py builds them: ``train.main(--no-train)`` with the shipped configs on a
  generated EuroSAT-layout JPEG tree (C = 10 classes) and random-weight CLIPs of the real shapes written as weight
  files, for each precision, ``TRAIN.COMPILE`` mode, teacher cache off / on (``TEACHER_CACHE fixed``) and, asked
  for, ``TRAIN.CUDA_GRAPH``; with the first step (compilation or capture included), the median step, images/s and
  peak GPU memory.
* epoch: ``train.py`` (PETR, the paper's config) on a generated 224 px EuroSAT-layout JPEG tree, timed per epoch
  with its data-loading share (train.py's ``data`` meter against its ``time`` meter), with the data loader's
  persistent workers off and on (the default).
* projection: one ImageNet base-to-novel epoch (every train image: PromptKD distils all 1,281,167, PETR steps over
  the ~640,584 labelled base images, each step also taking 8 unlabelled novel ones) from the measured step times.

The tree of any class count, the CLIP files and teacher checkpoint given from outside and the trainer built once for
steps of several batch sizes (``build_trainer``, ``fixed_step``) also serve bench/side_by_side.py.
"""
from __future__ import annotations

import contextlib
import datetime
import gc
import io
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from PIL import Image
from tabulate import tabulate

from bench.models import SPECS, ModelSpec, random_clip, sync, time_calls
from engine.cuda_graph import StepGraph
from engine.data_stream import LoaderStream
from engine.errors import ConfigError
from engine.precision import PRECISIONS, resolve_precision

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGENET_TRAIN = 1_281_167
EUROSAT_CLASSES = ("AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial", "Pasture",
                   "PermanentCrop", "Residential", "River", "SeaLake")
STEP_HEADERS = ["step", "prec", "compile", "teacher cache", "CUDA graph", "first step s", "ms/step", "images/s",
                "peak GiB"]


def _peak_memory(device: torch.device, fn) -> str:
    """Peak GPU memory (GiB) of one call of ``fn``; "-" on the CPU."""
    if device.type != "cuda":
        fn()
        return "-"
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    sync(device)
    return f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f}"


def release_memory(device: torch.device) -> None:
    """Free the trainers dropped so far before the next is built: PETR's refers to itself through its router, so only
    the cycle collector frees it (else the next row's peak memory counts it); then CUDA's cached blocks."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _first_call(device: torch.device, fn) -> float:
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def write_clip_files(spec: ModelSpec, folder: str) -> dict[str, str]:
    """Random-weight student and teacher CLIPs of ``spec``'s shapes as weight files (what MODEL.BACKBONE.NAME and
    TEACHER_NAME read)."""
    files = {}
    for role, sizes, seed in (("student", spec.student, 0), ("teacher", spec.teacher, 1)):
        files[role] = os.path.join(folder, f"{role}.pt")
        torch.save(random_clip(sizes, "cpu", seed).state_dict(), files[role])
    return files


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Inside: stdout and stderr go nowhere (a benchmark's table stays readable)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def quiet_main(argv: list[str]):
    """The trainer ``train.main`` builds from ``argv`` (``--no-train``), its output silenced."""
    import train

    with quiet():
        return train.main(argv)


CONFIGS = {"PETR": "PETR/vit_b16_ep40_batch8_4ctx", "PromptKD": "PromptKD/vit_b16_c2_ep20_batch8_4+4ctx",
           "CoOp": "CoOp/vit_b16_ctxv1", "PromptSRC": "PromptSRC/vit_l14_c2_ep20_batch8_4+4ctx"}
"""The shipped base-to-novel config each benchmarked trainer runs (the runner's default for it)."""


def config_argv(trainer: str, spec: ModelSpec, backbone: str, data: str, out: str, subsample: str = "base"
                ) -> list[str]:
    """The start of a benchmark's train.py arguments: ``trainer`` with its shipped config (:data:`CONFIGS`),
    base2novel on the generated EuroSAT tree evaluating the ``subsample`` classes, the spec's image size and the
    ``backbone`` CLIP file."""
    size = spec.student["image_resolution"]
    return ["--data", data, "--seed", "1", "--trainer", trainer, "--no-train",
            "--dataset-config-file", os.path.join(REPO, "configs/datasets/eurosat.yaml"),
            "--config-file", os.path.join(REPO, f"configs/trainers/{CONFIGS[trainer]}.yaml"), "--output-dir", out,
            "INPUT.SIZE", f"({size}, {size})", "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", subsample,
            "MODEL.BACKBONE.NAME", backbone]


def trainer_argv(trainer: str, spec: ModelSpec, files: dict, data: str, out: str, device: torch.device, prec: str,
                 *opts: str, subsample: str = "base") -> list[str]:
    """train.py arguments of PETR or PromptKD (:func:`config_argv`); ``files`` names the student and teacher CLIPs
    and, with a ``teacher_ckpt`` entry, the teacher prompts (TEACHER_CKPT)."""
    ns = trainer.upper()
    ckpt = [f"TRAINER.{ns}.TEACHER_CKPT", files["teacher_ckpt"]] if files.get("teacher_ckpt") else []
    return [*config_argv(trainer, spec, files["student"], data, out, subsample),
            f"TRAINER.{ns}.TEACHER_NAME", files["teacher"], *ckpt,
            f"TRAINER.{ns}.N_CTX_VISION", str(spec.n_ctx), f"TRAINER.{ns}.PROMPT_DEPTH_VISION", str(spec.depth),
            f"TRAINER.{ns}.PREC", prec, "USE_CUDA", str(device.type == "cuda"), *opts]


@dataclass(frozen=True)
class StepSetting:
    """One row of the step table: a trainer and the settings its step runs with."""

    trainer: str
    prec: str
    compile: str = "none"
    cache: bool = False
    cuda_graph: bool = False

    def opts(self) -> list[str]:
        return ["TRAIN.COMPILE", self.compile, "TRAIN.CUDA_GRAPH", str(self.cuda_graph),
                f"TRAINER.{self.trainer.upper()}.TEACHER_CACHE", "fixed" if self.cache else "none"]


def build_trainer(setting: StepSetting, spec: ModelSpec, files: dict, data: str, out: str, device: torch.device,
                  batch: int, *opts: str, subsample: str = "base"):
    """The trainer of ``setting`` built by ``train.main`` as train.py builds it (training batch ``batch``, teacher
    cache included), its output quiet; ``opts`` are further KEY VALUE overrides (the later value of a key wins)."""
    argv = trainer_argv(setting.trainer, spec, files, data, out, device, setting.prec,
                        "DATALOADER.TRAIN_X.BATCH_SIZE", str(batch), "DATALOADER.NUM_WORKERS", "0", *setting.opts(),
                        *opts, subsample=subsample)
    trainer = quiet_main(argv)
    if setting.cache:
        with quiet():
            trainer.build_teacher_cache()
    return trainer


def fixed_step(trainer, size: int | None = None):
    """``trainer.forward_backward`` on one fixed batch of its training loaders (the first ``size`` images of each,
    all when None), as a function of no argument; a CUDA-graph trainer gets a new graph for this batch's shape."""
    trainer.set_model_mode("train")
    streams = [LoaderStream(loader) for loader in trainer.train_loaders().values()]
    batches = [{key: value[:size] for key, value in stream.next().items()} for stream in streams]
    if trainer.step_graph is not None:
        trainer.step_graph = StepGraph(trainer.train_step, trainer.step_graph.optimizers)
    trainer.epoch, trainer.batch_idx, trainer.num_batches = 0, 0, 1 << 30  # no end of epoch (no LR step)
    return partial(trainer.forward_backward, *batches)


def build_step(setting: StepSetting, spec: ModelSpec, files: dict, data: str, out: str, device: torch.device,
               batch: int):
    """The trainer of ``setting`` (``build_trainer``) and its ``forward_backward`` on one fixed batch
    (``fixed_step``)."""
    trainer = build_trainer(setting, spec, files, data, out, device, batch)
    return trainer, fixed_step(trainer)


GPU_ROWS = [setting for trainer in ("PETR", "PromptKD") for setting in (
    StepSetting(trainer, "fp32"), StepSetting(trainer, "bf16"), StepSetting(trainer, "bf16", "compile"),
    StepSetting(trainer, "bf16", "compile", cache=True), StepSetting(trainer, "bf16", "none", True, cuda_graph=True),
    StepSetting(trainer, "bf16", "compile", True, cuda_graph=True))]
"""The GPU table's rows: fp32, bf16, bf16 + compile, + teacher cache, + CUDA graph (eager and compiled CLIPs)."""


def graph_check(spec: ModelSpec, device: torch.device, batch: int, steps: int = 6) -> str:
    """One line: do PETR's CUDA-graph steps (bf16, teacher cache) give the eager steps' losses, bit for bit?"""
    with tempfile.TemporaryDirectory() as tmp:
        data = write_jpeg_tree(os.path.join(tmp, "data"), 2 * batch, spec.student["image_resolution"])
        files = write_clip_files(spec, tmp)
        losses = {}
        for graph in (False, True):
            setting = StepSetting("PETR", "bf16", "none", True, cuda_graph=graph)
            _, step = build_step(setting, spec, files, data, os.path.join(tmp, f"out{graph}"), device, batch)
            losses[graph] = torch.stack([step()["loss"].float() for _ in range(steps)]).cpu()
    same = torch.equal(losses[False], losses[True])
    diff = (losses[False] - losses[True]).abs().max().item()
    return (f"CUDA graph vs eager, PETR bf16 + teacher cache, {steps} steps from the same start: losses "
            f"{'identical' if same else f'differ (max {diff:.3g})'}")


def step_settings(precisions: list[str], modes: list[str], graphs: bool) -> list[StepSetting]:
    """PETR's and PromptKD's rows: each precision x compile mode, teacher cache off and on; with ``graphs`` also
    the CUDA-graph step (cache on) of each precision with compile none/compile."""
    rows = []
    for trainer in ("PETR", "PromptKD"):
        for prec in precisions:
            for mode in modes:
                rows += [StepSetting(trainer, prec, mode, cache) for cache in (False, True)]
                if graphs and mode != "cudagraphs":
                    rows.append(StepSetting(trainer, prec, mode, True, cuda_graph=True))
    return rows


def step_report(spec: ModelSpec, device: torch.device, settings: list[StepSetting], batch: int, iters: int,
                warmup: int, work_dir: str | None = None) -> tuple[list, list]:
    """Rows of the step table (printed as they are measured) and notes on settings that do not run here."""
    rows, notes = [], []
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        data = write_jpeg_tree(os.path.join(tmp, "data"), 2 * batch, spec.student["image_resolution"])
        files = write_clip_files(spec, tmp)
        for i, setting in enumerate(settings):
            with contextlib.redirect_stdout(io.StringIO()):
                resolved = resolve_precision(setting.prec, device)
            if resolved != setting.prec:
                notes.append(f"{setting.prec}: not run on {device.type} (it falls back to {resolved} there)")
                continue
            try:
                trainer, step = build_step(setting, spec, files, data, os.path.join(tmp, f"out{i}"), device, batch)
            except ConfigError as e:
                notes.append(f"{setting}: {e}")
                continue
            images = batch * len(trainer.train_loaders())
            try:  # one failing setting (a capture the device refuses) must not cost the other rows
                first = _first_call(device, step)
                median = time_calls({"step": step}, iters, warmup, device)["step"]
                peak = _peak_memory(device, step)
            except Exception as e:  # noqa: BLE001 - reported as a note, the table goes on
                notes.append(f"{setting}: failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            row = [setting.trainer, setting.prec, setting.compile, "on" if setting.cache else "off",
                   "on" if setting.cuda_graph else "off", f"{first:.2f}", f"{1e3 * median:.1f}",
                   f"{images / median:.1f}", peak]
            rows.append(row)
            print("  " + "  ".join(str(v) for v in row), flush=True)
            del trainer, step
            release_memory(device)
    return rows, sorted(set(notes))


def format_steps(rows: list) -> str:
    return tabulate(rows, headers=STEP_HEADERS)


def tree_classes(classes: int) -> list[str]:
    """Class folder names of a generated tree: EuroSAT's ten (the first ``classes`` of them), then ``Class0010``,
    ``Class0011``, ... for more."""
    return list(EUROSAT_CLASSES[:classes]) + [f"Class{i:04d}" for i in range(len(EUROSAT_CLASSES), classes)]


def photo_like(width: int, height: int, rng: np.random.Generator) -> Image.Image:
    """A ``width`` x ``height`` RGB image whose JPEG costs about what a photo's does: random colours at four scales
    (4 to 256 cells across) and pixel noise, near 4 bits per pixel at quality 90 (a photo of ImageNet's size: 3 to 6),
    so that decoding, not the file's emptiness, is what a benchmark times."""
    acc = np.zeros((height, width, 3), np.float32)
    for cells, amplitude in ((4, 90.0), (16, 50.0), (64, 30.0), (256, 24.0)):
        across, down = max(2, width * cells // max(width, height)), max(2, height * cells // max(width, height))
        grid = np.clip(rng.normal(0, 40, (down, across, 3)) + 128, 0, 255).astype(np.uint8)
        up = np.asarray(Image.fromarray(grid).resize((width, height), Image.BICUBIC), np.float32) - 128
        acc += up * amplitude / 40
    acc += rng.normal(0, 9, acc.shape)
    return Image.fromarray(np.clip(acc + 128, 0, 255).astype(np.uint8))


def write_jpeg_tree(root: str, per_class: int, size: int = 224, seed: int = 0,
                    classes: int = len(EUROSAT_CLASSES), height: int | None = None, photo: bool = False) -> str:
    """``<root>/eurosat/2750/<Class>/<Class>_<i>.jpg``: ``per_class`` JPEGs (quality 90) of ``size`` x ``height``
    (default square) px in each of ``classes`` class folders (``tree_classes``), smooth random images or, with
    ``photo``, :func:`photo_like` ones; EuroSAT's reader splits each folder 50/20/30, so a class needs at least 4."""
    rng = np.random.default_rng(seed)
    for name in tree_classes(classes):
        folder = os.path.join(root, "eurosat", "2750", name)
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            if photo:
                image = photo_like(size, height or size, rng)
            else:
                coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                image = Image.fromarray(coarse).resize((size, height or size), Image.BICUBIC)
            image.save(os.path.join(folder, f"{name}_{i + 1}.jpg"), quality=90)
    return root


STEP_LOG_LINE = re.compile(r"time [\d.]+ \(([\d.]+)\) data [\d.]+ \(([\d.]+)\)")


def epoch_report(spec: ModelSpec, device: torch.device, prec: str, per_class: int, epochs: int,
                 workers: int | None, work_dir: str | None = None) -> tuple[list[list], float]:
    """Per-epoch rows of a PETR ``train.py`` run on a generated tree (persistent workers off, then on) and the
    milliseconds one process needs to load one training image."""
    import train

    rows = []
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        write_jpeg_tree(os.path.join(tmp, "data"), per_class, spec.student["image_resolution"])
        files = write_clip_files(spec, tmp)
        for persistent in (False, True):
            argv = trainer_argv("PETR", spec, files, os.path.join(tmp, "data"), os.path.join(tmp, f"out_{persistent}"),
                                device, prec, "OPTIM.MAX_EPOCH", str(epochs), "TRAIN.PRINT_FREQ", "1",
                                "DATALOADER.PERSISTENT_WORKERS", str(persistent))
            if workers is not None:
                argv += ["DATALOADER.NUM_WORKERS", str(workers)]
            with contextlib.redirect_stdout(io.StringIO()):
                trainer = train.main(argv)
            n_workers = trainer.cfg.DATALOADER.NUM_WORKERS
            if not persistent:
                load_ms = loading_cost(trainer.train_loader_x.dataset)
            for epoch in range(epochs):
                elapsed, step_s, data_s = timed_epoch(trainer, epoch)
                n_images = 2 * trainer.num_batches * trainer.cfg.DATALOADER.TRAIN_X.BATCH_SIZE
                rows.append([epoch + 1, n_workers, "on" if persistent else "off", trainer.num_batches, n_images,
                             f"{elapsed:.2f}", f"{n_images / elapsed:.1f}", f"{1e3 * step_s:.1f}",
                             f"{1e3 * data_s:.1f}", f"{100 * data_s / step_s:.0f}%"])
            del trainer
    return rows, load_ms


def timed_epoch(trainer, epoch: int) -> tuple[float, float, float]:
    """Run epoch ``epoch`` of a built trainer (its output kept from the terminal): its seconds, and the average step
    and data-wait seconds of train.py's meters (its last progress line: TRAIN.PRINT_FREQ 1 gives every step's)."""
    trainer.epoch = epoch
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        start = time.perf_counter()
        trainer.run_epoch()
        elapsed = time.perf_counter() - start
    step_s, data_s = (float(v) for v in STEP_LOG_LINE.findall(log.getvalue())[-1])
    return elapsed, step_s, data_s


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
    """Rows: one ImageNet base-to-novel epoch at each measured PETR / PromptKD setting."""
    steps = {"PETR": IMAGENET_TRAIN // 2 // batch, "PromptKD": IMAGENET_TRAIN // batch}
    out = []
    for step, prec, mode, cache, graph, _, ms, _, _ in rows:
        seconds = steps[step] * float(ms) / 1e3
        out.append([step, prec, mode, cache, graph, f"{steps[step]:,}",
                    str(datetime.timedelta(seconds=round(seconds)))])
    return out


def format_projection(rows: list) -> str:
    return tabulate(rows, headers=["ImageNet base-to-novel", "prec", "compile", "teacher cache", "CUDA graph", "steps",
                                   "epoch"])


def train_parts(args, spec: ModelSpec, device: torch.device) -> None:
    """Print the step table, the train.py epoch table and the ImageNet projection."""
    precisions = args.precisions or list(PRECISIONS)
    print(f"\n== Training steps of the real trainers (train.main, shipped configs), batch {args.step_batch} (PETR: "
          f"{args.step_batch} labelled + {args.step_batch} unlabelled), C = 10 (EuroSAT): first step (compilation or "
          f"capture included), then the median of {args.train_iters} after {args.warmup} warm-up; teacher cache on = "
          "TEACHER_CACHE fixed (features looked up by index)", flush=True)
    settings = GPU_ROWS if args.gpu_rows else step_settings(precisions, args.compile, args.cuda_graph)
    rows, notes = step_report(spec, device, settings, args.step_batch, args.train_iters, args.warmup)
    print(format_steps(rows))
    for note in notes:
        print(f"Note: {note}")
    if args.cuda_graph and device.type == "cuda":
        try:
            print(graph_check(spec, device, args.step_batch))
        except Exception as e:  # noqa: BLE001 - the table above stays the result
            print(f"CUDA graph check failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    if args.part == "steps":
        return
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
