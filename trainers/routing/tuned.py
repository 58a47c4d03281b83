"""PETR+X's seen branch: a finished run of a tuned method X, read without training, scoring any class names.

PETR+X asks of X what every method's model provides, a ``ClassScoringModel`` (trainers/prompting/scoring.py:
``class_scorer(classnames)``). X's trainer class says how its runs are read (:class:`TunedTrainer`): the model
folder its checkpoints are kept in (Dassl layout, ours and upstream's), the loader that builds that model from one
checkpoint file, and the keys of its namespace that loader takes from the config. The catalog marks the trainers
PETR+X routes on (``Method.routable``; ``trainers.catalog.TUNED_TRAINERS``).
"""
from __future__ import annotations

import os
from typing import Protocol

from yacs.config import CfgNode

from clip.model import CLIP
from engine.checkpoint import pointed_checkpoint
from engine.errors import ConfigError
from engine.registry import TRAINER_REGISTRY

from ..catalog import TRAINERS, TUNED_TRAINERS
from ..prompting.backbone import Autocast
from ..prompting.scoring import ClassScoringModel


class TunedTrainer(Protocol):
    """What a routable trainer class declares for PETR+X."""

    NS: str
    TUNED_MODEL: str
    """The folder of a run holding its checkpoints (``<run>/<TUNED_MODEL>/model.pth.tar-<E>``)."""
    TUNED_BORROWS: tuple[str, ...]
    """The keys of its namespace ``tuned_model`` reads from the config."""

    @classmethod
    def tuned_model(cls, clip_model: CLIP, cfg: CfgNode, path: str, autocast: Autocast) -> ClassScoringModel:
        """(the run's frozen CLIP, the run's config, a checkpoint file, the run's autocast) -> X's scoring model."""
        ...


def tuned_trainer(name: str) -> type[TunedTrainer]:
    """The trainer class whose runs PETR+X reads as ``TRAINER.PETRX.TUNED_TRAINER`` ``name`` (its module imported
    through the registry); ConfigError naming the routable trainers otherwise."""
    if name not in TUNED_TRAINERS:
        raise ConfigError(f"TRAINER.PETRX.TUNED_TRAINER is {name!r}; PETR+X routes on {', '.join(TUNED_TRAINERS)} "
                          "(the catalog's routable rows)")
    TRAINER_REGISTRY.load({name: TRAINERS[name]})
    return TRAINER_REGISTRY.get(name)


def borrowed_keys(name: str) -> tuple[str, ...]:
    """The dotted keys of trainer ``name``'s namespace that its ``tuned_model`` reads (empty for an unknown name)."""
    if name not in TUNED_TRAINERS:
        return ()
    trainer = tuned_trainer(name)
    return tuple(f"TRAINER.{trainer.NS}.{key}" for key in trainer.TUNED_BORROWS)


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
