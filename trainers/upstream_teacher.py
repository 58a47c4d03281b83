"""PromptKD / PromptSRC teacher checkpoints in upstream's key layout, mapped onto our ``VLPromptLearner`` prompts.

Keys: ``prompt_learner.ctx`` → text prompt layer 0; ``text_encoder.transformer.resblocks.{i}.VPT_shallow`` → text
layer i; ``image_encoder.VPT`` → vision layer 0; ``image_encoder.transformer.resblocks.{i}.VPT_shallow`` → vision
layer i (fp16 → fp32). Frozen CLIP weights, ``ZS_image_encoder`` and the class-token buffers are ignored: the CLIP
comes from the teacher's backbone name. Upstream tree: ``teacher_model/<Dataset>/VLPromptLearner/model-best.pth.tar``
(ImageNet-xd: ``VLPromptLearner_large/model.pth.tar-20``).
"""
from __future__ import annotations

import os
import re
from collections import Counter

import torch

from engine.errors import InvalidInputError

from .promptsrc import TEXT_KEY, VISION_KEY, VLPromptLearner

# PromptKD's teacher_model/README.md spells two folder names differently from DATASET.NAME.
FOLDER_TO_DATASET = {"ImageNet-xd": "ImageNet", "FGVCaircraft": "FGVCAircraft", "StandfordCars": "StanfordCars"}
_PROMPT_PATTERNS = (
    (re.compile(r"prompt_learner\.ctx"), TEXT_KEY, 0),
    (re.compile(r"text_encoder\.transformer\.resblocks\.(\d+)\.VPT_shallow"), TEXT_KEY, None),
    (re.compile(r"image_encoder\.VPT"), VISION_KEY, 0),
    (re.compile(r"image_encoder\.transformer\.resblocks\.(\d+)\.VPT_shallow"), VISION_KEY, None),
)
REQUIRED = ("prompt_learner.ctx", "image_encoder.VPT")


def is_upstream_layout(state: dict) -> bool:
    """True for a state dict in PromptKD/PromptSRC's key layout (``prompt_learner.ctx``)."""
    return "prompt_learner.ctx" in state


def _ignore_reason(key: str) -> str:
    if re.search(r"token_(prefix|suffix)\d*$", key):
        return "class-token buffer (rebuilt from class names)"
    if key.startswith("prompt_learner.ZS_image_encoder."):
        return "frozen zero-shot image tower (ZS_image_encoder)"
    if key.startswith(("image_encoder.", "text_encoder.")) or key == "logit_scale":
        return "frozen CLIP weight (taken from the teacher's backbone)"
    return "not a prompt of the teacher"


def map_promptkd_state(state: dict, where: str) -> tuple[dict[str, torch.Tensor], list[list], Counter]:
    """Our prompt keys (fp32) from a PromptKD/PromptSRC state dict, the mapped rows and the ignored-key counts."""
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise InvalidInputError(f"{where} lacks required key(s) {missing}: not a PromptSRC/PromptKD teacher "
                                f"checkpoint (its keys start with {sorted({k.split('.')[0] for k in state})[:6]})")
    mapped, rows, ignored = {}, [], Counter()
    for key, value in state.items():
        for pattern, prefix, fixed in _PROMPT_PATTERNS:
            match = pattern.fullmatch(key)
            if match:
                if not torch.is_tensor(value):
                    raise InvalidInputError(f"{where}: {key} is {value!r}, not a tensor")
                target = f"{prefix}{fixed if fixed is not None else int(match.group(1))}"
                mapped[target] = value.detach().float().clone()
                rows.append([key, target, "x".join(map(str, value.shape)), str(value.dtype).replace("torch.", "")])
                break
        else:
            ignored[_ignore_reason(key)] += 1
    for prefix in (TEXT_KEY, VISION_KEY):
        layers = sorted(int(k[len(prefix):]) for k in mapped if k.startswith(prefix))
        if layers != list(range(len(layers))):
            raise InvalidInputError(f"{where}: {prefix.split('_')[0]} prompt layers {layers} are not "
                                    f"0..{len(layers) - 1} (a VPT_shallow layer is missing)")
    rows.sort(key=lambda r: (r[1].split(".")[0], int(r[1].rsplit(".", 1)[1])))
    return mapped, rows, ignored


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
    mapped, rows, ignored = map_promptkd_state(state, path)
    epoch = checkpoint.get("epoch") if isinstance(checkpoint.get("epoch"), int) else 0
    n_classes = sum(v.shape[0] for k, v in state.items()
                    if re.fullmatch(r"prompt_learner\.token_prefix\d*", k) and torch.is_tensor(v))
    meta = {"backbone": backbone, "dataset": dataset or dataset_of(path), "source": os.path.abspath(path),
            "source_epoch": epoch}
    if n_classes:
        meta["num_classes"] = int(n_classes)
    prompts = VLPromptLearner.from_state_dict({**mapped, "_extra_state": meta}, path)
    return prompts.requires_grad_(False), state, rows, ignored
