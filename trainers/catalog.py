"""The project's methods, one row each: trainer, module, unit-command family, scripts folder, default configs, shots.

The one list of methods and trainers (standard library only: ``train.py --help`` and the runner read it without
importing torch). ``TRAINERS`` (registered name -> module) is derived from the rows; ``register_trainers()`` imports
the modules, whose ``@TRAINER_REGISTRY.register()`` classes then fill ``engine.TRAINER_REGISTRY`` (and Dassl's registry
when Dassl is importable). The unit commands take their defaults from a row and their commands from its family
(``units.commands.COMMANDS``); ``python -m units.wrappers`` renders its ``scripts/<scripts>/<command>.sh`` wrappers.
A plug-in (``plugin_of``) is evaluated training-free on a finished run of another method; a distilled method needs
the PromptSRC teacher of its dataset (or of the source, cross-dataset).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One method of the tables: its trainer and how its unit commands are called."""

    name: str
    """Name on the command line and in the plan."""
    trainer: str
    """``TRAINER`` (registered name, run folders, ``configs/trainers/<trainer>/``, parse_test_res ``--methods``)."""
    module: str
    """The module whose class registers ``trainer``."""
    commands: str
    """Its unit commands' family (a key of ``units.commands.COMMANDS``: ``learner``, ``coop``, ``petr``, ...)."""
    scripts: str
    """Folder under ``scripts/`` (the unit commands' method name)."""
    config: str
    """Base-to-novel config (``CFG``)."""
    ns: str = ""
    """Config namespace ``TRAINER.<ns>``; empty: the trainer name upper-cased."""
    imagenet_config: str = ""
    """Base-to-novel config on ImageNet when it differs (CoOp's 50-epoch schedule)."""
    xd_config: str = ""
    """Cross-dataset / DG config of the runner's transfer protocols; empty when it does not run the method there."""
    learner_xd_config: str = ""
    """Cross-dataset config of a prompt learner's own xd scripts (CoCoOp, MaPLe, IVLP), which the runner omits."""
    shots: int = 0
    """Training images per class of its base-to-novel runs (0: every train image)."""
    learns: str = ""
    """What a prompt learner's training learns, as its scripts' headers say it (``the coupled prompts``)."""
    distilled: bool = False
    """Distils from the PromptSRC teacher."""
    plugin_of: str = ""
    """The method whose finished run this training-free plug-in is evaluated on."""
    plugin_script: str = "plugin.sh"
    """The plug-in's script: ``plugin.sh DATASET SEED`` (PETR+CoOp), or PETR+X's ``base2new.sh X DATASET SEED
    X_RUN_DIR`` (``trainer`` PETRX), which names the prompt learner it routes on."""
    dg_script: str = ""
    """Its domain-generalisation script per target: ``xd_test.sh`` evaluates the source-trained student,
    ``dg_train.sh`` trains on the target's images; empty for methods without one."""
    config_suffix: str = ""
    """Appended to a config family's name for this method: PETR+X runs ``<family>_<x>`` (``vit_b16_cocoop``, the
    demo's ``demo_cocoop``), as one routing trainer (PETRX) has a config per prompt learner."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ns", self.ns or self.trainer.upper())

    def b2n_config(self, dataset: str) -> str:
        """Its base-to-novel config on ``dataset``."""
        return self.imagenet_config if dataset == "imagenet" and self.imagenet_config else self.config


ROWS = (
    Method("ZeroshotCLIP", "ZeroshotCLIP", "trainers.zeroshot", "zsclip", "zsclip", "vit_b16", ns="ZSCLIP",
           xd_config="vit_b16"),
    Method("PromptSRC", "PromptSRC", "trainers.promptsrc", "teacher", "teacher", "vit_l14_c2_ep20_batch8_4+4ctx",
           xd_config="vit_l14_c2_ep20_batch8_4+4ctx_cross_datasets", shots=16),
    Method("CoOp", "CoOp", "trainers.coop", "coop", "coop", "vit_b16_ctxv1", imagenet_config="vit_b16_ep50_ctxv1",
           shots=16),
    Method("CoCoOp", "CoCoOp", "trainers.cocoop", "learner", "cocoop", "vit_b16_c4_ep10_batch1_ctxv1",
           learner_xd_config="vit_b16_c4_ep10_batch1_ctxv1", shots=16, learns="the context and meta-net"),
    Method("MaPLe", "MaPLe", "trainers.maple", "learner", "maple", "vit_b16_c2_ep5_batch4_2ctx",
           learner_xd_config="vit_b16_c2_ep5_batch4_2ctx_cross_datasets", shots=16, learns="the coupled prompts"),
    Method("IVLP", "IVLP", "trainers.ivlp", "learner", "ivlp", "vit_b16_c2_ep20_batch4_4+4ctx",
           learner_xd_config="vit_b16_c2_ep20_batch4_4+4ctx", shots=16, learns="the vision and language prompts"),
    Method("PromptKD", "PromptKD", "trainers.promptkd", "promptkd", "promptkd", "vit_b16_c2_ep20_batch8_4+4ctx",
           xd_config="vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets", distilled=True, dg_script="xd_test.sh"),
    Method("PETR", "PETR", "trainers.petr", "petr", "petr", "vit_b16_ep40_batch8_4ctx",
           xd_config="vit_b16_ep40_batch8_4ctx_cross_datasets", distilled=True, dg_script="dg_train.sh"),
    Method("PETR+CoOp", "PETRCoOp", "trainers.petr_coop", "petr_coop", "petr_coop", "vit_b16_ctxv1",
           imagenet_config="vit_b16_ep50_ctxv1", shots=16, plugin_of="CoOp"),
)
"""The methods, one row each (name, trainer, module, command family, scripts folder, base-to-novel config, ...)."""
PETR_X = tuple(Method(f"PETR+{x.name}", "PETRX", "trainers.petr_x", "petr_x", "petr_x", f"vit_b16_{x.scripts}",
                      shots=16, plugin_of=x.name, plugin_script="base2new.sh", config_suffix=f"_{x.scripts}")
               for x in ROWS if x.name in ("CoCoOp", "MaPLe", "IVLP"))
"""PETR's routing on a finished CoCoOp, MaPLe or IVLP run (PETR+CoOp keeps its own trainer)."""

