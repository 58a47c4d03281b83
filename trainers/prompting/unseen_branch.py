"""PETR's unseen branch θ_u: the dataset's hand-crafted template ensemble on the frozen CLIP.

Shared by the routed plug-ins (PETR+CoOp, PETR+X), whatever method gives their seen branch θ_s.
"""
from __future__ import annotations

import torch

from clip.classifier import zeroshot_text_features
from clip.model import CLIP

from .templates import ensemble_templates


def ensemble_classifier(clip_model: CLIP, dataset_name: str, classnames: list[str],
                        device: torch.device | str) -> tuple[list[str], torch.Tensor]:
    """The unseen branch θ_u of PETR+CoOp and PETR+X: the dataset's hand-crafted template ensemble on the frozen CLIP,
    as (templates, text features [C, D]); run it under the trainer's autocast."""
    templates = ensemble_templates(dataset_name)
    print(f"Unseen branch θ_u: {len(templates)} hand-crafted template(s) of {dataset_name} on the frozen CLIP, "
          f"{len(classnames)} classes")
    return templates, zeroshot_text_features(clip_model, classnames, templates, device)
