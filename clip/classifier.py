"""Text classifiers built from a CLIP's text tower: hand-crafted template ensembles and deep-prompted class names.

``template_ensemble`` is the one implementation of "normalise each template's features, average over the
templates, renormalise" (CoOp's ZeroshotCLIP2, open_clip's zero-shot classifier); ``zeroshot_text_features`` runs it
on this package's CLIP. ``class_prompt_tokens`` / ``prompted_text_features`` are the class-name side of deep text
prompts (PromptSRC, the teacher).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from tqdm import tqdm

from engine.distributed import is_main
from engine.errors import ConfigError

from .clip import tokenize
from .model import CLIP
from .tokenizer import encode


def trim_padding(tokens: torch.Tensor) -> torch.Tensor:
    """Drop the padding columns after the last EOT: the causal text tower's EOT output does not depend on them."""
    return tokens[:, : int(tokens.argmax(dim=-1).max()) + 1]


@torch.no_grad()
def template_ensemble(encode_texts: Callable[[list[str]], torch.Tensor], classnames: Sequence[str],
                      templates: Sequence[str], batch_size: int = 256) -> torch.Tensor:
    """Classifier [C, D] (float32, L2-normalised rows): per-template features normalised, averaged, renormalised.

    ``encode_texts`` maps a list of texts to their features [N, D]; the (class, template) texts go through it in
    batches of ``batch_size``. ``_`` in class names becomes a space.
    """
    if not templates:
        raise ValueError("a template ensemble needs at least one template (e.g. ['a photo of a {}.'])")
    if not classnames:
        raise ValueError("a template ensemble needs at least one class name")
    names = [name.replace("_", " ") for name in classnames]
    texts = [template.format(name) for name in names for template in templates]
    total: torch.Tensor | None = None
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc=f"text features ({len(templates)} templates)",
                      disable=len(starts) <= 1 or not is_main()):
        features = F.normalize(encode_texts(texts[start:start + batch_size]).float(), dim=-1)
        if total is None:
            total = torch.zeros(len(names), features.shape[1], device=features.device)
        owner = torch.arange(len(names), device=features.device).repeat_interleave(len(templates))
        total.index_add_(0, owner[start:start + batch_size], features)
    return F.normalize(total / len(templates), dim=-1)


@torch.no_grad()
def zeroshot_text_features(clip_model: CLIP, classnames: Sequence[str], templates: Sequence[str],
                           device: torch.device | str | None = None, batch_size: int = 256) -> torch.Tensor:
    """``template_ensemble`` on ``clip_model``: one row per class name (float32, L2-normalised).

    Tokens are cut after the batch's longest text (same features, far less work than 77 positions).
    """
    device = clip_model.token_embedding.weight.device if device is None else torch.device(device)

    def encode_texts(texts: list[str]) -> torch.Tensor:
        tokens = tokenize(texts, context_length=clip_model.context_length, truncate=True).to(device)
        return clip_model.encode_text(trim_padding(tokens))

    return template_ensemble(encode_texts, classnames, templates, batch_size)


def class_prompt_tokens(classnames: Sequence[str], n_ctx: int, context_length: int = 77,
                        prefix: str = "") -> torch.Tensor:
    """Tokens of "<prefix> <class name>." per class, the prefix being n_ctx placeholders "X X X X" unless given (the
    words a prompt was initialised from, e.g. "a photo of a"): its first n_ctx tokens are overwritten by the text
    prompts, the rest stay words of the prompt.

    Padding after the last EOT is trimmed (``trim_padding``): the text features are unchanged and the text tower
    runs on ~10-20 instead of 77 positions.
    """
    tokens = tokenize(class_prompts(classnames, n_ctx, prefix), context_length)
    return trim_padding(tokens)


def class_prompts(classnames: Sequence[str], n_ctx: int, prefix: str = "") -> list[str]:
    """The texts "<prefix> <class name>." of ``class_prompt_tokens`` (prefix: n_ctx placeholders "X" unless given)."""
    prefix = prefix.replace("_", " ").strip() or " ".join(["X"] * n_ctx)
    return [f"{prefix} {name.replace('_', ' ')}." for name in classnames]


def fitting_class_prompts(classnames: Sequence[str], n_ctx: int, prefix: str, context_length: int,
                          setting: str) -> list[str]:
    """``class_prompts``, checked to fit the text tower's ``context_length`` tokens: a context of ``n_ctx`` tokens
    (``setting``: the config key and value that chose it) leaving the longest class name no room is refused in one
    line, before anything is trained."""
    prompts = class_prompts(classnames, n_ctx, prefix)
    lengths = [len(encode(text)) + 2 for text in prompts]  # + start and end tokens
    longest = max(range(len(prompts)), key=lengths.__getitem__)
    over = lengths[longest] - context_length
    if over > 0:
        raise ConfigError(f"{setting}: the prompt of the longest class name ({classnames[longest]!r}) then takes "
                          f"{lengths[longest]} tokens, more than this CLIP's context length {context_length}; use at "
                          f"most {n_ctx - over} context tokens")
    return prompts


@torch.no_grad()
def prompted_text_features(clip_model: CLIP, prompts: Sequence[torch.Tensor], classnames: Sequence[str],
                           batch_size: int = 256, prefix: str = "") -> torch.Tensor:
    """L2-normalised float32 text features [C, embed_dim] of ``classnames`` under deep text prompts (no grad), the
    class prompts "<prefix> <class name>." (``class_prompt_tokens``)."""
    device = clip_model.token_embedding.weight.device
    tokens = class_prompt_tokens(classnames, prompts[0].shape[0], clip_model.context_length, prefix).to(device)
    chunks = [clip_model.encode_text(tokens[i:i + batch_size], prompts).float()
              for i in range(0, len(tokens), batch_size)]
    return F.normalize(torch.cat(chunks), dim=-1)
