"""Every project-specific config key (``TRAINER.<NAME>.*`` and protocol keys) with its default and its rule,
declared in one place.

yacs rejects keys that are not declared, so a new trainer option is added here before any yaml uses it: one entry
``"KEY": (default, rule)`` in the trainer's table of ``TRAINER_KEYS`` (rules: ``engine/schema.py``).
``config_schema()`` is checked before a run prepares anything (``train.py``).
"""
from __future__ import annotations

from typing import Any

from yacs.config import CfgNode as CN

from engine.config import ENGINE_SCHEMA, add_project_keys
from engine.dataset_base import PROTOCOLS, SUBSAMPLES
from engine.precision import PRECISIONS
from engine.schema import NON_NEGATIVE, POSITIVE, Bool, Choice, Int, Number, Rule, Text

from .catalog import TRAINERS
from .coop import CLASS_TOKEN_POSITIONS
from .routing import DEFAULT_LAMBDA, DEFAULT_PERCENTILE, ROUTERS
from .teacher_cache import CACHE_MODES
from .zeroshot import TEMPLATE_MODES

KeyTable = dict[str, tuple[Any, Rule]]
"""Key → (default, rule) of one namespace."""

# Config namespaces of upstream trainers this project does not implement, and the trainer each belongs to.
FOREIGN_TRAINERS = {"VPT": "VPT"}

# Keys upstream's yamls set that have no effect here, with the reason (logged once by the trainer).
INERT_KEYS = {
    "PROMPTKD": {
        "PROJECT_LAYER": "upstream never reads it; the projector is two 1x1 convs, as upstream's",
        "CE_WEIGHT": "upstream never reads it; PromptKD distils label-free (PETR has its own CE_WEIGHT)",
        "N_CTX_TEXT": "the teacher's text prompts (count and values) come from TEACHER_CKPT",
        "CTX_INIT": "the teacher's text prompts (count and values) come from TEACHER_CKPT",
        "PROMPT_DEPTH_TEXT": "the student has no text prompts (upstream builds them and never uses them)",
    },
}

PREC = Choice(PRECISIONS)
CE_SCOPES = ("all", "base")
"""PETR's cross-entropy on the seen branch: over all classes or the base classes only."""
TEACHER_CACHE = Choice(CACHE_MODES)

ROUTER_KEYS: KeyTable = {
    "ROUTER": ("mahalanobis", Choice(ROUTERS)),  # trainers/routing.py ROUTERS
    "LAMBDA": (DEFAULT_LAMBDA, POSITIVE),  # Mahalanobis threshold = λ · percentile of the fit distances
    "PERCENTILE": (DEFAULT_PERCENTILE, Number(0, 100, low_open=True)),
    "REFIT_ROUTER": (False, Bool()),  # eval-only runs: fit a new router instead of reading the run's router.pth.tar
    "ROUTER_MAX_IMAGES": (0, Int(0, note="0: every image")),  # cap on router_x / train_u-dump images
    "DUMP_TRAIN_U": (True, Bool()),  # write train_u_logits.pt beside the router
}
"""The router keys of every routed trainer's namespace (PETR, PETRCOOP, PETRX), declared once."""

TEACHER_KEYS: KeyTable = {
    "TEACHER_NAME": ("ViT-L/14", Text()),
    "TEACHER_CKPT": ("", Text()),
    "KD_WEIGHT": (1.0, NON_NEGATIVE),
    "TEMPERATURE": (1.0, POSITIVE),
    # Teacher feature cache (trainers/teacher_cache.py): none (online teacher) | fixed | views (K stored crops).
    "TEACHER_CACHE": ("none", TEACHER_CACHE),
    "TEACHER_CACHE_VIEWS": (4, Int(1)),
    "TEACHER_CACHE_DIR": ("", Text()),  # "" = <OUTPUT_DIR>/teacher_cache; share one folder across runs
}
"""The teacher keys of the distilling trainers (PROMPTKD, PETR), declared once."""

VL_PROMPT_KEYS: KeyTable = {
    "N_CTX_VISION": (4, Int(1)),
    "N_CTX_TEXT": (4, Int(1)),
    "CTX_INIT": ("a photo of a", Text()),
    "PREC": ("fp16", PREC),
    "PROMPT_DEPTH_VISION": (9, Int(1)),
    "PROMPT_DEPTH_TEXT": (9, Int(1)),
}
"""The deep vision-language prompt keys PromptSRC, PromptKD and IVLP share (upstream's names and defaults)."""

