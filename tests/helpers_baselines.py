"""Test helpers for the learners (CoCoOp, MaPLe, IVLP, KgCoOp, CLIP-Adapter): tiny runs of their shipped configs, a
ViT-B/16-shaped CLIP without weights for parameter counts, and upstream's layout for their checkpoints."""
from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import clip
import train
from bench.models import VIT_B16
from clip.model import CLIP
from tests.helpers_clip import reference_encode_image, reference_encode_text, rel_err
from tests.helpers_datasets import Tree, load_images, write_tree
from tests.helpers_run import train_argv
from tests.helpers_upstream import write_dassl_checkpoint
from trainers.catalog import METHODS

EUROSAT_PROMPT = "a centered satellite photo of {}."
"""CoOp's hand-crafted EuroSAT prompt (CLIP-Adapter's class side)."""
BASE, NEW = [0, 1, 2], [3, 4]  # the tiny EuroSAT tree: 5 classes, base = the first ceil(5/2)
SMALL_RUN = ["DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TEST.BATCH_SIZE", "8", "OPTIM.MAX_EPOCH", "1",
             "DATASET.NUM_SHOTS", "0"]  # beside TINY_RUN: small batches, one epoch, every train image


def argv(root, out, trainer: str, config: str, backbone: str, subsample: str, *opts: str,
         flags: tuple = ()) -> list[str]:
    """train.py arguments of a tiny EuroSAT run of ``trainer`` with its shipped ``config`` (tiny sizes)."""
    return train_argv(trainer, config, root, out, *SMALL_RUN, "DATASET.SUBSAMPLE_CLASSES", subsample, *opts,
                      flags=flags, backbone=backbone)


def shipped_options(trainer: str, config: str):
    """``TRAINER.<NS>`` of a shipped config, merged as train.py merges it."""
    args = train.build_parser().parse_args(["--trainer", trainer, "--config-file",
                                            f"configs/trainers/{trainer}/{config}.yaml"])
    cfg = train.setup_cfg(args)
    return cfg, cfg.TRAINER[next(m.ns for m in METHODS.values() if m.trainer == trainer)]


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


def built_trainer(root, trainer: str, config: str, clip_file: str) -> tuple[Tree, object]:
    """A tiny EuroSAT tree under ``root`` and ``trainer`` built on its base classes (not trained), every learned
    tensor drawn from N(0, 0.3) so the prompts are far from their initial values."""
    tree = write_tree("EuroSAT", root / "data", mode="json")
    built = train.main(argv(root / "data", root / "run", trainer, config, clip_file, "base", flags=("--no-train",)))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in built.prompt_learner.parameters():
            p.normal_(std=0.3)
    return tree, built


Reference = Callable[[list[str], torch.Tensor], torch.Tensor]
"""(class names, images) → the reference logits of the trainer's current prompts."""


def deep_prompt_reference(model, text_prompts: list[torch.Tensor], vision_prompts: list[torch.Tensor],
                          template: str = "a photo of a {}.") -> Reference:
    """τ·cos(image, text) on open_clip with deep prompts done by hand: the text prompts at positions 1..n after SOS
    of the class prompt ``template`` ("a photo of a <class>.") before text blocks 0..J_t-1, the vision prompts
    appended to the patch tokens before vision blocks 0..J_v-1 (``tests.helpers_clip``'s reference encoders)."""

    @torch.no_grad()
    def logits(classnames: list[str], images: torch.Tensor) -> torch.Tensor:
        tokens = clip.tokenize([template.format(name) for name in classnames])
        text = F.normalize(reference_encode_text(model, tokens, text_prompts), dim=-1)
        image = F.normalize(reference_encode_image(model, images, vision_prompts), dim=-1)
        return model.logit_scale.exp() * image @ text.t()

    return logits


def adapter_reference(model, down: torch.Tensor, up: torch.Tensor, ratio: float):
    """(class names, images) → τ·cos(mix(image), text): the image features of open_clip through the bottleneck in
    float64 NumPy, ``ratio · relu(relu(f W1ᵀ) W2ᵀ) + (1 − ratio) · f``, against the frozen text features of the
    EuroSAT prompt."""
    w1, w2 = down.detach().double().numpy(), up.detach().double().numpy()

    @torch.no_grad()
    def logits(classnames: list[str], images: torch.Tensor) -> torch.Tensor:
        prompts = [EUROSAT_PROMPT.format(name.replace("_", " ")) for name in classnames]
        text = F.normalize(model.encode_text(clip.tokenize(prompts)), dim=-1)
        f = model.encode_image(images).double().numpy()
        mixed = ratio * np.maximum(np.maximum(f @ w1.T, 0) @ w2.T, 0) + (1 - ratio) * f
        mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
        return (model.logit_scale.exp().double() * torch.from_numpy(mixed) @ text.double().t()).float()

    return logits


