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
    """What a learner's training learns, as its scripts' headers say it (``the coupled prompts``, ``the feature
    adapter on the image features``)."""
    distilled: bool = False
    """Distils from the PromptSRC teacher."""
    kd_at_test: bool = False
    """A distilled method whose base-to-novel tests set KD_WEIGHT too and whose training leaves TEMPERATURE to its
    config (PETR's scripts); otherwise the training alone sets both (PromptKD's)."""
    plugin_of: str = ""
    """The method whose finished run this training-free plug-in is evaluated on."""
    plugin_script: str = "plugin.sh"
    """The plug-in's script: ``plugin.sh DATASET SEED`` (PETR+CoOp), or PETR+X's ``base2new.sh X DATASET SEED
    X_RUN_DIR`` (``trainer`` PETRX), which names the method it routes on."""
    dg_script: str = ""
    """Its domain-generalisation script per target: ``xd_test.sh`` evaluates the source-trained student,
    ``dg_train.sh`` trains on the target's images; empty for methods without one."""
    routable: bool = False
    """PETR+X routes on its finished runs (``scripts/petr_x/*.sh <scripts folder>``); its trainer class says how a
    run is read (``TUNED_MODEL``, ``tuned_model``). A routable method of the ``learner`` family is also a
    method of the tables, ``PETR+<name>`` (:data:`PETR_X`)."""
    routed_config: str = ""
    """The config of the run PETR+X takes by default, when it is not its base-to-novel config (PromptSRC: its
    ViT-B/16 recipe, not the ViT-L/14 teacher's)."""
    routes: bool = False
    """It routes between a seen and an unseen branch (its results record the routing rates)."""
    default_sweep: int = 0
    """Its place among the runner's default methods (the paper's comparison; 1 leads the table, its Δ baseline), in
    every protocol it has scripts for; 0: not a default."""
    fast: tuple[str, ...] = ()
    """The fast profile's settings it takes (``runner.profiles.FAST_SETTINGS``: bf16, compile, teacher_cache)."""
    demo: str = ""
    """Its place in the built-in demo: ``core`` (``make demo``), ``full`` (``make demo-full`` only) or empty."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ns", self.ns or self.trainer.upper())

    def b2n_config(self, dataset: str) -> str:
        """Its base-to-novel config on ``dataset``."""
        return self.imagenet_config if dataset == "imagenet" and self.imagenet_config else self.config

    def x_config(self, dataset: str) -> str:
        """The config of its base-to-novel run on ``dataset`` that PETR+X routes on by default."""
        return self.routed_config or self.b2n_config(dataset)


DISTILLED_FAST = ("bf16", "compile", "teacher_cache")
"""The fast profile's settings of the distilled students."""
ROWS = (
    Method("ZeroshotCLIP", "ZeroshotCLIP", "trainers.zeroshot", "zsclip", "zsclip", "vit_b16", ns="ZSCLIP",
           xd_config="vit_b16", default_sweep=5, demo="core"),
    Method("CoOp", "CoOp", "trainers.coop", "coop", "coop", "vit_b16_ctxv1", imagenet_config="vit_b16_ep50_ctxv1",
           shots=16, routable=True, default_sweep=3, fast=("bf16",), demo="core"),
    Method("KgCoOp", "KgCoOp", "trainers.kgcoop", "learner", "kgcoop", "vit_b16_ep100_ctxv1",
           learner_xd_config="vit_b16_ep100_ctxv1", shots=16, learns="the context near the hand-crafted prompt",
           routable=True, demo="full"),
    Method("CoCoOp", "CoCoOp", "trainers.cocoop", "learner", "cocoop", "vit_b16_c4_ep10_batch1_ctxv1",
           learner_xd_config="vit_b16_c4_ep10_batch1_ctxv1", shots=16, learns="the context and meta-net",
           routable=True, demo="full"),
    Method("MaPLe", "MaPLe", "trainers.maple", "learner", "maple", "vit_b16_c2_ep5_batch4_2ctx",
           learner_xd_config="vit_b16_c2_ep5_batch4_2ctx_cross_datasets", shots=16, learns="the coupled prompts",
           routable=True, demo="full"),
    Method("IVLP", "IVLP", "trainers.ivlp", "learner", "ivlp", "vit_b16_c2_ep20_batch4_4+4ctx",
           learner_xd_config="vit_b16_c2_ep20_batch4_4+4ctx", shots=16, learns="the vision and language prompts",
           routable=True, demo="full"),
    Method("CLIP-Adapter", "CLIPAdapter", "trainers.clip_adapter", "learner", "clip_adapter", "vit_b16",
           imagenet_config="vit_b16_ep50", learner_xd_config="vit_b16", shots=16,
           learns="the feature adapter on the image features", routable=True, demo="full"),
    Method("PromptSRC", "PromptSRC", "trainers.promptsrc", "teacher", "teacher", "vit_l14_c2_ep20_batch8_4+4ctx",
           xd_config="vit_l14_c2_ep20_batch8_4+4ctx_cross_datasets", shots=16, routable=True,
           routed_config="vit_b16_c2_ep20_batch4_4+4ctx", demo="core"),
    Method("PromptKD", "PromptKD", "trainers.promptkd", "promptkd", "promptkd", "vit_b16_c2_ep20_batch8_4+4ctx",
           xd_config="vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets", distilled=True, dg_script="xd_test.sh",
           default_sweep=2, fast=DISTILLED_FAST, demo="core"),
    Method("PETR", "PETR", "trainers.petr", "petr", "petr", "vit_b16_ep40_batch8_4ctx",
           xd_config="vit_b16_ep40_batch8_4ctx_cross_datasets", distilled=True, kd_at_test=True,
           dg_script="dg_train.sh", routes=True, default_sweep=1, fast=DISTILLED_FAST, demo="core"),
    Method("PETR+CoOp", "PETRCoOp", "trainers.petr_coop", "petr_coop", "petr_coop", "vit_b16_ctxv1",
           imagenet_config="vit_b16_ep50_ctxv1", shots=16, plugin_of="CoOp", routes=True, default_sweep=4,
           fast=("bf16",), demo="core"),
)
"""The methods, one row each (name, trainer, module, command family, scripts folder, base-to-novel config, ...), in
the order of the tables: zero-shot CLIP, the learners, the teacher, the distilled students, the plug-in."""
PETR_X_TRAINER = "PETRX"
"""The routing trainer of every PETR+X method (its rows are derived: :data:`PETR_X`)."""
PETR_X = tuple(Method(f"PETR+{x.name}", PETR_X_TRAINER, "trainers.petr_x", "petr_x", "petr_x", "vit_b16",
                      shots=x.shots, plugin_of=x.name, plugin_script="base2new.sh", routes=True, demo=x.demo)
               for x in ROWS if x.routable and x.commands == "learner")
