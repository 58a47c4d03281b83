"""Up-front checks of numeric config values, so a bad value fails before any data or model is loaded.

Rules match a key by its full name or by its last component (``*.LAMBDA`` covers every trainer's λ); each names
the key, the value and the allowed range.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from .errors import ConfigError

Rule = tuple[Callable[[float], bool], str]

_AT_LEAST_1: Rule = (lambda v: v >= 1, "an integer >= 1")
_POSITIVE: Rule = (lambda v: v > 0, "a number > 0")
_NON_NEGATIVE: Rule = (lambda v: v >= 0, "a number >= 0")

# Full key names.
_BY_KEY: dict[str, Rule] = {
    "DATALOADER.NUM_WORKERS": (lambda v: v >= 0, "an integer >= 0"),
    "DATASET.NUM_SHOTS": (lambda v: v >= -1, "an integer >= 1, or 0 / -1 for every image"),
    "OPTIM.MAX_EPOCH": (lambda v: v >= 0, "an integer >= 0"),
    "OPTIM.LR": _POSITIVE,
    "OPTIM.WEIGHT_DECAY": _NON_NEGATIVE,
    "OPTIM.MOMENTUM": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "OPTIM.GAMMA": _POSITIVE,
    "TRAIN.CHECKPOINT_FREQ": (lambda v: v >= 0, "an integer >= 0 (0: only the last epoch)"),
    "TRAIN.PRINT_FREQ": _AT_LEAST_1,
}
# Last key component, in any namespace (TRAINER.PETR.LAMBDA, TRAINER.PETRCOOP.LAMBDA, ...).
_BY_NAME: dict[str, Rule] = {
    "BATCH_SIZE": _AT_LEAST_1,
    "LAMBDA": _POSITIVE,
    "PERCENTILE": (lambda v: 0 < v <= 100, "a number in (0, 100]"),
    "TEMPERATURE": _POSITIVE,
    "KD_WEIGHT": _NON_NEGATIVE,
    "CE_WEIGHT": _NON_NEGATIVE,
    "TEXT_LOSS_WEIGHT": _NON_NEGATIVE,
    "IMAGE_LOSS_WEIGHT": _NON_NEGATIVE,
    "GPA_STD": _POSITIVE,
    "N_CTX": _AT_LEAST_1,
    "N_CTX_VISION": _AT_LEAST_1,
    "N_CTX_TEXT": _AT_LEAST_1,
    "ROUTER_MAX_IMAGES": (lambda v: v >= 0, "an integer >= 0 (0: every image)"),
}


def _leaves(node, prefix: str = "") -> Iterator[tuple[str, object]]:
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _leaves(value, name + ".")
        else:
            yield name, value


def check_config_values(cfg) -> None:
    """Raise ConfigError for the first numeric value outside its allowed range (see the rules above)."""
    for key, value in _leaves(cfg):
        rule = _BY_KEY.get(key) or _BY_NAME.get(key.rsplit(".", 1)[-1])
        if rule is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        ok, allowed = rule
        if not math.isfinite(value) or not ok(value):
            raise ConfigError(f"{key} is {value!r}; it must be {allowed}")
    if any(not isinstance(size, int) or size < 1 for size in cfg.INPUT.SIZE):
        raise ConfigError(f"INPUT.SIZE is {tuple(cfg.INPUT.SIZE)!r}; it must be two integers >= 1 (height, width)")
