"""Precision modes: bf16 (autocast bf16, no grad scaler) beside fp32 / amp / fp16, on CPU; CUDA paths by device type."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import train
from engine import PRECISIONS, autocast, make_grad_scaler, resolve_precision, weight_dtype
from tests.helpers_datasets import write_tree
from tests.test_trainer_coop import coop_argv

LOSS_ATOL = 0.02  # |bf16 loss - fp32 loss| of one CoOp step on the tiny CLIP (measured: 6.3e-3 on 1.51)
GRAD_COSINE = 0.99  # cosine similarity of the bf16 and fp32 context gradients (measured: 0.9992)


@pytest.mark.filterwarnings("ignore:CUDA is not available")  # the CUDA contexts are built, not entered, on CPU
def test_bf16_mode_helpers():
    assert PRECISIONS == ("fp32", "amp", "fp16", "bf16")
    assert resolve_precision("bf16", "cpu") == "bf16"
    a = torch.randn(4, 4)
    with autocast("bf16", "cpu"):
        assert (a @ a).dtype == torch.bfloat16
    assert autocast("bf16", "cuda").fast_dtype == torch.bfloat16 and autocast("amp", "cuda").fast_dtype == torch.float16
    for device in ("cpu", "cuda"):
        assert not make_grad_scaler("bf16", device).is_enabled()
    assert weight_dtype("bf16") is None and weight_dtype("amp") is None and weight_dtype("fp16") == torch.float16


@pytest.fixture(scope="module")
def coop_steps(tmp_path_factory, tiny_clip_file):
    """One CoOp training step from the same initial context on the same batch, in fp32 and in bf16."""
    tmp = tmp_path_factory.mktemp("precision")
    write_tree("EuroSAT", tmp / "data", "json")
    runs, steps = {}, {}
    for prec in ("fp32", "bf16"):
        runs[prec] = train.main(coop_argv(tmp / "data", tmp / prec, tiny_clip_file, "TRAINER.COOP.PREC", prec,
                                          flags=("--no-train",)))
    batch = next(iter(runs["fp32"].train_loader_x))
    for prec, trainer in runs.items():
        trainer.set_model_mode("train")
        trainer.batch_idx, trainer.num_batches = 0, 2
        loss = trainer.forward_backward(batch)["loss"]
        steps[prec] = (loss, trainer.prompt_learner.ctx.grad.detach().clone())
    return runs, steps


def test_bf16_step_is_finite_and_matches_fp32(coop_steps):
    runs, steps = coop_steps
    bf16 = runs["bf16"]
    assert bf16.prec == "bf16" and runs["fp32"].prec == "fp32"
    assert not bf16.scaler.is_enabled()  # bf16 has fp32's exponent range: no loss scaling
    assert bf16.prompt_learner.ctx.dtype == torch.float32  # autocast keeps the parameters in fp32
    (loss16, grad16), (loss32, grad32) = steps["bf16"], steps["fp32"]
    assert math.isfinite(loss16) and torch.isfinite(grad16).all()
    assert grad16.dtype == torch.float32
    assert abs(loss16 - loss32) <= LOSS_ATOL
    assert F.cosine_similarity(grad16.flatten(), grad32.flatten(), dim=0) >= GRAD_COSINE


def test_bf16_autocast_runs_the_clip_in_bf16(coop_steps):
    runs, _ = coop_steps
    trainer = runs["bf16"]
    images = next(iter(trainer.test_loader))["img"][:2]
    with trainer.autocast():
        features = trainer.clip_model.encode_image(images)
    assert features.dtype == torch.bfloat16
    with runs["fp32"].autocast():
        assert runs["fp32"].clip_model.encode_image(images).dtype == torch.float32
