"""Dassl's image transforms on uint8 tensors (``INPUT.DECODER tensor``, engine/decoding.py decodes the files).

The geometric steps run on uint8 tensors with torchvision.transforms.v2's functional ops, antialiased as PIL
resamples; the image becomes float in [0, 1] (``ToTensor``'s value / 255) and is normalised last. The random
parameters are drawn by the same torchvision calls, in the same order, as engine/transforms.py's PIL pipeline, on the
full image's size, so a seeded pass draws the same crops and flips with either decoder. The first step asks the image
for its region (``region``), which a JPEG may decode reduced in the DCT (engine/decoding.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F

TENSOR_TRANSFORMS = ("random_resized_crop", "random_flip", "resize", "center_crop", "normalize", "instance_norm")
"""The ``INPUT.TRANSFORMS`` choices the tensor pipeline runs (the CoOp, PromptKD and PETR configs use three)."""
RATIO = (3.0 / 4.0, 4.0 / 3.0)
"""Aspect-ratio range of the random resized crop (torchvision's default, which Dassl keeps)."""


class InstanceNormalization:
    """Normalise each channel of a CHW tensor by its own mean and std."""

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        flat = img.flatten(1)
        mean = flat.mean(1).view(-1, 1, 1)
        std = flat.std(1).view(-1, 1, 1)
        return (img - mean) / (std + 1e-8)


def dims_of(height: int, width: int) -> torch.Tensor:
    """A stand-in for a 3-channel image of this size (no memory: one element, expanded) for torchvision's
    ``get_params``, which reads only the size."""
    return torch.zeros(1, dtype=torch.uint8).expand(3, height, width)


def resized_size(height: int, width: int, size: int) -> tuple[int, int]:
    """(height, width) of an image resized so that its shorter side is ``size`` (torchvision's ``Resize(int)`` rule:
    the longer side truncated)."""
    if width <= height:
        return int(size * height / width), size
    return size, int(size * width / height)


def resized_crop(pixels: torch.Tensor, box: Sequence[int], size: Sequence[int], interpolation: str) -> torch.Tensor:
    """The ``box`` (top, left, height, width) of uint8 [3, H, W] resized to ``size`` (antialiased, as PIL resamples);
    the crop itself when it has that size already."""
    crop = F.crop(pixels, *box)
    if tuple(crop.shape[1:]) == tuple(size):
        return crop
    return F.resize(crop, list(size), InterpolationMode(interpolation), antialias=True)


@dataclass(frozen=True)
class TensorTransform:
    """A train or test transform of engine/transforms.py on uint8 tensors: ``steps`` in Dassl's order (``resize``
    (h, w) / ``resize_short`` side / ``random_resized_crop`` (h, w) / ``center_crop`` (h, w) / ``random_flip``),
    then float in [0, 1] and the normalisations. Called on an image with ``size`` (width, height) and ``region(box,
    size, interpolation)`` (engine/decoding.py's ``ImageFile``, a cached image); :meth:`pixels` and :meth:`finish`
    are its two halves (a cache stores the uint8 half)."""

    steps: tuple[tuple, ...]
    interpolation: str
    scale: tuple[float, float]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    normalize: bool
    instance_norm: bool

    def __call__(self, image) -> torch.Tensor:
        return self.finish(self.pixels(image))

    def pixels(self, image) -> torch.Tensor:
        """The transformed image as uint8 [3, h, w]; the first step's random parameters are drawn on the image's full
        size and its region is read from the image as reduced as the image allows."""
        width, height = image.size
        steps = list(self.steps)
        kind, arg = steps[0] if steps else ("", None)
        if kind == "random_resized_crop":
            box = T.RandomResizedCrop.get_params(dims_of(height, width), list(self.scale), list(RATIO))
            pixels = image.region(box, arg, self.interpolation)
            steps.pop(0)
        elif kind in ("resize", "resize_short"):
            target = arg if kind == "resize" else resized_size(height, width, arg)
            pixels = image.region((0, 0, height, width), target, self.interpolation)
            steps.pop(0)
        else:
            pixels = image.region((0, 0, height, width), (height, width), self.interpolation)
        for kind, arg in steps:
            pixels = self._step(pixels, kind, arg)
        return pixels

    def _step(self, pixels: torch.Tensor, kind: str, arg) -> torch.Tensor:
        if kind == "random_resized_crop":
            box = T.RandomResizedCrop.get_params(pixels, list(self.scale), list(RATIO))
            return resized_crop(pixels, box, arg, self.interpolation)
        if kind == "random_flip":
            return F.horizontal_flip(pixels) if torch.rand(1) < 0.5 else pixels
        if kind == "center_crop":
            return F.center_crop(pixels, list(arg))
        target = arg if kind == "resize" else resized_size(*pixels.shape[1:], arg)
        return resized_crop(pixels, (0, 0, *pixels.shape[1:]), target, self.interpolation)

    def finish(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 [3, h, w] -> float32 in [0, 1] (``ToTensor``'s division), normalised as configured."""
        return finish_pixels(pixels, self.mean, self.std, self.normalize, self.instance_norm)


def finish_pixels(pixels: torch.Tensor, mean: Sequence[float], std: Sequence[float], normalize: bool,
                  instance_norm: bool = False) -> torch.Tensor:
    """uint8 [3, h, w] -> float32 as ``ToTensor`` makes it (value / 255), then ``Normalize(mean, std)`` and instance
    normalisation where asked: on pixels a PIL transform made, the very tensor the PIL pipeline gives."""
    tensor = pixels.to(torch.float32).div(255)
    if normalize:
        tensor = F.normalize(tensor, list(mean), list(std))
    return InstanceNormalization()(tensor) if instance_norm else tensor


def tensor_transform(cfg, is_train: bool, choices: Sequence[str]) -> TensorTransform:
    """The tensor decoder's version of ``build_transform(cfg, is_train, choices)``: the same steps, printed with the
    same lines."""
    size = tuple(cfg.INPUT.SIZE)
    steps: list[tuple] = []
    if is_train:
        print("Building transform_train (INPUT.DECODER tensor: uint8 tensors)")
        random_crops = "random_crop" in choices or "random_resized_crop" in choices
        if "resize" in choices or not random_crops:
            print(f"+ resize to {size[0]}x{size[1]}")
            steps.append(("resize", size))
        if "random_resized_crop" in choices:
            print(f"+ random resized crop (size={size}, scale={tuple(cfg.INPUT.RRCROP_SCALE)})")
            steps.append(("random_resized_crop", size))
        if "center_crop" in choices:
            print(f"+ {size[0]}x{size[1]} center crop")
            steps.append(("center_crop", size))
        if "random_flip" in choices:
            print("+ random flip")
            steps.append(("random_flip", None))
    else:
        print("Building transform_test (INPUT.DECODER tensor: uint8 tensors)")
        print(f"+ resize the smaller edge to {max(size)}")
        print(f"+ {size[0]}x{size[1]} center crop")
        steps = [("resize_short", max(size)), ("center_crop", size)]
    print("+ to torch tensor of range [0, 1]")
    if "normalize" in choices:
        print(f"+ normalization (mean={cfg.INPUT.PIXEL_MEAN}, std={cfg.INPUT.PIXEL_STD})")
    if "instance_norm" in choices:
        print("+ instance normalization")
    return TensorTransform(tuple(steps), cfg.INPUT.INTERPOLATION, tuple(cfg.INPUT.RRCROP_SCALE),
                           tuple(cfg.INPUT.PIXEL_MEAN), tuple(cfg.INPUT.PIXEL_STD), "normalize" in choices,
                           "instance_norm" in choices)


