"""MaPLe (Khattak et al., CVPR 2023): deep language prompts coupled to the vision prompts by linear projections.

Text layer 0 learns ``ctx`` (n_ctx tokens after SOS; with CTX_INIT "a photo of a" and n_ctx 2 they start as "a
photo" and "of a" stays a fixed word of every prompt, as upstream; a context of more than 4 tokens starts at random,
``clip.prompts.context_words``); text layers j = 1..J-1 learn
``compound_prompts_text[j-1]``. The vision prompts are their images through linear maps (text width → vision
width): ``proj(ctx)`` appended after the positional embedding, ``compound_prompt_projections[j-1](…)`` replacing
them before vision block j. J = PROMPT_DEPTH. Logits are τ · cos(image, text), trained with cross-entropy.

Upstream registers its whole CLIP wrapper as ``MultiModalPromptLearner``, so its checkpoints hold the frozen CLIP
weights too; here the model of that name is the prompt learner alone, with upstream's parameter names, and
upstream checkpoints load into it (``prompt_learner.`` entries kept, the rest left out), also as PETR+X's seen branch
(``MaPLeCLIP.from_checkpoint``, with the words the run records). Trainable parameters are float32 in every precision.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from tabulate import tabulate
from torch import nn

from clip.classifier import class_prompt_tokens, class_prompts, fitting_class_prompts
from clip.model import CLIP, require_vit
from clip.prompts import context_words, init_text_embedding
from engine import TRAINER_REGISTRY, TrainerX, build_lr_scheduler, build_optimizer, load_checkpoint
from engine.compile import compile_clip
from engine.errors import ConfigError
from engine.precision import PREC_RULE
from engine.schema import Int, KeyTable, Text

from .prompting.backbone import Autocast, ClipWeightsCheck, load_backbone
from .prompting.learner_state import learner_state
from .prompting.scoring import ClassScorer, ClassScoring, PromptedCLIP, checkpoint_context
from .prompting.tuned_run import TunedRun, recorded_settings

MODEL_NAME = "MultiModalPromptLearner"
UPSTREAM_PREFIX = "prompt_learner."


class MultiModalPromptLearner(nn.Module):
    """MaPLe's prompts: text ``ctx`` + ``compound_prompts_text`` and the projections that make the vision prompts."""

    def __init__(self, clip_model: CLIP, n_ctx: int = 2, depth: int = 9, ctx_init: str = ""):
        super().__init__()
        layers = min(clip_model.text_layers, clip_model.vision_layers)
        if not 1 <= depth <= layers:
            raise ConfigError(f"TRAINER.MAPLE.PROMPT_DEPTH is {depth}; use 1 (shallow) to {layers} (the blocks of "
                              "this CLIP's shorter tower)")
        if n_ctx < 1:
            raise ConfigError(f"TRAINER.MAPLE.N_CTX is {n_ctx}; use at least 1 context token")
        words = context_words(ctx_init, n_ctx)
        if words:
            try:
                ctx = init_text_embedding(clip_model, words, n_ctx).float()
            except ValueError as e:
                raise ConfigError(f"TRAINER.MAPLE.CTX_INIT: {e}") from None
        else:
            ctx = torch.empty(n_ctx, clip_model.text_width).normal_(std=0.02)
        self.prompt_prefix = words
        self.context_length = clip_model.context_length
        text_width, vision_width = clip_model.text_width, clip_model.vision_width
        self.ctx = nn.Parameter(ctx)
        self.proj = nn.Linear(text_width, vision_width)
        self.compound_prompts_text = nn.ParameterList(
            [nn.Parameter(torch.empty(n_ctx, text_width).normal_(std=0.02)) for _ in range(depth - 1)])
        projection = nn.Linear(text_width, vision_width)  # every deeper projection starts from the same weights
        self.compound_prompt_projections = nn.ModuleList([copy.deepcopy(projection) for _ in range(depth - 1)])

    @property
    def n_ctx(self) -> int:
        return self.ctx.shape[0]

    @property
    def depth(self) -> int:
        return len(self.compound_prompts_text) + 1

    def text_prompts(self) -> list[torch.Tensor]:
        """The text prompts of layers 0..J-1 ([n_ctx, text width] each)."""
        return [self.ctx, *self.compound_prompts_text]

    def vision_prompts(self) -> list[torch.Tensor]:
        """The vision prompts of layers 0..J-1 ([n_ctx, vision width] each), projected from the text prompts."""
        deeper = [layer(p) for layer, p in zip(self.compound_prompt_projections, self.compound_prompts_text)]
        return [self.proj(self.ctx), *deeper]

    def prompt_tokens(self, classnames: Sequence[str]) -> torch.Tensor:
        """Tokens of "<ctx_init or X X> <class name>." per class (positions 1..n_ctx take the text prompts)."""
        return class_prompt_tokens(classnames, self.n_ctx, self.context_length, self.prompt_prefix)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False):
        """Our checkpoints, or upstream's wrapper state (its ``prompt_learner.`` entries; frozen CLIP left out)."""
        state = learner_state(self, state_dict, "MaPLe prompt learner", "use the TRAINER.MAPLE N_CTX / "
                              "PROMPT_DEPTH and the CLIP (MODEL.BACKBONE.NAME) the checkpoint was trained with",
                              UPSTREAM_PREFIX, strict)
        return super().load_state_dict(state, strict=strict, assign=assign)


