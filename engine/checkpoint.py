"""Checkpoint files with Dassl's layout (``<dir>/model.pth.tar-<E>``, ``checkpoint`` pointer file).

Writes are atomic (temporary file + ``os.replace``); contents are tensors and plain Python values only, so
every load uses ``torch.load(weights_only=True)``. Files that hold pickled objects (upstream Dassl checkpoints) are
read with ``restricted_pickle``: no pickled code runs, and only their entries free of objects are kept.
"""
from __future__ import annotations

import os
import pickle
import random
import shutil
import signal
import warnings
import zipfile
from collections import OrderedDict
from typing import Any, BinaryIO

import numpy as np
import torch
from torch import nn

from .atomic import atomic_write, atomic_write_text
from .errors import CorruptFileError, InputNotFoundError, InvalidInputError, first_line
from .inputs import open_input
from .preemption import SIGNALS, held
from .restricted_pickle import dropped_entries, load_upstream_checkpoint, plain_entries
from .run_files import file_kind, not_regular_error
from .runs import POINTER_FILE, pointed_checkpoint

_PLAIN = (bool, int, float, str, bytes, type(None), torch.Tensor, torch.Size, torch.dtype, torch.device)


def check_plain(obj: Any, where: str = "checkpoint") -> None:
    """Raise TypeError naming the entry when ``obj`` holds anything but tensors and plain values."""
    if isinstance(obj, _PLAIN):
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise TypeError(f"{where}: key {key!r} has type {type(key).__name__}; use str or int keys")
            check_plain(value, f"{where}.{key}")
        return
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            check_plain(value, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where} is a {type(obj).__module__}.{type(obj).__name__} object; checkpoints hold tensors and plain "
        "values only (store its state_dict() or convert it to a list/tensor)"
    )


def atomic_torch_save(obj: Any, fpath: str) -> None:
    """``torch.save`` to a temporary file in the same folder, then rename it over ``fpath``. Ctrl-C and the
    preemption signals wait for the write (``preemption.held``): an exception raised inside torch's zip writer left it
    half-written, and its close then failed with a RuntimeError (a traceback, exit status 1) instead of the
    interrupt."""
    with held((signal.SIGINT, *SIGNALS)):
        atomic_write(fpath, lambda f: torch.save(obj, f), binary=True)


def save_checkpoint(
    state: dict,
    save_dir: str,
    is_best: bool = False,
    remove_module_from_keys: bool = True,
    model_name: str = "",
) -> str:
    """Write ``state`` to ``<save_dir>/model.pth.tar-<epoch>`` (or ``model_name``) and update ``checkpoint``; the
    folder is made as every atomic write makes it (``engine.atomic``: inside a run folder, no link is entered)."""
    if remove_module_from_keys and "state_dict" in state:
        state = dict(state)
        state["state_dict"] = OrderedDict(
            (k[len("module."):] if k.startswith("module.") else k, v) for k, v in state["state_dict"].items()
        )
    check_plain(state)
    fpath = os.path.join(save_dir, model_name or f"model.pth.tar-{state['epoch']}")
    atomic_torch_save(state, fpath)
    print(f"Checkpoint saved to {fpath}")
    atomic_write_text(f"{os.path.basename(fpath)}\n", os.path.join(save_dir, POINTER_FILE))
    if is_best:
        with open(fpath, "rb") as src:
            atomic_write(os.path.join(save_dir, "model-best.pth.tar"), lambda f: shutil.copyfileobj(src, f),
                         binary=True)
    return fpath


def checkpoint_epoch(path: str) -> int | None:
    """Epoch in a ``model.pth.tar-<E>`` file name; None for other names (e.g. ``model-best.pth.tar``)."""
    suffix = os.path.basename(path).rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else None


def check_archive(f: BinaryIO, fpath: str) -> None:
    """Refuse a zip checkpoint (the open file ``f`` of ``fpath``) whose records would unpack to more than the file
    holds, before any is read: torch writes its records uncompressed, so a compressed record or such a total is a zip
    bomb or no torch file. ``f`` is left at its start."""
    try:
        if not zipfile.is_zipfile(f):
            return
        f.seek(0)
        with zipfile.ZipFile(f) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):  # torch's reader names what is wrong with it
        return
    finally:
        f.seek(0)
    size = os.fstat(f.fileno()).st_size
    total = sum(r.file_size for r in records)
    packed = [r.filename for r in records if r.compress_type != zipfile.ZIP_STORED]
    if packed or total > size:
        shown = f" (compressed: {', '.join(packed[:3])}{', ...' if len(packed) > 3 else ''})" if packed else ""
        raise CorruptFileError(f"{fpath} is a zip archive whose records unpack to {total} bytes from a {size}-byte "
                               f"file{shown}; torch writes checkpoints uncompressed, so it was refused before reading: "
                               "restore a good copy or point to another file")


