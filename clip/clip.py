"""OpenAI-compatible CLIP entry points: available_models, load (``(model, preprocess)`` as OpenAI's package),
load_model (the frozen model alone, what the trainers use; local files first, then download), tokenize.

Besides OpenAI's names and weight files, every entry point takes open_clip's CLIPs by an ``open_clip:`` name
(``clip/weights.py``; built by ``clip/openclip.py``)."""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import urllib.error
import urllib.request
import warnings
import zipfile
from typing import BinaryIO

import safetensors.torch
import torch
import torchvision.transforms as T
from PIL import Image
from safetensors import SafetensorError
from tqdm import tqdm

from engine.errors import ConfigError, CorruptFileError, InputNotFoundError, InvalidInputError, UserError, first_line
from engine.inputs import open_input

from .model import CLIP, build_model
from .tokenizer import EOT_TOKEN, SOT_TOKEN, encode
from .weights import MODELS as _MODELS
from .weights import (
    NAME_FORMS,
    OPENAI_MEAN,
    OPENAI_STD,
    cache_dir,
    candidate_paths,
    find_weights,
    open_clip_by_hand,
    open_clip_name,
    url_sha256,
)

__all__ = ["available_models", "build_model", "load", "load_model", "preprocess_for", "tokenize", "weights_path"]

_DOWNLOAD_TIMEOUT_S = 30


def available_models() -> list[str]:
    """Names accepted by ``load`` besides file paths."""
    return list(_MODELS)


def download(url: str, root: str) -> str:
    """Download ``url`` into ``root`` under its basename with a progress bar; SHA-256 checked before the rename."""
    os.makedirs(root, exist_ok=True)
    target = os.path.join(root, os.path.basename(url))
    expected = url_sha256(url)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=os.path.basename(url))
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as source:
            total = int(source.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="iB", unit_scale=True, unit_divisor=1024, desc=os.path.basename(url)) as bar:
                for chunk in iter(lambda: source.read(1 << 16), b""):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        actual = digest.hexdigest()
        if actual != expected:
            raise CorruptFileError(f"SHA-256 mismatch for {url}: got {actual}, expected {expected}; the download is "
                                   "corrupt or the file changed, so it was discarded")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def weights_path(name_or_path: str, download_root: str | None = None) -> str:
    """Path of the weight file for a file path or a model name, downloading into ``download_root`` (default
    ~/.cache/clip; for an open_clip tag, the Hugging Face hub cache) when needed."""
    found = find_weights(name_or_path, download_root)
    if found:
        return found
    spec = open_clip_name(name_or_path)
    if spec is not None and spec.pretrained is not None:
        from . import openclip

        return openclip.download(spec, download_root)
    if spec is not None:
        raise InputNotFoundError(f"CLIP weights of {name_or_path} not found: {open_clip_by_hand(spec)}")
    if name_or_path not in _MODELS:
        raise ConfigError(f"CLIP weights '{name_or_path}' are neither a file nor a known model; "
                           f"available models: {', '.join(available_models())}, or {NAME_FORMS}")
    tried = candidate_paths(name_or_path, download_root)
    url = _MODELS[name_or_path]
    try:
        return download(url, download_root or cache_dir())
    except (urllib.error.URLError, OSError) as e:
        basename = os.path.basename(url)
        raise InputNotFoundError(
            f"CLIP weights for {name_or_path} not found (tried {', '.join(tried)}) and the download failed ({e}); "
            f"download {url} and put {basename} in ./clip/ (run from the repository root), in $CLIP_WEIGHTS_DIR "
            f"or in {download_root or cache_dir()}"
        ) from None


_WEIGHTS_FIX = ("point MODEL.BACKBONE.NAME (or the teacher's TEACHER_NAME) to CLIP weights: a model name such as "
                "ViT-B/16 or open_clip:ViT-B-16/laion2b_s34b_b88k, or an OpenAI-format weight file")


def _is_torchscript(f: BinaryIO) -> bool:
    """True for TorchScript archives (OpenAI's .pt files), which hold code/ and constants.pkl entries; ``f`` (an open
    weight file) is left at its start."""
    try:
        if not zipfile.is_zipfile(f):
            return False
        f.seek(0)
        with zipfile.ZipFile(f) as archive:
            return any(n.endswith("/constants.pkl") or "/code/" in n for n in archive.namelist())
    finally:
        f.seek(0)


def _is_safetensors(f: BinaryIO) -> bool:
    """True for a safetensors file (an 8-byte header length, then its JSON header); ``f`` is left at its start."""
    head = f.read(9)
    f.seek(0)
    return len(head) == 9 and head[8:] == b"{"


