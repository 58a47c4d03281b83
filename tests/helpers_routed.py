"""Test helpers for the routed trainers (PETR+CoOp, PETR+X): tiny-run settings, routed evaluations recomputed from
open_clip forwards written in the test, and a runner that replays what a scripts/*/*.sh script asks train.py to do."""
from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import clip
from tests.helpers_clip import reference_encode_text
from tests.helpers_datasets import load_images
from tests.helpers_run import ScriptRunner
from trainers.routing import MahalanobisRouter
from trainers.templates import ENSEMBLE_TEMPLATES

BASE, NEW = [0, 1, 2], [3, 4]  # EuroSAT tiny tree: 5 classes, base = first ceil(5/2)
TINY = ["INPUT.SIZE", "(32, 32)", "DATALOADER.NUM_WORKERS", "0", "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
        "DATALOADER.TEST.BATCH_SIZE", "8", "USE_CUDA", "False", "OPTIM.MAX_EPOCH", "2", "DATASET.NUM_SHOTS", "0",
        "OPTIM.LR", "0.5", "TRAIN.PRINT_FREQ", "1"]


def run_argv(root, out, trainer: str, backbone: str, subsample: str, *opts: str, flags: tuple = (),
             config: str = "vit_b16_ctxv1") -> list[str]:
    """train.py arguments of a tiny EuroSAT run of ``trainer`` (CoOp or PETRCoOp, ctxv1 settings)."""
    return ["--root", str(root), "--seed", "1", "--trainer", trainer, *flags,
            "--dataset-config-file", "configs/datasets/eurosat.yaml",
            "--config-file", f"configs/trainers/{trainer}/{config}.yaml", "--output-dir", str(out),
            *TINY, "MODEL.BACKBONE.NAME", backbone, "DATASET.SUBSAMPLE_CLASSES", subsample, *opts]


@torch.no_grad()
def ensemble_reference(model, classnames: list[str], images: torch.Tensor) -> torch.Tensor:
    """θ_u from open_clip: the EuroSAT template ensemble (per-template normalised, averaged, renormalised)."""
    per_template = [F.normalize(model.encode_text(clip.tokenize([t.format(n) for n in classnames])), dim=-1)
                    for t in ENSEMBLE_TEMPLATES["EuroSAT"]]
    ensemble = F.normalize(torch.stack(per_template).mean(0), dim=-1)
    return model.logit_scale.exp() * F.normalize(model.encode_image(images), dim=-1) @ ensemble.t()


def coop_branch(ctx: torch.Tensor) -> Callable:
    """θ_s of a CoOp context from open_clip: the prompt 'ctx <name>.' written by hand."""

    @torch.no_grad()
    def logits(model, classnames: list[str], images: torch.Tensor) -> torch.Tensor:
        tokens = clip.tokenize([f"{' '.join(['X'] * ctx.shape[0])} {name}." for name in classnames])
        coop = F.normalize(reference_encode_text(model, tokens, [ctx]), dim=-1)
        return model.logit_scale.exp() * F.normalize(model.encode_image(images), dim=-1) @ coop.t()

    return logits


def reference_routing(tree, model, seen_branch: Callable, subset: list[int]) -> dict:
    """Routed evaluation done directly: θ_s = ``seen_branch(model, classnames, images)``, θ_u the ensemble, router
    fitted on the base train images, decisions, accuracies."""
    names = tree.classnames

    def branches(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return seen_branch(model, names, images), ensemble_reference(model, names, images)

    fit_s, fit_u = branches(load_images(tree, "train", BASE)[0])
    router = MahalanobisRouter(lam=1.4, percentile=99.0).fit(torch.cat([fit_s, fit_u], 1))
    images, labels = load_images(tree, "test", subset)
    q_s, q_u = branches(images)
    route = router.route_to_seen(torch.cat([q_s, q_u], 1))
    is_seen = torch.isin(labels, torch.tensor(BASE))
    cols = torch.tensor(subset)

    def acc(logits: torch.Tensor) -> float:
        return 100.0 * (cols[logits[:, cols].argmax(1)] == labels).double().mean().item()

    return {"accuracy": acc(torch.where(route[:, None], q_s, q_u)), "acc_seen_branch": acc(q_s),
            "acc_unseen_branch": acc(q_u), "acc_oracle": acc(torch.where(is_seen[:, None], q_s, q_u)),
            "route_acc": 100.0 * (route == is_seen).double().mean().item(), "threshold": router.threshold,
            "q_s": q_s, "q_u": q_u}


def check_against_reference(out, expected: dict) -> dict:
    result = json.loads((out / "results.json").read_text())
    for key in ("accuracy", "acc_seen_branch", "acc_unseen_branch", "acc_oracle", "route_acc"):
        assert result[key] == pytest.approx(expected[key], abs=1e-6), key
    assert result["threshold"] == pytest.approx(expected["threshold"], rel=1e-4)
    dump = torch.load(out / result["logits_dump"], weights_only=True)
    torch.testing.assert_close(dump["q_s"], expected["q_s"], atol=2e-3, rtol=1e-4)
    torch.testing.assert_close(dump["q_u"], expected["q_u"], atol=2e-3, rtol=1e-4)
    return result


def script_runner(tmp_path, tree, backbone: str) -> ScriptRunner:
    """A runner of ``scripts/<method>/<script>`` on the tiny EuroSAT tree (SHOTS 0, the tiny settings, ``backbone``)."""
    return ScriptRunner(tmp_path, {"DATA": tree.root, "OUTPUT_ROOT": str(tmp_path / "output"), "SHOTS": "0",
                                   "BACKBONE": backbone, "EXTRA_OPTS": " ".join(TINY).replace("(32, 32)", "(32,32)")})
