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
the image paths, the transform and the teacher's weights and precision; when any of them changes the files are
rebuilt. Size: N · K · D · 4 bytes (docs/throughput.md, teacher cache, gives ImageNet's).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import functional as TF
from tqdm import tqdm

from engine.checkpoint import atomic_torch_save
from engine.data_manager import build_data_loader
from engine.data_stream import sample_context
from engine.dataset_base import Datum
from engine.errors import ConfigError
from engine.inputs import declare_cache, open_input
from engine.preemption import worker_init_fn
from engine.transforms import INTERPOLATION_MODES
from engine.utils import read_image, write_json

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
    """Applies stored view parameters to a PIL image: crop + resize to ``size``, flip, to tensor, normalise."""

    size: tuple[int, int]
    interpolation: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale: tuple[float, float]
    crop: bool
    flip: bool
    normalize: bool

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
                   "random_flip" in choices, "normalize" in choices)

    def sample(self, image, index: int, k: int) -> list[list[int]]:
        """The K views of the image at ``index``: the same for the same index, whatever the process."""
        generator = torch.Generator().manual_seed(VIEW_SEED * 1_000_003 + index)
        return [sample_view(image.width, image.height, self.scale, self.crop, self.flip, generator)
                for _ in range(k)]

    def __call__(self, image, view: Sequence[int]) -> torch.Tensor:
        top, left, h, w, flipped = (int(v) for v in view)
        out = TF.resized_crop(image, top, left, h, w, list(self.size), INTERPOLATION_MODES[self.interpolation])
        if flipped:
            out = TF.hflip(out)
        tensor = TF.to_tensor(out)
        return TF.normalize(tensor, list(self.mean), list(self.std)) if self.normalize else tensor


def check_cache_mode(cfg, mode: str) -> None:
    """For ``views``: raise ConfigError when INPUT.TRANSFORMS holds transforms that cannot be stored (the mode itself
    is one of ``CACHE_MODES``: the config schema checks it)."""
    if mode == "views":
        ViewTransform.from_cfg(cfg)


class _BuildDataset(Dataset):
    """All K views of one image (stacked) with their parameters, for the teacher's one-off forward."""

    def __init__(self, source: Sequence[Datum], k: int, view_tfm: ViewTransform | None, fixed_tfm: Callable | None):
        self.source, self.k, self.view_tfm, self.fixed_tfm = source, k, view_tfm, fixed_tfm

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict:
        image = read_image(self.source[index].impath)
        if self.view_tfm is None:
            return {"img": self.fixed_tfm(image)[None], "views": torch.zeros(1, 5, dtype=torch.long), "index": index}
        views = self.view_tfm.sample(image, index, self.k)
        return {"img": torch.stack([self.view_tfm(image, v) for v in views]),
                "views": torch.tensor(views, dtype=torch.long), "index": index}


class CachedViewDataset(Dataset):
    """Training items whose image is one stored view (chosen at random among K), with ``index`` and ``view``."""

    def __init__(self, cfg, data_source: Sequence[Datum], transform=None, is_train: bool = True,
                 views: torch.Tensor | None = None, view_tfm: ViewTransform | None = None):
        self.data_source, self.transform, self.views, self.view_tfm = data_source, transform, views, view_tfm

    def __len__(self) -> int:
        return len(self.data_source)

    def __getitem__(self, key) -> dict:
        index, rng = sample_context(key)  # a training pass's seeded sample (engine/data_stream.py)
        item = self.data_source[index]
        image = read_image(item.impath)
        if self.view_tfm is None:
            view, img = 0, self.transform(image)
        else:
            with rng:
                view = int(torch.randint(self.views.shape[1], (1,)))
            img = self.view_tfm(image, self.views[index, view].tolist())
        return {"img": img, "label": item.label, "domain": item.domain, "impath": item.impath, "index": index,
                "view": view}


@dataclass
class TeacherCache:
    """Stored teacher features of one training split and the views they were computed on."""

    path: str
    features: torch.Tensor  # [N, K, D] float32
    views: torch.Tensor  # [N, K, 5] int64

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
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return ValueError(f"teacher cache file {path} is corrupt or unreadable ({reason}); delete it to rebuild the "
                      f"cache")


def _read(meta_path: str, data_path: str, key: str) -> tuple[dict, TeacherCache | None]:
    """The stored metadata and, when its key is ``key`` and the data file exists, the cache itself."""
    try:
        with open_input(meta_path, "cache", text=True) as f:
            meta = json.load(f)
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


