"""CoOp: learnable context words around the class name on a frozen CLIP, trained with cross-entropy.

``CoOpPromptLearner`` and ``coop_text_features`` are shared with PETR+CoOp (its seen branch); ``CoOpTuned`` is a
finished CoOp run as PETR+X's seen branch (a ``ClassScoringModel``). The checkpoint holds ``ctx`` only: the class-name
token embeddings are non-persistent buffers rebuilt from the class names, so a generic context trained on base
classes evaluates on novel classes (or another dataset) unchanged.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import clip
from clip.classifier import fitting_class_prompts, trim_padding
from clip.model import CLIP
from clip.prompts import init_text_embedding
from clip.tokenizer import encode
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
from engine.schema import Bool, Choice, Int, KeyTable, Text

from .prompting.backbone import Autocast, ClipWeightsCheck, cosine_logits, load_backbone
from .prompting.scoring import ClassScorer, CrossEntropyStep
from .prompting.tuned_run import TunedRun, recorded_settings

MODEL_NAME = "prompt_learner"
CLASS_TOKEN_POSITIONS = ("end", "middle", "front")


def context_init(clip_model: CLIP, ctx_init: str, setting: str) -> torch.Tensor:
    """CoOp's initial context from words: the token embeddings of every BPE token of ``ctx_init`` ([n_ctx, w])."""
    try:
        return init_text_embedding(clip_model, ctx_init)
    except ValueError as e:
        raise ConfigError(f"{setting}: {e}") from None


def _describe_ctx(shape: Sequence[int]) -> str:
    if len(shape) == 3:
        return f"class-specific context (CSC) for {shape[0]} classes, {shape[1]} tokens of width {shape[2]}"
    return f"generic context of {shape[0]} tokens of width {shape[1]}"


