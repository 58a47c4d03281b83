"""Small file and reproducibility helpers with Dassl's names (mkdir_if_missing, read_json, ...)."""
from __future__ import annotations

import contextlib
import json
import os
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from PIL import Image

from .atomic import atomic_write_text
from .errors import CorruptFileError, InputNotFoundError
from .images import UNREADABLE, unreadable_reason
from .json_text import load_json


def mkdir_if_missing(dirname: str) -> None:
    """Create ``dirname`` (and parents) if it does not exist."""
    if dirname:
        os.makedirs(dirname, exist_ok=True)


def check_isfile(fpath: str) -> bool:
    """True when ``fpath`` is an existing file; warns otherwise (Dassl behaviour)."""
    isfile = os.path.isfile(fpath)
    if not isfile:
        warnings.warn(f'No file found at "{fpath}"', stacklevel=2)
    return isfile


def read_json(fpath: str) -> Any:
    """Read a JSON file, naming the file in the error when it is missing or malformed."""
    try:
        with open(fpath) as f:
            return load_json(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"JSON file not found: {fpath}") from None
    except ValueError as e:
        raise ValueError(f"Malformed JSON in {fpath}: {e}") from None


def write_json(obj: Any, fpath: str) -> None:
    """Write ``obj`` as indented JSON (atomically), creating the parent folder."""
    atomic_write_text(json.dumps(obj, indent=4, separators=(",", ": ")), fpath)


def listdir_nohidden(path: str, sort: bool = False) -> list[str]:
    """List a folder without names starting with a dot."""
    items = [f for f in os.listdir(path) if not f.startswith(".")]
    if sort:
        items.sort()
    return items


SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
"""Pillow's modes of 16-bit grayscale images (PNG, TIFF; "I" in older Pillow), which ``convert("RGB")`` clips to
white."""
_noted: set[str] = set()


def to_rgb(img: Image.Image, path: str) -> Image.Image:
    """``img`` as 8-bit RGB; 16-bit grayscale is scaled (v / 257, so 65535 → 255) instead of clipped, noted once."""
    if img.mode not in SIXTEEN_BIT_MODES:
        return img.convert("RGB")
    if "16-bit" not in _noted:
        _noted.add("16-bit")
        print(f"Note: {path} is a 16-bit grayscale image: its values are scaled to 8 bits (v / 257); so are those of "
              "any other (noted once)")
    values = np.asarray(img).astype(np.float64) / 257.0
    return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8)).convert("RGB")


@contextlib.contextmanager
def image_errors(path: str, *errors: type[Exception]) -> Iterator[None]:
    """Inside: reading the image ``path``; a missing file, or a PIL error (and ``errors``) raised while it is read, is
    one error naming the file and the fix."""
    if not os.path.exists(path):
        raise InputNotFoundError(f"Image not found: {path} (restore it from the dataset's archive, or fix the split "
                                 "file that lists it)")
    try:
        yield
    except (*UNREADABLE, *errors) as e:  # the data-root check's rule (engine.images)
        raise CorruptFileError(f"Cannot read image {path} ({unreadable_reason(e)}); restore it from the dataset's "
                               "archive, or fix the split file that lists it") from None


def read_image(path: str) -> Image.Image:
    """Open an image as RGB (16-bit grayscale scaled to 8 bits); a missing or corrupt file raises an error naming it
    and the fix."""
    with image_errors(path), Image.open(path) as img:
        return to_rgb(img, path)


def set_random_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def count_num_param(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters of ``model`` (only those with requires_grad when ``trainable_only``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def collect_env_info() -> str:
    """torch's environment report plus the Pillow version (slow: it queries the system and the GPU driver)."""
    import PIL
    from torch.utils.collect_env import get_pretty_env_info

    return f"{get_pretty_env_info()}\n        Pillow ({PIL.__version__})"
