"""The methods: trainer, scripts folder, default configs and shots per protocol, and how they relate.

One row per method, read by the unit commands (their defaults) and by the runner (its plans). A plug-in
(``plugin_of``) is evaluated training-free on a finished run of another method; a distilled method needs the
PromptSRC teacher of its dataset (or of the source, cross-dataset).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One method of the tables and how its unit commands are called."""

    name: str
    """Name on the command line and in the plan."""
    trainer: str
    """``TRAINER`` (run folders, ``configs/trainers/<trainer>/``, parse_test_res ``--methods``)."""
    scripts: str
    """Folder under ``scripts/`` (the unit commands' method name)."""
    ns: str
    """Config namespace ``TRAINER.<ns>``."""
    config: str
    """Base-to-novel config (``CFG``)."""
    imagenet_config: str = ""
    """Base-to-novel config on ImageNet when it differs (CoOp's 50-epoch schedule)."""
    xd_config: str = ""
    """Cross-dataset / DG config of the runner's transfer protocols; empty when it does not run the method there."""
    learner_xd_config: str = ""
    """Cross-dataset config of a prompt learner's own xd scripts (CoCoOp, MaPLe, IVLP), which the runner omits."""
    shots: int = 0
    """Training images per class of its base-to-novel runs (0: every train image)."""
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

    def b2n_config(self, dataset: str) -> str:
        """Its base-to-novel config on ``dataset``."""
        return self.imagenet_config if dataset == "imagenet" and self.imagenet_config else self.config


ZERO_SHOT = Method("ZeroshotCLIP", "ZeroshotCLIP", "zsclip", "ZSCLIP", "vit_b16", xd_config="vit_b16")
TEACHER = Method("PromptSRC", "PromptSRC", "teacher", "PROMPTSRC", "vit_l14_c2_ep20_batch8_4+4ctx",
                 xd_config="vit_l14_c2_ep20_batch8_4+4ctx_cross_datasets", shots=16)
COOP = Method("CoOp", "CoOp", "coop", "COOP", "vit_b16_ctxv1", imagenet_config="vit_b16_ep50_ctxv1", shots=16)
PROMPTKD = Method("PromptKD", "PromptKD", "promptkd", "PROMPTKD", "vit_b16_c2_ep20_batch8_4+4ctx",
                  xd_config="vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets", distilled=True, dg_script="xd_test.sh")
PETR = Method("PETR", "PETR", "petr", "PETR", "vit_b16_ep40_batch8_4ctx",
              xd_config="vit_b16_ep40_batch8_4ctx_cross_datasets", distilled=True, dg_script="dg_train.sh")
PETR_COOP = Method("PETR+CoOp", "PETRCoOp", "petr_coop", "PETRCOOP", "vit_b16_ctxv1",
                   imagenet_config="vit_b16_ep50_ctxv1", shots=16, plugin_of="CoOp")

COCOOP = Method("CoCoOp", "CoCoOp", "cocoop", "COCOOP", "vit_b16_c4_ep10_batch1_ctxv1",
                learner_xd_config="vit_b16_c4_ep10_batch1_ctxv1", shots=16)
MAPLE = Method("MaPLe", "MaPLe", "maple", "MAPLE", "vit_b16_c2_ep5_batch4_2ctx",
               learner_xd_config="vit_b16_c2_ep5_batch4_2ctx_cross_datasets", shots=16)
IVLP = Method("IVLP", "IVLP", "ivlp", "IVLP", "vit_b16_c2_ep20_batch4_4+4ctx",
              learner_xd_config="vit_b16_c2_ep20_batch4_4+4ctx", shots=16)

PETR_X = tuple(Method(f"PETR+{x.name}", "PETRX", "petr_x", "PETRX", f"vit_b16_{x.scripts}", shots=16,
                      plugin_of=x.name, plugin_script="base2new.sh", config_suffix=f"_{x.scripts}")
               for x in (COCOOP, MAPLE, IVLP))
"""PETR's routing on a finished CoCoOp, MaPLe or IVLP run (PETR+CoOp keeps its own trainer)."""

METHODS = {m.name: m for m in (ZERO_SHOT, TEACHER, COOP, COCOOP, MAPLE, IVLP, PROMPTKD, PETR, PETR_COOP, *PETR_X)}
ALIASES = {"zsclip": "ZeroshotCLIP", "clip": "ZeroshotCLIP", "teacher": "PromptSRC", "petrcoop": "PETR+CoOp",
           "petr_coop": "PETR+CoOp"}
"""Other spellings (lower case) of the names in :data:`METHODS`."""
PLUGIN_SUFFIX = "_plugin"
"""A plug-in run's config folder is ``<config>_plugin`` (``petr_coop plugin``)."""
PETR_X_LEARNERS = {"coop": COOP, "cocoop": COCOOP, "maple": MAPLE, "ivlp": IVLP,
                   "promptsrc": Method("PromptSRC", "PromptSRC", "teacher", "PROMPTSRC",
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
    """The method whose unit commands live in ``scripts/<folder>/`` (PETR+X: its trainer's row)."""
    for method in METHODS.values():
        if method.scripts == folder:
            return method
    raise KeyError(folder)
