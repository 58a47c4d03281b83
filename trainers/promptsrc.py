"""PromptSRC, the teacher of PromptKD/PETR: deep vision+language prompts on a frozen CLIP with self-regularisation.

loss = CE + TEXT_LOSS_WEIGHT·L1(text, frozen ensemble text) + IMAGE_LOSS_WEIGHT·L1(image, frozen image)
+ KL(zero-shot ‖ prompted) summed / numel (PromptSRC's formula). The frozen features come from the same CLIP called
without prompts (one CLIP copy). Gaussian prompt aggregation (GPA) averages the *prompts* of every epoch with
Gaussian weights (the frozen CLIP is never touched, unlike upstream, whose fp16 state-dict averaging drifts it).

Frozen text targets: PromptKD's 60 ImageNet templates (``PROMPTSRC_TEMPLATES``), each template's features
normalised, averaged and renormalised (``clip.classifier.zeroshot_text_features``); upstream averages the
un-normalised features.

The prompting itself (``VLPromptLearner`` and ``VLPromptTrainer``: deep prompts trained with cross-entropy) is IVLP's
(``trainers/ivlp.py``); PromptSRC adds the regularisation and GPA on top.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from clip.classifier import (
    prompted_text_features,
    zeroshot_text_features,
)
from engine import TRAINER_REGISTRY, compute_accuracy
from engine.checkpoint import atomic_torch_save
from engine.distributed import is_main
from engine.schema import NON_NEGATIVE, POSITIVE, KeyTable, Number

from .ivlp import VLPromptTrainer
from .prompting.deep_prompts import VL_PROMPT_KEYS
from .prompting.templates import IMAGENET_TEMPLATES

TEACHER_FEATURES_FILE = "teacher_text_features.pt"
_PHOTO = "a photo of a {}."
PROMPTSRC_TEMPLATES: list[str] = [_PHOTO] + [t for t in IMAGENET_TEMPLATES if t != _PHOTO][:59]
"""PromptKD/PromptSRC's 60 templates: "a photo of a {}." first, then CLIP's 80 without their last 20."""


def promptsrc_loss_terms(logits: torch.Tensor, labels: torch.Tensor, text: torch.Tensor, frozen_text: torch.Tensor,
                         image: torch.Tensor, frozen_image: torch.Tensor, zs_logits: torch.Tensor,
                         text_weight: float, image_weight: float) -> dict[str, torch.Tensor]:
    """PromptSRC's loss terms (the loss is their sum); features are L2-normalised, logits scaled.

    ce = CE(logits, labels); scl_text / scl_image = weight · mean |x − frozen x|;
    scl_kl = Σ p_zs (log p_zs − log p) / logits.numel() with p = softmax(logits), p_zs = softmax(zs_logits).
    """
    kl = F.kl_div(F.log_softmax(logits, dim=1), F.log_softmax(zs_logits, dim=1), reduction="sum", log_target=True)
    return {
        "ce": F.cross_entropy(logits, labels),
        "scl_text": text_weight * F.l1_loss(text, frozen_text),
        "scl_image": image_weight * F.l1_loss(image, frozen_image),
        "scl_kl": kl / logits.numel(),
    }


def all_classnames(dataset) -> list[str]:
    """Every class name of the dataset in label order, also when SUBSAMPLE_CLASSES keeps only base or new ones."""
    if dataset.splits is None:  # a plain Dassl dataset: only the classes it holds
        return list(dataset.classnames)
    full = dataset.splits.all_lab2cname
    return [full[label] for label in sorted(full)]


@TRAINER_REGISTRY.register()
class PromptSRC(VLPromptTrainer):
    """The PromptSRC teacher trainer (16-shot base classes in base2novel); saves ``teacher_text_features.pt``."""

    NS = "PROMPTSRC"
    CONFIG_KEYS: KeyTable = {
        **VL_PROMPT_KEYS,
        "TEXT_LOSS_WEIGHT": (25.0, NON_NEGATIVE),
        "IMAGE_LOSS_WEIGHT": (10.0, NON_NEGATIVE),
        "GPA_MEAN": (15.0, Number()),
        "GPA_STD": (1.0, POSITIVE),
    }

    def build_model(self) -> None:
        super().build_model()
        opts = self.ns
        self.prompt_learner.enable_gpa(self.cfg.OPTIM.MAX_EPOCH, opts.GPA_MEAN, opts.GPA_STD)
        self.frozen_text_features: torch.Tensor | None = None  # the training targets, made in before_train
        weights = self.prompt_learner.gpa.weights
        top = sorted(range(len(weights)), key=lambda e: -weights[e])[:5]
        print(f"GPA (mean {opts.GPA_MEAN}, std {opts.GPA_STD}) heaviest epochs: "
              + ", ".join(f"{e + 1}: {weights[e]:.3f}" for e in sorted(top)))

    def before_train(self) -> None:
        """Compute the frozen text targets once (the 60-template ensemble; not needed for --eval-only)."""
        classnames = self.dm.dataset.classnames
        print(f"Frozen text targets: {len(classnames)} classes x {len(PROMPTSRC_TEMPLATES)} templates")
        with self.autocast():
            self.frozen_text_features = zeroshot_text_features(self.clip_model, classnames, PROMPTSRC_TEMPLATES,
                                                               self.device)
        super().before_train()

    def loss_terms(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """PromptSRC's loss terms on one batch (see ``promptsrc_loss_terms``) and the prompted logits."""
        opts = self.cfg.TRAINER.PROMPTSRC
        image, text = self.scoring.image_features(images), self.scoring.text_features(self.dm.dataset.classnames)
        with torch.no_grad(), self.autocast():
            frozen_image = F.normalize(self.clip_model.encode_image(images).float(), dim=-1)
        scale = self.clip_model.logit_scale.exp().float()
        logits = scale * image @ text.t()
        zs_logits = scale * frozen_image @ self.frozen_text_features.t()
        terms = promptsrc_loss_terms(logits, labels, text, self.frozen_text_features, image, frozen_image, zs_logits,
                                     opts.TEXT_LOSS_WEIGHT, opts.IMAGE_LOSS_WEIGHT)
        return terms, logits

    def forward_backward(self, batch: dict) -> dict:
        images, labels, _ = self.parse_batch_train(batch)
        terms, logits = self.loss_terms(images, labels)
        loss = sum(terms.values())
        self.model_backward_and_update(loss)
        if self.batch_idx + 1 == self.num_batches:
            self.update_lr()
        summary = {"loss": loss.detach(), "acc": compute_accuracy(logits, labels)[0]}  # read at log time
        summary.update({name: value.detach() for name, value in terms.items()})
        return summary

    def after_epoch(self) -> None:
        """Add this epoch's prompts to the GPA sum; after the last epoch load the aggregate (then save as usual)."""
        params = list(self.prompt_learner.parameters())
        self.prompt_learner.gpa.accumulate(params, self.epoch)
        if self.epoch + 1 == self.max_epoch:
            self.prompt_learner.gpa.load_into(params)
            print("GPA: loaded the Gaussian-weighted average of the epochs' prompts")
        super().after_epoch()

    def after_train(self) -> None:
        super().after_train()
        if self.cfg.TEST.NO_TEST and is_main():
            self.save_teacher_text_features()

    def after_test(self) -> None:
        """After a final evaluation, save the teacher text features."""
        if not self.validating and is_main():
            self.save_teacher_text_features()
        super().after_test()

    def save_teacher_text_features(self) -> str:
        """Write ``<OUTPUT_DIR>/teacher_text_features.pt``: prompted text features of ALL classes of the dataset."""
        classnames = all_classnames(self.dm.dataset)
        with self.autocast():
            features = prompted_text_features(self.clip_model, self.prompt_learner.text_prompts(), classnames,
                                              prefix=self.prompt_learner.prompt_prefix)
        sizes = self.prompt_learner.describe()
        record = {"classnames": classnames, "text_features": features.cpu(), "clip": self.cfg.MODEL.BACKBONE.NAME,
                  "dataset": self.cfg.DATASET.NAME, **{k: sizes[k] for k in
                                                        ("n_ctx_text", "n_ctx_vision", "depth_text", "depth_vision")}}
        path = os.path.join(self.output_dir, TEACHER_FEATURES_FILE)
        atomic_torch_save(record, path)
        print(f"Teacher text features of {len(classnames)} classes ({tuple(features.shape)}) saved to {path}")
        return path

