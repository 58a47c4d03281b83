"""Every project-specific config key (``TRAINER.<NAME>.*`` and protocol keys), declared in one place.

yacs rejects keys that are not declared, so a new trainer option is added here before any yaml uses it.
"""
from __future__ import annotations

from yacs.config import CfgNode as CN

from .routing import DEFAULT_LAMBDA, DEFAULT_PERCENTILE

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
    """Add the method namespaces and protocol keys to a ``get_cfg_default()`` tree (in place; also returned)."""
    # Protocol: which classes a split keeps (all|base|new) and the PromptKD-style protocol (base2novel|cross|dg).
    cfg.DATASET.SUBSAMPLE_CLASSES = "all"
    cfg.TRAINER.MODAL = "base2novel"
    if "NO_TEST" not in cfg.TEST:
        cfg.TEST.NO_TEST = False

    # CoOp: learnable context shared (or class-specific) in front of / around the class token.
    cfg.TRAINER.COOP = CN()
    cfg.TRAINER.COOP.N_CTX = 16
    cfg.TRAINER.COOP.CSC = False
    cfg.TRAINER.COOP.CTX_INIT = ""
    cfg.TRAINER.COOP.PREC = "fp16"
    cfg.TRAINER.COOP.CLASS_TOKEN_POSITION = "end"

    # CoCoOp: CoOp with an image-conditioned meta-net (declared so CoCoOp configs load).
    cfg.TRAINER.COCOOP = CN()
    cfg.TRAINER.COCOOP.N_CTX = 16
    cfg.TRAINER.COCOOP.CTX_INIT = ""
    cfg.TRAINER.COCOOP.PREC = "fp16"

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

    # PETR: seen/unseen student prompts on one frozen CLIP, KD (+CE for seen) and a training-free router.
    cfg.TRAINER.PETR = CN()
    cfg.TRAINER.PETR.N_CTX_VISION = 4
    cfg.TRAINER.PETR.PROMPT_DEPTH_VISION = 9
    cfg.TRAINER.PETR.TEACHER_NAME = "ViT-L/14"
    cfg.TRAINER.PETR.TEACHER_CKPT = ""
    cfg.TRAINER.PETR.KD_WEIGHT = 1.0
    cfg.TRAINER.PETR.TEMPERATURE = 1.0
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

    # ---- Datasets (added by the datasets issue; see datasets/protocols.py) ----
    # Labelled source dataset of PETR's cross-dataset and dg protocols, read from the same DATASET.ROOT.
    cfg.DATASET.SOURCE_DATASET = "ImageNet"
    return cfg
