"""Trainers of the project; importing this package registers them in ``engine.TRAINER_REGISTRY``."""
from . import config, coop, petr, petr_coop, promptkd, promptsrc, zeroshot  # noqa: F401
