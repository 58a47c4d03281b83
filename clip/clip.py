"""OpenAI-compatible CLIP entry points: available_models, load / load_model (local files first, then download),
tokenize."""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import urllib.error
import urllib.request
import warnings
import zipfile

import torch
from tqdm import tqdm

from .model import CLIP, build_model
from .tokenizer import EOT_TOKEN, SOT_TOKEN, encode

__all__ = ["available_models", "build_model", "load", "load_model", "tokenize"]

# OpenAI's public checkpoints; the second-to-last path segment is the file's SHA-256.
_MODELS = {
    "ViT-B/32": "https://openaipublic.azureedge.net/clip/models/"
                "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt",
    "ViT-B/16": "https://openaipublic.azureedge.net/clip/models/"
                "5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85e4ecb61988df416f/ViT-B-16.pt",
    "ViT-L/14": "https://openaipublic.azureedge.net/clip/models/"
                "b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be6f7c2e0eca1737a03836/ViT-L-14.pt",
    "ViT-L/14@336px": "https://openaipublic.azureedge.net/clip/models/"
                      "3035c92b350959924f9f00213499208652fc7ea050643e8b385c2dac08641f02/ViT-L-14-336px.pt",
}
_DOWNLOAD_TIMEOUT_S = 30


def available_models() -> list[str]:
    """Names accepted by ``load`` besides file paths."""
    return list(_MODELS)


def _cache_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "clip")


def _candidate_paths(name: str) -> list[str]:
    """Places searched for a named model, in order: ./clip/, $CLIP_WEIGHTS_DIR, ~/.cache/clip."""
    basename = os.path.basename(_MODELS[name])
    dirs = [os.path.join(os.getcwd(), "clip")]
    if os.environ.get("CLIP_WEIGHTS_DIR"):
        dirs.append(os.environ["CLIP_WEIGHTS_DIR"])
    dirs.append(_cache_dir())
    return [os.path.join(d, basename) for d in dirs]


def download(url: str, root: str) -> str:
    """Download ``url`` into ``root`` under its basename with a progress bar; SHA-256 checked before the rename."""
    os.makedirs(root, exist_ok=True)
    target = os.path.join(root, os.path.basename(url))
    expected = url.split("/")[-2]
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
            raise RuntimeError(f"SHA-256 mismatch for {url}: got {actual}, expected {expected}; the download is "
                               "corrupt or the file changed, so it was discarded")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def _resolve(name_or_path: str) -> str:
    """Path of the weight file for a file path or a model name, downloading into ~/.cache/clip when needed."""
    if os.path.isfile(name_or_path):
        return name_or_path
    if name_or_path not in _MODELS:
        raise RuntimeError(f"CLIP weights '{name_or_path}' are neither a file nor a known model; "
                           f"available models: {', '.join(available_models())}")
    tried = _candidate_paths(name_or_path)
    for path in tried:
        if os.path.isfile(path):
            return path
    url = _MODELS[name_or_path]
    try:
        return download(url, _cache_dir())
    except (urllib.error.URLError, OSError) as e:
        basename = os.path.basename(url)
        raise RuntimeError(
            f"CLIP weights for {name_or_path} not found (tried {', '.join(tried)}) and the download failed ({e}); "
            f"download {url} and put {basename} in ./clip/ (run from the repository root), in $CLIP_WEIGHTS_DIR "
            f"or in {_cache_dir()}"
        ) from None


def _is_torchscript(path: str) -> bool:
    """True for TorchScript archives (OpenAI's .pt files), which hold code/ and constants.pkl entries."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(n.endswith("/constants.pkl") or "/code/" in n for n in archive.namelist())


def _read_state_dict(path: str) -> dict:
    """State dict from a TorchScript archive or a plain (possibly {'state_dict': ...}-wrapped) torch.save file."""
    try:
        if _is_torchscript(path):
            with warnings.catch_warnings():  # torch.jit's deprecation notice is no use to someone loading weights
                warnings.simplefilter("ignore", FutureWarning)
                return torch.jit.load(path, map_location="cpu").state_dict()
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile, pickle.UnpicklingError) as e:
        raise RuntimeError(f"cannot read CLIP weights from {path} ({type(e).__name__}: {e}); the file may be "
                           "incomplete or corrupt: delete it and obtain it again") from None
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise RuntimeError(f"{path} holds a {type(obj).__name__}, not a CLIP state dict")
    return obj


def load_model(name_or_path: str, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> CLIP:
    """The frozen CLIP of a model name (see available_models) or a weight file, cast to ``dtype`` (None: float32)
    and moved to ``device``: the one place the trainers' precision casts the CLIP weights.

    Names are looked up in ./clip/, $CLIP_WEIGHTS_DIR and ~/.cache/clip, then downloaded (SHA-256 checked).
    """
    path = _resolve(name_or_path)
    try:
        model = build_model(_read_state_dict(path))
    except (ValueError, NotImplementedError) as e:
        raise type(e)(f"{path}: {e}") from None
    if dtype is not None:
        model.to(dtype)
    return model.to(device)


def load(name_or_path: str, device: str | torch.device = "cpu", jit: bool = False) -> CLIP:
    """Returns the float32 CLIP model (a ``clip.model.CLIP``, eval mode) of a model name or weight file on ``device``.

    Same lookup as ``load_model``; ``jit=True`` is refused (the prompt-aware CLIP runs as a Python model).
    """
    if jit:
        raise ValueError("jit=True is not supported: the prompt-aware CLIP runs as a Python model; use jit=False")
    return load_model(name_or_path, device)


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
