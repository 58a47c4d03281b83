"""Contrastive pretraining of the demo's tiny CLIPs (student and teacher sizes), saved in OpenAI's format.

Symmetric InfoNCE where every same-class image/caption pair in the batch is a positive (soft targets), on a
fresh stream of pretraining-style images of all 48 classes and varied captions (``demo.captions``), as web-scale
CLIP knows every concept. Models are open_clip CLIPs with QuickGELU, whose state dicts carry OpenAI's key names,
so ``clip.load_model(<file>)`` reads the saved file. The text tower keeps OpenAI's 77 positions; training feeds only
the tokens up to the longest caption of a batch, which is exact under the causal mask and much faster.

The teacher is wider (192 vs 128, embedding 256 vs 128) and pretrained under random lighting
(``shapes.PRETRAIN_RELIT``); the student sees neutral light only, so the downstream images' dim warm light costs
it zero-shot accuracy that prompts can win back (the teacher's guidance wins back little of it: docs/demo.md, the
transfer study).

Command line: ``python -m demo.pretrain --size student`` (cached in ``demo_cache/``; skipped when cached).
"""
from __future__ import annotations

import argparse
import hashlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

if __name__ == "__main__":  # process-wide, so only as a program; read when torch loads, hence before the imports below
    from demo.kernels import set_process_env

    set_process_env()

import numpy as np
import open_clip
import torch
import torch.nn.functional as F
from tqdm import tqdm

from demo.captions import PRETRAIN_TEMPLATES, pretraining_captions
from demo.evaluate import print_zero_shot, quick_check
from demo.shapes import GENERATOR_VERSION, PRETRAIN, PRETRAIN_RELIT, Style, sample_batch, to_model_input
from engine.atomic import atomic_write
from engine.utils import read_json, write_json

CONTEXT_LENGTH = 77
VOCAB_SIZE = 49408
DEFAULT_CACHE = "demo_cache"


@dataclass(frozen=True)
class TinyClipSpec:
    """Architecture of a tiny ViT CLIP (heads = width // 64, as OpenAI's build_model infers)."""

    embed_dim: int
    image_size: int
    patch_size: int
    vision_width: int
    vision_layers: int
    text_width: int
    text_layers: int


SPECS: dict[str, TinyClipSpec] = {
    "student": TinyClipSpec(embed_dim=128, image_size=32, patch_size=8, vision_width=128, vision_layers=4,
                            text_width=128, text_layers=3),
    "teacher": TinyClipSpec(embed_dim=256, image_size=32, patch_size=8, vision_width=192, vision_layers=4,
                            text_width=192, text_layers=3),
    "student_wide": TinyClipSpec(embed_dim=128, image_size=32, patch_size=8, vision_width=192, vision_layers=4,
                                 text_width=128, text_layers=3),
}
"""``student_wide`` (the transfer study's, ``bench.demo_transfer``) has a vision tower as wide as its patch holds values
(8 x 8 x 3 = 192), as ViT-B/16's (768 for 768) and ViT-L/14's (1024 for 588) are; the demo's student maps each
patch's 192 values to 128."""