class MaPLeCLIP(PromptedCLIP):
    """MaPLe's scoring: text features under the language prompts, image features under the projected vision ones."""

    prompt_learner: MultiModalPromptLearner

    @classmethod
    def from_checkpoint(cls, clip_model: CLIP, cfg, path: str, autocast: Autocast, ns: str) -> MaPLeCLIP:
        """A finished MaPLe run's prompts (ours or upstream's), frozen; N_CTX and PROMPT_DEPTH are read off the
        tensors (and must be what the run records), the prompt's words are the CTX_INIT the run records, else this
        config's TRAINER.<ns>.CTX_INIT (the words after the context stay in the prompt)."""
        state = load_checkpoint(path).get("state_dict", {})
        own = {k.removeprefix(UPSTREAM_PREFIX): v for k, v in state.items()}
        n_ctx = checkpoint_context(own, path, "MaPLe").shape[0]
        depth = 1 + sum(k.startswith("compound_prompts_text.") for k in own)
        run = TunedRun.of_checkpoint(path)
        settings, note = recorded_settings(run, ns, {"CTX_INIT": cfg.TRAINER[ns].CTX_INIT},
                                           {"N_CTX": n_ctx, "PROMPT_DEPTH": depth}, path)
        if note:
            print(note)
        learner = MultiModalPromptLearner(clip_model, n_ctx, depth, settings["CTX_INIT"])
        learner.load_state_dict(state)
        print(f"{path}: class prompt {class_prompts(['{}'], n_ctx, learner.prompt_prefix)[0]!r}, its first {n_ctx} "
              f"tokens learned ({run.config_source or 'no recorded config: the words of this config'})")
        return cls.frozen(clip_model, learner, autocast)

    def class_scorer(self, classnames: Sequence[str]) -> ClassScorer:
        tokens = self.class_tokens(classnames)
        with self.autocast():
            text = self.clip_model.encode_text(tokens, self.prompt_learner.text_prompts())
        text = F.normalize(text.float(), dim=-1)
        scale = self.clip_model.logit_scale.exp().float()

        def score(images: torch.Tensor) -> torch.Tensor:
            with self.autocast():
                image = self.clip_model.encode_image(images, self.prompt_learner.vision_prompts())
            return scale * F.normalize(image.float(), dim=-1) @ text.t()

        return score


@TRAINER_REGISTRY.register()
class MaPLe(ClassScoring, ClipWeightsCheck, TrainerX):
    """MaPLe: ``MultiModalPromptLearner`` trained with cross-entropy on the labels (a ViT CLIP)."""

    NS = "MAPLE"
    DATA_ROLE = "standard"
    CONFIG_KEYS: KeyTable = {
        "N_CTX": (2, Int(1)),
        "CTX_INIT": ("a photo of a", Text()),
        "PREC": ("fp16", PREC_RULE),
        "PROMPT_DEPTH": (9, Int(1)),  # deep text prompts coupled to the vision prompts in layers 0..PROMPT_DEPTH-1
    }
    SCORING_MODEL = MaPLeCLIP
    RECORDED_KEYS = ("N_CTX", "CTX_INIT", "PROMPT_DEPTH")
    TUNED_MODEL = MODEL_NAME
    TUNED_BORROWS = ("CTX_INIT",)

    def build_model(self) -> None:
        cfg, opts = self.cfg, self.ns
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        require_vit(self.clip_model, cfg.MODEL.BACKBONE.NAME, "MODEL.BACKBONE.NAME", type(self).__name__)
        compile_clip(self.clip_model, cfg.TRAIN.COMPILE)
        self.prompt_learner = MultiModalPromptLearner(self.clip_model, opts.N_CTX, opts.PROMPT_DEPTH,
                                                      opts.CTX_INIT).to(self.device)
        learner = self.prompt_learner
        fitting_class_prompts(self.dm.dataset.classnames, learner.n_ctx, learner.prompt_prefix,
                              self.clip_model.context_length, f"TRAINER.MAPLE.N_CTX is {opts.N_CTX}")
        template = class_prompts(["{}"], learner.n_ctx, learner.prompt_prefix)[0]
        print(f"MaPLe: {learner.n_ctx} context tokens, prompt {template!r}, coupled prompts in layers "
              f"0..{learner.depth - 1}")
        groups = (("text prompts", [learner.ctx, *learner.compound_prompts_text]),
                  ("projections", [*learner.proj.parameters(), *learner.compound_prompt_projections.parameters()]))
        print(tabulate([[name, sum(p.numel() for p in params)] for name, params in groups],
                       headers=["part", "trainable params"]))
        optim = build_optimizer(learner, cfg.OPTIM)
        sched = build_lr_scheduler(optim, cfg.OPTIM)
        self.register_model(MODEL_NAME, learner, optim, sched)

    def extra_results(self) -> dict:
        learner = self.prompt_learner
        return {**super().extra_results(), "n_ctx": learner.n_ctx, "prompt_depth": learner.depth}
