"""Image transforms built from ``cfg.INPUT`` with Dassl's choice names, order and ``+ ...`` log lines."""
from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode

from .decoding import decoder_of
from .tensor_transforms import InstanceNormalization, tensor_transform

AVAI_CHOICES = (
    "random_flip",
    "random_resized_crop",
    "normalize",
    "instance_norm",
    "random_crop",
    "random_translation",
    "center_crop",
    "resize",
    "cutout",
    "colorjitter",
    "randomgrayscale",
    "gaussian_blur",
    "gaussian_noise",
)
"""Transform names accepted in ``INPUT.TRANSFORMS`` (Dassl's names; auto-augment policies are not provided)."""

INTERPOLATION_MODES = {
    "bilinear": InterpolationMode.BILINEAR,
    "bicubic": InterpolationMode.BICUBIC,
    "nearest": InterpolationMode.NEAREST,
}


class Random2DTranslation:
    """With probability ``p`` enlarge the image by 1/8 and crop it back at a random place; else plain resize."""

    def __init__(self, height: int, width: int, p: float = 0.5, interpolation=InterpolationMode.BILINEAR) -> None:
        self.height, self.width, self.p, self.interpolation = height, width, p, interpolation

    def __call__(self, img: Image.Image) -> Image.Image:
        if random.uniform(0, 1) > self.p:
            return T.functional.resize(img, [self.height, self.width], self.interpolation)
        new_h, new_w = round(self.height * 1.125), round(self.width * 1.125)
        resized = T.functional.resize(img, [new_h, new_w], self.interpolation)
        top = int(round(random.uniform(0, new_h - self.height)))
        left = int(round(random.uniform(0, new_w - self.width)))
        return T.functional.crop(resized, top, left, self.height, self.width)