class CoOpPromptLearner(nn.Module):
    """CoOp's context vectors ``ctx`` ([n_ctx, w] generic or [C, n_ctx, w] class-specific) and prompt assembly.

    Prompts are "<SOS> ctx <name>. <EOS>" (``end``), "<SOS> ctx[:n/2] <name> ctx[n/2:]. <EOS>" (``middle``) or
    "<SOS> <name> ctx. <EOS>" (``front``). ``ctx_init`` (e.g. "a photo of a") sets n_ctx to its BPE token count
    and initialises a generic context from its token embeddings (CSC is then ignored, as in CoOp).
    """

    UPSTREAM_KEYS: tuple[str, ...] = ("token_prefix", "token_suffix")
    """Entries (or entry prefixes) of upstream checkpoints that are not loaded: CoOp's class-token buffers, rebuilt
    from the class names instead."""

    def __init__(self, clip_model: CLIP, classnames: Sequence[str], n_ctx: int = 16, ctx_init: str = "",
                 csc: bool = False, class_token_position: str = "end", setting: str = "TRAINER.COOP"):
        super().__init__()
        if class_token_position not in CLASS_TOKEN_POSITIONS:
            raise ConfigError(f"{setting}.CLASS_TOKEN_POSITION is {class_token_position!r}; choose one of "
                              f"{', '.join(CLASS_TOKEN_POSITIONS)}")
        weight = clip_model.token_embedding.weight
        names = [name.replace("_", " ") for name in classnames]
        ctx_init = ctx_init.replace("_", " ").strip()
        if ctx_init:
            ctx = context_init(clip_model, ctx_init, f"{setting}.CTX_INIT")
            n_ctx = ctx.shape[0]
            if csc:
                print(f"Note: {setting}.CSC is ignored with CTX_INIT (as in CoOp): one generic context "
                      f"initialised from {ctx_init!r}")
            csc, prefix_text = False, ctx_init
        else:
            if n_ctx < 1:
                raise ConfigError(f"{setting}.N_CTX is {n_ctx}; use at least 1 context token")
            shape = (len(names), n_ctx, clip_model.text_width) if csc else (n_ctx, clip_model.text_width)
            ctx = torch.empty(shape, dtype=weight.dtype, device=weight.device).normal_(std=0.02)
            prefix_text = " ".join(["X"] * n_ctx)
        print(f"CoOp context: {_describe_ctx(ctx.shape)}; prompt template {prefix_text + ' {}.'!r}, class token "
              f"at the {class_token_position}")
        self.ctx = nn.Parameter(ctx)
        self.n_ctx, self.csc, self.class_token_position = n_ctx, csc, class_token_position
        self.classnames, self.setting = list(classnames), setting
        self.name_lens = [len(encode(name)) for name in names]
        fits = f"{setting}.CTX_INIT {ctx_init!r}" if ctx_init else f"{setting}.N_CTX is {n_ctx}"
        prompts = fitting_class_prompts(names, n_ctx, prefix_text, clip_model.context_length, fits)
        tokens = clip.tokenize(prompts, context_length=clip_model.context_length).to(weight.device)
        with torch.no_grad():
            embedding = clip_model.token_embedding(tokens)
        self.register_buffer("tokens", tokens, persistent=False)
        self.register_buffer("token_prefix", embedding[:, :1], persistent=False)
        self.register_buffer("token_suffix", embedding[:, 1 + n_ctx:], persistent=False)

    @property
    def n_cls(self) -> int:
        return len(self.classnames)

    def prompt_spans(self) -> list[int]:
        """Per class, how many tokens after SOS differ from the plain token embedding of ``tokens``."""
        if self.class_token_position == "end":
            return [self.n_ctx] * self.n_cls
        return [self.n_ctx + n for n in self.name_lens]

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt embeddings [C, context_length, w] (before the positional embedding) and their tokens [C, L]."""
        ctx = self.ctx if self.ctx.dim() == 3 else self.ctx.unsqueeze(0).expand(self.n_cls, -1, -1)
        prefix, suffix = self.token_prefix, self.token_suffix
        if self.class_token_position == "end":
            return torch.cat([prefix, ctx, suffix], dim=1), self.tokens
        half = self.n_ctx // 2
        rows = []
        for i, n in enumerate(self.name_lens):
            name, rest = suffix[i:i + 1, :n], suffix[i:i + 1, n:]
            ctx_i = ctx[i:i + 1]
            if self.class_token_position == "middle":
                parts = [prefix[i:i + 1], ctx_i[:, :half], name, ctx_i[:, half:], rest]
            else:
                parts = [prefix[i:i + 1], name, ctx_i, rest]
            rows.append(torch.cat(parts, dim=1))
        return torch.cat(rows, dim=0), self.tokens

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False):
        """Load ``ctx`` only (upstream's ``UPSTREAM_KEYS`` are dropped); a shape mismatch raises one clear error."""
        state = {k: v for k, v in state_dict.items()
                 if not any(k == key or k.startswith(key + ".") for key in self.UPSTREAM_KEYS)}
        unused = sorted(set(state_dict) - set(state) - set(CoOpPromptLearner.UPSTREAM_KEYS))
        if unused:
            print(f"{self.setting}: left out the checkpoint's {', '.join(unused)} (upstream entries this learner "
                  "does not use)")
        if strict and set(state) != {"ctx"}:
            raise InvalidInputError(f"CoOp prompt-learner checkpoint has keys {sorted(state)}; expected only 'ctx'")
        if "ctx" in state and tuple(state["ctx"].shape) != tuple(self.ctx.shape):
            saved, wanted = tuple(state["ctx"].shape), tuple(self.ctx.shape)
            hint = ("a class-specific (CSC) context only fits the classes it was trained on; train with "
                    f"{self.setting}.CSC False to evaluate on other classes" if len(saved) == 3 else
                    "use the N_CTX / CTX_INIT / CSC settings the context was trained with")
            raise InvalidInputError(f"CoOp checkpoint 'ctx' is a {_describe_ctx(saved)}, but this run builds a "
                                    f"{_describe_ctx(wanted)}; {hint}")
        return super().load_state_dict(state, strict=strict, assign=assign)


def coop_text_features(clip_model: CLIP, learner: CoOpPromptLearner) -> torch.Tensor:
    """L2-normalised float32 text features [C, embed_dim] of the learner's prompts (differentiable in ``ctx``).

    Each class's prompt span (the tokens after SOS that differ from the plain tokens) goes through
    ``CLIP.encode_text(tokens, prompts=[span])``; classes are grouped by span length, one forward per group, and
    the padding after the longest prompt's EOT is skipped (the causal text tower's EOT output ignores it).
    """
    embeddings, tokens = learner()
    tokens = trim_padding(tokens)
    spans = learner.prompt_spans()
    groups: dict[int, list[int]] = {}
    for i, span in enumerate(spans):
        groups.setdefault(span, []).append(i)
    order, chunks = [], []
    for span, members in groups.items():
        index = torch.tensor(members, device=tokens.device)
        chunks.append(clip_model.encode_text(tokens[index], prompts=[embeddings[index, 1:1 + span]]))
        order += members
    features = torch.cat(chunks, dim=0)
    if len(groups) > 1:
        features = features[torch.tensor(order, device=features.device).argsort()]
    return F.normalize(features.float(), dim=-1)


class CoOpTuned:
    """A finished CoOp context as PETR+X's seen branch (a ``ClassScoringModel``): the same generic context around
    any class names, scored against plain CLIP image features."""

    def __init__(self, clip_model: CLIP, ctx: torch.Tensor, class_token_position: str, autocast: Autocast,
                 setting: str = "TRAINER.COOP"):
        self.clip_model, self.ctx, self.autocast = clip_model, ctx, autocast
        self.class_token_position, self.setting = class_token_position, setting

    @classmethod
    def from_checkpoint(cls, clip_model: CLIP, cfg, path: str, autocast: Autocast, ns: str = "COOP") -> CoOpTuned:
        """The context of a checkpoint of CoOp or a variant of namespace ``TRAINER.<ns>`` (ours or upstream's); its
        length is read off the tensor, the class token position is the one the run records, else this config's."""
        state = load_checkpoint(path).get("state_dict", {})
        ctx = state.get("ctx")
        if not torch.is_tensor(ctx) or ctx.dim() not in (2, 3):
            raise InvalidInputError(f"{path} holds no CoOp context 'ctx' (its keys: {sorted(state)[:6]}); give the "
                                    "folder of a CoOp run")
        if ctx.dim() == 3:
            raise InvalidInputError(f"{path} holds a {_describe_ctx(ctx.shape)}, which only fits the classes it was "
                                    f"trained on; train with TRAINER.{ns}.CSC False to score the other classes")
        settings, note = recorded_settings(TunedRun.of_checkpoint(path), ns,
                                           {"CLASS_TOKEN_POSITION": cfg.TRAINER[ns].CLASS_TOKEN_POSITION})
        if note:
            print(note)
        return cls(clip_model, ctx, settings["CLASS_TOKEN_POSITION"], autocast, f"TRAINER.{ns}")

    def class_scorer(self, classnames: Sequence[str]) -> ClassScorer:
        """The context's text features of ``classnames`` (computed here, once) against each image's CLIP features."""
        device = self.clip_model.token_embedding.weight.device
        learner = CoOpPromptLearner(self.clip_model, classnames, self.ctx.shape[0], "", False,
                                    self.class_token_position, self.setting).to(device)
        learner.load_state_dict({"ctx": self.ctx})
        with torch.no_grad(), self.autocast():
            text = coop_text_features(self.clip_model, learner)

        def score(images: torch.Tensor) -> torch.Tensor:
            with self.autocast():
                image = self.clip_model.encode_image(images)
            return cosine_logits(self.clip_model, image, text)

        return score


@TRAINER_REGISTRY.register()
class CoOp(CrossEntropyStep, ClipWeightsCheck, TrainerX):
    """CoOp (Zhou et al., IJCV 2022): only ``prompt_learner.ctx`` is trained, with cross-entropy on the labels.

    Written against its own namespace (``TRAINER.<NS>``), so a variant (KgCoOp) subclasses it with its ``NS`` and its
    users' messages name the keys they set. ``eval_classifier`` holds ``text_classifier()`` while an evaluation runs
    (the context is fixed then).
    """

    NS = "COOP"
    DATA_ROLE = "standard"
    CONFIG_KEYS: KeyTable = {
        "N_CTX": (16, Int(1)),
        "CSC": (False, Bool()),  # class-specific contexts instead of one shared context
        "CTX_INIT": ("", Text()),
        "PREC": ("fp16", PREC_RULE),
        "CLASS_TOKEN_POSITION": ("end", Choice(CLASS_TOKEN_POSITIONS)),
    }
    RECORDED_KEYS = ("N_CTX", "CSC", "CTX_INIT", "CLASS_TOKEN_POSITION")
    LEARNER = CoOpPromptLearner
    LEARNER_NS = ""
    """The namespace holding the prompt learner's settings (RECORDED_KEYS); empty: the trainer's own ``NS``."""
    TUNED_MODEL = MODEL_NAME
    TUNED_BORROWS = ("CLASS_TOKEN_POSITION",)
    """PETR+X reads a finished run's ``TUNED_MODEL`` checkpoint with ``tuned_model``, which takes these keys of the
    trainer's namespace from the config (the context's length comes from its tensor)."""
    eval_classifier: torch.Tensor | None = None

    @classmethod
    def tuned_model(cls, clip_model: CLIP, cfg, path: str, autocast: Autocast) -> CoOpTuned:
        """A finished run's context as PETR+X's seen branch."""
        return CoOpTuned.from_checkpoint(clip_model, cfg, path, autocast, cls.NS)

    def build_model(self) -> None:
        cfg = self.cfg
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        print(f"Building the {type(self).__name__} prompt learner")
        self.prompt_learner = self.context_learner(self.dm.dataset.classnames)
        if cfg.MODEL.INIT_WEIGHTS:
            load_pretrained_weights(self.prompt_learner, cfg.MODEL.INIT_WEIGHTS)
        print(f"Trainable parameters: {count_num_param(self.prompt_learner):,} (the CLIP weights are frozen)")
        self.optim = build_optimizer(self.prompt_learner, cfg.OPTIM)
        self.sched = build_lr_scheduler(self.optim, cfg.OPTIM)
        self.register_model(MODEL_NAME, self.prompt_learner, self.optim, self.sched)

    def context_learner(self, classnames: Sequence[str], csc: bool | None = None) -> CoOpPromptLearner:
        """A CoOp prompt learner over ``classnames`` with the settings of ``TRAINER.<LEARNER_NS or NS>`` (``csc``
        overrides its CSC), on the run's device."""
        ns = self.LEARNER_NS or self.NS
        opts = self.cfg.TRAINER[ns]
        return self.LEARNER(self.clip_model, classnames, opts.N_CTX, opts.CTX_INIT, opts.CSC if csc is None else csc,
                            opts.CLASS_TOKEN_POSITION, f"TRAINER.{ns}").to(self.device)

    def text_classifier(self) -> torch.Tensor:
        """The class text features of the current context (``coop_text_features``, in the run's precision)."""
        with self.autocast():
            return coop_text_features(self.clip_model, self.prompt_learner)

    def model_inference(self, images: torch.Tensor) -> torch.Tensor:
        text = self.eval_classifier if self.eval_classifier is not None else self.text_classifier()
        with self.autocast():
            image = self.clip_model.encode_image(images)
        return cosine_logits(self.clip_model, image, text)

    def before_test(self) -> None:
        """Compute the classifier once for the whole evaluation."""
        super().before_test()
        self.eval_classifier = self.text_classifier()

    def after_test(self) -> None:
        self.eval_classifier = None
        super().after_test()

    def extra_results(self) -> dict:
        learner = self.prompt_learner
        return {**super().extra_results(), "n_ctx": learner.n_ctx, "csc": learner.csc,
                "class_token_position": learner.class_token_position}