@torch.no_grad()
def _build(encode: Callable[[torch.Tensor], torch.Tensor], source: Sequence[Datum], k: int,
           view_tfm: ViewTransform | None, fixed_tfm: Callable | None, device: torch.device, batch_size: int,
           num_workers: int, desc: str) -> tuple[torch.Tensor, torch.Tensor]:
    loader = DataLoader(_BuildDataset(source, k, view_tfm, fixed_tfm), batch_size=max(1, batch_size // k),
                        num_workers=num_workers, pin_memory=device.type == "cuda", worker_init_fn=worker_init_fn())
    features, views = None, torch.zeros(len(source), k, 5, dtype=torch.long)
    for batch in tqdm(loader, desc=desc):
        out = encode(batch["img"].flatten(0, 1).to(device, non_blocking=True)).float().cpu()
        if features is None:
            features = torch.zeros(len(source), k, out.shape[-1])
        features[batch["index"]] = out.view(-1, k, out.shape[-1])
        views[batch["index"]] = batch["views"]
    return features, views


def load_or_build(cfg, split: str, source: Sequence[Datum], mode: str, k: int, teacher_key: str,
                  encode: Callable[[torch.Tensor], torch.Tensor], precision: str, fixed_tfm: Callable,
                  cache_dir: str, device: torch.device) -> TeacherCache:
    """The teacher cache of ``source`` (``split``), read from ``cache_dir`` or (re)built with ``encode``;
    ``teacher_key`` is the teacher's ``teacher_digest``.

    Under torchrun, rank 0 checks or builds the files first while the other processes wait, then they read them.
    """
    distributed = dist.is_available() and dist.is_initialized()
    if distributed and dist.get_rank() != 0:
        dist.barrier()
    cache = _load_or_build(cfg, split, source, mode, k, teacher_key, encode, precision, fixed_tfm, cache_dir, device)
    if distributed and dist.get_rank() == 0:
        dist.barrier()
    return cache


def _load_or_build(cfg, split: str, source: Sequence[Datum], mode: str, k: int, teacher_key: str,
                   encode: Callable[[torch.Tensor], torch.Tensor], precision: str, fixed_tfm: Callable,
                   cache_dir: str, device: torch.device) -> TeacherCache:
    view_tfm = ViewTransform.from_cfg(cfg) if mode == "views" else None
    k = k if mode == "views" else 1
    paths = [item.impath for item in source]
    made_from = {"images": _sha(paths), "teacher": teacher_key, "precision": precision,
                 "transform": repr(view_tfm) if view_tfm else repr(fixed_tfm), "views": k, "view_seed": VIEW_SEED}
    key = _sha(made_from)
    name = f"{cfg.DATASET.NAME}_{split}_{mode}_{made_from['images'][:12]}"
    data_path, meta_path = os.path.join(cache_dir, f"{name}.pt"), os.path.join(cache_dir, f"{name}.json")
    declare_cache(cache_dir, "the teacher cache")
    if os.path.isfile(meta_path):
        meta, cache = _read(meta_path, data_path, key)
        if cache is not None:
            print(f"Teacher cache {data_path}: {len(source):,} images x {k} view(s), up to date")
            return cache
        changed = [what for what in ("teacher", "precision", "transform", "views")
                   if meta.get("made_from", {}).get(what) != made_from[what]] or ["data file missing"]
        print(f"Teacher cache {data_path} is stale ({', '.join(changed)} changed); rebuilding it")
    print(f"Building the teacher cache {data_path} ({mode}: {len(source):,} images x {k} view(s))")
    features, views = _build(encode, source, k, view_tfm, fixed_tfm, device, cfg.DATALOADER.TEST.BATCH_SIZE,
                             cfg.DATALOADER.NUM_WORKERS, f"teacher cache {split}")
    atomic_torch_save({"key": key, "features": features, "views": views}, data_path)
    write_json({"key": key, "mode": mode, "split": split, "dataset": cfg.DATASET.NAME, "num_images": len(source),
                "feature_dim": features.shape[-1], "made_from": made_from}, meta_path)
    return TeacherCache(data_path, features, views)


def cached_loader(cfg, split: str, source: Sequence[Datum], cache: TeacherCache, mode: str,
                  fixed_tfm: Callable) -> DataLoader:
    """The training loader of ``split`` (its usual sampler and batch size) yielding stored views."""
    dl = cfg.DATALOADER
    settings = dl.TRAIN_X if split == "train_x" or dl.TRAIN_U.SAME_AS_X else dl.TRAIN_U
    view_tfm = ViewTransform.from_cfg(cfg) if mode == "views" else None
    wrapper = partial(CachedViewDataset, views=cache.views, view_tfm=view_tfm)
    return build_data_loader(cfg, settings.SAMPLER, source, settings.BATCH_SIZE, settings.N_DOMAIN, settings.N_INS,
                             tfm=fixed_tfm, is_train=True, dataset_wrapper=wrapper)
