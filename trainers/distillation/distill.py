"""What PromptKD and PETR share: the frozen student CLIP, the frozen teacher and its text features (computed once),
student prompt sets with their optimisers, and the logits and KD term of one distillation step."""
from __future__ import annotations

import os

import torch

from clip.model import require_vit
from clip.prompts import check_prompt_depth
from engine import build_lr_scheduler, build_optimizer
from engine.compile import compile_clip
from engine.errors import ConfigError
from engine.precision import weight_dtype
from engine.run_lock import launched_world_size
from engine.schema import NON_NEGATIVE, POSITIVE, Bool, Choice, Int, KeyTable, Text

from ..prompting.backbone import ClipWeightsCheck, load_backbone
from .losses import kd_loss
from .student import VisualPromptStudent
from .teacher import build_teacher
from .teacher_cache import (
    CACHE_MODES,
    TeacherCache,
    cached_loader,
    check_cache_mode,
    load_or_build,
    teacher_digest,
)

TEACHER_KEYS: KeyTable = {
    "TEACHER_NAME": ("ViT-L/14", Text()),
    "TEACHER_CKPT": ("", Text()),
    "KD_WEIGHT": (1.0, NON_NEGATIVE),
    "TEMPERATURE": (1.0, POSITIVE),
    # Teacher feature cache (distillation/teacher_cache.py): none (online teacher) | fixed | views (K stored crops).
    "TEACHER_CACHE": ("none", Choice(CACHE_MODES)),
    "TEACHER_CACHE_VIEWS": (4, Int(1)),
    "TEACHER_CACHE_DIR": ("", Text()),  # "" = <OUTPUT_DIR>/teacher_cache; share one folder across runs
    # also store the cache's views decoded (uint8, memory-mapped): epochs after the build decode no image
    "TEACHER_CACHE_IMAGES": (False, Bool()),
}
"""The teacher keys every distilling trainer (PromptKD, PETR) has in its namespace, declared once."""


