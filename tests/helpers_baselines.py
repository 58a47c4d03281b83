"""Test helpers for the CoCoOp, MaPLe and IVLP trainers: tiny runs of their shipped configs, a ViT-B/16-shaped CLIP
without weights for parameter counts, and upstream's layout for their checkpoints."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

import train
from clip.model import CLIP
from tools.benchmark import VIT_B16

BASE, NEW = [0, 1, 2], [3, 4]  # the tiny EuroSAT tree: 5 classes, base = the first ceil(5/2)
TINY = ["INPUT.SIZE", "(32, 32)", "DATALOADER.NUM_WORKERS", "0", "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
        "DATALOADER.TEST.BATCH_SIZE", "8", "USE_CUDA", "False", "OPTIM.MAX_EPOCH", "1", "DATASET.NUM_SHOTS", "0"]


def argv(root, out, trainer: str, config: str, backbone: str, subsample: str, *opts: str,
         flags: tuple = ()) -> list[str]:
    """train.py arguments of a tiny EuroSAT run of ``trainer`` with its shipped ``config`` (tiny sizes)."""
    return ["--root", str(root), "--seed", "1", "--trainer", trainer, *flags,
            "--dataset-config-file", "configs/datasets/eurosat.yaml",
            "--config-file", f"configs/trainers/{trainer}/{config}.yaml", "--output-dir", str(out),
            *TINY, "MODEL.BACKBONE.NAME", backbone, "DATASET.SUBSAMPLE_CLASSES", subsample, *opts]


def shipped_options(trainer: str, config: str):
    """``TRAINER.<NS>`` of a shipped config, merged as train.py merges it."""
    args = train.build_parser().parse_args(["--trainer", trainer, "--config-file",
                                            f"configs/trainers/{trainer}/{config}.yaml"])
    cfg = train.setup_cfg(args)
    return cfg, cfg.TRAINER[{"CoCoOp": "COCOOP", "MaPLe": "MAPLE", "IVLP": "IVLP"}[trainer]]


def vit_b16_shell() -> CLIP:
    """A CLIP of ViT-B/16's shapes without weights (meta tensors), but a real token-embedding table (uninitialised
    values), which prompt initialisation from words reads."""
    with torch.device("meta"):
        model = CLIP(**VIT_B16)
    model.token_embedding.to_empty(device="cpu")
    return model


def trainable(module: nn.Module) -> int:
    """Number of trainable parameter values of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def train_batch(images: torch.Tensor, labels: torch.Tensor) -> dict:
    """A training batch as the data loader gives it."""
    return {"img": images, "label": labels, "domain": torch.zeros_like(labels), "index": torch.arange(len(labels))}


def numpy_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean −log softmax(logits)[label], in float64 NumPy."""
    z = logits.double().numpy()
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(labels)), labels.numpy()].mean())


def accuracy(logits: torch.Tensor, labels: torch.Tensor, classes: list[int]) -> float:
    """Top-1 accuracy (%) over ``classes`` (the logits' columns are those classes, in order)."""
    return 100.0 * (torch.tensor(classes)[logits.argmax(dim=1)] == labels).double().mean().item()


def frozen_clip_entries(model: nn.Module, prefix: str, count: int = 3) -> dict[str, torch.Tensor]:
    """A few of the frozen CLIP weights upstream saves beside the prompts (fp16, under ``prefix``)."""
    return {f"{prefix}{k}": v.detach().half() for k, v in list(model.state_dict().items())[:count]}
