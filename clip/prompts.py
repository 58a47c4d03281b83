"""Learnable deep prompts for the frozen CLIP, and batching of several prompt sets into one forward."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from engine.errors import ConfigError

from .clip import tokenize
from .model import CLIP

WORDS_MAX_CTX = 4
"""Upstream MaPLe, IVLP and PromptSRC start a text context of at most this many tokens from CTX_INIT's words and keep
the words beyond it in the class prompt; a longer context starts at random, its prompt all placeholders."""


def context_words(ctx_init: str, n_ctx: int) -> str:
    """The words before the class name of a class prompt whose first ``n_ctx`` tokens are learned, upstream's rule
    (:data:`WORDS_MAX_CTX`): CTX_INIT's words ("a photo of a" with 2 tokens: "of a" stays a word of the prompt), or ""
    (``n_ctx`` placeholders) without words or for a longer context."""
    words = ctx_init.replace("_", " ").strip()
    return words if n_ctx <= WORDS_MAX_CTX else ""


def init_text_embedding(clip_model: CLIP, init_text: str, n_ctx: int | None = None) -> torch.Tensor:
    """Token embeddings [n, width] of ``init_text``'s BPE tokens (``_`` read as a space): all of them, or the first
    ``n_ctx`` (the rest of the words then stay fixed words of the prompt, as in MaPLe and IVLP)."""
    tokens = tokenize(init_text.replace("_", " "), context_length=clip_model.context_length)
    available = int(tokens.argmax(dim=-1)) - 1
    if available < 1:
        raise ValueError(f"prompt init text {init_text!r} has no tokens; give words such as 'a photo of a'")
    n_ctx = available if n_ctx is None else n_ctx
    if not 1 <= n_ctx <= available:
        raise ValueError(f"prompt init text {init_text!r} has {available} tokens, fewer than the {n_ctx} context "
                         "tokens to initialise; use a longer init text, fewer context tokens or no init text")
    weight = clip_model.token_embedding.weight
    with torch.no_grad():
        return clip_model.token_embedding(tokens.to(weight.device))[0, 1:1 + n_ctx].clone()


def check_prompt_depth(clip_model: CLIP, tower: str, depth: int, key: str) -> None:
    """Refuse deep prompts for more layers than the CLIP's ``tower`` ("text" or "vision") has blocks, naming the
    config ``key``, before anything is trained (the encoder would refuse them at the first forward)."""
    layers = clip_model.text_layers if tower == "text" else clip_model.vision_layers
    if not 1 <= depth <= layers:
        raise ConfigError(f"{key} is {depth}, but this CLIP's {tower} transformer has {layers} blocks; use 1 to "
                          f"{layers} (MODEL.BACKBONE.NAME decides the CLIP)")


class DeepPrompts(nn.Module):
    """``depth`` learnable [n_ctx, width] prompt tensors (layer 0 first); ``forward()`` gives the prompts list."""

    def __init__(self, n_ctx: int, width: int, depth: int, init_std: float = 0.02):
        super().__init__()
        if n_ctx < 1 or depth < 1:
            raise ValueError(f"DeepPrompts needs n_ctx >= 1 and depth >= 1, got n_ctx={n_ctx}, depth={depth}")
        self.n_ctx = n_ctx
        self.width = width
        self.depth = depth
        self.prompts = nn.ParameterList([nn.Parameter(torch.randn(n_ctx, width) * init_std) for _ in range(depth)])

    @classmethod
    def from_text_init(cls, clip_model: CLIP, init_text: str, depth: int, init_std: float = 0.02,
                       n_ctx: int | None = None) -> DeepPrompts:
        """Text prompts whose layer 0 is the token embedding of ``init_text`` (e.g. CTX_INIT "a photo of a").

        n_ctx is the number of BPE tokens of ``init_text`` unless given (then its first n_ctx tokens); deeper layers
        start from N(0, init_std).
        """
        embedding = init_text_embedding(clip_model, init_text, n_ctx)
        prompts = cls(embedding.shape[0], clip_model.text_width, depth, init_std)
        with torch.no_grad():
            prompts.prompts[0].copy_(embedding)
        return prompts

    def forward(self) -> list[torch.Tensor]:
        return list(self.prompts)


def stack_prompt_sets(prompt_sets: Sequence[Sequence[torch.Tensor]], batch_sizes: Sequence[int]) -> list[torch.Tensor]:
    """Per-sample prompts for one forward over consecutive sample groups, group i using ``prompt_sets[i]``.

    Each layer's [n_ctx, w] tensor is expanded to its group's size (per-sample [b, n_ctx, w] tensors are kept)
    and the groups are concatenated, so the result is [sum(batch_sizes), n_ctx, w] per layer.
    """
    if len(prompt_sets) != len(batch_sizes):
        raise ValueError(f"{len(prompt_sets)} prompt sets but {len(batch_sizes)} batch sizes; give one size per set")
    depths = {len(s) for s in prompt_sets}
    if len(depths) != 1:
        raise ValueError(f"prompt sets have depths {[len(s) for s in prompt_sets]}; only equal depths can share "
                         "a forward")
    layers = []
    for layer in range(depths.pop()):
        parts = []
        for i, (prompt_set, size) in enumerate(zip(prompt_sets, batch_sizes)):
            p = prompt_set[layer]
            if p.dim() == 3 and p.shape[0] != size:
                raise ValueError(f"prompt set {i} layer {layer} is per sample for {p.shape[0]} samples, "
                                 f"but its batch size is {size}")
            parts.append(p.expand(size, -1, -1) if p.dim() == 2 else p)
        shapes = {tuple(p.shape[1:]) for p in parts}
        if len(shapes) != 1:
            raise ValueError(f"prompt sets differ at layer {layer}: [n_ctx, width] shapes {sorted(shapes)}; "
                             "prompts batched together need the same n_ctx and width")
        layers.append(torch.cat(parts, dim=0))
    return layers
