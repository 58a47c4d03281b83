"""PromptKD's student: deep visual prompts on a frozen CLIP image tower plus a 2-layer 1x1-conv projector.

The frozen CLIP is not a submodule: it is shared by every prompt set and passed in at call time, so PETR's two
students (seen and unseen) run on one CLIP and, through per-sample prompts, in one batched forward.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from clip.model import CLIP
from clip.prompts import DeepPrompts, stack_prompt_sets


class Projector(nn.Module):
    """1x1 conv (in→out), BatchNorm, ReLU, 1x1 conv (out→out) on a feature vector, as PromptKD's student."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_dim, out_dim, kernel_size=1),
            nn.BatchNorm2d(out_dim),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_dim, out_dim, kernel_size=1),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.conv1(features[:, :, None, None]).flatten(1)


class VisualPromptStudent(nn.Module):
    """Learnable deep visual prompts + projector to the teacher's embedding width; holds no CLIP weights."""

    def __init__(self, clip_model: CLIP, n_ctx: int, depth: int, out_dim: int):
        super().__init__()
        self.prompt = DeepPrompts(n_ctx, clip_model.vision_width, depth)
        self.projector = Projector(clip_model.embed_dim, out_dim)

    def forward(self, clip_model: CLIP, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised student features [B, out_dim] of ``images``."""
        features = clip_model.encode_image(images, prompts=self.prompt())
        return F.normalize(self.projector(features.float()), dim=-1)


def batched_features(clip_model: CLIP, students: Sequence[VisualPromptStudent],
                     images: torch.Tensor) -> list[torch.Tensor]:
    """Features of the same images under each student, from ONE CLIP forward with per-sample prompts.

    The image batch is repeated once per student; each student's projector then maps its own slice. Equals
    calling each student separately (the CLIP forward is per sample), at one pass's overhead.
    """
    batch = images.shape[0]
    prompts = stack_prompt_sets([s.prompt() for s in students], [batch] * len(students))
    repeated = images.repeat(len(students), *([1] * (images.dim() - 1)))
    features = clip_model.encode_image(repeated, prompts=prompts).float()
    return [F.normalize(s.projector(chunk), dim=-1) for s, chunk in zip(students, features.split(batch))]
