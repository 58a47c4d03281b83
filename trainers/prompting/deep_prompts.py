"""Deep vision-language prompts, the prompting IVLP, PromptSRC and PromptKD share: ``VLPromptLearner`` (learnable
text prompts in text layers 0..J_t-1 and vision prompts in vision layers 0..J_v-1; no CLIP weights), its scoring on a
frozen CLIP (``VLPromptCLIP``), the config keys of its namespace, Gaussian prompt aggregation (PromptSRC's GPA, kept
in the learner's buffers so a resume continues it), and upstream's key layout (``map_upstream_state``: the CLIP
wrapper state upstream IVLP / PromptSRC / PromptKD save) mapped onto our prompt keys.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from clip.classifier import (
    class_prompt_tokens,
)
from clip.model import CLIP
from clip.prompts import DeepPrompts, check_prompt_depth, context_words
from engine.errors import ConfigError, InvalidInputError
from engine.precision import PREC_RULE
from engine.schema import Int, KeyTable, Text

from .learner_state import learner_state
from .scoring import ClassScorer, PromptedCLIP

MODEL_NAME = "VLPromptLearner"

VL_PROMPT_KEYS: KeyTable = {
    "N_CTX_VISION": (4, Int(1)),
    "N_CTX_TEXT": (4, Int(1)),
    "CTX_INIT": ("a photo of a", Text()),
    "PREC": ("fp16", PREC_RULE),
    "PROMPT_DEPTH_VISION": (9, Int(1)),
    "PROMPT_DEPTH_TEXT": (9, Int(1)),
}
"""The deep vision-language prompt keys PromptSRC, PromptKD and IVLP share (upstream's names and defaults)."""

TEXT_KEY, VISION_KEY, GPA_KEY = "text_prompts.prompts.", "vision_prompts.prompts.", "gpa."

_PROMPT_PATTERNS = (
    (re.compile(r"prompt_learner\.ctx"), TEXT_KEY, 0),
    (re.compile(r"text_encoder\.transformer\.resblocks\.(\d+)\.VPT_shallow"), TEXT_KEY, None),
    (re.compile(r"image_encoder\.VPT"), VISION_KEY, 0),
    (re.compile(r"image_encoder\.transformer\.resblocks\.(\d+)\.VPT_shallow"), VISION_KEY, None),
)
REQUIRED = ("prompt_learner.ctx", "image_encoder.VPT")


def is_upstream_layout(state: dict) -> bool:
    """True for a state dict in upstream IVLP / PromptSRC / PromptKD's key layout (``prompt_learner.ctx``)."""
    return "prompt_learner.ctx" in state


def _ignore_reason(key: str) -> str:
    if re.search(r"token_(prefix|suffix)\d*$", key):
        return "class-token buffer (rebuilt from class names)"
    if key.startswith("prompt_learner.ZS_image_encoder."):
        return "frozen zero-shot image tower (ZS_image_encoder)"
    if key.startswith(("image_encoder.", "text_encoder.")) or key == "logit_scale":
        return "frozen CLIP weight (taken from the run's backbone)"
    return "not a prompt of the teacher"


def map_upstream_state(state: dict, where: str) -> tuple[dict[str, torch.Tensor], list[list], Counter]:
    """Our prompt keys (fp32) from a state dict in the key layout of upstream IVLP, PromptSRC and PromptKD (their CLIP
    wrapper's state), the mapped rows and the ignored-key counts. ``prompt_learner.ctx`` → text layer 0,
    ``text_encoder.transformer.resblocks.{i}.VPT_shallow`` → text layer i, ``image_encoder.VPT`` → vision layer 0,
    ``image_encoder.transformer.resblocks.{i}.VPT_shallow`` → vision layer i (fp16 → fp32)."""
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise InvalidInputError(f"{where} lacks required key(s) {missing}: not a PromptSRC/PromptKD teacher "
                                f"checkpoint (its keys start with {sorted({k.split('.')[0] for k in state})[:6]})")
    mapped, rows, ignored = {}, [], Counter()
    for key, value in state.items():
        for pattern, prefix, fixed in _PROMPT_PATTERNS:
            match = pattern.fullmatch(key)
            if match:
                if not torch.is_tensor(value):
                    raise InvalidInputError(f"{where}: {key} is {value!r}, not a tensor")
                target = f"{prefix}{fixed if fixed is not None else int(match.group(1))}"
                mapped[target] = value.detach().float().clone()
                rows.append([key, target, "x".join(map(str, value.shape)), str(value.dtype).replace("torch.", "")])
                break
        else:
            ignored[_ignore_reason(key)] += 1
    for prefix in (TEXT_KEY, VISION_KEY):
        layers = sorted(int(k[len(prefix):]) for k in mapped if k.startswith(prefix))
        if layers != list(range(len(layers))):
            raise InvalidInputError(f"{where}: {prefix.split('_')[0]} prompt layers {layers} are not "
                                    f"0..{len(layers) - 1} (a VPT_shallow layer is missing)")
    rows.sort(key=lambda r: (r[1].split(".")[0], int(r[1].rsplit(".", 1)[1])))
    return mapped, rows, ignored


def gpa_weights(max_epoch: int, mean: float, std: float) -> list[float]:
    """GPA weights w_e ∝ N(e; mean, std) for epochs e = 1..max_epoch, summing to 1 (log space: no underflow)."""
    if std <= 0 or max_epoch < 1:
        raise ValueError(f"GPA needs TRAINER.PROMPTSRC.GPA_STD > 0 and OPTIM.MAX_EPOCH >= 1, got std={std}, "
                         f"max_epoch={max_epoch}")
    epochs = torch.arange(1, max_epoch + 1, dtype=torch.float64)
    return torch.softmax(-0.5 * ((epochs - mean) / std) ** 2, dim=0).tolist()


class GaussianPromptAggregation(nn.Module):
    """Running Σ_e w_e·prompts_e over epochs (PromptSRC's GPA) in buffers, so ``--resume`` continues it."""

    def __init__(self, params: Sequence[torch.Tensor], max_epoch: int, mean: float, std: float):
        super().__init__()
        self.weights = gpa_weights(max_epoch, mean, std)
        for i, p in enumerate(params):
            self.register_buffer(f"sum{i}", torch.zeros(p.shape, dtype=torch.float32, device=p.device))

    def _sums(self) -> list[torch.Tensor]:
        return [getattr(self, f"sum{i}") for i in range(len(self._buffers))]

    def zero_state(self, prefix: str) -> dict[str, torch.Tensor]:
        """Sums at zero under ``prefix`` (e.g. ``gpa.``): what a checkpoint without them (an imported teacher, an
        upstream run, evaluated with --eval-only) starts from."""
        return {prefix + name: torch.zeros_like(total) for name, total in self._buffers.items()}

    @torch.no_grad()
    def accumulate(self, params: Sequence[torch.Tensor], epoch: int) -> None:
        """Add w_{epoch+1}·params (``epoch`` 0-based, as the trainer's ``self.epoch``)."""
        for total, p in zip(self._sums(), params):
            total.add_(p.detach().float(), alpha=self.weights[epoch])

    @torch.no_grad()
    def load_into(self, params: Sequence[torch.Tensor]) -> None:
        """Overwrite ``params`` with the aggregate."""
        for total, p in zip(self._sums(), params):
            p.copy_(total)


def _layers(state_dict: dict, prefix: str) -> list[torch.Tensor]:
    """Tensors ``<prefix>0``, ``<prefix>1``, ... of a state dict, in layer order (stops at the first gap)."""
    layers = []
    while f"{prefix}{len(layers)}" in state_dict:
        layers.append(state_dict[f"{prefix}{len(layers)}"])
    return layers


class VLPromptLearner(nn.Module):
    """PromptSRC's learnable prompts: deep text prompts and deep vision prompts; holds no CLIP weights.

    ``meta`` (backbone, dataset, training class names) travels in the state dict as extra state, so a teacher
    checkpoint says how it was trained. ``enable_gpa`` adds the GPA buffers (training only).
    """

    def __init__(self, text_prompts: DeepPrompts, vision_prompts: DeepPrompts, meta: dict | None = None,
                 setting: str = "TRAINER.PROMPTSRC"):
        super().__init__()
        self.text_prompts = text_prompts
        self.vision_prompts = vision_prompts
        self.meta = dict(meta or {})
        self.setting = setting
        self.gpa: GaussianPromptAggregation | None = None
        # the words of the class prompts before the class name, their first n_ctx tokens learned ("": placeholders):
        # CTX_INIT's words with at most 4 text tokens (clip.prompts.context_words), as the run recorded them when a
        # finished run is read (trainers/prompting/tuned_run.py deep_prompt_words)
        self.prompt_prefix = ""

    @classmethod
    def build(cls, clip_model: CLIP, n_ctx_text: int, n_ctx_vision: int, depth_text: int, depth_vision: int,
              ctx_init: str = "", meta: dict | None = None, setting: str = "TRAINER.PROMPTSRC") -> VLPromptLearner:
        """Fresh prompts for ``clip_model`` (``setting`` names the options in errors). As upstream, a text context of at
        most 4 tokens starts from the first N_CTX_TEXT token embeddings of ``ctx_init``'s words, and the words beyond
        it stay in the class prompts ("a photo of a" with 2 tokens: "X X of a <class>."); a longer one starts at
        random (``clip.prompts.context_words``)."""
        check_prompt_depth(clip_model, "text", depth_text, f"{setting}.PROMPT_DEPTH_TEXT")
        check_prompt_depth(clip_model, "vision", depth_vision, f"{setting}.PROMPT_DEPTH_VISION")
        words = context_words(ctx_init, n_ctx_text)
        if words:
            try:
                text = DeepPrompts.from_text_init(clip_model, words, depth_text, n_ctx=n_ctx_text)
            except ValueError as e:
                raise ConfigError(f"{setting}.CTX_INIT: {e}") from None
        else:
            text = DeepPrompts(n_ctx_text, clip_model.text_width, depth_text)
        vision = DeepPrompts(n_ctx_vision, clip_model.vision_width, depth_vision)
        learner = cls(text, vision, meta, setting)
        learner.prompt_prefix = words
        return learner

    @classmethod
    def from_state_dict(cls, state_dict: dict, where: str) -> VLPromptLearner:
        """Prompts (shapes read off the tensors) from a PromptSRC state dict; ``where`` names it in errors."""
        text, vision = _layers(state_dict, TEXT_KEY), _layers(state_dict, VISION_KEY)
        if not text or not vision:
            raise InvalidInputError(f"{where} holds no PromptSRC prompts (keys {TEXT_KEY}N and {VISION_KEY}N); give "
                                    "a PromptSRC checkpoint or a file written by tools/import_promptkd_teacher.py")
        for kind, layers in (("text", text), ("vision", vision)):
            if any(t.dim() != 2 or t.shape != layers[0].shape for t in layers):
                raise InvalidInputError(f"{where}: {kind} prompts have shapes {[tuple(t.shape) for t in layers]}; "
                                        "every layer must be [n_ctx, width] with the same shape")
        learner = cls(DeepPrompts(*text[0].shape, depth=len(text)), DeepPrompts(*vision[0].shape, depth=len(vision)))
        own = {k: v for k, v in state_dict.items() if k.startswith((TEXT_KEY, VISION_KEY))}
        own["_extra_state"] = state_dict.get("_extra_state", {})
        learner.load_state_dict({k: v.float() if torch.is_tensor(v) else v for k, v in own.items()})
        return learner

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False):
        """Our checkpoints, or upstream IVLP / PromptSRC / PromptKD's CLIP wrapper state (its prompt keys mapped,
        ``map_upstream_state``; the frozen CLIP weights and class-token buffers left out); GPA sums a checkpoint lacks
        start at zero. A checkpoint of other prompt sizes is one error naming the key."""
        state = dict(state_dict)
        if is_upstream_layout(state):
            mapped, _, ignored = map_upstream_state(state, f"{self.setting} checkpoint")
            print(f"{self.setting} prompt learner: upstream checkpoint, left out " + ", ".join(
                f"{n} {reason}" for reason, n in sorted(ignored.items())))
            state = {**mapped, "_extra_state": self.get_extra_state()}
        if self.gpa is not None:
            state = {**self.gpa.zero_state(GPA_KEY), **state}
        state = learner_state(self, state, f"{self.setting} prompt learner", f"use the {self.setting} N_CTX_* / "
                              "PROMPT_DEPTH_* and the CLIP (MODEL.BACKBONE.NAME) the checkpoint was trained with",
                              strict=strict)
        return super().load_state_dict(state, strict=strict, assign=assign)

    def enable_gpa(self, max_epoch: int, mean: float, std: float) -> None:
        """Add Gaussian prompt aggregation over ``max_epoch`` epochs (buffers ``gpa.sumN`` in the state dict)."""
        self.gpa = GaussianPromptAggregation(list(self.parameters()), max_epoch, mean, std)

    def describe(self) -> dict:
        """Prompt sizes as plain values (for reports and the teacher text-feature file)."""
        return {"n_ctx_text": self.text_prompts.n_ctx, "n_ctx_vision": self.vision_prompts.n_ctx,
                "depth_text": self.text_prompts.depth, "depth_vision": self.vision_prompts.depth,
                "text_width": self.text_prompts.width, "vision_width": self.vision_prompts.width}

    def get_extra_state(self) -> dict:
        return dict(self.meta)

    def set_extra_state(self, state: dict) -> None:
        self.meta = dict(state)


