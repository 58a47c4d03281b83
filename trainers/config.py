"""Every project-specific config key (``TRAINER.<NAME>.*`` and protocol keys), declared in one place.

yacs rejects keys that are not declared, so a new trainer option is added here before any yaml uses it.
"""
from __future__ import annotations

from yacs.config import CfgNode as CN

from engine.config import add_project_keys

from .catalog import TRAINERS
from .routing import DEFAULT_LAMBDA, DEFAULT_PERCENTILE

# Config namespaces of upstream trainers this project does not implement, and the trainer each belongs to.
FOREIGN_TRAINERS = {"MAPLE": "MaPLe", "IVLP": "IVLP", "COCOOP": "CoCoOp"}

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

ROUTER_KEYS = {
    "ROUTER": "mahalanobis",  # trainers/routing.py ROUTERS
    "LAMBDA": DEFAULT_LAMBDA,  # Mahalanobis threshold = λ · percentile of the fit distances
    "PERCENTILE": DEFAULT_PERCENTILE,
    "REFIT_ROUTER": False,  # eval-only runs: fit a new router instead of reading the run's router.pth.tar
    "ROUTER_MAX_IMAGES": 0,  # cap on router_x / train_u-dump images (0 = all)
    "DUMP_TRAIN_U": True,  # write train_u_logits.pt beside the router
}
"""The router keys of every routed trainer's namespace (PETR, PETRCOOP), declared once."""


