"""Zero-shot CLIP: the ZeroshotCLIP trainer with a hand-crafted prompt classifier (one template or an ensemble).

The classifier is ``clip.classifier.zeroshot_text_features``: each template's text features are L2-normalised,
averaged over templates and renormalised (CoOp's ZeroshotCLIP2 semantics).
"""
from __future__ import annotations

import torch

from clip.classifier import zeroshot_text_features
from engine import TRAINER_REGISTRY, TrainerX
from engine.precision import PREC_RULE
from engine.schema import Choice, KeyTable

from .prompting.backbone import ClipWeightsCheck, cosine_logits, load_backbone
from .prompting.templates import ensemble_templates, select_templates, single_template

TEMPLATE_MODES = ("single", "ensemble", "select")


def templates_for(dataset_name: str, mode: str) -> list[str]:
    """Templates of TRAINER.ZSCLIP.TEMPLATES ``mode``: single (CoOp's), ensemble (CLIP's list), select (ZSCLIP2)."""
    if mode == "single":
        return [single_template(dataset_name)]
    if mode == "ensemble":
        return ensemble_templates(dataset_name)
    if mode == "select":
        return select_templates(dataset_name)
    raise ValueError(f"TRAINER.ZSCLIP.TEMPLATES is {mode!r}; choose one of {', '.join(TEMPLATE_MODES)}")


@TRAINER_REGISTRY.register()
class ZeroshotCLIP(ClipWeightsCheck, TrainerX):
    """Frozen CLIP with a hand-crafted classifier; evaluation only (no trained weights, no registered models)."""

    NS = "ZSCLIP"
    DATA_ROLE = "standard"
    CONFIG_KEYS: KeyTable = {
        "TEMPLATES": ("single", Choice(TEMPLATE_MODES)),  # one template (single) or the per-dataset ensemble
        "PREC": ("fp32", PREC_RULE),
    }

    def build_model(self) -> None:
        cfg = self.cfg
        self.template_mode = self.ns.TEMPLATES
        self.templates = templates_for(cfg.DATASET.NAME, self.template_mode)
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        classnames = self.dm.dataset.classnames
        print(f"Zero-shot classifier: {len(classnames)} classes x {len(self.templates)} template(s) "
              f"({self.template_mode}), e.g. {self.templates[0]!r}")
        with self.autocast():
            self.text_features = zeroshot_text_features(self.clip_model, classnames, self.templates, self.device)

    def model_inference(self, images: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            image_features = self.clip_model.encode_image(images)
        return cosine_logits(self.clip_model, image_features, self.text_features)

    def load_model(self, directory: str, epoch: int | None = None) -> None:
        """Nothing to load: zero-shot CLIP has no learned weights."""
        if directory:
            print(f"Note: ZeroshotCLIP has no learned weights; --model-dir {directory} is ignored")

    def train(self) -> None:
        """No training: evaluate on TEST.SPLIT (as ``--eval-only`` does)."""
        print("ZeroshotCLIP has nothing to train; evaluating (pass --eval-only to skip this note)")
        self.test()

    def extra_results(self) -> dict:
        return {**super().extra_results(), "templates": self.template_mode, "num_templates": len(self.templates)}