@dataclass(frozen=True)
class PretrainParams:
    """Everything a pretrained tiny CLIP depends on; its digest names the cached file."""

    size: str = "student"
    steps: int = 400
    batch_size: int = 128
    captions_per_class: int = 1
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup_frac: float = 0.05
    seed: int = 1
    style: Style = PRETRAIN
    generator_version: int = GENERATOR_VERSION

    def digest(self) -> str:
        text = repr((sorted(asdict(self).items()), asdict(SPECS[self.size]), PRETRAIN_TEMPLATES))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_open_clip(spec: TinyClipSpec) -> open_clip.CLIP:
    """A randomly initialised open_clip CLIP (QuickGELU, OpenAI key names) of the given tiny size."""
    return open_clip.CLIP(
        embed_dim=spec.embed_dim,
        quick_gelu=True,
        vision_cfg=dict(image_size=spec.image_size, patch_size=spec.patch_size, width=spec.vision_width,
                        layers=spec.vision_layers, head_width=64),
        text_cfg=dict(context_length=CONTEXT_LENGTH, vocab_size=VOCAB_SIZE, width=spec.text_width,
                      heads=spec.text_width // 64, layers=spec.text_layers),
    )


def initial_model(spec: TinyClipSpec, seed: int) -> open_clip.CLIP:
    """The tiny CLIP as pretraining starts it: torch seeded with ``seed``, then built (the rows of the token
    embedding that pretraining never trains keep these values, so ``demo.compact`` rebuilds them from here)."""
    torch.manual_seed(seed)
    return build_open_clip(spec)


def caption_tokens() -> torch.Tensor:
    """Token ids of every pretraining caption, ``[classes, captions per class, 77]`` (open_clip's tokenizer)."""
    captions = pretraining_captions()
    tokens = open_clip.get_tokenizer("ViT-B-16")([c for row in captions for c in row])
    return tokens.view(len(captions), len(captions[0]), -1)


def encode_text_trimmed(model: open_clip.CLIP, tokens: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """open_clip's text features for tokens cut after the last EOT of the batch (exact: the mask is causal).

    ``rows`` (same shape as ``tokens``) index ``model.token_embedding`` when it holds only the used vocabulary.
    """
    length = int(tokens.argmax(dim=-1).max()) + 1
    rows = (tokens if rows is None else rows)[:, :length]
    tokens = tokens[:, :length]
    x = model.token_embedding(rows) + model.positional_embedding[:length]
    x = model.transformer(x, attn_mask=model.attn_mask[:length, :length])
    x = model.ln_final(x)[torch.arange(tokens.shape[0]), tokens.argmax(dim=-1)]
    return x @ model.text_projection


def same_class_infonce(image_features: torch.Tensor, image_labels: torch.Tensor, text_features: torch.Tensor,
                       text_labels: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE whose targets spread uniformly over all same-class image/caption pairs of the batch.

    Image-to-text rows need at least one caption of their class; text-to-image rows without a same-class image
    in the batch are left out.
    """
    logits = logit_scale * F.normalize(image_features, dim=-1) @ F.normalize(text_features, dim=-1).t()
    same = (image_labels[:, None] == text_labels[None, :]).float()
    image_to_text = F.cross_entropy(logits, same / same.sum(dim=1, keepdim=True))
    has_image = same.sum(dim=0) > 0
    same_t = same.t()[has_image]
    text_to_image = F.cross_entropy(logits.t()[has_image], same_t / same_t.sum(dim=1, keepdim=True))
    return 0.5 * (image_to_text + text_to_image)


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only (not on norms, biases, embeddings or the logit scale)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        skip = p.ndim < 2 or "embedding" in name or name == "logit_scale"
        (no_decay if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _lr_factor(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def pretrain(params: PretrainParams, verbose: bool = True, hook: Callable[[int, open_clip.CLIP], None] | None = None,
             hook_every: int = 0) -> dict[str, torch.Tensor]:
    """Train a tiny CLIP from scratch; returns its OpenAI-format float32 state dict.

    ``hook(step, model)`` (e.g. an evaluation) runs every ``hook_every`` steps on the model with its full vocabulary.
    """
    spec = SPECS[params.size]
    model = initial_model(spec, params.seed).train()
    rng = np.random.default_rng(params.seed)
    table = caption_tokens()
    # Train only the embedding rows of tokens that occur (AdamW on all 49408 rows would dominate each step).
    used = torch.unique(table)
    rows_table = torch.searchsorted(used, table)
    full_embedding = model.token_embedding
    model.token_embedding = torch.nn.Embedding.from_pretrained(full_embedding.weight[used].clone(), freeze=False)

    def with_full_vocabulary() -> torch.nn.Embedding:
        """Write the trained rows into the full embedding and put it back; returns the small one."""
        with torch.no_grad():
            full_embedding.weight[used] = model.token_embedding.weight
        trained = model.token_embedding
        model.token_embedding = full_embedding
        return trained

    optimizer = torch.optim.AdamW(_param_groups(model, params.weight_decay), lr=params.lr, betas=(0.9, 0.98),
                                  eps=1e-6)
    warmup = max(1, round(params.warmup_frac * params.steps))
    bar = tqdm(range(params.steps), desc=f"Pretraining tiny CLIP ({params.size})", disable=not verbose)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = params.lr * _lr_factor(step, params.steps, warmup)
        images, labels = sample_batch(rng, params.batch_size, spec.image_size, params.style)
        classes = torch.arange(table.shape[0]).repeat(params.captions_per_class)
        pick = (classes, torch.from_numpy(rng.integers(0, table.shape[1], size=len(classes))))
        text_features = encode_text_trimmed(model, table[pick], rows_table[pick])
        loss = same_class_infonce(model.encode_image(to_model_input(images)), torch.from_numpy(labels),
                                  text_features, classes, model.logit_scale.exp())
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite pretraining loss at step {step}; lower --lr")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}", scale=f"{model.logit_scale.exp().item():.1f}")
        if hook is not None and hook_every and (step + 1) % hook_every == 0:
            trained = with_full_vocabulary()
            hook(step + 1, model.eval())
            model.train().token_embedding = trained
    with_full_vocabulary()
    return {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}


def default_path(params: PretrainParams, cache_dir: str = DEFAULT_CACHE) -> str:
    """Cache file of a pretrained tiny CLIP, named by size and parameter digest."""
    return os.path.join(cache_dir, f"tinyclip-{params.size}-{params.digest()}.pt")


def _sidecar(path: str) -> str:
    return path + ".json"


def is_cached(path: str, params: PretrainParams) -> bool:
    """True when ``path`` exists and its sidecar JSON records the same parameter digest."""
    sidecar = _sidecar(path)
    return os.path.isfile(path) and os.path.isfile(sidecar) and read_json(sidecar).get("digest") == params.digest()


def save_state_dict(state_dict: dict[str, torch.Tensor], path: str, params: PretrainParams,
                    seconds: float | None = None) -> None:
    """Write the state dict atomically (``engine.atomic``), then its sidecar JSON with the parameters and the
    pretraining's seconds and threads."""
    atomic_write(path, lambda f: torch.save(state_dict, f), binary=True)
    write_json({"digest": params.digest(), "params": asdict(params), "spec": asdict(SPECS[params.size]),
                "seconds": None if seconds is None else round(seconds, 1), "threads": torch.get_num_threads()},
               _sidecar(path))


def cached_pretraining(params: PretrainParams, cache_dir: str) -> tuple[dict[str, torch.Tensor], dict] | None:
    """The state dict and sidecar record of ``params`` pretrained earlier into ``cache_dir``; None when absent."""
    path = default_path(params, cache_dir)
    if not is_cached(path, params):
        return None
    return torch.load(path, map_location="cpu", weights_only=True), read_json(_sidecar(path))


def pretrained_path(params: PretrainParams, out: str | None = None, force: bool = False, verbose: bool = True,
                    hook: Callable[[int, open_clip.CLIP], None] | None = None, hook_every: int = 0) -> str:
    """Path of the pretrained tiny CLIP for ``params``, pretraining and saving it first unless cached."""
    path = out or default_path(params)
    if not force and is_cached(path, params):
        if verbose:
            print(f"Tiny CLIP ({params.size}) already pretrained: {path}")
        return path
    start = time.time()
    state_dict = pretrain(params, verbose=verbose, hook=hook, hook_every=hook_every)
    save_state_dict(state_dict, path, params, time.time() - start)
    if verbose:
        print(f"Saved tiny CLIP ({params.size}) to {path} after {time.time() - start:.0f} s")
    return path


def main(argv: list[str] | None = None) -> None:
    """Command line: pretrain (or find cached) a tiny CLIP and print its zero-shot accuracy on the demo test set."""
    parser = argparse.ArgumentParser(description="Pretrain a tiny CLIP for the built-in demo.")
    parser.add_argument("--size", choices=sorted(SPECS), default="student")
    parser.add_argument("--out", help=f"output file (default: {DEFAULT_CACHE}/tinyclip-<size>-<digest>.pt)")
    parser.add_argument("--steps", type=int, help="optimiser steps (default: per size)")
    parser.add_argument("--batch-size", type=int, default=PretrainParams.batch_size)
    parser.add_argument("--lr", type=float, default=PretrainParams.lr)
    parser.add_argument("--seed", type=int, default=PretrainParams.seed)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--force", action="store_true", help="pretrain even when a cached file matches")
    parser.add_argument("--no-eval", action="store_true", help="skip the final zero-shot evaluation")
    parser.add_argument("--eval-every", type=int, default=0, metavar="N",
                        help="print a quick zero-shot check (10 test images per class) every N steps")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    params = default_params(args.size)
    params = replace(params, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                     steps=args.steps if args.steps else params.steps)
    path = pretrained_path(params, args.out, force=args.force, hook=quick_check, hook_every=args.eval_every)
    if not args.no_eval:
        print_zero_shot(path)
    print(path)


def default_params(size: str) -> PretrainParams:
    """The demo's pretraining parameters for ``size``: the teacher trains longer, on the relit stream."""
    if size not in SPECS:
        raise ValueError(f"unknown tiny CLIP size {size!r}; expected one of {sorted(SPECS)}")
    if size == "teacher":
        return PretrainParams(size=size, steps=500, style=PRETRAIN_RELIT)
    return PretrainParams(size=size, steps=400, style=PRETRAIN)


SHIPPED: dict[str, PretrainParams] = {
    "student": PretrainParams(size="student_wide", steps=400, style=PRETRAIN),
    "teacher": PretrainParams(size="teacher", steps=500, style=PRETRAIN_RELIT),
}
"""The design of the tiny CLIPs the repository ships (``demo/weights``, ``demo.shipped``), by role."""
PRETRAIN_THREADS = 2
"""Torch threads of a pretraining whose result is kept: the float sums, hence the weights, depend on the count."""


if __name__ == "__main__":
    main()
