"""Decoded training images (``DATALOADER.IMAGE_CACHE_SIDE`` > 0): each image of a training split decoded once, its
shorter side brought down to that many pixels (never up), stored uint8 in a memory-mapped array file
(``engine/array_file.py``) in ``DATALOADER.IMAGE_CACHE_DIR`` (default ``<OUTPUT_DIR>/image_cache``), and the training
transform's random crops taken from the stored image: epochs after the first decode nothing.

Meant for the few-shot trainers (CoOp, CoCoOp, MaPLe, IVLP, PromptSRC: 16 images per class, drawn for 10 to 200
epochs). The crops are drawn on the stored image's size, so the augmentation is not the run's without the cache (the
same distribution of crop areas and ratios, over fewer source pixels); it is a setting, off by default. The file is
keyed like the teacher cache (the image paths and bytes, the side, the interpolation and the decoder that resized them),
declared as a cache of the run and read through the inputs ledger; a stale file is written again. Size: the stored
pixels, 3 · side · (side · aspect) bytes per image (196,608 for a 4:3 image at side 256).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from .array_file import ArrayFile, ArrayWriter, open_keyed, write_arrays
from .dataset_base import Datum
from .decoding import PIL_RESAMPLING, as_tensor, decoder_of, load_image
from .digests import files_digest
from .inputs import declare_cache
from .preemption import worker_init_fn
from .tensor_transforms import resized_crop, resized_size


def stored_size(width: int, height: int, side: int) -> tuple[int, int]:
    """(height, width) an image of this size is stored at: the shorter side ``side`` when it is longer, else as is."""
    return (height, width) if min(width, height) <= side else resized_size(height, width, side)


class CachedImage:
    """One stored image, which the transforms take as they take an image file: ``size`` (width, height) and
    ``region`` (engine/tensor_transforms.py), or as a PIL image (:meth:`pil`)."""

    def __init__(self, pixels: np.ndarray) -> None:
        self.pixels = pixels  # uint8 [H, W, 3], a view of the mapped file
        self.size = (pixels.shape[1], pixels.shape[0])

    def region(self, box: Sequence[int], size: Sequence[int], interpolation: str) -> torch.Tensor:
        return resized_crop(torch.from_numpy(np.array(self.pixels)).permute(2, 0, 1), box, size, interpolation)

    def pil(self) -> Image.Image:
        return Image.fromarray(np.array(self.pixels))


class ImageCache:
    """The stored images of one training split, in its order."""

    def __init__(self, stored: ArrayFile) -> None:
        self.stored = stored
        self.index = stored.arrays["index"]  # [N, 3]: offset, height, width

    def __len__(self) -> int:
        return len(self.index)

    def image(self, index: int, decoder: str):
        """The image at ``index`` as a transform of ``decoder`` takes it."""
        offset, height, width = (int(v) for v in self.index[index])
        image = CachedImage(self.stored.arrays["pixels"][offset:offset + height * width * 3].reshape(height, width, 3))
        return image if decoder == "tensor" else image.pil()


class _Decode(Dataset):
    """Each image of a split, decoded and brought to its stored size (uint8 [H, W, 3])."""

    def __init__(self, source: Sequence[Datum], side: int, interpolation: str, decoder: str) -> None:
        self.source, self.side, self.interpolation, self.decoder = source, side, interpolation, decoder

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> torch.Tensor:
        image = load_image(self.source[index].impath, self.decoder)
        height, width = stored_size(*image.size, self.side)
        if self.decoder == "tensor":
            pixels = image.region((0, 0, image.size[1], image.size[0]), (height, width), self.interpolation)
        else:
            pixels = as_tensor(image.resize((width, height), PIL_RESAMPLING[self.interpolation]))
        return pixels.permute(1, 2, 0).contiguous()


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _write(path: str, key: str, made_from: dict, source: Sequence[Datum], side: int, interpolation: str,
           decoder: str, workers: int) -> None:
    def fill(writer: ArrayWriter) -> None:
        loader = DataLoader(_Decode(source, side, interpolation, decoder), batch_size=None, num_workers=workers,
                            worker_init_fn=worker_init_fn())
        for index, pixels in enumerate(loader):
            offset = writer.append(pixels.numpy())
            writer.put("index", index, np.array([offset, pixels.shape[0], pixels.shape[1]]))

    write_arrays(path, key, made_from, {"index": ("int64", (len(source), 3)), "pixels": ("uint8", (None,))}, fill)


def load_or_build(cfg, split: str, source: Sequence[Datum]) -> ImageCache:
    """The stored images of ``source`` (training split ``split``), read or written first (under torchrun rank 0
    writes while the other processes wait)."""
    distributed = dist.is_available() and dist.is_initialized()
    if distributed and dist.get_rank() != 0:
        dist.barrier()
    side, interpolation, decoder = cfg.DATALOADER.IMAGE_CACHE_SIDE, cfg.INPUT.INTERPOLATION, decoder_of(cfg)
    folder = cfg.DATALOADER.IMAGE_CACHE_DIR or os.path.join(cfg.OUTPUT_DIR, "image_cache")
    paths = [item.impath for item in source]
    made_from = {"images": _sha(paths), "image_bytes": files_digest(paths), "side": side,
                 "interpolation": interpolation, "decoder": decoder}
    key = _sha(made_from)
    path = os.path.join(folder, f"{cfg.DATASET.NAME}_{split}_{made_from['images'][:12]}_side{side}.pixels")
    declare_cache(folder, "decoded training images")
    stored = open_keyed(path, key, made_from, "Image cache")
    if stored is None:
        print(f"Decoding {len(source):,} {split} images once into {path} (shorter side at most {side} px)")
        with torch.random.fork_rng(devices=[]):  # its loader draws from the global RNG: the run must not see it
            _write(path, key, made_from, source, side, interpolation, decoder, cfg.DATALOADER.NUM_WORKERS)
        stored = open_keyed(path, key, made_from, "Image cache")
    else:
        print(f"Image cache {path}: {len(source):,} images, up to date")
    if distributed and dist.get_rank() == 0:
        dist.barrier()
    return ImageCache(stored)