TRAINER_KEYS: dict[str, KeyTable] = {
    # CoOp: learnable context shared (or class-specific) in front of / around the class token.
    "COOP": {
        "N_CTX": (16, Int(1)),
        "CSC": (False, Bool()),
        "CTX_INIT": ("", Text()),
        "PREC": ("fp16", PREC),
        "CLASS_TOKEN_POSITION": ("end", Choice(CLASS_TOKEN_POSITIONS)),
    },
    # ZeroshotCLIP: hand-crafted prompts, one template (single) or the per-dataset ensemble (ensemble).
    "ZSCLIP": {
        "TEMPLATES": ("single", Choice(TEMPLATE_MODES)),
        "PREC": ("fp32", PREC),
    },
    # PromptSRC: the ViT-L/14 teacher's deep vision+language prompts with self-regularisation losses.
    "PROMPTSRC": {
        **VL_PROMPT_KEYS,
        "TEXT_LOSS_WEIGHT": (25.0, NON_NEGATIVE),
        "IMAGE_LOSS_WEIGHT": (10.0, NON_NEGATIVE),
        "GPA_MEAN": (15.0, Number()),
        "GPA_STD": (1.0, POSITIVE),
    },
    # PromptKD: a deep-visual-prompt ViT-B/16 student distilled from the PromptSRC teacher's logits.
    "PROMPTKD": {
        **VL_PROMPT_KEYS,
        **TEACHER_KEYS,
        # Declared and set by upstream's yamls but never read by upstream's trainer (see INERT_KEYS).
        "PROJECT_LAYER": (2, Int()),
        "CE_WEIGHT": (0.0, NON_NEGATIVE),
    },
    # PETR: seen/unseen student prompts on one frozen CLIP, KD (+CE for seen) and a training-free router.
    "PETR": {
        "N_CTX_VISION": (4, Int(1)),
        "PROMPT_DEPTH_VISION": (9, Int(1)),
        **TEACHER_KEYS,
        "CE_WEIGHT": (1.0, NON_NEGATIVE),
        "CE_SCOPE": ("all", Choice(CE_SCOPES)),
        "PREC": ("fp16", PREC),
        **ROUTER_KEYS,
    },
    # PETRCoOp: a trained CoOp prompt (seen branch) + the hand-crafted ensemble (unseen branch), same router.
    "PETRCOOP": {
        "COOP_MODEL_DIR": ("", Text()),
        "COOP_LOAD_EPOCH": (0, Int(0, note="0: the last saved epoch")),
        "PREC": ("fp16", PREC),
        **ROUTER_KEYS,
    },
    # PETRX: PETR's routing on a finished run of any prompt learner (trainers/tuned.py TUNED_METHODS, checked by the
    # trainer): θ_s = its prediction, θ_u = the hand-crafted ensemble, same router; nothing is trained.
    "PETRX": {
        "TUNED_TRAINER": ("CoOp", Text()),
        "TUNED_MODEL_DIR": ("", Text()),  # the tuned run's folder (its <model>/checkpoint names the file)
        "TUNED_LOAD_EPOCH": (0, Int(0, note="0: the last saved epoch")),
        "PREC": ("fp16", PREC),
        **ROUTER_KEYS,
    },
    # CoCoOp: CoOp's context shifted per image by a meta-net (embed_dim -> embed_dim/16 -> text width).
    "COCOOP": {
        "N_CTX": (16, Int(1)),
        "CTX_INIT": ("", Text()),
        "PREC": ("fp16", PREC),
    },
    # MaPLe: deep text prompts coupled to the vision prompts by linear projections, in layers 0..PROMPT_DEPTH-1.
    "MAPLE": {
        "N_CTX": (2, Int(1)),
        "CTX_INIT": ("a photo of a", Text()),
        "PREC": ("fp16", PREC),
        "PROMPT_DEPTH": (9, Int(1)),
    },
    # IVLP: independent deep vision and language prompts (PromptSRC's prompting without its regularisation).
    "IVLP": dict(VL_PROMPT_KEYS),
}
"""Every trainer's options: namespace (``TRAINER.<NS>``) → key → (default, rule). A new trainer adds its namespace
here; ``extend_cfg`` declares the defaults and ``config_schema`` the rules."""

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
    for ns, keys in TRAINER_KEYS.items():
        cfg.TRAINER[ns] = CN({key: default for key, (default, _) in keys.items()})
    return cfg


def config_schema() -> dict[str, Rule]:
    """The rule of every key of an ``extend_cfg`` tree: the engine's, the protocol keys and each trainer's."""
    schema = dict(ENGINE_SCHEMA)
    schema.update({dotted: rule for dotted, (_, rule) in PROTOCOL_KEYS.items()})
    for ns, keys in TRAINER_KEYS.items():
        schema.update({f"TRAINER.{ns}.{key}": rule for key, (_, rule) in keys.items()})
    return schema


def inert_keys_note(cfg: CN, ns: str) -> str:
    """One log line listing the keys of ``TRAINER.<ns>`` that are accepted but have no effect here, and why."""
    keys = INERT_KEYS.get(ns, {})
    if not keys:
        return ""
    parts = [f"{key}={cfg.TRAINER[ns][key]!r} ({why})" for key, why in keys.items()]
    return f"Note: TRAINER.{ns} keys accepted for upstream configs but without effect here: " + "; ".join(parts)


def foreign_trainer_message(key: str) -> str:
    """For an unknown ``TRAINER.<NS>.*`` key of an upstream trainer we lack, the error naming our trainers; else ""."""
    parts = key.split(".")
    if len(parts) < 2 or parts[0] != "TRAINER" or parts[1] not in FOREIGN_TRAINERS:
        return ""
    return (f"'{key}' configures upstream's {FOREIGN_TRAINERS[parts[1]]} trainer, which this project does not have; "
            f"trainers here: {', '.join(sorted(TRAINERS))}")