class VLPromptCLIP(PromptedCLIP):
    """Deep vision+language prompts' scoring (IVLP's and PromptSRC's): τ · cos(prompted image, prompted text)."""

    prompt_learner: VLPromptLearner

    def prompt_tokens(self, classnames: Sequence[str]) -> torch.Tensor:
        learner = self.prompt_learner
        return class_prompt_tokens(classnames, learner.text_prompts.n_ctx, self.clip_model.context_length,
                                   learner.prompt_prefix)

    def image_features(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised float32 prompted image features [B, D] (with grad)."""
        with self.autocast():
            image = self.clip_model.encode_image(images, self.prompt_learner.vision_prompts())
        return F.normalize(image.float(), dim=-1)

    def text_features(self, classnames: Sequence[str]) -> torch.Tensor:
        """L2-normalised float32 prompted text features [C, D] of ``classnames`` (with grad)."""
        tokens = self.class_tokens(classnames)
        with self.autocast():
            text = self.clip_model.encode_text(tokens, self.prompt_learner.text_prompts())
        return F.normalize(text.float(), dim=-1)

    def class_scorer(self, classnames: Sequence[str]) -> ClassScorer:
        text = self.text_features(classnames)
        scale = self.clip_model.logit_scale.exp().float()
        return lambda images: scale * self.image_features(images) @ text.t()

