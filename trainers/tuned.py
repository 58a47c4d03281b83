"""PETR+X's seen branch: a finished run of a prompt learner X, read without training, scoring any class names.

``TunedModel`` (a Protocol) is all PETR+X asks of a prompt learner: given class names, a function images -> logits
over those names with the learned prompts. ``TUNED_METHODS`` maps each X (its trainer name, the value of
``TRAINER.PETRX.TUNED_TRAINER``) to the folder its runs keep checkpoints in (Dassl layout, ours and upstream's) and
the loader that builds its ``TunedModel`` from one checkpoint file. Adding a prompt learner is one entry here plus
its loader and ``scorer``, a few lines next to its trainer (``CoOpTuned`` in coop.py, ``PromptSRCTuned`` in
teacher.py).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from yacs.config import CfgNode

from clip.model import CLIP
from engine.checkpoint import pointed_checkpoint

from .backbone import Autocast
from .coop import CoOpTuned
from .teacher import PromptSRCTuned


class TunedModel(Protocol):
    """A finished prompt learner that scores images over any class names with its learned prompts."""

    def scorer(self, classnames: Sequence[str]) -> Callable[[torch.Tensor], torch.Tensor]:
        """images [B, 3, H, W] -> float32 logits [B, len(classnames)], classifying among ``classnames``.

        Called once per class list: work that does not depend on the image (text features) is done here. The
        returned function runs its CLIP forwards under the run's autocast (given to the loader) and its own
        arithmetic in float32, without gradients.
        """
        ...


TunedLoader = Callable[[CLIP, CfgNode, str, Autocast], TunedModel]
"""(the run's frozen CLIP, the run's config, a checkpoint file, the run's autocast) -> the tuned model."""


@dataclass(frozen=True)
class TunedMethod:
    """How PETR+X reads the runs of one prompt learner."""

    model_name: str
    """The folder of a run holding its checkpoints (``<run>/<model_name>/model.pth.tar-<E>``)."""
    load: TunedLoader


TUNED_METHODS: dict[str, TunedMethod] = {
    "CoOp": TunedMethod("prompt_learner", CoOpTuned.from_checkpoint),
    "PromptSRC": TunedMethod("VLPromptLearner", PromptSRCTuned.from_checkpoint),
}


def run_checkpoint(run_dir: str, model_name: str, epoch: int, trainer: str, dir_key: str, epoch_key: str) -> str:
    """``<run_dir>/<model_name>/model.pth.tar-<epoch>`` of a finished ``trainer`` run; epoch 0 = the last one saved
    (named in ``<model_name>/checkpoint``). ``dir_key`` / ``epoch_key`` name the config keys in the errors."""
    folder = os.path.join(run_dir, model_name)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{dir_key} {run_dir} has no {model_name}/ folder (not a {trainer} run directory); "
                                f"train {trainer} first or give the folder of a finished {trainer} run")
    if epoch > 0:
        path = os.path.join(folder, f"model.pth.tar-{epoch}")
    else:
        path = pointed_checkpoint(folder)
        if path is None:
            raise FileNotFoundError(f"{folder} has no 'checkpoint' file naming the last saved model; set "
                                    f"{epoch_key} to the epoch to load")
    if not os.path.isfile(path):
        saved = sorted(n for n in os.listdir(folder) if n.startswith("model"))
        raise FileNotFoundError(f"{trainer} checkpoint not found: {path} ({epoch_key} {epoch}); saved there: "
                                f"{saved or 'nothing'}")
    return path


def file_sha256(path: str) -> str:
    """sha256 of a file's bytes (identifies a checkpoint wherever it is copied)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
