"""What both sides of the comparison with upstream PromptKD read, in upstream's own folder layout.

``<folder>/clip/ViT-B-16.pt`` and ``<folder>/clip/ViT-L-14.pt`` are random-weight CLIPs of the spec's shapes
(OpenAI key names; upstream loads them from these paths relative to its working directory), and
``<folder>/teacher_model/EuroSAT/VLPromptLearner/model-best.pth.tar`` holds random PromptSRC teacher prompts in
upstream's key layout and fp16 (the file its base-to-novel PromptKD loads; ours reads it as ``TEACHER_CKPT``). Both
sides thus step the same weights.
"""
from __future__ import annotations

import os

import torch

from bench.models import ModelSpec, random_clip
from trainers.prompting.deep_prompts import VLPromptLearner

STUDENT_FILE = os.path.join("clip", "ViT-B-16.pt")
TEACHER_FILE = os.path.join("clip", "ViT-L-14.pt")
TEACHER_CKPT = os.path.join("teacher_model", "EuroSAT", "VLPromptLearner", "model-best.pth.tar")
"""Upstream's paths, relative to its working directory (its PromptKD hard-codes them)."""


def upstream_teacher_state(prompts: VLPromptLearner) -> dict[str, torch.Tensor]:
    """The prompts of ``prompts`` under upstream PromptKD/PromptSRC's keys, in fp16 as its checkpoints hold them:
    text layer 0 is ``prompt_learner.ctx``, vision layer 0 ``image_encoder.VPT``, deeper layers the
    ``VPT_shallow`` of their residual blocks."""
    state = {}
    for key, first, deeper in (("text", "prompt_learner.ctx", "text_encoder.transformer.resblocks.{}.VPT_shallow"),
                               ("vision", "image_encoder.VPT", "image_encoder.transformer.resblocks.{}.VPT_shallow")):
        layers = prompts.text_prompts() if key == "text" else prompts.vision_prompts()
        for i, p in enumerate(layers):
            state[deeper.format(i) if i else first] = p.detach().half().cpu()
    return state


def write_inputs(folder: str, spec: ModelSpec, seed: int = 0) -> dict[str, str]:
    """Write the student and teacher CLIPs and the teacher checkpoint under ``folder``; their absolute paths by role
    (``student``, ``teacher``, ``teacher_ckpt``)."""
    paths = {role: os.path.join(os.path.abspath(folder), rel)
             for role, rel in (("student", STUDENT_FILE), ("teacher", TEACHER_FILE), ("teacher_ckpt", TEACHER_CKPT))}
    for path in paths.values():
        os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(random_clip(spec.student, "cpu", seed).state_dict(), paths["student"])
    teacher = random_clip(spec.teacher, "cpu", seed + 1)
    torch.save(teacher.state_dict(), paths["teacher"])
    torch.manual_seed(seed + 2)
    prompts = VLPromptLearner.build(teacher, spec.n_ctx, spec.n_ctx, spec.depth, spec.depth)
    torch.save({"state_dict": upstream_teacher_state(prompts), "epoch": 20}, paths["teacher_ckpt"])
    return paths