def load_checkpoint(fpath: str, trust_pickle: bool = False, role: str = "checkpoint") -> Any:
    """Load a checkpoint on CPU with ``weights_only=True`` (restricted unpickling for upstream files that hold
    pickled objects); ``trust_pickle=True`` unpickles a trusted file as it is. The file is read through the inputs
    ledger as ``role`` (``engine.inputs``)."""
    if fpath is None:
        raise ValueError("load_checkpoint: file path is None")
    if not os.path.exists(fpath):
        raise InputNotFoundError(f'Checkpoint file not found: "{fpath}"')
    kind = file_kind(os.stat(fpath).st_mode)
    if kind != "a regular file":  # a FIFO would block the read
        raise not_regular_error(fpath, kind)
    with open_input(fpath, role) as f:
        check_archive(f, fpath)
        if trust_pickle:
            return torch.load(f, map_location="cpu", weights_only=False)
        try:
            checkpoint = torch.load(f, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:  # pickled objects (an upstream Dassl checkpoint) or no checkpoint at all
            return load_upstream_checkpoint(fpath, f)
        except Exception as e:  # torch's readers on a cut-off or foreign file
            raise CorruptFileError(
                f"{fpath} is truncated or corrupt ({first_line(e)[:120]}); delete it (a rerun of the same command "
                "resumes from the previous checkpoint, if any) or restore a good copy") from None
    kept, ignored = plain_entries(checkpoint, fpath)  # weights_only also rebuilds the functions and classes it allows
    if ignored:
        print(f"Note: {fpath}: ignored the entries that are not tensors or plain values: {dropped_entries(ignored)}")
    return checkpoint if not ignored else kept


def load_model_state(model: nn.Module, checkpoint: Any, source: str) -> None:
    """Load ``checkpoint["state_dict"]`` into ``model``; a checkpoint without one, or of another model (another
    trainer, backbone or prompt size), is one InvalidInputError naming ``source`` and the first difference."""
    state_dict = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    if not isinstance(state_dict, dict):
        raise InvalidInputError(f"{source} holds no state_dict, so it is not a checkpoint of a model (Dassl layout: "
                                "state_dict, epoch, ...); point to a run's <model>/model.pth.tar-<epoch>")
    try:
        model.load_state_dict(state_dict)
    except InvalidInputError as e:  # a model's own one-line explanation
        raise InvalidInputError(f"{source}: {e}") from None
    except RuntimeError as e:  # torch lists the missing / unexpected keys and the shape mismatches, one per line
        detail = next((line.strip() for line in str(e).splitlines()[1:] if line.strip()), first_line(e))
        raise InvalidInputError(f"{source} does not fit this {type(model).__name__} ({detail[:200]}): it was saved "
                                "by another trainer, backbone or prompt size; use a run of this configuration "
                                "(--model-dir, OUTPUT_DIR)") from None


def get_rng_state() -> dict:
    """RNG states of Python, NumPy and torch (CPU and every CUDA device) as tensors and plain values."""
    version, internal, gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [np_name, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos), int(np_has_gauss),
                  float(np_gauss)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def set_rng_state(state: dict) -> None:
    """Restore the RNG states saved by ``get_rng_state``."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = state["numpy"]
    np.random.set_state((np_name, np_keys.numpy().astype(np.uint32), np_pos, np_has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        if len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            warnings.warn("CUDA RNG states not restored: the number of GPUs differs from the saved run", stacklevel=2)


def advance_scheduler(scheduler, epochs: int) -> None:
    """Step a fresh per-epoch scheduler ``epochs`` times (a checkpoint without scheduler state, e.g. upstream's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "scheduler.step() before optimizer.step()": intended here
        for _ in range(epochs):
            scheduler.step()
    print(f"No scheduler state in the checkpoint: advanced the scheduler by {epochs} epoch(s)")


def resume_from_checkpoint(fdir: str, model: nn.Module, optimizer=None, scheduler=None,
                           restore_rng: bool = True) -> int:
    """Restore model/optimizer/scheduler (and RNG states) from the file named in ``<fdir>/checkpoint``."""
    fpath = pointed_checkpoint(fdir)
    if fpath is None:
        raise FileNotFoundError(f'No "{POINTER_FILE}" file in "{fdir}" naming the checkpoint to resume from')
    print(f'Loading checkpoint from "{fpath}"')
    checkpoint = load_checkpoint(fpath)
    load_model_state(model, checkpoint, fpath)
    print("Loaded model weights")
    scheduled_lrs = None
    if scheduler is not None and checkpoint.get("scheduler") is None:
        # before the optimizer state: schedules that step from the current lr (cosine) would otherwise apply the
        # saved epochs' decay twice; the rates of the saved epoch are then set on the loaded optimizer
        advance_scheduler(scheduler, checkpoint["epoch"])
        scheduled_lrs = scheduler.get_last_lr()
    if optimizer is not None and checkpoint.get("optimizer") is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
        print("Loaded optimizer")
        for group, lr in zip(optimizer.param_groups, scheduled_lrs or ()):
            group["lr"] = lr
    if scheduler is not None and checkpoint.get("scheduler") is not None:
        scheduler.load_state_dict(checkpoint["scheduler"])
        print("Loaded scheduler")
    if restore_rng and checkpoint.get("rng_state") is not None:
        set_rng_state(checkpoint["rng_state"])
        print("Restored random number generator states")
    start_epoch = checkpoint["epoch"]
    print(f"Previous epoch: {start_epoch}")
    return start_epoch


def load_pretrained_weights(model: nn.Module, weight_path: str) -> None:
    """Load the matching (same name and shape) entries of a checkpoint into ``model``."""
    checkpoint = load_checkpoint(weight_path)
    state_dict = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else checkpoint
    model_dict = model.state_dict()
    matched, discarded = OrderedDict(), []
    for k, v in state_dict.items():
        k = k[len("module."):] if k.startswith("module.") else k
        if k in model_dict and model_dict[k].size() == v.size():
            matched[k] = v
        else:
            discarded.append(k)
    if not matched:
        warnings.warn(f'Cannot load "{weight_path}" (check the key names manually)', stacklevel=2)
        return
    model_dict.update(matched)
    model.load_state_dict(model_dict)
    print(f'Successfully loaded pretrained weights from "{weight_path}"')
    if discarded:
        print(f"Layers discarded due to unmatched keys or size: {discarded}")
