"""Zero-shot CLIP: hand-crafted prompt classifiers (one template or an ensemble) and the ZeroshotCLIP trainer.

``zeroshot_text_features`` is shared with the teacher (PromptSRC's zero-shot targets) and PETR+CoOp's unseen
branch: each template's text features are L2-normalised, averaged over templates and renormalised (CoOp's
ZeroshotCLIP2 semantics).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from tqdm import tqdm

import clip
from clip.model import CLIP
from engine import TRAINER_REGISTRY, TrainerX, autocast, resolve_precision
from engine.distributed import is_main

from .templates import ensemble_templates, select_templates, single_template

TEMPLATE_MODES = ("single", "ensemble", "select")


def load_backbone(name: str, device: torch.device | str, prec: str, role: str = "CLIP") -> tuple[str, CLIP]:
    """Resolve a PREC setting for ``device`` and load the frozen CLIP ``name`` (model name or weight file).

    Returns ``(resolved precision, model)``; the model gets half-precision parameters for fp16 (CUDA only, after
    engine.resolve_precision).
    """
    prec = resolve_precision(prec, device)
    print(f"Loading {role} (backbone: {name}, precision {prec})")
    return prec, clip.load_model(name, device, torch.float16 if prec == "fp16" else None)


def templates_for(dataset_name: str, mode: str) -> list[str]:
    """Templates of TRAINER.ZSCLIP.TEMPLATES ``mode``: single (CoOp's), ensemble (CLIP's list), select (ZSCLIP2)."""
    if mode == "single":
        return [single_template(dataset_name)]
    if mode == "ensemble":
        return ensemble_templates(dataset_name)
    if mode == "select":
        return select_templates(dataset_name)
    raise ValueError(f"TRAINER.ZSCLIP.TEMPLATES is {mode!r}; choose one of {', '.join(TEMPLATE_MODES)}")


def trim_padding(tokens: torch.Tensor) -> torch.Tensor:
    """Drop the padding columns after the last EOT: the causal text tower's EOT output does not depend on them."""
    return tokens[:, : int(tokens.argmax(dim=-1).max()) + 1]


@torch.no_grad()
def zeroshot_text_features(clip_model: CLIP, classnames: Sequence[str], templates: Sequence[str],
                           device: torch.device | str | None = None, batch_size: int = 256) -> torch.Tensor:
    """Prompt-ensemble classifier [C, embed_dim] (float32, L2-normalised rows), one row per class name.

    Every (class, template) text is encoded in batches of ``batch_size``; per-template features are normalised,
    averaged over the templates and renormalised. ``_`` in class names becomes a space. Tokens are cut after the
    batch's longest text (same features, far less work than 77 positions).
    """
    if not templates:
        raise ValueError("zeroshot_text_features needs at least one template (e.g. ['a photo of a {}.'])")
    device = clip_model.token_embedding.weight.device if device is None else torch.device(device)
    names = [name.replace("_", " ") for name in classnames]
    texts = [template.format(name) for name in names for template in templates]
    owner = torch.arange(len(names), device=device).repeat_interleave(len(templates))
    total = torch.zeros(len(names), clip_model.embed_dim, device=device)
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc=f"text features ({len(templates)} templates)",
                      disable=len(starts) <= 1 or not is_main()):
        tokens = clip.tokenize(texts[start:start + batch_size], context_length=clip_model.context_length,
                               truncate=True).to(device)
        features = F.normalize(clip_model.encode_text(trim_padding(tokens)).float(), dim=-1)
        total.index_add_(0, owner[start:start + batch_size], features)
    return F.normalize(total / len(templates), dim=-1)


@TRAINER_REGISTRY.register()
class ZeroshotCLIP(TrainerX):
    """Frozen CLIP with a hand-crafted classifier; evaluation only (no trained weights, no registered models)."""

    DATA_ROLE = "standard"

    def build_model(self) -> None:
        cfg = self.cfg
        self.template_mode = cfg.TRAINER.ZSCLIP.TEMPLATES
        self.templates = templates_for(cfg.DATASET.NAME, self.template_mode)
        self.prec, self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, cfg.TRAINER.ZSCLIP.PREC)
        classnames = self.dm.dataset.classnames
        print(f"Zero-shot classifier: {len(classnames)} classes x {len(self.templates)} template(s) "
              f"({self.template_mode}), e.g. {self.templates[0]!r}")
        with autocast(self.prec, self.device):
            self.text_features = zeroshot_text_features(self.clip_model, classnames, self.templates, self.device)

    def model_inference(self, images: torch.Tensor) -> torch.Tensor:
        with autocast(self.prec, self.device):
            image_features = self.clip_model.encode_image(images)
        image_features = F.normalize(image_features.float(), dim=-1)
        return self.clip_model.logit_scale.exp().float() * image_features @ self.text_features.t()

    def load_model(self, directory: str, epoch: int | None = None) -> None:
        """Nothing to load: zero-shot CLIP has no learned weights."""
        if directory:
            print(f"Note: ZeroshotCLIP has no learned weights; --model-dir {directory} is ignored")

    def train(self) -> None:
        """No training: evaluate on TEST.SPLIT (as ``--eval-only`` does)."""
        print("ZeroshotCLIP has nothing to train; evaluating (pass --eval-only to skip this note)")
        self.test()

    def extra_results(self) -> dict:
        return {"templates": self.template_mode, "num_templates": len(self.templates)}
