"""The frozen CLIP every trainer starts from, loaded in the run's precision, and its classification logits."""
from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F

import clip
from clip.model import CLIP
from clip.weights import declared_normalisation
from engine.errors import ConfigError
from engine.precision import weight_dtype

Autocast = Callable[[], AbstractContextManager]
"""A run's autocast factory (``SimpleTrainer.autocast``): wraps the CLIP forwards of its precision."""


def load_backbone(name: str, device: torch.device | str, prec: str, role: str = "CLIP") -> CLIP:
    """The frozen CLIP ``name`` (model name or weight file) on ``device``, fp16 weights for PREC fp16 (a resolved
    precision, the trainer's ``prec``)."""
    print(f"Loading {role} (backbone: {name}, precision {prec})")
    return clip.load_model(name, device, weight_dtype(prec))


def cosine_logits(clip_model: CLIP, image_features: torch.Tensor, text_features: torch.Tensor) -> torch.Tensor:
    """CLIP's classification logits in float32: ``logit_scale · normalize(image) @ textᵀ`` (text rows normalised)."""
    image = F.normalize(image_features.float(), dim=-1)
    return clip_model.logit_scale.exp().float() * image @ text_features.float().t()


class ClipWeightsCheck:
    """Mixin of the trainers that load CLIP weights: ``check_cfg`` finds (or downloads) them before any data is
    prepared, so a missing file stops the run before it writes anything (a few-shot file, say), and refuses a CLIP
    trained on images normalised otherwise than the run's (INPUT.PIXEL_MEAN / PIXEL_STD, which follow the backbone:
    ``trainers.config.follow_backbone``): a distilling trainer's teacher sees the student's batch."""

    def clip_weight_names(self, cfg) -> list[str]:
        """The CLIP weights the run loads (model names or weight files)."""
        return [cfg.MODEL.BACKBONE.NAME]

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        for name in self.clip_weight_names(cfg):
            clip.weights_path(name)
            declared = declared_normalisation(name)
            run = (tuple(cfg.INPUT.PIXEL_MEAN), tuple(cfg.INPUT.PIXEL_STD))
            if declared is not None and not all(math.isclose(a, b, rel_tol=1e-6) for a, b in
                                                zip((*declared[0], *declared[1]), (*run[0], *run[1]))):
                raise ConfigError(f"the CLIP {name} was trained on images normalised with mean {list(declared[0])}, "
                                  f"std {list(declared[1])}, but this run's are normalised with INPUT.PIXEL_MEAN "
                                  f"{list(run[0])}, INPUT.PIXEL_STD {list(run[1])} (those of MODEL.BACKBONE.NAME): "
                                  "give it a CLIP of the same normalisation")
