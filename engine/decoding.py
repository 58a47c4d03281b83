"""``INPUT.DECODER``: how a run turns its image files into tensors.

* ``pil`` (default, Dassl's path): PIL decodes the file and the transforms of engine/transforms.py run on the PIL
  image, ``ToTensor`` making it float before normalisation.
* ``tensor``: the file is decoded to a uint8 tensor (torchvision.io's libjpeg-turbo for JPEG, PIL for other formats)
  and the same transforms run on it (engine/tensor_transforms.py). Where a JPEG holds at least twice what the
  first transform keeps (a random resized crop's box, a resize's target size), it is decoded reduced by 2, 4 or 8 in
  the DCT (PIL's draft mode, libjpeg's scaled decoding), so the pixels the resize would average away are never made,
  and PIL resamples the box from there (its fractional coordinates in the reduced image: the same region).

The random parameters are the same with either decoder (a seeded pass draws the same crops and flips and resumes the
same); the pixels differ by resampling, which tests/test_decoding.py bounds. docs/throughput.md measures the speed.
"""
from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torchvision.io as tio
from PIL import Image
from torchvision import transforms as T

from .errors import ConfigError
from .tensor_transforms import TENSOR_TRANSFORMS, TensorTransform, resized_crop
from .utils import image_errors, read_image, to_rgb

DECODERS = ("pil", "tensor")
"""The values of ``INPUT.DECODER``."""
DRAFT_SCALES = (8, 4, 2)
"""The reductions of libjpeg's scaled decoding that PIL's draft mode offers (besides none)."""
PIL_RESAMPLING = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}
"""PIL's filter of each ``INPUT.INTERPOLATION``."""


def decoder_of(cfg) -> str:
    """The run's ``INPUT.DECODER`` (``pil`` in a Dassl tree without the key)."""
    return cfg.INPUT.get("DECODER", "pil")


def check_decoder(cfg) -> None:
    """ConfigError when ``INPUT.DECODER tensor`` meets a transform or loader option it does not cover."""
    if decoder_of(cfg) != "tensor":
        return
    other = [c for c in cfg.INPUT.TRANSFORMS if c not in TENSOR_TRANSFORMS]
    if other:
        raise ConfigError(f"INPUT.DECODER tensor runs the transforms {list(TENSOR_TRANSFORMS)}, but INPUT.TRANSFORMS "
                          f"has {other}; drop them or use INPUT.DECODER pil")
    if cfg.DATALOADER.RETURN_IMG0:
        raise ConfigError("DATALOADER.RETURN_IMG0 True needs INPUT.DECODER pil (the tensor decoder makes no "
                          "untransformed copy); set one of them")


class ImageFile:
    """An image file whose header is read (size, format) and whose pixels are decoded on demand as uint8 [3, H, W],
    at full size or, for a JPEG, reduced in the DCT (``draft``: whether it may be; the benchmark turns it off). Each
    decode is kept, so several regions of one image (a teacher cache's K views) decode it once per scale."""

    def __init__(self, path: str, draft: bool = True) -> None:
        self.path, self.draft = path, draft
        self._decoded: dict[int, torch.Tensor | Image.Image] = {}
        with image_errors(path), open(path, "rb") as f:
            self.data = bytearray(f.read())
            with Image.open(io.BytesIO(self.data)) as img:
                self.format, self.mode, self.size = img.format, img.mode, img.size

    def decode(self) -> torch.Tensor:
        """The whole image, uint8 [3, H, W]."""
        if 1 not in self._decoded:
            with image_errors(self.path, RuntimeError):
                if self.format == "JPEG" and self.mode in ("RGB", "L"):
                    data = torch.frombuffer(self.data, dtype=torch.uint8)
                    self._decoded[1] = tio.decode_jpeg(data, mode=tio.ImageReadMode.RGB)
                else:
                    with Image.open(io.BytesIO(self.data)) as img:
                        self._decoded[1] = as_tensor(to_rgb(img, self.path))
        return self._decoded[1]

    def reduced(self, scale: int) -> Image.Image:
        """The JPEG decoded reduced by ``scale`` in the DCT (draft mode), an RGB PIL image."""
        if scale not in self._decoded:
            width, height = self.size
            with image_errors(self.path), Image.open(io.BytesIO(self.data)) as img:
                img.draft(None, (width // scale, height // scale))
                self._decoded[scale] = to_rgb(img, self.path)
        return self._decoded[scale]

    def region(self, box: Sequence[int], size: Sequence[int], interpolation: str) -> torch.Tensor:
        """The ``box`` (top, left, height, width) of the image resized to ``size`` (height, width), uint8 [3, h, w].
        A JPEG whose box holds at least twice ``size`` on both sides is decoded reduced by the largest of
        :data:`DRAFT_SCALES` that keeps it so, and PIL resamples the box from there (its fractional coordinates in
        the reduced image, within the whole pixels that hold it: the crop's edge as the crop-then-resize of the
        full image has it, to a reduced pixel); any other image is decoded whole and resampled by torch."""
        top, left, height, width = box
        limit = min(height / size[0], width / size[1])
        scale = next((s for s in DRAFT_SCALES if s <= limit), 1) if self.format == "JPEG" and self.draft else 1
        if scale == 1:
            return resized_crop(self.decode(), box, size, interpolation)
        reduced = self.reduced(scale)
        sx, sy = reduced.size[0] / self.size[0], reduced.size[1] / self.size[1]
        area = (left * sx, top * sy, (left + width) * sx, (top + height) * sy)
        outer = (math.floor(area[0]), math.floor(area[1]), math.ceil(area[2]), math.ceil(area[3]))
        inner = (area[0] - outer[0], area[1] - outer[1], area[2] - outer[0], area[3] - outer[1])
        return as_tensor(reduced.crop(outer).resize((size[1], size[0]), PIL_RESAMPLING[interpolation], box=inner))


def as_tensor(image: Image.Image) -> torch.Tensor:
    """An RGB PIL image as uint8 [3, H, W] (contiguous, as ``ToTensor`` lays its result out)."""
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).contiguous()


def load_image(path: str, decoder: str):
    """What a transform of ``decoder`` takes of the image file ``path``: an :class:`ImageFile` (``tensor``), else the
    decoded RGB PIL image."""
    return ImageFile(path) if decoder == "tensor" else read_image(path)


def decoder_for(transform) -> str:
    """The decoder a built transform runs on: ``tensor`` for a ``TensorTransform``, else ``pil``."""
    return "tensor" if isinstance(transform, TensorTransform) else "pil"


def split_stages(transform) -> tuple[Callable, Callable[[torch.Tensor], torch.Tensor]]:
    """``(pixels, finish)`` of a deterministic transform, whose composition is the transform: ``pixels(image)`` is
    the uint8 [3, h, w] a cache can store, ``finish(pixels)`` the float tensor the model sees. A ``TensorTransform``
    has both halves; a PIL ``Compose`` is cut at its ``ToTensor`` (the steps before it, then ``ToTensor``'s division
    and the steps after it), which gives the very tensor the whole ``Compose`` gives."""
    if isinstance(transform, TensorTransform):
        return transform.pixels, transform.finish
    steps = list(transform.transforms)
    cut = next((i for i, step in enumerate(steps) if isinstance(step, T.ToTensor)), None)
    if cut is None:
        raise ValueError(f"{transform!r} has no ToTensor step to store its pixels before")
    before, after = T.Compose(steps[:cut]), T.Compose(steps[cut + 1:])
    return (lambda image: as_tensor(before(image))), (lambda pixels: after(pixels.to(torch.float32).div(255)))