def cocoop_reference(model, ctx: torch.Tensor, meta_net: list[tuple[torch.Tensor, torch.Tensor]]) -> Reference:
    """The paper's CoCoOp, image by image: f̂ = f(x)/|f(x)|, π = W2·ReLU(W1·f̂ + b1) + b2 (``meta_net`` = [(W1, b1),
    (W2, b2)]), prompt tokens ctx_m + π after SOS of "a photo of a <class>.", logits τ·cos(f(x), g(prompt_c))."""
    (w1, b1), (w2, b2) = meta_net

    @torch.no_grad()
    def logits(classnames: list[str], images: torch.Tensor) -> torch.Tensor:
        tokens = clip.tokenize([f"a photo of a {name}." for name in classnames])
        rows = []
        for f in F.normalize(model.encode_image(images), dim=-1):
            shift = w2 @ torch.relu(w1 @ f + b1) + b2
            text = F.normalize(reference_encode_text(model, tokens, [ctx + shift]), dim=-1)
            rows.append(model.logit_scale.exp() * f @ text.t())
        return torch.stack(rows)

    return logits


def maple_reference(model, text_prompts: list[torch.Tensor], projections: list[tuple[torch.Tensor, torch.Tensor]],
                    template: str = "a photo of a {}.") -> Reference:
    """τ·cos(image, text) with MaPLe's coupling: text prompts P_j (the first tokens of the class prompt ``template``
    and the same positions before each deeper block), vision prompts W_j·P_j + b_j (``projections`` = [(W_j, b_j)])
    appended to the patch tokens and replaced before each deeper block, j = 0..J-1."""
    vision_prompts = [p @ w.t() + b for p, (w, b) in zip(text_prompts, projections)]
    return deep_prompt_reference(model, text_prompts, vision_prompts, template)


def check_scores(tree: Tree, trainer, reference: Reference) -> None:
    """``class_scorer`` over every class of the tree (base and novel) and ``model_inference`` (the dataset's base
    classes) equal the reference on the test images of every class."""
    images, _ = load_images(tree, "test", BASE + NEW)
    with torch.no_grad():
        every_class = trainer.class_scorer(tree.classnames)(images)
        dataset_classes = trainer.model_inference(images)
    assert every_class.shape == (len(images), 5) and dataset_classes.shape == (len(images), 3)
    assert rel_err(every_class, reference(tree.classnames, images)) < 1e-5
    assert rel_err(dataset_classes, reference(tree.classnames[:3], images)) < 1e-5


def check_cross_entropy_step(tree: Tree, trainer, reference: Reference) -> dict[str, torch.Tensor]:
    """One training step on the base train images: its loss equals NumPy's cross-entropy of the reference logits,
    the CLIP stays frozen and the optimiser holds exactly the learned module (a prompt learner, an adapter); returns its
    state before."""
    images, labels = load_images(tree, "train", BASE)
    expected = numpy_cross_entropy(reference(tree.classnames[:3], images), labels)
    learned = trainer.scoring.learned
    before = {k: v.clone() for k, v in learned.state_dict().items() if torch.is_tensor(v)}
    trainer.batch_idx, trainer.num_batches = 0, 2
    summary = trainer.forward_backward(train_batch(images, labels))
    assert summary["loss"] == pytest.approx(expected, rel=1e-5) and set(summary) == {"loss", "acc"}
    assert not any(p.requires_grad for p in trainer.clip_model.parameters())
    optimised = {id(p) for group in trainer.get_optimizer(trainer.get_model_names()[0]).param_groups
                 for p in group["params"]}
    assert optimised == {id(p) for p in learned.parameters()}
    return before


MARKER = "pickled_code_ran"
"""The folder an upstream checkpoint's scheduler entry would create if its pickled code ran (in the test's tmp_path)."""


def upstream_run(tmp_path, name: str, folder: str, state: dict, epoch: int) -> str:
    """A run folder ``tmp_path/name`` holding ``state`` as upstream saves it: ``<folder>/model.pth.tar-<epoch>`` with
    a scheduler entry whose unpickling would create ``tmp_path/MARKER``."""
    write_dassl_checkpoint(str(tmp_path / name / folder), state, epoch, None, str(tmp_path / MARKER))
    return str(tmp_path / name)


def eval_only(tree: Tree, out, trainer: str, config: str, clip_file: str, model_dir: str, epoch: int,
              *opts: str) -> list[str]:
    """train.py arguments evaluating ``model_dir``'s epoch ``epoch`` on the novel classes (``--eval-only``)."""
    return argv(tree.root, out, trainer, config, clip_file, "new", *opts,
                flags=("--eval-only", "--model-dir", model_dir, "--load-epoch", str(epoch)))


def check_upstream_accuracy(tree: Tree, out, reference: Reference) -> None:
    """The evaluation's results.json accuracy equals the reference's on the novel test images."""
    images, labels = load_images(tree, "test", NEW)
    logits = reference(tree.classnames[3:], images)
    with open(os.path.join(out, "results.json")) as f:
        assert json.load(f)["accuracy"] == pytest.approx(accuracy(logits, labels, NEW))
