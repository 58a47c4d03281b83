"""tools/benchmark.py on tiny shapes: FLOP counts against hand-computed transformer FLOPs, and the printed tables."""
from __future__ import annotations

import pytest
import torch

import clip
from tools import benchmark
from tools.benchmark import SPECS, TRAIN_MODES, InferenceModels, TrainStepModels, count_flops

SPEC = SPECS["tiny"]
CLASSES = 5


def block_flops(tokens: int, width: int) -> int:
    """One CLIP residual block on one sequence: qkv, out-proj and the 4x MLP (2 per MAC), QKᵀ and AV."""
    linear = 2 * tokens * (3 * width * width + width * width + 2 * 4 * width * width)
    attention = 2 * (2 * tokens * tokens * width)
    return linear + attention


def student_flops_per_image(spec: benchmark.ModelSpec, classes: int) -> int:
    """Prompted image tower + projector (two 1x1 convs) + logits, for one image, counted by hand."""
    s, out = spec.student, spec.teacher["embed_dim"]
    grid = s["image_resolution"] // s["vision_patch_size"]
    tokens = 1 + grid * grid + spec.n_ctx
    patch_embed = 2 * grid * grid * s["vision_width"] * 3 * s["vision_patch_size"] ** 2
    tower = patch_embed + s["vision_layers"] * block_flops(tokens, s["vision_width"])
    tower += 2 * s["vision_width"] * s["embed_dim"]
    projector = 2 * s["embed_dim"] * out + 2 * out * out
    return tower + projector + 2 * out * classes


def text_flops(spec: benchmark.ModelSpec, classes: int, length: int) -> int:
    """The teacher's text tower over ``classes`` prompts of ``length`` tokens, projected at EOT."""
    t = spec.teacher
    return classes * (t["transformer_layers"] * block_flops(length, t["transformer_width"])
                      + 2 * t["transformer_width"] * t["embed_dim"])


@pytest.fixture(scope="module")
def inference_models():
    return InferenceModels(SPEC, CLASSES, torch.device("cpu"), router_fit=200)


@torch.inference_mode()
def test_inference_flops_match_the_hand_count(inference_models):
    models, batch = inference_models, 3
    images = models.images(batch)
    one_branch = student_flops_per_image(SPEC, CLASSES)
    router = 2 * batch * (2 * CLASSES) ** 2  # (q̃ - μ) @ Σ⁻¹, one [B, 2C] x [2C, 2C] product
    assert count_flops(models.promptkd, images) == batch * one_branch
    assert count_flops(models.petr_branches_batched, images) == 2 * batch * one_branch
    assert count_flops(models.petr_branches_two_pass, images) == 2 * batch * one_branch
    assert count_flops(models.petr_batched, images) == 2 * batch * one_branch + router
    assert count_flops(models.router.decide, torch.randn(batch, 2 * CLASSES), CLASSES) == router
    # same answers from one batched forward and from two passes
    torch.testing.assert_close(models.petr_batched(images), models.petr_two_pass(images), rtol=1e-5, atol=1e-4)


def test_training_step_flops_differ_by_the_text_tower_only():
    models = TrainStepModels(SPEC, CLASSES, torch.device("cpu"))
    images = models.images(2)
    flops = {mode: count_flops(models.step, images, mode) for mode in TRAIN_MODES}
    tokens = clip.tokenize([f"X X X X {name}." for name in models.classnames])
    trimmed = int(tokens.argmax(dim=-1).max()) + 1
    assert flops["per_batch"] - flops["once"] == text_flops(SPEC, CLASSES, trimmed)
    assert flops["per_batch_77"] - flops["once"] == text_flops(SPEC, CLASSES, 77)
    assert torch.allclose(models.text_features("per_batch_77"), models.teacher.text_features, atol=1e-5)
    assert all(p.grad is not None for p in models.student.parameters())  # the step trains the student


def test_cli_prints_both_tables(capsys):
    benchmark.main(["--model", "tiny", "--classes", "4", "--batch", "2", "--iters", "1", "--warmup", "0",
                    "--router-fit", "50", "--train-batch", "2", "--train-iters", "1"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    for label in ("PromptKD (one branch)", "PETR two-pass", "PETR batched"):
        assert sum(line.startswith(label) for line in lines) == 2  # batch 1 and batch 2
    assert "router share" in out and "batched <= two-pass" in out and "GFLOPs/image" in out
    assert all(sum(line.startswith(label) for line in lines) == 1 for label in TRAIN_MODES.values())
    benchmark.main(["inference", "--model", "tiny", "--batch", "1", "--iters", "1", "--warmup", "0",
                    "--router-fit", "50"])
    out = capsys.readouterr().out
    assert sum(line.startswith("PETR batched") for line in out.splitlines()) == 1 and "Training step" not in out
    for bad in (["--iters", "0"], ["--train-batch", "1"]):
        with pytest.raises(SystemExit):
            benchmark.main(bad)
