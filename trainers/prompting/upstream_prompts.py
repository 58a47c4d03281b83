"""PromptKD / PromptSRC teacher checkpoints in upstream's key layout, mapped onto our ``VLPromptLearner`` prompts.

The keys are mapped by ``trainers.promptsrc.map_upstream_state`` (which IVLP's and PromptSRC's learners also load
upstream runs with); frozen CLIP weights, ``ZS_image_encoder`` and the class-token buffers are ignored: the CLIP
comes from the teacher's backbone name. Upstream tree: ``teacher_model/<Dataset>/VLPromptLearner/model-best.pth.tar``
(ImageNet-xd: ``VLPromptLearner_large/model.pth.tar-20``).
"""
from __future__ import annotations

import os
import re
from collections import Counter

import torch

from engine.errors import InvalidInputError

from .deep_prompts import VLPromptLearner, map_upstream_state

# PromptKD's teacher_model/README.md spells two folder names differently from DATASET.NAME.
FOLDER_TO_DATASET = {"ImageNet-xd": "ImageNet", "FGVCaircraft": "FGVCAircraft", "StandfordCars": "StanfordCars"}
def check_frozen_shapes(state: dict, clip_model, name: str, where: str, setting: str) -> None:
    """The checkpoint's own frozen CLIP weights (when present) must have the shapes of CLIP ``name``'s."""
    ours = clip_model.state_dict()
    for theirs, key in (("image_encoder.conv1.weight", "visual.conv1.weight"),
                        ("image_encoder.positional_embedding", "visual.positional_embedding"),
                        ("text_encoder.text_projection", "text_projection")):
        value = state.get(theirs)
        if torch.is_tensor(value) and tuple(value.shape) != tuple(ours[key].shape):
            raise InvalidInputError(f"{where} was trained on a different CLIP: {theirs} has shape "
                                    f"{tuple(value.shape)} but {setting} {name} has {tuple(ours[key].shape)}; pass the "
                                    f"teacher's backbone as {setting}")


def dataset_of(path: str) -> str:
    """DATASET.NAME of an upstream teacher file ``.../<Dataset folder>/VLPromptLearner*/<file>``."""
    folder = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(path))))
    return FOLDER_TO_DATASET.get(folder, folder)


def upstream_teacher_prompts(checkpoint: dict, path: str, backbone: str = "",
                             dataset: str = "") -> tuple[VLPromptLearner, dict, list[list], Counter]:
    """Frozen prompts (with metadata) of an upstream teacher checkpoint dict, its state dict (``module.`` removed),
    the mapped-key rows and the ignored-key counts."""
    state = checkpoint["state_dict"] if isinstance(checkpoint.get("state_dict"), dict) else checkpoint
    state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
    mapped, rows, ignored = map_upstream_state(state, path)
    epoch = checkpoint.get("epoch") if isinstance(checkpoint.get("epoch"), int) else 0
    n_classes = sum(v.shape[0] for k, v in state.items()
                    if re.fullmatch(r"prompt_learner\.token_prefix\d*", k) and torch.is_tensor(v))
    meta = {"backbone": backbone, "dataset": dataset or dataset_of(path), "source": os.path.abspath(path),
            "source_epoch": epoch}
    if n_classes:
        meta["num_classes"] = int(n_classes)
    prompts = VLPromptLearner.from_state_dict({**mapped, "_extra_state": meta}, path)
    return prompts.requires_grad_(False), state, rows, ignored
