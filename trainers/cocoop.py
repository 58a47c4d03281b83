"""CoCoOp (Zhou et al., CVPR 2022): CoOp's context shifted per image by a meta-net, on a frozen CLIP.

For image x with normalised feature f(x), the meta-net π (Linear–ReLU–Linear, embed_dim → embed_dim/16 → text
width) gives one shift added to every context token: prompt_c(x) = [SOS, ctx_1 + π(f(x)), …, ctx_M + π(f(x)),
<class c>. EOS]. p(y=c|x) ∝ exp(τ · cos(f(x), g(prompt_c(x)))), trained with cross-entropy; ``ctx`` and π are learned.

Upstream runs the text encoder once per image over every class. Here the images of a batch share one text forward
(per-sample prompts of the prompt-aware CLIP, in chunks of at most ``TEXT_ROWS`` image×class rows): the same
logits, fewer and larger kernels. Trainable parameters stay float32 in every precision (upstream keeps them fp16
under PREC fp16); upstream checkpoints (``prompt_learner/``, with fp16 tensors and class-token buffers) load as
they are, also as PETR+X's seen branch (``CoCoOpCLIP.from_checkpoint``).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from tabulate import tabulate
from torch import nn

from clip.classifier import class_prompt_tokens, fitting_class_prompts, trim_padding
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
from engine.compile import compile_clip
from engine.errors import ConfigError
from engine.precision import PREC_RULE
from engine.schema import Int, KeyTable, Text

from .coop import context_init
from .prompting.backbone import Autocast, ClipWeightsCheck, load_backbone
from .prompting.learner_state import learner_state
from .prompting.scoring import ClassScorer, ClassScoring, PromptedCLIP, checkpoint_context

MODEL_NAME = "prompt_learner"
TEXT_ROWS = 4096
"""At most this many (image, class) prompts go through the text encoder in one forward (bounds peak memory)."""


class CoCoOpPromptLearner(nn.Module):
    """CoCoOp's learned parts: the generic context ``ctx`` [n_ctx, w] and the meta-net ``meta_net``.

    ``ctx_init`` (e.g. "a photo of a") sets n_ctx to its BPE token count and initialises ``ctx`` from its token
    embeddings (CoOp's rule); otherwise ``ctx`` ~ N(0, 0.02). Holds no class names: ``prompt_tokens`` gives the
    class-name tokens of any class list.
    """

    def __init__(self, clip_model: CLIP, n_ctx: int = 16, ctx_init: str = ""):
        super().__init__()
        ctx_init = ctx_init.replace("_", " ").strip()
        if ctx_init:
            ctx = context_init(clip_model, ctx_init, "TRAINER.COCOOP.CTX_INIT").float()
        elif n_ctx < 1:
            raise ConfigError(f"TRAINER.COCOOP.N_CTX is {n_ctx}; use at least 1 context token")
        else:
            ctx = torch.empty(n_ctx, clip_model.text_width).normal_(std=0.02)
        self.prompt_prefix = ctx_init
        self.context_length = clip_model.context_length
        self.ctx = nn.Parameter(ctx)
        vis_dim = clip_model.embed_dim
        self.meta_net = nn.Sequential(OrderedDict([
            ("linear1", nn.Linear(vis_dim, vis_dim // 16)),
            ("relu", nn.ReLU(inplace=True)),
            ("linear2", nn.Linear(vis_dim // 16, clip_model.text_width)),
        ]))

    @property
    def n_ctx(self) -> int:
        return self.ctx.shape[0]

    def forward(self, image_features: torch.Tensor) -> torch.Tensor:
        """Per-image contexts [B, n_ctx, w]: ``ctx`` + π(normalised image feature) on every token."""
        return self.ctx.unsqueeze(0) + self.meta_net(image_features).unsqueeze(1)

    def prompt_tokens(self, classnames: Sequence[str]) -> torch.Tensor:
        """Tokens of "<ctx_init or X X X X> <class name>." per class (positions 1..n_ctx take the context)."""
        return class_prompt_tokens(classnames, self.n_ctx, self.context_length, self.prompt_prefix)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False):
        """``ctx`` and the meta-net from our checkpoints or upstream's (class-token buffers left out)."""
        state = learner_state(self, state_dict, "CoCoOp prompt learner", "use the TRAINER.COCOOP N_CTX / CTX_INIT "
                              "and the CLIP (MODEL.BACKBONE.NAME) the checkpoint was trained with", strict=strict)
        return super().load_state_dict(state, strict=strict, assign=assign)


def conditional_logits(clip_model: CLIP, learner: CoCoOpPromptLearner, tokens: torch.Tensor,
                       image_features: torch.Tensor, rows: int = TEXT_ROWS) -> torch.Tensor:
    """CoCoOp's logits [B, C] (float32) for L2-normalised image features [B, D] over the classes of ``tokens``
    [C, L]: image b against the text features of its own prompts, one text forward per chunk of images."""
    tokens = trim_padding(tokens)
    n_cls = tokens.shape[0]
    contexts = learner(image_features)
    scale = clip_model.logit_scale.exp().float()
    per_chunk = max(1, rows // n_cls)
    chunks = []
    for start in range(0, contexts.shape[0], per_chunk):
        ctx = contexts[start:start + per_chunk]
        batch = ctx.shape[0]
        prompts = ctx.unsqueeze(1).expand(-1, n_cls, -1, -1).reshape(batch * n_cls, *ctx.shape[1:])
        text = clip_model.encode_text(tokens.repeat(batch, 1), prompts=[prompts])
        text = F.normalize(text.float(), dim=-1).view(batch, n_cls, -1)
        chunks.append(scale * (text * image_features[start:start + batch].float().unsqueeze(1)).sum(dim=-1))
    return torch.cat(chunks)


class CoCoOpCLIP(PromptedCLIP):
    """CoCoOp's scoring: each image's prompts shifted by the meta-net, one batched text forward per chunk."""

    prompt_learner: CoCoOpPromptLearner

    @classmethod
    def from_checkpoint(cls, clip_model: CLIP, cfg, path: str, autocast: Autocast, ns: str) -> CoCoOpCLIP:
        """A finished CoCoOp run's learner (ours or upstream's), frozen; the context length is read off ``ctx``.
        The prompt's words are placeholders: the context replaces them, so the logits are the run's whatever its
        CTX_INIT."""
        state = load_checkpoint(path).get("state_dict", {})
        learner = CoCoOpPromptLearner(clip_model, checkpoint_context(state, path, "CoCoOp").shape[0])
        learner.load_state_dict(state)
        return cls.frozen(clip_model, learner, autocast)

    def class_scorer(self, classnames: Sequence[str]) -> ClassScorer:
        tokens = self.class_tokens(classnames)

        def score(images: torch.Tensor) -> torch.Tensor:
            with self.autocast():
                image = F.normalize(self.clip_model.encode_image(images).float(), dim=-1)
                return conditional_logits(self.clip_model, self.prompt_learner, tokens, image)

        return score


@TRAINER_REGISTRY.register()
class CoCoOp(ClassScoring, ClipWeightsCheck, TrainerX):
    """CoCoOp: ``prompt_learner`` (context + meta-net) trained with cross-entropy on the labels."""

    NS = "COCOOP"
    DATA_ROLE = "standard"
    CONFIG_KEYS: KeyTable = {
        "N_CTX": (16, Int(1)),
        "CTX_INIT": ("", Text()),
        "PREC": ("fp16", PREC_RULE),
    }
    SCORING_MODEL = CoCoOpCLIP
    RECORDED_KEYS = ("N_CTX", "CTX_INIT")
    TUNED_MODEL = MODEL_NAME

    def build_model(self) -> None:
        cfg, opts = self.cfg, self.ns
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        compile_clip(self.clip_model, cfg.TRAIN.COMPILE)
        self.prompt_learner = CoCoOpPromptLearner(self.clip_model, opts.N_CTX, opts.CTX_INIT).to(self.device)
        learner = self.prompt_learner
        setting = (f"TRAINER.COCOOP.CTX_INIT {opts.CTX_INIT!r}" if learner.prompt_prefix
                   else f"TRAINER.COCOOP.N_CTX is {opts.N_CTX}")
        fitting_class_prompts(self.dm.dataset.classnames, learner.n_ctx, learner.prompt_prefix,
                              self.clip_model.context_length, setting)
        if cfg.MODEL.INIT_WEIGHTS:
            load_pretrained_weights(self.prompt_learner, cfg.MODEL.INIT_WEIGHTS)
        learner = self.prompt_learner
        template = f"{learner.prompt_prefix or ' '.join(['X'] * learner.n_ctx)} {{}}."
        rows = [["context", f"{learner.n_ctx} x {learner.ctx.shape[1]}", learner.ctx.numel()],
                ["meta-net", " -> ".join(str(n) for n in (learner.meta_net.linear1.in_features,
                                                          learner.meta_net.linear1.out_features,
                                                          learner.meta_net.linear2.out_features)),
                 count_num_param(learner.meta_net)]]
        print(f"CoCoOp prompt {template!r}, context shifted per image by the meta-net")
        print(tabulate(rows, headers=["part", "shape", "trainable params"]))
        self.optim = build_optimizer(learner, cfg.OPTIM)
        self.sched = build_lr_scheduler(self.optim, cfg.OPTIM)
        self.register_model(MODEL_NAME, learner, self.optim, self.sched)

    def extra_results(self) -> dict:
        return {**super().extra_results(), "n_ctx": self.prompt_learner.n_ctx}
