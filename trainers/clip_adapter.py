"""CLIP-Adapter (Gao et al., IJCV 2024): a residual bottleneck adapter on the frozen CLIP's image features.

The image feature f [B, D] goes through two bias-free linear maps D → D/REDUCTION → D, each followed by a ReLU (A(f));
the classifier sees ``RATIO · A(f) + (1 − RATIO) · f`` against the text features of the dataset's hand-crafted prompt
(CoOp's per-dataset template, :func:`single_template`) on the frozen CLIP, and only the adapter learns, with
cross-entropy. The class side is the frozen CLIP's, so a trained adapter scores any class list: the novel classes,
another dataset's, or every class of the task as PETR+X's seen branch. Checkpoints keep upstream's layout
(``clip_adapter/``, entries ``fc.0.weight`` and ``fc.2.weight``), so upstream runs load as ours; the ratio, which no
tensor holds, is a recorded setting (``RECORDED_KEYS``).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from clip.classifier import zeroshot_text_features
from clip.model import CLIP
from engine import (
    TRAINER_REGISTRY,
    TrainerX,
    build_lr_scheduler,
    build_optimizer,
    count_num_param,
    load_checkpoint,
    load_pretrained_weights,
)
from engine.errors import ConfigError, InvalidInputError
from engine.precision import PREC_RULE
from engine.schema import FRACTION, Int, KeyTable

from .prompting.backbone import Autocast, ClipWeightsCheck, cosine_logits, load_backbone
from .prompting.scoring import ClassScorer, ClassScoring, TunedCLIP
from .prompting.templates import single_template
from .prompting.tuned_run import TunedRun, recorded_settings

MODEL_NAME = "clip_adapter"
WEIGHTS = ("fc.0.weight", "fc.2.weight")
"""The adapter's two weight matrices, named as upstream's checkpoints name them."""


class FeatureAdapter(nn.Module):
    """The bottleneck A and the residual mix: ``forward(f) = ratio · A(f) + (1 − ratio) · f``."""

    def __init__(self, width: int, reduction: int = 4, ratio: float = 0.2):
        super().__init__()
        hidden = width // reduction
        self.fc = nn.Sequential(nn.Linear(width, hidden, bias=False), nn.ReLU(),
                                nn.Linear(hidden, width, bias=False), nn.ReLU())
        self.ratio = ratio

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        adapted = self.fc(features.to(self.fc[0].weight.dtype))
        return self.ratio * adapted + (1.0 - self.ratio) * features

    @classmethod
    def from_state(cls, state: dict, ratio: float, path: str) -> FeatureAdapter:
        """The adapter whose weights are ``state``'s (its width and reduction read off their shapes)."""
        down, up = (state.get(key) for key in WEIGHTS)
        if not (torch.is_tensor(down) and torch.is_tensor(up) and down.dim() == up.dim() == 2
                and tuple(up.shape) == tuple(down.shape[::-1]) and down.shape[1] % down.shape[0] == 0):
            raise InvalidInputError(f"{path} holds no CLIP-Adapter weights {' and '.join(WEIGHTS)} (its keys: "
                                    f"{sorted(state)[:6]}); give the folder of a CLIP-Adapter run")
        adapter = cls(down.shape[1], down.shape[1] // down.shape[0], ratio)
        adapter.load_state_dict({key: state[key].float() for key in WEIGHTS})
        return adapter


class AdaptedCLIP(TunedCLIP):
    """The adapter on its frozen CLIP: text features of ``template`` per class name, adapted image features."""

    learned: FeatureAdapter

    def __init__(self, clip_model: CLIP, adapter: FeatureAdapter, autocast: Autocast, template: str):
        super().__init__(clip_model, adapter, autocast)
        self.template = template
        self._text: tuple[tuple[str, ...], torch.Tensor] | None = None

    def class_scorer(self, classnames: Sequence[str]) -> ClassScorer:
        """The frozen CLIP's text features of the template for ``classnames`` (computed here, kept for the last class
        list: training asks every step) against each image's adapted CLIP features."""
        key = tuple(classnames)
        if self._text is None or self._text[0] != key:
            with torch.no_grad(), self.autocast():
                self._text = (key, zeroshot_text_features(self.clip_model, classnames, [self.template]))
        text = self._text[1]

        def score(images: torch.Tensor) -> torch.Tensor:
            with torch.no_grad(), self.autocast():
                image = self.clip_model.encode_image(images)
            return cosine_logits(self.clip_model, self.learned(image.float()), text)

        return score

    @classmethod
    def from_checkpoint(cls, clip_model: CLIP, cfg, path: str, autocast: Autocast, ns: str) -> AdaptedCLIP:
        """A finished run's adapter (ours or upstream's): its sizes read off the weights, its ratio as the run records
        it, else this config's; the template is that of ``cfg``'s dataset."""
        state = load_checkpoint(path).get("state_dict", {})
        settings, note = recorded_settings(TunedRun.of_checkpoint(path), ns, {"RATIO": cfg.TRAINER[ns].RATIO})
        if note:
            print(note)
        adapter = FeatureAdapter.from_state(state, settings["RATIO"], path)
        return cls.frozen(clip_model, adapter, autocast, single_template(cfg.DATASET.NAME))


@TRAINER_REGISTRY.register()
class CLIPAdapter(ClassScoring, ClipWeightsCheck, TrainerX):
    """CLIP-Adapter: only the feature adapter (``clip_adapter``) is trained, with cross-entropy on the labels."""

    NS = "CLIPADAPTER"
    DATA_ROLE = "standard"
    CONFIG_KEYS: KeyTable = {
        "REDUCTION": (4, Int(1)),  # the bottleneck's width is the feature width over it
        "RATIO": (0.2, FRACTION),  # the adapted features' share of the mix
        "PREC": ("fp32", PREC_RULE),
    }
    RECORDED_KEYS = ("RATIO",)
    SCORING_MODEL = AdaptedCLIP
    TUNED_MODEL = MODEL_NAME
    TUNED_BORROWS = ("RATIO",)

    def build_model(self) -> None:
        cfg, opts = self.cfg, self.ns
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        width = self.clip_model.embed_dim
        if width // opts.REDUCTION < 1:
            raise ConfigError(f"TRAINER.CLIPADAPTER.REDUCTION is {opts.REDUCTION}, more than the CLIP's feature "
                                    f"width {width}; use a reduction that leaves a bottleneck (upstream: 4)")
        self.adapter = FeatureAdapter(width, opts.REDUCTION, opts.RATIO).to(self.device)
        if cfg.MODEL.INIT_WEIGHTS:
            load_pretrained_weights(self.adapter, cfg.MODEL.INIT_WEIGHTS)
        self.template = single_template(cfg.DATASET.NAME)
        print(f"CLIP-Adapter: {width} -> {width // opts.REDUCTION} -> {width} on the image features, ratio "
              f"{opts.RATIO}, prompt {self.template!r}; trainable parameters: {count_num_param(self.adapter):,} "
              "(the CLIP weights are frozen)")
        self.optim = build_optimizer(self.adapter, cfg.OPTIM)
        self.sched = build_lr_scheduler(self.optim, cfg.OPTIM)
        self.register_model(MODEL_NAME, self.adapter, self.optim, self.sched)

    def scoring_model(self) -> AdaptedCLIP:
        return AdaptedCLIP(self.clip_model, self.adapter, self.autocast, self.template)

    def extra_results(self) -> dict:
        return {**super().extra_results(), "reduction": self.ns.REDUCTION, "ratio": self.ns.RATIO}
