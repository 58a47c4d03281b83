"""Teacher feature cache of the distilling trainers (``TRAINER.<NS>.TEACHER_CACHE``): none, fixed or views.

The frozen teacher's image forward is the largest part of a PromptKD/PETR step. With a cache it runs once per
stored view, before training, and each step looks its features up instead:

* ``none`` (default): the paper's online teacher, run on every augmented batch.
* ``fixed``: one view per training image, the test transform (resize + centre crop); the student trains on
  exactly that view (no augmentation).
* ``views``: ``TEACHER_CACHE_VIEWS`` = K random-resized-crop + flip parameters per image, drawn once from a
  generator seeded by the image's position, with the teacher's features of each view ("fast knowledge
  distillation"). Every time an image is drawn, the loader picks one of its K views at random and the student
  sees exactly that crop. Only the transforms random_resized_crop, random_flip and normalize can be stored.

Files (in ``TEACHER_CACHE_DIR``, default ``<OUTPUT_DIR>/teacher_cache``): ``<name>.pt`` holds tensors only
(``features`` [N, K, D] float32, ``views`` [N, K, 5] int64: top, left, height, width, flip) and is loaded with
``weights_only=True``; ``<name>.json`` says what it was made from. Both are written atomically. The key hashes
the image paths and the images' bytes (``engine.digests.files_digest``: each image hashed once per machine while it
stays the same file), the transform and the teacher's weights and precision; when any of them changes the files are
rebuilt. Size: N · K · D · 4 bytes (docs/throughput.md, teacher cache, gives ImageNet's).

Decoded views (``TEACHER_CACHE_IMAGES True``): the stored views themselves, uint8 [N, K, 3, H, W] with their
parameters, in ``<name>.pixels`` beside them (``engine/array_file.py``: memory-mapped, keyed and checked as the
features are, read through the inputs ledger). The training loader then reads each view from there and only makes it
float and normalises it: epochs decode nothing. The pixels depend on the images, the transform, K and the decoder,
not on the teacher, so a new teacher rebuilds the features from the stored pixels without decoding. Size:
N · K · 3 · H · W bytes (150,528 per view at 224 px). With the PIL decoder the student sees the very tensor it sees
without them.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import functional as TF
from tqdm import tqdm

from engine.array_file import ArrayFile, ArrayWriter, corrupt_cache, open_keyed, write_arrays
from engine.checkpoint import atomic_torch_save
from engine.data_manager import build_data_loader
from engine.data_stream import sample_context
from engine.dataset_base import Datum
from engine.decoding import as_tensor, decoder_for, decoder_of, load_image, split_stages
from engine.digests import files_digest
from engine.errors import ConfigError
from engine.inputs import declare_cache, open_input
from engine.json_text import load_json
from engine.preemption import worker_init_fn
from engine.tensor_transforms import finish_pixels
from engine.transforms import INTERPOLATION_MODES
from engine.utils import write_json

CACHE_MODES = ("none", "fixed", "views")
VIEW_TRANSFORMS = ("random_resized_crop", "random_flip", "normalize")
RATIO = (3.0 / 4.0, 4.0 / 3.0)  # aspect-ratio range of torchvision's RandomResizedCrop
VIEW_SEED = 0


def sample_view(width: int, height: int, scale: Sequence[float], crop: bool, flip: bool,
                generator: torch.Generator) -> list[int]:
    """[top, left, height, width, flip] of one random resized crop (torchvision's sampling rule) and flip."""
    top, left, h, w = 0, 0, height, width
    if crop:
        area, log_lo, log_hi = width * height, math.log(RATIO[0]), math.log(RATIO[1])
        for _ in range(10):
            u = torch.rand(2, generator=generator).tolist()
            target = area * (scale[0] + (scale[1] - scale[0]) * u[0])
            aspect = math.exp(log_lo + (log_hi - log_lo) * u[1])
            cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
            if 0 < cw <= width and 0 < ch <= height:
                top = int(torch.randint(0, height - ch + 1, (1,), generator=generator))
                left = int(torch.randint(0, width - cw + 1, (1,), generator=generator))
                h, w = ch, cw
                break
        else:  # no crop fitted: the central crop at the nearest allowed aspect ratio
            if width / height < RATIO[0]:
                w, h = width, round(width / RATIO[0])
            elif width / height > RATIO[1]:
                w, h = round(height * RATIO[1]), height
            top, left = (height - h) // 2, (width - w) // 2
    flipped = int(flip and float(torch.rand(1, generator=generator)) < 0.5)
    return [top, left, h, w, flipped]


@dataclass(frozen=True)
class ViewTransform:
    """Applies stored view parameters to an image: crop + resize to ``size``, flip (:meth:`pixels`, uint8), then
    float and normalisation (:meth:`finish`). With ``decoder`` pil the image is a PIL image and PIL resamples it;
    with tensor it is an ``engine.decoding.ImageFile`` (engine/decoding.py)."""

    size: tuple[int, int]
    interpolation: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale: tuple[float, float]
    crop: bool
    flip: bool
    normalize: bool
    decoder: str = field(default="pil", repr=False)  # in the cache key only when it is not pil (older keys stay)

    @classmethod
    def from_cfg(cls, cfg) -> ViewTransform:
        """The view transform of ``cfg.INPUT``; transforms that cannot be stored raise ConfigError."""
        choices = list(cfg.INPUT.TRANSFORMS)
        other = [c for c in choices if c not in VIEW_TRANSFORMS]
        if other:
            raise ConfigError(f"TEACHER_CACHE views stores crops and flips only, but INPUT.TRANSFORMS has {other}; "
                             f"use {list(VIEW_TRANSFORMS)} or TEACHER_CACHE none/fixed")
        return cls(tuple(cfg.INPUT.SIZE), cfg.INPUT.INTERPOLATION, tuple(cfg.INPUT.PIXEL_MEAN),
                   tuple(cfg.INPUT.PIXEL_STD), tuple(cfg.INPUT.RRCROP_SCALE), "random_resized_crop" in choices,
                   "random_flip" in choices, "normalize" in choices, decoder_of(cfg))

    def sample(self, image, index: int, k: int) -> list[list[int]]:
        """The K views of the image at ``index``: the same for the same index, whatever the process."""
        generator = torch.Generator().manual_seed(VIEW_SEED * 1_000_003 + index)
        width, height = image.size
        return [sample_view(width, height, self.scale, self.crop, self.flip, generator) for _ in range(k)]

    def pixels(self, image, view: Sequence[int]) -> torch.Tensor:
        """The view of ``image`` as uint8 [3, h, w]."""
        top, left, h, w, flipped = (int(v) for v in view)
        if self.decoder == "tensor":
            out = image.region((top, left, h, w), self.size, self.interpolation)
            return TF.hflip(out) if flipped else out
        out = TF.resized_crop(image, top, left, h, w, list(self.size), INTERPOLATION_MODES[self.interpolation])
        return as_tensor(TF.hflip(out) if flipped else out)

    def finish(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 [3, h, w] -> the normalised float view (``ToTensor`` then ``Normalize``)."""
        return finish_pixels(pixels, self.mean, self.std, self.normalize)

    def __call__(self, image, view: Sequence[int]) -> torch.Tensor:
        return self.finish(self.pixels(image, view))


def check_cache_mode(cfg, ns: str) -> None:
    """The teacher cache keys of ``TRAINER.<ns>``: for ``views``, ConfigError when INPUT.TRANSFORMS holds transforms
    that cannot be stored (the mode itself is one of ``CACHE_MODES``: the config schema checks it); decoded views
    (``TEACHER_CACHE_IMAGES``) need a cache to store; decoded training images (``DATALOADER.IMAGE_CACHE_SIDE``)
    would feed loaders the cache replaces."""
    mode = cfg.TRAINER[ns].TEACHER_CACHE
    if mode == "views":
        ViewTransform.from_cfg(cfg)
    if cfg.TRAINER[ns].TEACHER_CACHE_IMAGES and mode == "none":
        raise ConfigError(f"TRAINER.{ns}.TEACHER_CACHE_IMAGES True stores the teacher cache's views decoded, but "
                          f"TRAINER.{ns}.TEACHER_CACHE is none; set it to fixed or views, or the images to False")
    side = cfg.DATALOADER.get("IMAGE_CACHE_SIDE", 0)
    if side and mode != "none":
        raise ConfigError(f"DATALOADER.IMAGE_CACHE_SIDE {side} would decode the training images for loaders that "
                          f"TRAINER.{ns}.TEACHER_CACHE {mode} replaces; set it to 0 (TRAINER.{ns}.TEACHER_CACHE_IMAGES "
                          "True stores the cache's own views decoded)")


class ViewBuildDataset(Dataset):
    """All K views of one image with their parameters, for the one-off build: ``img`` (normalised, stacked, for the
    teacher) and, when the pixels are stored, ``pixels`` (uint8); from the image files, or from stored pixels."""

    def __init__(self, source: Sequence[Datum], k: int, view_tfm: ViewTransform | None, fixed_tfm: Callable | None,
                 keep_pixels: bool = False, stored: ArrayFile | None = None):
        self.source, self.k, self.view_tfm, self.keep_pixels, self.stored = source, k, view_tfm, keep_pixels, stored
        self.decoder = view_tfm.decoder if view_tfm else decoder_for(fixed_tfm)
        self.fixed = None if fixed_tfm is None else split_stages(fixed_tfm)

    def __len__(self) -> int:
        return len(self.source)

    def finish(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.view_tfm.finish(pixels) if self.view_tfm else self.fixed[1](pixels)

    def __getitem__(self, index: int) -> dict:
        if self.stored is not None:
            pixels = torch.from_numpy(np.array(self.stored.arrays["pixels"][index]))
            views = torch.from_numpy(np.array(self.stored.arrays["views"][index]))
        else:
            image = load_image(self.source[index].impath, self.decoder)
            if self.view_tfm is None:
                views = torch.zeros(1, 5, dtype=torch.long)
                pixels = self.fixed[0](image)[None]
            else:
                views = torch.tensor(self.view_tfm.sample(image, index, self.k), dtype=torch.long)
                pixels = torch.stack([self.view_tfm.pixels(image, v) for v in views.tolist()])
        item = {"img": torch.stack([self.finish(p) for p in pixels]), "views": views, "index": index}
        return {**item, "pixels": pixels} if self.keep_pixels else item


class CachedViewDataset(Dataset):
    """Training items whose image is one stored view (chosen at random among K), with ``index`` and ``view``: cut
    from the image file, or read decoded from ``pixels`` (an :class:`engine.array_file.ArrayFile`)."""

    def __init__(self, cfg, data_source: Sequence[Datum], transform=None, is_train: bool = True,
                 views: torch.Tensor | None = None, view_tfm: ViewTransform | None = None,
                 pixels: ArrayFile | None = None):
        self.data_source, self.transform, self.views, self.view_tfm = data_source, transform, views, view_tfm
        self.pixels = pixels
        self.decoder = view_tfm.decoder if view_tfm else decoder_for(transform)
        self.finish = view_tfm.finish if view_tfm else split_stages(transform)[1] if pixels is not None else None

    def __len__(self) -> int:
        return len(self.data_source)

    def __getitem__(self, key) -> dict:
        index, rng = sample_context(key)  # a training pass's seeded sample (engine/data_stream.py)
        item = self.data_source[index]
        view = 0
        if self.view_tfm is not None:
            with rng:
                view = int(torch.randint(self.views.shape[1], (1,)))
        if self.pixels is not None:
            img = self.finish(torch.from_numpy(np.array(self.pixels.arrays["pixels"][index, view])))
        elif self.view_tfm is None:
            img = self.transform(load_image(item.impath, self.decoder))
        else:
            img = self.view_tfm(load_image(item.impath, self.decoder), self.views[index, view].tolist())
        return {"img": img, "label": item.label, "domain": item.domain, "impath": item.impath, "index": index,
                "view": view}


@dataclass
class TeacherCache:
    """Stored teacher features of one training split, the views they were computed on and (``TEACHER_CACHE_IMAGES``)
    the decoded views."""

    path: str
    features: torch.Tensor  # [N, K, D] float32
    views: torch.Tensor  # [N, K, 5] int64
    pixels: ArrayFile | None = None  # arrays "pixels" [N, K, 3, H, W] uint8 and "views" [N, K, 5] int64

    def lookup(self, batch: dict) -> torch.Tensor:
        """Features [B, D] of a batch from a ``CachedViewDataset`` loader (its ``index`` and ``view``)."""
        return self.features[batch["index"], batch["view"]]


def teacher_digest(teacher: torch.nn.Module) -> str:
    """sha256 of the teacher's weights (names, dtypes, shapes and values of the tensors of its state dict; extra
    state such as the prompts' metadata, which names the checkpoint's path, is left out)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(teacher.state_dict().items()):
        if not torch.is_tensor(tensor):
            continue
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().reshape(-1).cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _corrupt(path: str, error: Exception) -> ValueError:
    return corrupt_cache("teacher cache file", path, error)


def _read(meta_path: str, data_path: str, key: str) -> tuple[dict, TeacherCache | None]:
    """The stored metadata and, when its key is ``key`` and the data file exists, the cache itself."""
    try:
        with open_input(meta_path, "cache", text=True) as f:
            meta = load_json(f)
        if not isinstance(meta, dict):
            raise ValueError(f"a {type(meta).__name__}, not a JSON object")
    except (OSError, ValueError) as e:
        raise _corrupt(meta_path, e) from None
    if meta.get("key") != key or not os.path.isfile(data_path):
        return meta, None
    try:
        with open_input(data_path, "cache") as f:
            data = torch.load(f, map_location="cpu", weights_only=True)
        features, views = data["features"], data["views"]
        if data["key"] != key or features.shape[:2] != views.shape[:2] or features.shape[0] != meta["num_images"]:
            raise ValueError("its contents do not match its .json file")
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same one-line advice
        raise _corrupt(data_path, e) from None
    return meta, TeacherCache(data_path, features, views)


def _read_pixels(path: str, key: str, made_from: dict, shape: tuple[int, ...]) -> ArrayFile | None:
    """The stored decoded views at ``path`` when their key is ``key`` (``engine.array_file.open_keyed``)."""
    stored = open_keyed(path, key, made_from, "Decoded views")
    if stored is not None and (stored.arrays["pixels"].shape != shape or stored.arrays["views"].shape != shape[:2]
                               + (5,)):
        raise corrupt_cache("Decoded views", path, ValueError(f"its arrays are not of shape {shape}"))
    return stored


def _loader(dataset: Dataset, k: int, batch_size: int, num_workers: int, device: torch.device) -> DataLoader:
    """The build's loader: about ``batch_size`` views per batch, in dataset order."""
    return DataLoader(dataset, batch_size=max(1, batch_size // k), num_workers=num_workers,
                      pin_memory=device.type == "cuda", worker_init_fn=worker_init_fn())


def _store_pixels(path: str, key: str, made_from: dict, shape: tuple[int, ...], dataset: ViewBuildDataset,
                  batch_size: int, num_workers: int, desc: str) -> None:
    """Decode every view of ``dataset`` once and write them (uint8) and their parameters to ``path``."""

    def fill(writer: ArrayWriter) -> None:
        for batch in tqdm(_loader(dataset, shape[1], batch_size, num_workers, torch.device("cpu")), desc=desc):
            for index, pixels, views in zip(batch["index"].tolist(), batch["pixels"], batch["views"]):
                writer.put("views", index, views.numpy())
                writer.put("pixels", index, pixels.numpy())

    write_arrays(path, key, made_from, {"views": ("int64", shape[:2] + (5,)), "pixels": ("uint8", shape)}, fill)


@torch.no_grad()
def _build(encode: Callable[[torch.Tensor], torch.Tensor], dataset: ViewBuildDataset, device: torch.device,
           batch_size: int, num_workers: int, desc: str) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = len(dataset), dataset.k
    features, views = None, torch.zeros(n, k, 5, dtype=torch.long)
    for batch in tqdm(_loader(dataset, k, batch_size, num_workers, device), desc=desc):
        out = encode(batch["img"].flatten(0, 1).to(device, non_blocking=True)).float().cpu()
        if features is None:
            features = torch.zeros(n, k, out.shape[-1])
        features[batch["index"]] = out.view(-1, k, out.shape[-1])
        views[batch["index"]] = batch["views"]
    return features, views


def load_or_build(cfg, split: str, source: Sequence[Datum], mode: str, k: int, teacher_key: str,
                  encode: Callable[[torch.Tensor], torch.Tensor], precision: str, fixed_tfm: Callable,
                  cache_dir: str, device: torch.device, images: bool = False) -> TeacherCache:
    """The teacher cache of ``source`` (``split``), read from ``cache_dir`` or (re)built with ``encode``;
    ``teacher_key`` is the teacher's ``teacher_digest``; with ``images`` also the decoded views.

    Under torchrun, rank 0 checks or builds the files first while the other processes wait, then they read them.
    Building leaves the global RNG as it was (the DataLoaders it iterates draw their base seeds from it), so a run
    that builds the cache trains exactly as one that reads it.
    """
    distributed = dist.is_available() and dist.is_initialized()
    if distributed and dist.get_rank() != 0:
        dist.barrier()
    with torch.random.fork_rng(devices=[]):  # a build's loaders draw from the global RNG: the run must not see it
        cache = _load_or_build(cfg, split, source, mode, k, teacher_key, encode, precision, fixed_tfm, cache_dir,
                               device, images)
    if distributed and dist.get_rank() == 0:
        dist.barrier()
    return cache


def _load_or_build(cfg, split: str, source: Sequence[Datum], mode: str, k: int, teacher_key: str,
                   encode: Callable[[torch.Tensor], torch.Tensor], precision: str, fixed_tfm: Callable,
                   cache_dir: str, device: torch.device, images: bool) -> TeacherCache:
    view_tfm = ViewTransform.from_cfg(cfg) if mode == "views" else None
    k = k if mode == "views" else 1
    paths = [item.impath for item in source]
    made_from = {"images": _sha(paths), "image_bytes": files_digest(paths), "teacher": teacher_key,
                 "precision": precision, "transform": repr(view_tfm) if view_tfm else repr(fixed_tfm), "views": k,
                 "view_seed": VIEW_SEED}
    decoder = view_tfm.decoder if view_tfm else decoder_for(fixed_tfm)
    if decoder != "pil":
        made_from["decoder"] = decoder
    key = _sha(made_from)
    name = f"{cfg.DATASET.NAME}_{split}_{mode}_{made_from['images'][:12]}"
    data_path, meta_path = os.path.join(cache_dir, f"{name}.pt"), os.path.join(cache_dir, f"{name}.json")
    declare_cache(cache_dir, "the teacher cache")
    cache = None
    if os.path.isfile(meta_path):
        meta, cache = _read(meta_path, data_path, key)
        if cache is None:
            changed = [what for what in ("image_bytes", "teacher", "precision", "transform", "views", "decoder")
                       if meta.get("made_from", {}).get(what) != made_from.get(what)] or ["data file missing"]
            print(f"Teacher cache {data_path} is stale ({', '.join(changed)} changed); rebuilding it")
    batch, workers = cfg.DATALOADER.TEST.BATCH_SIZE, cfg.DATALOADER.NUM_WORKERS
    stored = None
    if images:
        pixel_made_from = {what: v for what, v in made_from.items() if what not in ("teacher", "precision")}
        pixel_key, pixel_path = _sha(pixel_made_from), os.path.join(cache_dir, f"{name}.pixels")
        shape = (len(source), k, 3, *cfg.INPUT.SIZE)
        stored = _read_pixels(pixel_path, pixel_key, pixel_made_from, shape)
        if stored is None:
            print(f"Storing the decoded views {pixel_path} ({len(source):,} images x {k} view(s), "
                  f"{np.prod(shape) / 2**30:.2f} GiB)")
            _store_pixels(pixel_path, pixel_key, pixel_made_from, shape,
                          ViewBuildDataset(source, k, view_tfm, fixed_tfm, keep_pixels=True), batch, workers,
                          f"decoded views {split}")
            stored = _read_pixels(pixel_path, pixel_key, pixel_made_from, shape)
        else:
            print(f"Decoded views {pixel_path}: {len(source):,} images x {k} view(s), up to date")
    if cache is not None:
        print(f"Teacher cache {data_path}: {len(source):,} images x {k} view(s), up to date")
        cache.pixels = stored
        return cache
    print(f"Building the teacher cache {data_path} ({mode}: {len(source):,} images x {k} view(s)"
          + (", from the decoded views)" if stored is not None else ")"))
    dataset = ViewBuildDataset(source, k, view_tfm, fixed_tfm, stored=stored)
    features, views = _build(encode, dataset, device, batch, workers, f"teacher cache {split}")
    atomic_torch_save({"key": key, "features": features, "views": views}, data_path)
    write_json({"key": key, "mode": mode, "split": split, "dataset": cfg.DATASET.NAME, "num_images": len(source),
                "feature_dim": features.shape[-1], "made_from": made_from}, meta_path)
    return TeacherCache(data_path, features, views, stored)


def cached_loader(cfg, split: str, source: Sequence[Datum], cache: TeacherCache, mode: str,
                  fixed_tfm: Callable) -> DataLoader:
    """The training loader of ``split`` (its usual sampler and batch size) yielding stored views (decoded ones when
    the cache holds them)."""
    dl = cfg.DATALOADER
    settings = dl.TRAIN_X if split == "train_x" or dl.TRAIN_U.SAME_AS_X else dl.TRAIN_U
    view_tfm = ViewTransform.from_cfg(cfg) if mode == "views" else None
    wrapper = partial(CachedViewDataset, views=cache.views, view_tfm=view_tfm, pixels=cache.pixels)
    return build_data_loader(cfg, settings.SAMPLER, source, settings.BATCH_SIZE, settings.N_DOMAIN, settings.N_INS,
                             tfm=fixed_tfm, is_train=True, dataset_wrapper=wrapper)
