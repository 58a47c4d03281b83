"""The data path for ``benchmark.py loader``: how fast one core loads a training image, per image size and path, and
``train.py`` epochs of PETR and PromptKD with their data share, per teacher cache and decoder.

* per core: generated photo-like JPEG trees (``benchmark_train.photo_like``) of each size, loaded one image at a time
  in this process (one torch thread) exactly as the training loader's items are made (``DatasetWrapper`` with the
  seeded pass's keys): PIL decoding alone; the CoOp / PromptKD / PETR configs' train transform (random resized crop
  to 224, flip, normalise) with ``INPUT.DECODER`` pil and tensor (and tensor without draft-mode decoding); their
  test transform (evaluation, the ``fixed`` teacher cache's view); a view read decoded from the teacher cache
  (``TEACHER_CACHE_IMAGES``); a crop of a stored image (``DATALOADER.IMAGE_CACHE_SIDE``); the teacher cache's build
  of 4 views of an image, decoded once and stored (tensor decoder). Images/s per core is the median over interleaved
  passes over the tree.
* epochs: ``train.py`` (``train.main`` with the shipped configs, the tiny224 CLIPs, so the step is small next to the
  loading) on a photo-like tree of one size, per trainer and setting: the epoch's images/s and train.py's ``data``
  meter against its ``time`` meter (the data share of a step); the teacher cache's build time apart.

It also prints the per-core rates as the ``LOADER_RATES`` lines of runner/costs.py.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from tabulate import tabulate

from bench.benchmark_train import (
    CONFIGS,
    REPO,
    photo_like,
    quiet,
    quiet_main,
    timed_epoch,
    trainer_argv,
    write_clip_files,
    write_jpeg_tree,
)
from bench.models import SPECS
from engine import DatasetWrapper, build_transform, get_cfg_default
from engine.array_file import ArrayFile, write_arrays
from engine.data_stream import sample_seed, seeded_rngs
from engine.dataset_base import Datum
from engine.decoding import ImageFile
from engine.image_cache import load_or_build as cached_images
from engine.utils import read_image
from trainers.config import extend_cfg
from trainers.distillation.teacher_cache import CachedViewDataset, ViewBuildDataset, ViewTransform

SIZES = ("64x64", "224x224", "500x375", "800x600", "1600x1200")
"""Image sizes of the per-core table (width x height): EuroSAT's, the 224 px of the old measurement, ImageNet's
typical size, a large photo (Flowers-102, Stanford Cars, SUN397, FGVC-Aircraft reach it) and a camera-sized one
(where draft-mode decoding pays)."""
STORED_SIDE = 256
"""``DATALOADER.IMAGE_CACHE_SIDE`` of the stored-image row."""
BUILD_VIEWS = 4
"""Views per image of the teacher-cache build row (the fast profile's ``TEACHER_CACHE_VIEWS``)."""
PER_CORE_HEADERS = ["image size", "path", "images/s per core", "ms per image", "x pil"]
RATE_KEYS = {"pil": "pil", "tensor": "tensor", "pil test": "pil test", "tensor test": "tensor test",
             f"views build ({BUILD_VIEWS} views)": "views build"}
"""The per-core paths runner/costs.py projects with (the profiles' decoders and the teacher cache's build), and their
names there."""


def parse_size(text: str) -> tuple[int, int]:
    """``"500x375"`` -> (500, 375)."""
    width, height = (int(v) for v in text.lower().split("x"))
    return width, height


def loader_cfg(decoder: str, *opts: str):
    """The PETR config's INPUT and loader settings (those of every CoOp-family config) with ``decoder``."""
    cfg = extend_cfg(get_cfg_default())
    cfg.merge_from_file(os.path.join(REPO, "configs", "trainers", f"{CONFIGS['PETR']}.yaml"))
    cfg.merge_from_list(["INPUT.DECODER", decoder, "DATALOADER.NUM_WORKERS", "0", *opts])
    return cfg


def write_images(folder: str, size: str, count: int, seed: int = 0) -> list[Datum]:
    """``count`` photo-like JPEGs (quality 90) of ``size`` in ``folder``, as Datums."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    items = []
    for i in range(count):
        path = os.path.join(folder, f"{size}_{i}.jpg")
        photo_like(*parse_size(size), rng).save(path, quality=90)
        items.append(Datum(path, label=0, classname="c"))
    return items


def stored_views(path: str, count: int, size: tuple[int, int]) -> ArrayFile:
    """An array file of ``count`` decoded 224 px views (random pixels: reading them costs the same)."""
    generator = torch.Generator().manual_seed(0)

    def fill(writer) -> None:
        for i in range(count):
            writer.put("views", i, torch.zeros(1, 5, dtype=torch.long).numpy())
            writer.put("pixels", i, torch.randint(0, 256, (1, 3, *size), generator=generator, dtype=torch.uint8)
                       .numpy())

    write_arrays(path, "bench", {}, {"views": ("int64", (count, 1, 5)), "pixels": ("uint8", (count, 1, 3, *size))},
                 fill)
    with open(path, "rb") as f:
        return ArrayFile(path, f)


def loading_paths(items: list[Datum], work: str) -> dict[str, Callable[[int, int], object]]:
    """Each path of the per-core table as ``load(index, seed)`` of one item."""
    with quiet():
        pil, tensor = loader_cfg("pil"), loader_cfg("tensor")
        stored_cfg = loader_cfg("tensor", "DATALOADER.IMAGE_CACHE_SIDE", str(STORED_SIDE),
                                "DATALOADER.IMAGE_CACHE_DIR", os.path.join(work, "image_cache"), "DATASET.NAME",
                                "bench")
        tfm = {(d, train): build_transform(c, is_train=train) for d, c in (("pil", pil), ("tensor", tensor))
               for train in (True, False)}
        images = cached_images(stored_cfg, "train_x", items)
    wrappers = {name: DatasetWrapper(cfg, items, tfm[decoder, train], is_train=train, images=cache)
                for name, cfg, decoder, train, cache in (
                    ("pil", pil, "pil", True, None), ("tensor", tensor, "tensor", True, None),
                    ("pil test", pil, "pil", False, None), ("tensor test", tensor, "tensor", False, None),
                    (f"stored image (side {STORED_SIDE})", tensor, "tensor", True, images))}
    views = CachedViewDataset(tensor, items, tfm["tensor", False], views=torch.zeros(len(items), 1, 5),
                              pixels=stored_views(os.path.join(work, "views.pixels"), len(items), pil.INPUT.SIZE))

    def no_draft(index: int, seed: int):
        with seeded_rngs(seed):
            return tfm["tensor", True](ImageFile(items[index].impath, draft=False))

    paths = {"PIL decode only": lambda i, seed: read_image(items[i].impath)}
    for name in ("pil", "tensor"):
        paths[name] = lambda i, seed, w=wrappers[name]: w[(i, seed)]
    paths["tensor, no draft"] = no_draft
    for name in ("pil test", "tensor test"):
        paths[name] = lambda i, seed, w=wrappers[name]: w[i]
    paths["decoded view"] = lambda i, seed: views[(i, seed)]
    build = ViewBuildDataset(items, BUILD_VIEWS, ViewTransform.from_cfg(tensor), None, keep_pixels=True)
    paths[f"views build ({BUILD_VIEWS} views)"] = lambda i, seed: build[i]
    name = f"stored image (side {STORED_SIDE})"
    paths[name] = lambda i, seed, w=wrappers[name]: w[(i, seed)]
    return paths


def per_core_rates(size: str, count: int, rounds: int, work_dir: str | None = None) -> dict[str, float]:
    """Images/s per core of every path on ``count`` images of ``size``: the median over ``rounds`` passes, the
    paths interleaved within each round (a busy machine slows them alike)."""
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        items = write_images(os.path.join(tmp, "images"), size, count)
        paths = loading_paths(items, tmp)
        rates: dict[str, list[float]] = {name: [] for name in paths}
        for round_ in range(rounds + 1):
            for name, load in paths.items():
                start = time.perf_counter()
                for i in range(count):
                    load(i, sample_seed(round_, 0, i))
                if round_:  # the first round warms the caches up
                    rates[name].append(count / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def per_core_rows(sizes: list[str], count: int, rounds: int) -> tuple[list[list], dict[str, dict[str, float]]]:
    """Rows of the per-core table (printed as measured) and ``{size: {path: images/s}}``."""
    rows, measured = [], {}
    for size in sizes:
        measured[size] = rates = per_core_rates(size, count, rounds)
        for name, rate in rates.items():
            rows.append([size, name, f"{rate:.0f}", f"{1e3 / rate:.2f}", f"{rate / rates['pil']:.2f}"])
            print("  " + "  ".join(rows[-1]), flush=True)
    return rows, measured


def rates_block(measured: dict[str, dict[str, float]], where: str) -> str:
    """The ``LOADER_RATES`` lines of runner/costs.py for these measurements."""
    lines = [f'LOADER_SOURCE = "measured: python -m bench.benchmark loader, {where}"', "LOADER_RATES = {"]
    for size, rates in measured.items():
        entries = [f'"{key}": {rates[name]:.0f}' for name, key in RATE_KEYS.items()]
        indent = " " * (len(size) + 9)
        rows = [", ".join(entries[i:i + 4]) for i in range(0, len(entries), 4)]
        lines.append(f'    "{size}": {{' + f",\n{indent}".join(rows) + "},")
    return "\n".join([*lines, "}"])


@dataclass(frozen=True)
class EpochSetting:
    """One row group of the epoch table: the teacher cache, the decoder and whether the views are stored decoded."""

    cache: str
    decoder: str
    images: bool = False

    def opts(self, trainer: str) -> list[str]:
        ns = trainer.upper()
        return [f"TRAINER.{ns}.TEACHER_CACHE", self.cache, f"TRAINER.{ns}.TEACHER_CACHE_IMAGES", str(self.images),
                "INPUT.DECODER", self.decoder]

    def label(self) -> list[str]:
        return [self.cache, self.decoder, "yes" if self.images else "no"]


EPOCH_SETTINGS = (EpochSetting("none", "pil"), EpochSetting("none", "tensor"), EpochSetting("views", "pil"),
                  EpochSetting("views", "tensor"), EpochSetting("views", "tensor", images=True))
"""The paper profile's path, the tensor decoder alone, the views teacher cache with each decoder, and the fast
profile's (views, tensor decoder, decoded views)."""
EPOCH_HEADERS = ["trainer", "teacher cache", "decoder", "decoded views", "cache build s", "epoch", "steps", "images",
                 "epoch s", "images/s", "step ms", "data ms", "data share"]


def epoch_rows(size: str, per_class: int, epochs: int, workers: int, device: torch.device,
               work_dir: str | None = None) -> list[list]:
    """Per trainer, setting and epoch: the epoch's numbers (printed as measured)."""
    import train  # noqa: F401 - train.main's registries, imported once here

    spec, rows = SPECS["tiny224"], []
    width, height = parse_size(size)
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        data = write_jpeg_tree(os.path.join(tmp, "data"), per_class, width, height=height, photo=True)
        files = write_clip_files(spec, tmp)
        for trainer in ("PETR", "PromptKD"):
            for i, setting in enumerate(EPOCH_SETTINGS):
                out = os.path.join(tmp, f"{trainer}_{i}")
                argv = trainer_argv(trainer, spec, files, data, out, device, "fp32", "TRAIN.PRINT_FREQ", "1",
                                    "DATALOADER.NUM_WORKERS", str(workers), "DATALOADER.PERSISTENT_WORKERS", "True",
                                    *setting.opts(trainer))
                model = quiet_main(argv)
                start = time.perf_counter()
                with quiet():
                    model.build_teacher_cache()
                build_s = time.perf_counter() - start
                for epoch in range(epochs):
                    elapsed, step_s, data_s = timed_epoch(model, epoch)
                    n_images = model.num_batches * sum(loader.batch_size for loader in model.train_loaders().values())
                    rows.append([trainer, *setting.label(), f"{build_s:.1f}" if setting.cache != "none" else "-",
                                 epoch + 1, model.num_batches, n_images, f"{elapsed:.2f}", f"{n_images / elapsed:.1f}",
                                 f"{1e3 * step_s:.1f}", f"{1e3 * data_s:.1f}", f"{100 * data_s / step_s:.0f}%"])
                    print("  " + "  ".join(str(v) for v in rows[-1]), flush=True)
                del model
    return rows


def cpu_name() -> str:
    """This machine's CPU model and core count (Linux's /proc/cpuinfo; the core count alone elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "CPU")
    except OSError:
        model = "CPU"
    return f"{model}, {os.cpu_count()} cores"


def loader_part(args, device: torch.device, where: str) -> None:
    """Print the per-core table, its ``LOADER_RATES`` block and the epoch table."""
    where = f"{cpu_name()}, {where}"
    print(f"\n== Loading one training image, per core ({where}): {args.loader_images} photo-like JPEGs (quality 90) "
          f"per size, median of {args.loader_rounds} interleaved passes; train transform = the configs' random resized "
          "crop to 224 + flip + normalise; x pil = against INPUT.DECODER pil", flush=True)
    rows, measured = per_core_rows(args.loader_sizes, args.loader_images, args.loader_rounds)
    print(tabulate(rows, headers=PER_CORE_HEADERS, disable_numparse=True))
    print("\nPaste over runner/costs.py's loader block:\n" + rates_block(measured, where))
    if args.epochs > 0:
        workers = args.workers if args.workers is not None else os.cpu_count()
        print(f"\n== train.py epochs on a photo-like {args.epoch_size} JPEG tree ({10 * args.epoch_images_per_class} "
              f"images; PETR trains the 5 base classes' half, PromptKD all train images), {SPECS['tiny224'].label}, "
              f"fp32, batch 8 (PETR 8 + 8), {workers} loader workers (persistent); data = train.py's data meter",
              flush=True)
        rows = epoch_rows(args.epoch_size, args.epoch_images_per_class, args.epochs, workers, device)
        print(tabulate(rows, headers=EPOCH_HEADERS, disable_numparse=True))
