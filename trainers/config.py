"""The project's config: the protocol keys, and each trainer's keys collected from the trainer classes of the catalog.

yacs rejects keys that are not declared. A trainer declares the keys of its namespace ``TRAINER.<NS>`` next to its
class, ``CONFIG_KEYS = {"KEY": (default, rule), ...}`` (rules: ``engine/schema.py``); ``extend_cfg`` adds every
catalog trainer's defaults and ``config_schema()`` their rules, checked before a run prepares anything (``train.py``).
``check_namespaces`` refuses a key of another trainer's namespace that the running trainer would ignore.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from yacs.config import CfgNode as CN

from clip.weights import declared_normalisation
from engine.config import ENGINE_SCHEMA, add_project_keys
from engine.dataset_base import PROTOCOLS, SUBSAMPLES
from engine.errors import ConfigError
from engine.registry import TRAINER_REGISTRY
from engine.schema import Choice, KeyTable, Rule, Text

from .catalog import TRAINERS, register_trainers

# Config namespaces of upstream trainers this project does not implement, and the trainer each belongs to.
FOREIGN_TRAINERS = {"VPT": "VPT"}

PROTOCOL_KEYS: KeyTable = {
    # Which classes a split keeps (all | base | new) and the PromptKD-style protocol (base2novel | cross | dg).
    "DATASET.SUBSAMPLE_CLASSES": ("all", Choice(SUBSAMPLES)),
    "TRAINER.MODAL": ("base2novel", Choice(PROTOCOLS)),
    # Labelled source dataset of PETR's cross-dataset and dg protocols, read from the same DATASET.ROOT.
    "DATASET.SOURCE_DATASET": ("ImageNet", Text()),
    # Folder of the few-shot files (<FEWSHOT_DIR>/<dataset folder>/shot_K-seed_S.json); "" = in the dataset's own
    # folder (<dataset folder>/split_fewshot), or <OUTPUT_DIR>/split_fewshot/<dataset folder> where it is read-only.
    "DATASET.FEWSHOT_DIR": ("", Text()),
}
"""Protocol and dataset keys beyond the engine's: dotted name → (default, rule)."""


def catalog_trainers() -> dict[str, type]:
    """Every trainer class of the catalog by namespace (importing their modules); each declares its own
    ``CONFIG_KEYS``, and no two share a namespace."""
    register_trainers()
    classes: dict[str, type] = {}
    for name in TRAINERS:
        cls = TRAINER_REGISTRY.get(name)
        if "CONFIG_KEYS" not in vars(cls):
            raise TypeError(f"{name} ({TRAINERS[name]}) declares no CONFIG_KEYS of its own: declare the keys of "
                            f"TRAINER.{cls.NS} in its class")
        if classes.setdefault(cls.NS, cls) is not cls:
            raise TypeError(f"{name} and {classes[cls.NS].__name__} both have the namespace TRAINER.{cls.NS}")
    return classes


def trainer_keys() -> dict[str, KeyTable]:
    """Every catalog trainer's namespace → its keys (the class's ``CONFIG_KEYS``)."""
    return {ns: cls.CONFIG_KEYS for ns, cls in catalog_trainers().items()}


def _set(cfg: CN, dotted: str, value) -> None:
    *parents, key = dotted.split(".")
    node = cfg
    for name in parents:
        node = node[name]
    node[key] = value


def extend_cfg(cfg: CN) -> CN:
    """Add the method namespaces and protocol keys to a ``get_cfg_default()`` tree, ours or Dassl's (which also gets
    the engine's own keys, ``engine.config.PROJECT_KEYS``), in place; also returned."""
    add_project_keys(cfg)
    if "NO_TEST" not in cfg.TEST:
        cfg.TEST.NO_TEST = False
    for dotted, (default, _) in PROTOCOL_KEYS.items():
        _set(cfg, dotted, default)
    for ns, keys in trainer_keys().items():
        cfg.TRAINER[ns] = CN({key: default for key, (default, _) in keys.items()})
    return cfg


def config_schema() -> dict[str, Rule]:
    """The rule of every key of an ``extend_cfg`` tree: the engine's, the protocol keys and each trainer's."""
    schema = dict(ENGINE_SCHEMA)
    schema.update({dotted: rule for dotted, (_, rule) in PROTOCOL_KEYS.items()})
    for ns, keys in trainer_keys().items():
        schema.update({f"TRAINER.{ns}.{key}": rule for key, (_, rule) in keys.items()})
    return schema


