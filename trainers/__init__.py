"""Trainers of the project; importing this package registers them in ``engine.TRAINER_REGISTRY`` (and in Dassl's
registry when Dassl is importable)."""
from engine.dassl_bridge import register_into_dassl

from . import cocoop, config, coop, ivlp, maple, petr, petr_coop, petr_x, promptkd, promptsrc, zeroshot  # noqa: F401

register_into_dassl(strict=False)