class DistillMixin(ClipWeightsCheck):
    """Builds the distillation parts of a trainer whose options live in ``TRAINER.<NS>`` (PROMPTKD or PETR).

    Sets ``self.clip_model`` (frozen student CLIP), ``self.teacher`` (frozen), ``self.text_features`` (teacher text
    features of the task's classes, [C, D], float32, computed once) and ``self.logit_scale`` (the student CLIP's
    exp'd scale, as PromptKD); both CLIPs in the run's precision. With ``TEACHER_CACHE`` fixed or views,
    ``before_train`` loads or builds the teacher cache and swaps the train loaders for ones yielding the stored views
    (``trainers/distillation/teacher_cache.py``; decoded once and stored with ``TEACHER_CACHE_IMAGES``).
    ``TRAIN.COMPILE`` compiles both frozen CLIPs (``engine/compile.py``).
    """

    def clip_weight_names(self, cfg) -> list[str]:
        """The student CLIP and the teacher's CLIP."""
        return [*super().clip_weight_names(cfg), cfg.TRAINER[self.NS].TEACHER_NAME]

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        check_cache_mode(cfg, self.NS)
        self.check_norm_batches(cfg)

    def check_norm_batches(self, cfg) -> None:
        """The students' projector has BatchNorm, which fails in training on a batch of one image: each training
        batch (per process under torchrun) must hold at least 2. Partial batches never reach it: training loaders
        drop the last incomplete batch (Dassl's rule, as upstream PromptKD)."""
        loaders = ["TRAIN_X"]
        if self.DATA_ROLE == "seen_unseen" and not cfg.DATALOADER.TRAIN_U.SAME_AS_X:
            loaders.append("TRAIN_U")
        world = launched_world_size()
        for loader in loaders:
            size = cfg.DATALOADER[loader].BATCH_SIZE
            if cfg.OPTIM.MAX_EPOCH > 0 and size < 2 * world:
                per = f" per process ({world} processes share the batch)" if world > 1 else ""
                raise ConfigError(f"DATALOADER.{loader}.BATCH_SIZE is {size}; {type(self).__name__}'s students "
                                  "normalise their projector's input over the batch (BatchNorm), which takes at least "
                                  f"2 images per training batch{per}: use {2 * world} or more")

    def build_distill_parts(self, classnames: list[str]) -> None:
        """Load the frozen student CLIP and the teacher for ``classnames`` (the task's full label space)."""
        cfg, ns = self.cfg, self.ns
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec, role="student CLIP")
        require_vit(self.clip_model, cfg.MODEL.BACKBONE.NAME, "MODEL.BACKBONE.NAME", type(self).__name__)
        self.logit_scale = float(self.clip_model.logit_scale.exp())
        print(f"Loading teacher {ns.TEACHER_NAME} ({ns.TEACHER_CKPT or 'plain CLIP, no checkpoint'})")
        self.teacher = build_teacher(ns.TEACHER_NAME, ns.TEACHER_CKPT, classnames, self.device,
                                     dataset_name=cfg.DATASET.NAME,
                                     dtype=weight_dtype(self.prec))
        self.text_features = self.teacher.text_features.detach().float().to(self.device)
        for model in (self.clip_model, self.teacher.clip_model):  # after the teacher's one-off text features
            compile_clip(model, cfg.TRAIN.COMPILE)
        self.teacher_cache: dict[str, TeacherCache] = {}

    def before_train(self) -> None:
        self.build_teacher_cache()
        super().before_train()

    def build_teacher_cache(self) -> None:
        """With TEACHER_CACHE fixed/views: read or build the cache of each train split and use its loader."""
        ns, cfg = self.ns, self.cfg
        if ns.TEACHER_CACHE == "none" or self.teacher_cache:
            return
        cache_dir = ns.TEACHER_CACHE_DIR or os.path.join(cfg.OUTPUT_DIR, "teacher_cache")
        teacher_key = teacher_digest(self.teacher)  # hashes every teacher weight: once for both splits
        for split, loader in (("train_x", "train_loader_x"), ("train_u", "train_loader_u")):
            source = getattr(self.dm.dataset, split)
            if getattr(self, loader) is None or not source:
                continue
            cache = load_or_build(cfg, split, source, ns.TEACHER_CACHE, ns.TEACHER_CACHE_VIEWS, teacher_key,
                                  self.teacher_image_features_amp, self.prec, self.dm.tfm_test, cache_dir,
                                  self.device, images=ns.TEACHER_CACHE_IMAGES)
            self.teacher_cache[split] = cache
            setattr(self, loader, cached_loader(cfg, split, source, cache, ns.TEACHER_CACHE, self.dm.tfm_test))

    def make_student(self, name: str) -> VisualPromptStudent:
        """A new prompt set + projector (to the teacher's width) registered as ``name`` with its optimiser."""
        ns = self.ns
        check_prompt_depth(self.clip_model, "vision", ns.PROMPT_DEPTH_VISION, f"TRAINER.{self.NS}.PROMPT_DEPTH_VISION")
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

    def teacher_image_features_amp(self, images: torch.Tensor) -> torch.Tensor:
        """``teacher_image_features`` under this run's autocast (as in a training step)."""
        with self.autocast():
            return self.teacher_image_features(images)

    def cached_teacher_features(self, batches: dict[str, dict]) -> list[torch.Tensor]:
        """The stored teacher features of each ``{split: batch}`` of a step (``TEACHER_CACHE`` fixed / views), on the
        device."""
        return [self.teacher_cache[split].lookup(batch).to(self.device, non_blocking=True)
                for split, batch in batches.items()]

    def online_teacher_features(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """The teacher's features of each image batch of a step, from one forward over all of them."""
        features = self.teacher_image_features(torch.cat(images) if len(images) > 1 else images[0])
        return list(features.split([i.shape[0] for i in images]))

    def teacher_logits(self, image_features: torch.Tensor, text_features: torch.Tensor | None = None) -> torch.Tensor:
        """``teacher.logit_scale · f_t @ Wᵀ`` (W: the task's teacher text features unless given)."""
        weights = self.text_features if text_features is None else text_features
        return float(self.teacher.logit_scale) * image_features @ weights.t()

    def kd_term(self, student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        """``KD_WEIGHT · kd_loss(s, t, TEMPERATURE)``."""
        return self.ns.KD_WEIGHT * kd_loss(student_logits, teacher_logits, self.ns.TEMPERATURE)