def extend_cfg(cfg: CN) -> CN:
    """Add the method namespaces and protocol keys to a ``get_cfg_default()`` tree, ours or Dassl's (which also gets
    the engine's own keys, ``engine.config.PROJECT_KEYS``), in place; also returned."""
    add_project_keys(cfg)
    # Protocol: which classes a split keeps (all|base|new) and the PromptKD-style protocol (base2novel|cross|dg).
    cfg.DATASET.SUBSAMPLE_CLASSES = "all"
    cfg.TRAINER.MODAL = "base2novel"
    if "NO_TEST" not in cfg.TEST:
        cfg.TEST.NO_TEST = False
    # torch.compile of the frozen CLIP forwards (engine/compile.py): none | compile | cudagraphs.
    cfg.TRAIN.COMPILE = "none"
    # Keep data loader workers alive across epochs and loader restarts (no respawn stalls). Off by default: with
    # workers > 0 it changes the augmentation random streams, so a run's numbers and exact resume would change.
    cfg.DATALOADER.PERSISTENT_WORKERS = False

    # CoOp: learnable context shared (or class-specific) in front of / around the class token.
    cfg.TRAINER.COOP = CN()
    cfg.TRAINER.COOP.N_CTX = 16
    cfg.TRAINER.COOP.CSC = False
    cfg.TRAINER.COOP.CTX_INIT = ""
    cfg.TRAINER.COOP.PREC = "fp16"
    cfg.TRAINER.COOP.CLASS_TOKEN_POSITION = "end"

    # ZeroshotCLIP: hand-crafted prompts, one template (single) or the per-dataset ensemble (ensemble).
    cfg.TRAINER.ZSCLIP = CN()
    cfg.TRAINER.ZSCLIP.TEMPLATES = "single"
    cfg.TRAINER.ZSCLIP.PREC = "fp32"

    # PromptSRC: the ViT-L/14 teacher's deep vision+language prompts with self-regularisation losses.
    cfg.TRAINER.PROMPTSRC = CN()
    cfg.TRAINER.PROMPTSRC.N_CTX_VISION = 4
    cfg.TRAINER.PROMPTSRC.N_CTX_TEXT = 4
    cfg.TRAINER.PROMPTSRC.CTX_INIT = "a photo of a"
    cfg.TRAINER.PROMPTSRC.PREC = "fp16"
    cfg.TRAINER.PROMPTSRC.PROMPT_DEPTH_VISION = 9
    cfg.TRAINER.PROMPTSRC.PROMPT_DEPTH_TEXT = 9
    cfg.TRAINER.PROMPTSRC.TEXT_LOSS_WEIGHT = 25.0
    cfg.TRAINER.PROMPTSRC.IMAGE_LOSS_WEIGHT = 10.0
    cfg.TRAINER.PROMPTSRC.GPA_MEAN = 15.0
    cfg.TRAINER.PROMPTSRC.GPA_STD = 1.0

    # PromptKD: a deep-visual-prompt ViT-B/16 student distilled from the PromptSRC teacher's logits.
    cfg.TRAINER.PROMPTKD = CN()
    cfg.TRAINER.PROMPTKD.N_CTX_VISION = 4
    cfg.TRAINER.PROMPTKD.N_CTX_TEXT = 4
    cfg.TRAINER.PROMPTKD.CTX_INIT = "a photo of a"
    cfg.TRAINER.PROMPTKD.PREC = "fp16"
    cfg.TRAINER.PROMPTKD.PROMPT_DEPTH_VISION = 9
    cfg.TRAINER.PROMPTKD.PROMPT_DEPTH_TEXT = 9
    cfg.TRAINER.PROMPTKD.TEACHER_NAME = "ViT-L/14"
    cfg.TRAINER.PROMPTKD.TEACHER_CKPT = ""
    cfg.TRAINER.PROMPTKD.KD_WEIGHT = 1.0
    cfg.TRAINER.PROMPTKD.TEMPERATURE = 1.0
    # Declared and set by upstream's yamls but never read by upstream's trainer (see INERT_KEYS).
    cfg.TRAINER.PROMPTKD.PROJECT_LAYER = 2
    cfg.TRAINER.PROMPTKD.CE_WEIGHT = 0.0
    # Teacher feature cache (trainers/teacher_cache.py): none (online teacher) | fixed | views (K stored crops).
    cfg.TRAINER.PROMPTKD.TEACHER_CACHE = "none"
    cfg.TRAINER.PROMPTKD.TEACHER_CACHE_VIEWS = 4
    cfg.TRAINER.PROMPTKD.TEACHER_CACHE_DIR = ""  # "" = <OUTPUT_DIR>/teacher_cache; share one folder across runs

    # PETR: seen/unseen student prompts on one frozen CLIP, KD (+CE for seen) and a training-free router.
    cfg.TRAINER.PETR = CN()
    cfg.TRAINER.PETR.N_CTX_VISION = 4
    cfg.TRAINER.PETR.PROMPT_DEPTH_VISION = 9
    cfg.TRAINER.PETR.TEACHER_NAME = "ViT-L/14"
    cfg.TRAINER.PETR.TEACHER_CKPT = ""
    cfg.TRAINER.PETR.KD_WEIGHT = 1.0
    cfg.TRAINER.PETR.TEMPERATURE = 1.0
    # Teacher feature cache (trainers/teacher_cache.py): none (online teacher) | fixed | views (K stored crops).
    cfg.TRAINER.PETR.TEACHER_CACHE = "none"
    cfg.TRAINER.PETR.TEACHER_CACHE_VIEWS = 4
    cfg.TRAINER.PETR.TEACHER_CACHE_DIR = ""  # "" = <OUTPUT_DIR>/teacher_cache; share one folder across runs
    cfg.TRAINER.PETR.CE_WEIGHT = 1.0
    cfg.TRAINER.PETR.CE_SCOPE = "all"
    cfg.TRAINER.PETR.PREC = "fp16"
    cfg.TRAINER.PETR.update(ROUTER_KEYS)

    # PETRCoOp: a trained CoOp prompt (seen branch) + the hand-crafted ensemble (unseen branch), same router.
    cfg.TRAINER.PETRCOOP = CN()
    cfg.TRAINER.PETRCOOP.COOP_MODEL_DIR = ""
    cfg.TRAINER.PETRCOOP.COOP_LOAD_EPOCH = 0
    cfg.TRAINER.PETRCOOP.PREC = "fp16"
    cfg.TRAINER.PETRCOOP.update(ROUTER_KEYS)

    # ---- Datasets (datasets/protocols.py) ----
    # Labelled source dataset of PETR's cross-dataset and dg protocols, read from the same DATASET.ROOT.
    cfg.DATASET.SOURCE_DATASET = "ImageNet"
    return cfg


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
