"""PETR: two student prompt sets on one frozen CLIP, distilled from one teacher, joined by a training-free router.

Each step trains ``θ_s`` (``seen_student``) on a labelled batch of ``train_x`` with ``α·KD + CE_WEIGHT·CE`` and
``θ_u`` (``unseen_student``) on an unlabelled batch of ``train_u`` with ``α·KD``. The teacher encodes both batches
in one forward (no gradients); its text features are computed once. Each student has its own optimiser and
scheduler (registered separately, so each checkpoint folder is self-contained); their losses touch disjoint
parameters, so one backward of the sum equals two separate backwards.

Protocols (docs/ARCHITECTURE.md, "Data roles"): base2novel — ``train_x`` = base classes, logits and KD over all
classes, CE over all classes (``CE_SCOPE all``) or the base columns (``base``). cross/dg — ``train_x`` = labelled
source (ImageNet) images whose KD and CE use the source classes' teacher text features; ``train_u`` = target
images, KD over the target classes.
The router is the trainer's ``routing`` component (trainers/routing/routed.py): fitted when the run deploys, stored in
the run folder, applied at every evaluation.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine import TRAINER_REGISTRY, TrainerXU, compute_accuracy
from engine.dataset_base import UNLABELED
from engine.errors import ConfigError
from engine.precision import PREC_RULE
from engine.schema import NON_NEGATIVE, Choice, Int, KeyTable

from .distillation.distill import TEACHER_KEYS, DistillMixin
from .distillation.student import batched_features
from .routing.routed import ROUTER_KEYS, BranchScorer, RoutedTrainerMixin

CE_SCOPES = ("all", "base")
"""The cross-entropy on the seen branch (``CE_SCOPE``): over all classes or the base classes only."""


@TRAINER_REGISTRY.register()
class PETR(RoutedTrainerMixin, DistillMixin, TrainerXU):
    """PETR trainer (models ``seen_student`` and ``unseen_student``; router in the run directory)."""

    DATA_ROLE = "seen_unseen"
    NS = "PETR"
    CONFIG_KEYS: KeyTable = {
        "N_CTX_VISION": (4, Int(1)),
        "PROMPT_DEPTH_VISION": (9, Int(1)),
        **TEACHER_KEYS,
        "CE_WEIGHT": (1.0, NON_NEGATIVE),
        "CE_SCOPE": ("all", Choice(CE_SCOPES)),
        "PREC": ("fp16", PREC_RULE),
        **ROUTER_KEYS,
    }

    def build_model(self) -> None:
        ds = self.dm.dataset
        splits = ds.splits
        if not ds.train_u:
            raise ConfigError(f"{self.cfg.DATASET.NAME}: train_u is empty, so the unseen branch has nothing to learn "
                              f"from (protocol {splits.protocol}, SUBSAMPLE_CLASSES {splits.subsample}); check the "
                              "dataset's train split has novel/target images")
        if any(item.label == UNLABELED for item in ds.train_x):
            raise ConfigError(f"{self.cfg.DATASET.NAME}: train_x holds unlabelled images; PETR's seen branch needs "
                              "labels (check the dataset reader's DATA_ROLE 'seen_unseen' splits)")
        self.build_distill_parts(ds.classnames)
        if splits.source_lab2cname:  # cross/dg: θ_s learns the source classes
            names = [splits.source_lab2cname[k] for k in sorted(splits.source_lab2cname)]
            self.source_text_features = self.teacher.text_features_for(names).detach().float().to(self.device)
            self.ce_columns = None
        else:
            self.source_text_features = self.text_features
            base = splits.base_labels
            self.ce_columns = torch.as_tensor(base, device=self.device) if self.ns.CE_SCOPE == "base" else None
        self.seen_student = self.make_student("seen_student")
        self.unseen_student = self.make_student("unseen_student")

    def forward_backward(self, batch_x: dict, batch_u: dict) -> dict:
        images_x, labels_x, images_u = self.parse_batch_train(batch_x, batch_u)
        inputs = {"images_x": images_x, "labels_x": labels_x, "images_u": images_u}
        if self.teacher_cache:
            inputs["teacher_x"], inputs["teacher_u"] = self.cached_teacher_features({"train_x": batch_x,
                                                                                     "train_u": batch_u})
        summary = self.run_step(inputs)
        if (self.batch_idx + 1) == self.num_batches:
            self.update_lr()
        return summary

    def train_step(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Forward, backward and update of both students on device tensors (what TRAIN.CUDA_GRAPH captures); the
        loss terms come back as tensors, read at log time."""
        images_x, labels_x, images_u = inputs["images_x"], inputs["labels_x"], inputs["images_u"]
        with self.autocast():
            if "teacher_x" in inputs:
                teacher_x, teacher_u = inputs["teacher_x"], inputs["teacher_u"]
            else:
                teacher_x, teacher_u = self.online_teacher_features([images_x, images_u])
            features_x = self.seen_student(self.clip_model, images_x)
            features_u = self.unseen_student(self.clip_model, images_u)
        logits_x = self.student_logits(features_x, self.source_text_features)
        logits_u = self.student_logits(features_u)
        kd_seen = self.kd_term(logits_x, self.teacher_logits(teacher_x, self.source_text_features))
        kd_unseen = self.kd_term(logits_u, self.teacher_logits(teacher_u))
        ce_logits, ce_labels = logits_x, labels_x
        if self.ce_columns is not None:  # CE_SCOPE base: softmax over the base columns only
            ce_logits = logits_x[:, self.ce_columns]
            ce_labels = torch.searchsorted(self.ce_columns, labels_x)
        ce = F.cross_entropy(ce_logits, ce_labels)
        loss = kd_seen + self.ns.CE_WEIGHT * ce + kd_unseen
        self.model_backward_and_update(loss)
        return {"loss": loss.detach(), "kd_seen": kd_seen.detach(), "ce": ce.detach(), "kd_unseen": kd_unseen.detach(),
                "acc_x": compute_accuracy(ce_logits.detach(), ce_labels)[0]}

    def branch_scorer(self) -> BranchScorer:
        """``branch_logits``: the students hold no per-pass state."""
        return self.branch_logits

    @torch.no_grad()
    def branch_logits(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_s, q_u) over all classes of the task, both branches in one batched CLIP forward."""
        with self.autocast():
            features_s, features_u = batched_features(self.clip_model, [self.seen_student, self.unseen_student],
                                                      images)
        return self.student_logits(features_s), self.student_logits(features_u)
