"""Trainers of the project; importing this package registers them in ``engine.TRAINER_REGISTRY``."""
from . import config, coop, petr, promptkd, promptsrc, zeroshot  # noqa: F401