"""PETR's routing on the finished runs of each routable method of the ``learner`` family (CoOp has its own
routed method, PETR+CoOp; PromptSRC is the teacher, routed on through its scripts alone): one routing trainer,
PETRX, whose runs keep ``<config>_<x>`` folders."""

METHODS = {m.name: m for m in (*ROWS, *PETR_X)}
ZERO_SHOT, TEACHER = METHODS["ZeroshotCLIP"], METHODS["PromptSRC"]
TRAINERS: dict[str, str] = {m.trainer: m.module for m in METHODS.values()}
"""Registered trainer name -> the module whose class registers it."""
ALIASES = {"clip": "ZeroshotCLIP"}
"""Other spellings (lower case) of the names in :data:`METHODS`, besides each method's trainer and scripts folder."""
PETR_X_LEARNERS = {(m.name.lower() if m.commands == "teacher" else m.scripts): m
                   for m in sorted((m for m in ROWS if m.routable), key=lambda m: m.commands == "teacher")}
"""The methods PETR+X routes on, by the name its scripts take (the scripts folder; the teacher's by its
name, ``promptsrc``, last)."""
TUNED_TRAINERS = tuple(dict.fromkeys(m.trainer for m in ROWS if m.routable))
"""The trainers whose runs PETR+X reads (``TRAINER.PETRX.TUNED_TRAINER``)."""


def method_name(trainer: str, routed_on: str = "") -> str:
    """The name of the method a run belongs to, from what it records: its trainer's row, and for PETR+X (``PETRX``)
    the row of the learner whose run it routed on (``KgCoOp`` -> ``PETR+KgCoOp``); the trainer name where no row
    names the run (PETRX on CoOp or the PromptSRC teacher, a trainer the catalog lacks)."""
    if trainer == PETR_X_TRAINER:
        return next((m.name for m in PETR_X if METHODS[m.plugin_of].trainer == routed_on), trainer)
    return next((m.name for m in ROWS if m.trainer == trainer), trainer)


def method_trainer(name: str) -> str:
    """The trainer of a method name (``PETR+KgCoOp`` -> ``PETRX``); other names are taken for trainer names."""
    return METHODS[name].trainer if name in METHODS else name


def find_method(name: str) -> Method:
    """The method called ``name`` (any case): its name as the tables print it (``PETR+CoOp``), an alias, or its
    trainer or scripts folder where only one method has it (``PETRCoOp``, ``petr_coop``); ValueError listing the
    names otherwise (``PETRX``: the PETR+X methods it could be)."""
    lower = name.lower()
    lower = ALIASES.get(lower, lower).lower()
    named = [m for m in METHODS.values() if m.name.lower() == lower]
    named = named or [m for m in METHODS.values() if lower in (m.trainer.lower(), m.scripts)]
    if len(named) == 1:
        return named[0]
    if named:
        raise ValueError(f"'{name}' is the {'trainer' if named[0].trainer.lower() == lower else 'scripts folder'} of "
                         f"{', '.join(m.name for m in named)}: name one of them")
    raise ValueError(f"unknown method '{name}'; choose from {', '.join(METHODS)}")


def by_scripts(folder: str) -> Method:
    """The method whose unit commands live in ``scripts/<folder>/`` (PETR+X: its trainer's row); KeyError if none."""
    for method in METHODS.values():
        if method.scripts == folder:
            return method
    raise KeyError(folder)


def scripts_folder(name: str) -> str:
    """The scripts folder of the unit commands ``name`` names: ``name`` when it is one (``petr_coop``), else the
    folder of the method :func:`find_method` finds (``PETR+CoOp``, ``PETRCoOp``); ``name`` itself when neither
    does (its caller says it is unknown)."""
    if any(m.scripts == name for m in METHODS.values()):
        return name
    try:
        return find_method(name).scripts
    except ValueError:
        return name


def register_trainers() -> None:
    """Register every trainer of ``TRAINERS`` in ``engine.TRAINER_REGISTRY`` (and Dassl's, when importable)."""
    from engine.registry import TRAINER_REGISTRY

    TRAINER_REGISTRY.load(TRAINERS)