METHODS = {m.name: m for m in (*ROWS, *PETR_X)}
ZERO_SHOT, TEACHER = METHODS["ZeroshotCLIP"], METHODS["PromptSRC"]
TRAINERS: dict[str, str] = {m.trainer: m.module for m in METHODS.values()}
"""Registered trainer name -> the module whose class registers it."""
ALIASES = {"zsclip": "ZeroshotCLIP", "clip": "ZeroshotCLIP", "teacher": "PromptSRC", "petrcoop": "PETR+CoOp",
           "petr_coop": "PETR+CoOp"}
"""Other spellings (lower case) of the names in :data:`METHODS`."""
PETR_X_LEARNERS = {**{m.scripts: m for m in ROWS if m.name in ("CoOp", "CoCoOp", "MaPLe", "IVLP")},
                   "promptsrc": Method("PromptSRC", "PromptSRC", "trainers.promptsrc", "teacher", "teacher",
                                       "vit_b16_c2_ep20_batch4_4+4ctx", shots=16)}
"""The prompt learners PETR+X routes on, with the config of the run it takes by default (PromptSRC: the ViT-B/16
teacher recipe, ``teacher base2new_train`` with that CFG and TEACHER_NAME=ViT-B/16)."""


def find_method(name: str) -> Method:
    """The method called ``name`` (any case, or an alias); ValueError listing the names otherwise."""
    by_lower = {k.lower(): v for k, v in METHODS.items()}
    key = ALIASES.get(name.lower(), name).lower()
    if key not in by_lower:
        raise ValueError(f"unknown method '{name}'; choose from {', '.join(METHODS)}")
    return by_lower[key]


def by_scripts(folder: str) -> Method:
    """The method whose unit commands live in ``scripts/<folder>/`` (PETR+X: its trainer's row); KeyError if none."""
    for method in METHODS.values():
        if method.scripts == folder:
            return method
    raise KeyError(folder)


def register_trainers() -> None:
    """Register every trainer of ``TRAINERS`` in ``engine.TRAINER_REGISTRY`` (and Dassl's, when importable)."""
    from engine.registry import TRAINER_REGISTRY

    TRAINER_REGISTRY.load(TRAINERS)