def _read_state_dict(path: str, found_by: str = "") -> dict:
    """State dict from a TorchScript archive, a plain (possibly {'state_dict': ...}-wrapped) torch.save file or a
    safetensors file, read through the inputs ledger (``engine.inputs``: role ``clip``, with the name ``found_by``
    that resolved to it, if any, so a run compares what the name resolves to later)."""
    try:
        with open_input(path, "clip", name=found_by) as f:
            if _is_safetensors(f):
                return safetensors.torch.load(f.read())
            if _is_torchscript(f):
                with warnings.catch_warnings():  # torch.jit's deprecation notice is no use to someone loading weights
                    warnings.simplefilter("ignore", FutureWarning)
                    return torch.jit.load(f, map_location="cpu").state_dict()
            obj = torch.load(f, map_location="cpu", weights_only=True)
    except UserError:
        raise
    except pickle.UnpicklingError:  # no torch file at all (a text file, say), or one that pickles objects
        raise CorruptFileError(f"cannot read CLIP weights from {path}: it is no torch weight file (or it pickles "
                               f"objects, which are never loaded); {_WEIGHTS_FIX}") from None
    except (RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile, SafetensorError) as e:
        raise CorruptFileError(f"cannot read CLIP weights from {path} ({type(e).__name__}: {first_line(e)[:160]}); "
                               "the file may be incomplete or corrupt: delete it and obtain it again") from None
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise InvalidInputError(f"{path} holds a {type(obj).__name__}, not a CLIP state dict; {_WEIGHTS_FIX}")
    return obj


def load_model(name_or_path: str, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> CLIP:
    """Frozen CLIP from a model name (see available_models) or a weight file, on ``device``, cast once to ``dtype``
    (None = float32).

    Names are looked up in ./clip/, $CLIP_WEIGHTS_DIR and ~/.cache/clip, then downloaded (SHA-256 checked); an
    open_clip tag in the Hugging Face hub cache first, then downloaded through open_clip (``clip/openclip.py``).
    """
    path = weights_path(name_or_path)
    found_by = name_or_path if path != name_or_path else ""
    return _build(name_or_path, path, found_by).to(device=device, dtype=dtype or torch.float32)


def _build(name: str, path: str, found_by: str = "") -> CLIP:
    """The frozen CLIP of ``name`` from its weight file ``path`` (``found_by``: the name that resolved to it, for the
    inputs ledger): OpenAI's format, or an open_clip name's model."""
    spec = open_clip_name(name)
    try:
        if spec is not None:
            from . import openclip

            config = openclip.model_config(spec)  # a config that does not fit is refused before the weights are read
            return openclip.build(spec, config, _read_state_dict(path, found_by))
        return build_model(_read_state_dict(path, found_by))
    except UserError:
        raise
    except ValueError as e:  # build_model: a dict that is no CLIP of a supported shape
        raise InvalidInputError(f"{path}: {e}; {_WEIGHTS_FIX}") from None
    except NotImplementedError as e:
        raise type(e)(f"{path}: {e}") from None


def _to_rgb(image: Image.Image) -> Image.Image:
    return image.convert("RGB")


def preprocess_for(n_px: int, mean: tuple[float, ...] = OPENAI_MEAN, std: tuple[float, ...] = OPENAI_STD
                   ) -> T.Compose:
    """OpenAI's image preprocessing: bicubic resize of the short side, center crop, RGB, tensor, the CLIP's mean/std
    (default OpenAI's)."""
    return T.Compose([
        T.Resize(n_px, interpolation=T.InterpolationMode.BICUBIC),
        T.CenterCrop(n_px),
        _to_rgb,
        T.ToTensor(),
        T.Normalize(mean, std),
    ])


def load(name: str, device: str | torch.device = "cpu", jit: bool = False,
         download_root: str | None = None) -> tuple[CLIP, T.Compose]:
    """``(model, preprocess)`` as OpenAI's ``clip.load``: the model in eval mode with trainable parameters, float16
    on CUDA and float32 elsewhere, and the preprocessing for its input resolution.

    ``name`` is a model name or a weight file; ``download_root`` (default ~/.cache/clip) is searched and downloaded
    into. The model runs as Python code (``jit=True`` is refused, as OpenAI's TorchScript path is not provided).
    """
    if jit:
        raise ValueError("jit=True is not supported: the prompt-aware CLIP runs as a Python model; use jit=False")
    dtype = torch.float16 if torch.device(device).type == "cuda" else torch.float32
    model = _build(name, weights_path(name, download_root)).to(device=device, dtype=dtype).requires_grad_(True)
    return model, preprocess_for(model.visual.input_resolution, model.image_mean, model.image_std)


def tokenize(texts: str | list[str], context_length: int = 77, truncate: bool = False) -> torch.LongTensor:
    """OpenAI CLIP token ids [N, context_length]: SOT + BPE + EOT, zero-padded.

    Over-long texts raise RuntimeError unless ``truncate``, which cuts them and puts EOT in the last slot.
    """
    if isinstance(texts, str):
        texts = [texts]
    result = torch.zeros(len(texts), context_length, dtype=torch.long)
    for i, text in enumerate(texts):
        ids = [SOT_TOKEN, *encode(text), EOT_TOKEN]
        if len(ids) > context_length:
            if not truncate:
                shown = text if len(text) <= 80 else text[:77] + "..."
                raise RuntimeError(f"Input {shown!r} is too long for context length {context_length} "
                                   f"({len(ids)} tokens); shorten it or pass truncate=True")
            ids = ids[:context_length]
            ids[-1] = EOT_TOKEN
        result[i, : len(ids)] = torch.tensor(ids)
    return result
