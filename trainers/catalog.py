"""The project's trainers: each registered name and the module that defines it (standard library only).

The one list of trainers. ``train.py --help`` prints it without importing torch; ``register_trainers()`` imports the
modules, whose ``@TRAINER_REGISTRY.register()`` classes then fill ``engine.TRAINER_REGISTRY`` (and Dassl's registry
when Dassl is importable). Importing one module (``import trainers.petr``) registers its class alone. Adding a
trainer is its module plus one line here.
"""
from __future__ import annotations

TRAINERS: dict[str, str] = {
    "ZeroshotCLIP": "trainers.zeroshot",
    "CoOp": "trainers.coop",
    "CoCoOp": "trainers.cocoop",
    "MaPLe": "trainers.maple",
    "IVLP": "trainers.ivlp",
    "PromptSRC": "trainers.promptsrc",
    "PromptKD": "trainers.promptkd",
    "PETR": "trainers.petr",
    "PETRCoOp": "trainers.petr_coop",
    "PETRX": "trainers.petr_x",
}
"""Registered trainer name -> the module whose class registers it."""


def register_trainers() -> None:
    """Register every trainer of ``TRAINERS`` in ``engine.TRAINER_REGISTRY`` (and Dassl's, when importable)."""
    from engine.registry import TRAINER_REGISTRY

    TRAINER_REGISTRY.load(TRAINERS)