class Cutout:
    """Zero ``n_holes`` square patches of side ``length`` in a CHW tensor (DeVries & Taylor)."""

    def __init__(self, n_holes: int = 1, length: int = 16) -> None:
        self.n_holes, self.length = n_holes, length

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        h, w = img.shape[-2:]
        mask = torch.ones(h, w, dtype=img.dtype)
        for _ in range(self.n_holes):
            y, x = random.randrange(h), random.randrange(w)
            y1, y2 = max(0, y - self.length // 2), min(h, y + self.length // 2)
            x1, x2 = max(0, x - self.length // 2), min(w, x + self.length // 2)
            mask[y1:y2, x1:x2] = 0
        return img * mask


class GaussianNoise:
    """Add N(mean, std) noise to a tensor with probability ``p``."""

    def __init__(self, mean: float = 0.0, std: float = 0.15, p: float = 0.5) -> None:
        self.mean, self.std, self.p = mean, std, p

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if random.uniform(0, 1) > self.p:
            return img
        return img + torch.randn(img.size()) * self.std + self.mean


def _check_choices(choices: Sequence[str]) -> None:
    unknown = [c for c in choices if c not in AVAI_CHOICES]
    if unknown:
        raise ValueError(
            f"Unknown transform(s) {unknown} in INPUT.TRANSFORMS; allowed: {', '.join(AVAI_CHOICES)}"
        )


def _interpolation(cfg) -> InterpolationMode:
    name = cfg.INPUT.INTERPOLATION
    if name not in INTERPOLATION_MODES:
        raise ValueError(f"Unknown INPUT.INTERPOLATION {name!r}; allowed: {', '.join(INTERPOLATION_MODES)}")
    return INTERPOLATION_MODES[name]


def build_transform(cfg, is_train: bool = True, choices: Sequence[str] | None = None):
    """Compose the train or test transform for ``choices`` (default ``cfg.INPUT.TRANSFORMS``); None if disabled.
    With ``INPUT.DECODER tensor`` the same steps on uint8 tensors (engine/tensor_transforms.py)."""
    if cfg.INPUT.NO_TRANSFORM:
        print("Note: no transform is applied!")
        return None
    choices = list(cfg.INPUT.TRANSFORMS if choices is None else choices)
    _check_choices(choices)
    if decoder_of(cfg) == "tensor":
        return tensor_transform(cfg, is_train, choices)
    normalize = T.Normalize(mean=cfg.INPUT.PIXEL_MEAN, std=cfg.INPUT.PIXEL_STD)
    if is_train:
        return _build_transform_train(cfg, choices, normalize)
    return _build_transform_test(cfg, choices, normalize)


def _build_transform_train(cfg, choices: list[str], normalize: T.Normalize) -> T.Compose:
    print("Building transform_train")
    interp = _interpolation(cfg)
    size = tuple(cfg.INPUT.SIZE)
    tfm: list = []
    random_crops = "random_crop" in choices or "random_resized_crop" in choices
    if "resize" in choices or not random_crops:
        print(f"+ resize to {size[0]}x{size[1]}")
        tfm.append(T.Resize(size, interpolation=interp))
    if "random_translation" in choices:
        print("+ random translation")
        tfm.append(Random2DTranslation(size[0], size[1], interpolation=interp))
    if "random_crop" in choices:
        pad = cfg.INPUT.CROP_PADDING
        print(f"+ random crop (padding = {pad})")
        tfm.append(T.RandomCrop(size, padding=pad))
    if "random_resized_crop" in choices:
        scale = tuple(cfg.INPUT.RRCROP_SCALE)
        print(f"+ random resized crop (size={size}, scale={scale})")
        tfm.append(T.RandomResizedCrop(size, scale=scale, interpolation=interp))
    if "center_crop" in choices:
        print(f"+ {size[0]}x{size[1]} center crop")
        tfm.append(T.CenterCrop(size))
    if "random_flip" in choices:
        print("+ random flip")
        tfm.append(T.RandomHorizontalFlip())
    if "colorjitter" in choices:
        i = cfg.INPUT
        print(f"+ color jitter (brightness={i.COLORJITTER_B}, contrast={i.COLORJITTER_C}, "
              f"saturation={i.COLORJITTER_S}, hue={i.COLORJITTER_H})")
        tfm.append(T.ColorJitter(i.COLORJITTER_B, i.COLORJITTER_C, i.COLORJITTER_S, i.COLORJITTER_H))
    if "randomgrayscale" in choices:
        print(f"+ random gray scale (p={cfg.INPUT.RGS_P})")
        tfm.append(T.RandomGrayscale(p=cfg.INPUT.RGS_P))
    if "gaussian_blur" in choices:
        print(f"+ gaussian blur (kernel={cfg.INPUT.GB_K}, p={cfg.INPUT.GB_P})")
        tfm.append(T.RandomApply([T.GaussianBlur(cfg.INPUT.GB_K)], p=cfg.INPUT.GB_P))
    print("+ to torch tensor of range [0, 1]")
    tfm.append(T.ToTensor())
    if "cutout" in choices:
        print(f"+ cutout (n_holes={cfg.INPUT.CUTOUT_N}, length={cfg.INPUT.CUTOUT_LEN})")
        tfm.append(Cutout(cfg.INPUT.CUTOUT_N, cfg.INPUT.CUTOUT_LEN))
    if "normalize" in choices:
        print(f"+ normalization (mean={cfg.INPUT.PIXEL_MEAN}, std={cfg.INPUT.PIXEL_STD})")
        tfm.append(normalize)
    if "gaussian_noise" in choices:
        print(f"+ gaussian noise (mean={cfg.INPUT.GN_MEAN}, std={cfg.INPUT.GN_STD})")
        tfm.append(GaussianNoise(cfg.INPUT.GN_MEAN, cfg.INPUT.GN_STD))
    if "instance_norm" in choices:
        print("+ instance normalization")
        tfm.append(InstanceNormalization())
    return T.Compose(tfm)


def _build_transform_test(cfg, choices: list[str], normalize: T.Normalize) -> T.Compose:
    print("Building transform_test")
    size = tuple(cfg.INPUT.SIZE)
    print(f"+ resize the smaller edge to {max(size)}")
    tfm: list = [T.Resize(max(size), interpolation=_interpolation(cfg))]
    print(f"+ {size[0]}x{size[1]} center crop")
    tfm.append(T.CenterCrop(size))
    print("+ to torch tensor of range [0, 1]")
    tfm.append(T.ToTensor())
    if "normalize" in choices:
        print(f"+ normalization (mean={cfg.INPUT.PIXEL_MEAN}, std={cfg.INPUT.PIXEL_STD})")
        tfm.append(normalize)
    if "instance_norm" in choices:
        print("+ instance normalization")
        tfm.append(InstanceNormalization())
    return T.Compose(tfm)
