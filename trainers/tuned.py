"""PETR+X's seen branch: a finished run of a prompt learner X, read without training, scoring any class names.

PETR+X asks of X what every prompt learner provides, a ``ClassScoringModel`` (trainers/scoring.py:
``class_scorer(classnames)``). ``TUNED_METHODS`` maps each X (its trainer name, the value of
``TRAINER.PETRX.TUNED_TRAINER``) to the folder its runs keep checkpoints in (Dassl layout, ours and upstream's) and
the loader that builds that model from one checkpoint file: the trainer's own ``PromptedCLIP`` on a frozen learner
(CoCoOp, MaPLe, IVLP, PromptSRC), or ``CoOpTuned`` (CoOp's context rebuilt for each class list).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from yacs.config import CfgNode

from clip.model import CLIP
from engine.checkpoint import pointed_checkpoint

from .backbone import Autocast
from .cocoop import CoCoOpCLIP
from .coop import CoOpTuned
from .maple import MaPLeCLIP
from .scoring import ClassScoringModel
from .teacher import deep_prompt_run

TunedLoader = Callable[[CLIP, CfgNode, str, Autocast], ClassScoringModel]
"""(the run's frozen CLIP, the run's config, a checkpoint file, the run's autocast) -> X's scoring model."""


@dataclass(frozen=True)
class TunedMethod:
    """How PETR+X reads the runs of one prompt learner."""

    model_name: str
    """The folder of a run holding its checkpoints (``<run>/<model_name>/model.pth.tar-<E>``)."""
    load: TunedLoader
    borrowed: tuple[str, ...] = ()
    """The keys of X's namespace ``load`` reads from the config (the rest comes from the checkpoint)."""


TUNED_METHODS: dict[str, TunedMethod] = {
    "CoOp": TunedMethod("prompt_learner", CoOpTuned.from_checkpoint, ("TRAINER.COOP.CLASS_TOKEN_POSITION",)),
    "CoCoOp": TunedMethod("prompt_learner", CoCoOpCLIP.from_checkpoint),
    "MaPLe": TunedMethod("MultiModalPromptLearner", MaPLeCLIP.from_checkpoint, ("TRAINER.MAPLE.CTX_INIT",)),
    "IVLP": TunedMethod("VLPromptLearner", partial(deep_prompt_run, ns="IVLP")),
    "PromptSRC": TunedMethod("VLPromptLearner", partial(deep_prompt_run, ns="PROMPTSRC")),
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


