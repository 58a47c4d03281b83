"""What PromptKD and PETR share: the frozen student CLIP, the frozen teacher and its text features (computed once),
student prompt sets with their optimisers, and the logits and KD term of one distillation step."""
from __future__ import annotations

import torch

from engine import build_lr_scheduler, build_optimizer
from engine.precision import weight_dtype

from .backbone import load_backbone
from .losses import kd_loss
from .student import VisualPromptStudent
from .teacher import build_teacher


class DistillMixin:
    """Builds the distillation parts of a trainer whose options live in ``TRAINER.<NS>`` (PROMPTKD or PETR).

    Sets ``self.clip_model`` (frozen student CLIP), ``self.teacher`` (frozen), ``self.text_features`` (teacher text
    features of the task's classes, [C, D], float32, computed once) and ``self.logit_scale`` (the student CLIP's
    exp'd scale, as PromptKD); both CLIPs in the run's precision.
    """

    def build_distill_parts(self, classnames: list[str]) -> None:
        """Load the frozen student CLIP and the teacher for ``classnames`` (the task's full label space)."""
        cfg, ns = self.cfg, self.ns
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec, role="student CLIP")
        self.logit_scale = float(self.clip_model.logit_scale.exp())
        print(f"Loading teacher {ns.TEACHER_NAME} ({ns.TEACHER_CKPT or 'plain CLIP, no checkpoint'})")
        self.teacher = build_teacher(ns.TEACHER_NAME, ns.TEACHER_CKPT, classnames, self.device,
                                     dataset_name=cfg.DATASET.NAME,
                                     dtype=weight_dtype(self.prec))
        self.text_features = self.teacher.text_features.detach().float().to(self.device)

    def make_student(self, name: str) -> VisualPromptStudent:
        """A new prompt set + projector (to the teacher's width) registered as ``name`` with its optimiser."""
        ns = self.ns
        student = VisualPromptStudent(self.clip_model, ns.N_CTX_VISION, ns.PROMPT_DEPTH_VISION,
                                      self.text_features.shape[1]).to(self.device)
        optim = build_optimizer(student, self.cfg.OPTIM)
        sched = build_lr_scheduler(optim, self.cfg.OPTIM)
        self.register_model(name, student, optim, sched)
        trainable = sum(p.numel() for p in student.parameters() if p.requires_grad)
        print(f"{name}: {trainable:,} trainable parameters (prompts depth {ns.PROMPT_DEPTH_VISION} x "
              f"{ns.N_CTX_VISION} tokens + projector {self.clip_model.embed_dim}->{self.text_features.shape[1]})")
        return student

    def student_logits(self, features: torch.Tensor, text_features: torch.Tensor | None = None) -> torch.Tensor:
        """``logit_scale · f_s @ Wᵀ`` in float32 (W: the task's teacher text features unless given)."""
        weights = self.text_features if text_features is None else text_features
        return self.logit_scale * features.float() @ weights.t()

    @torch.no_grad()
    def teacher_image_features(self, images: torch.Tensor) -> torch.Tensor:
        """The teacher's normalised image features (float32), without gradients."""
        return self.teacher.encode_image(images).float()

    def teacher_logits(self, image_features: torch.Tensor, text_features: torch.Tensor | None = None) -> torch.Tensor:
        """``teacher.logit_scale · f_t @ Wᵀ`` (W: the task's teacher text features unless given)."""
        weights = self.text_features if text_features is None else text_features
        return float(self.teacher.logit_scale) * image_features @ weights.t()

    def kd_term(self, student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        """``KD_WEIGHT · kd_loss(s, t, TEMPERATURE)``."""
        return self.ns.KD_WEIGHT * kd_loss(student_logits, teacher_logits, self.ns.TEMPERATURE)
