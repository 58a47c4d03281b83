"""Trainers of the project; importing this package registers them in ``engine.TRAINER_REGISTRY``."""
from . import config, coop, zeroshot  # noqa: F401
