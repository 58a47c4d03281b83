"""KgCoOp (Yao et al., CVPR 2023): CoOp's learned context, kept near the hand-crafted prompt's text features.

loss = CE(logits, labels) + W · (1 − mean_c cos(w_c, w_c^clip)): w_c is class c's text feature under the learned
context, w_c^clip that of the dataset's hand-crafted prompt (:data:`KGCOOP_TEMPLATES`) on the frozen CLIP, over the
classes the run trains on (the base classes in base-to-novel). Everything else is CoOp's, in KgCoOp's own namespace
``TRAINER.KGCOOP``: the prompt learner, the scoring, the checkpoint (``prompt_learner/``, ``ctx`` only) and how
PETR+X reads a finished run. Upstream's checkpoints also hold a ``bias_vectors`` and a ``meta_net`` that its
training leaves untouched; they are not loaded.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from clip.classifier import zeroshot_text_features
from engine import TRAINER_REGISTRY, compute_accuracy
from engine.schema import NON_NEGATIVE, KeyTable

from .coop import CoOp, CoOpPromptLearner, coop_text_features
from .prompting.backbone import cosine_logits
from .prompting.templates import CUSTOM_TEMPLATES, single_template

KGCOOP_TEMPLATES = {**CUSTOM_TEMPLATES, "DescribableTextures": "a photo of a {}, a type of texture."}
"""KgCoOp's hand-crafted prompt per dataset: CoOp's, but for textures."""


class KgCoOpPromptLearner(CoOpPromptLearner):
    """CoOp's prompt learner; an upstream KgCoOp checkpoint's unused ``bias_vectors`` and ``meta_net`` are left out."""

    UPSTREAM_KEYS = (*CoOpPromptLearner.UPSTREAM_KEYS, "bias_vectors", "meta_net")


@TRAINER_REGISTRY.register()
class KgCoOp(CoOp):
    """KgCoOp: CoOp's context trained with cross-entropy plus W times the knowledge-guided distance."""

    NS = "KGCOOP"
    CONFIG_KEYS: KeyTable = {**CoOp.CONFIG_KEYS, "W": (1.0, NON_NEGATIVE)}
    LEARNER = KgCoOpPromptLearner
    hand_crafted: torch.Tensor | None = None

    def hand_crafted_features(self) -> torch.Tensor:
        """L2-normalised text features [C, D] of the dataset's hand-crafted prompt for its classes, on the frozen
        CLIP: the targets the learned prompts' features are kept near."""
        name = self.cfg.DATASET.NAME
        template = KGCOOP_TEMPLATES.get(name) or single_template(name)
        print(f"Knowledge-guided targets: {template!r} on the frozen CLIP, W {self.ns.W}")
        with torch.no_grad(), self.autocast():
            return zeroshot_text_features(self.clip_model, self.dm.dataset.classnames, [template], self.device)

    def before_train(self) -> None:
        """The targets, once before training (an ``--eval-only`` run does not need them)."""
        self.hand_crafted = self.hand_crafted_features()
        super().before_train()

    def train_step(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """CE on the logits + W · (1 − mean cos(learned text features, hand-crafted ones)); one text forward."""
        with self.autocast():
            text = coop_text_features(self.clip_model, self.prompt_learner)
            image = self.clip_model.encode_image(inputs["images"])
        logits = cosine_logits(self.clip_model, image, text)
        ce = F.cross_entropy(logits, inputs["labels"])
        kg = 1.0 - (text * self.hand_crafted).sum(dim=-1).mean()
        loss = ce + self.ns.W * kg
        self.model_backward_and_update(loss)
        return {"loss": loss.detach(), "acc": compute_accuracy(logits.detach(), inputs["labels"])[0],
                "ce": ce.detach(), "kg": kg.detach()}

    def extra_results(self) -> dict:
        return {**super().extra_results(), "w": self.ns.W}
