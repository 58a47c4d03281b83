"""The frozen CLIP every trainer starts from, loaded in the run's precision, and its classification logits."""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F

import clip
from clip.model import CLIP
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
    prepared, so a missing file stops the run before it writes anything (a few-shot file, say)."""

    def clip_weight_names(self, cfg) -> list[str]:
        """The CLIP weights the run loads (model names or weight files)."""
        return [cfg.MODEL.BACKBONE.NAME]

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        for name in self.clip_weight_names(cfg):
            clip.weights_path(name)