def check_namespaces(cfg: CN, given: Mapping[str, str]) -> None:
    """Refuse (ConfigError) a key of another trainer's namespace that a config file or the command line set
    (``given``: dotted key -> that source) when the running trainer does not read it (its ``borrowed_keys``): e.g.
    ``TRAINER.MAPLE.N_CTX`` given to CoOp, or a MaPLe yaml. Nothing is checked for a trainer name the registry lacks
    (building the trainer names it)."""
    name = cfg.TRAINER.NAME
    if name not in TRAINER_REGISTRY:
        return
    borrowed = set(TRAINER_REGISTRY.get(name).borrowed_keys(cfg))
    for dotted, source in given.items():
        line = foreign_key_line(name, dotted, source) if dotted not in borrowed else ""
        if line:
            raise ConfigError(line)


def foreign_key_line(name: str, dotted: str, source: str) -> str:
    """The line refusing ``dotted`` (set by ``source``) when it is a key of another trainer's namespace than that of
    the registered trainer ``name``, naming the key to set instead; "" otherwise."""
    owners = catalog_trainers()
    parts = dotted.split(".")
    if name not in TRAINER_REGISTRY or len(parts) != 3 or parts[0] != "TRAINER" or parts[1] not in owners:
        return ""
    running = TRAINER_REGISTRY.get(name)
    if parts[1] == running.NS:
        return ""
    key = parts[2]
    fix = f"set TRAINER.{running.NS}.{key} instead" if key in running.CONFIG_KEYS else "leave it out"
    owner = owners[parts[1]].__name__
    return (f"{source}: {dotted} is a key of {owner}, but {name} reads TRAINER.{running.NS or '<none>'} and would "
            f"ignore it: {fix}, or run --trainer {owner}")


def follow_backbone(cfg: CN, given: Mapping[str, str]) -> str:
    """Set INPUT.PIXEL_MEAN / PIXEL_STD to the normalisation MODEL.BACKBONE.NAME was trained with, where its name
    declares it (``clip.weights.declared_normalisation``: OpenAI's models, open_clip's names), whatever the config
    files say: it is a fact of the weights. A command-line value that differs is refused (``given``: dotted key ->
    the source that set it). Returns a note naming what changed ("" when nothing did)."""
    declared = declared_normalisation(cfg.MODEL.BACKBONE.NAME)
    if declared is None:
        return ""
    changed = []
    for key, value in zip(("INPUT.PIXEL_MEAN", "INPUT.PIXEL_STD"), declared):
        current = [float(v) for v in cfg.INPUT[key.split(".")[1]]]
        if all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(current, value)):
            continue
        if given.get(key) == "command-line opts":
            raise ConfigError(f"command-line opts: {key} is {current}, but MODEL.BACKBONE.NAME "
                              f"{cfg.MODEL.BACKBONE.NAME} was trained on images normalised with {list(value)}: leave "
                              f"{key} out (it follows the backbone)")
        changed.append(f"{key} {current} -> {list(value)}")
        cfg.INPUT[key.split(".")[1]] = list(value)
    return f"Note: {', '.join(changed)}, the normalisation of {cfg.MODEL.BACKBONE.NAME}" if changed else ""


def own_key_hint(trainer: str, key: str) -> str:
    """For an unknown ``TRAINER.<X>.<K>`` whose ``K`` the running ``trainer`` declares in its own namespace (an
    upstream command of a variant that kept its parent's namespace: KgCoOp's ``TRAINER.COOP.W``): where to set it."""
    parts = key.split(".")
    if len(parts) != 3 or parts[0] != "TRAINER" or trainer not in TRAINER_REGISTRY:
        return ""
    running = TRAINER_REGISTRY.get(trainer)
    return f"; {trainer} reads TRAINER.{running.NS}.{parts[2]}: set that instead" if parts[2] in running.CONFIG_KEYS \
        else ""


def foreign_trainer_message(key: str) -> str:
    """For an unknown ``TRAINER.<NS>.*`` key of an upstream trainer we lack, the error naming our trainers; else ""."""
    parts = key.split(".")
    if len(parts) < 2 or parts[0] != "TRAINER" or parts[1] not in FOREIGN_TRAINERS:
        return ""
    return (f"'{key}' configures upstream's {FOREIGN_TRAINERS[parts[1]]} trainer, which this project does not have; "
            f"trainers here: {', '.join(sorted(TRAINERS))}")
