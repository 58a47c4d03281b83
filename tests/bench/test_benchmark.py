"""bench/benchmark.py on tiny shapes: FLOP counts against hand-computed transformer FLOPs, the full training steps
(the teacher cache removes exactly the teacher's forward), the projection arithmetic and the printed tables."""
from __future__ import annotations

import gc

import pytest
import torch

import clip
from bench import benchmark
from bench.benchmark import SPECS, TRAIN_MODES, InferenceModels, TrainStepModels, count_flops
from bench.benchmark_train import (
    IMAGENET_TRAIN,
    StepSetting,
    build_step,
    step_report,
    write_clip_files,
    write_jpeg_tree,
)

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
                    "--router-fit", "50", "--train-batch", "2", "--train-iters", "1", "--precisions", "fp32",
                    "--compile", "none", "--step-batch", "2", "--epochs", "0"])
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
    for bad in (["--iters", "0"], ["--train-batch", "1"], ["--step-batch", "1"], ["--compile", "fast"]):
        with pytest.raises(SystemExit):
            benchmark.main(bad)


def test_teacher_cache_removes_exactly_the_teacher_forward(tmp_path):
    """The real trainers' steps (built by train.main): with TEACHER_CACHE the step does the online forward's FLOPs
    less exactly the teacher's image forward on its batches (PETR: labelled + unlabelled)."""
    data = write_jpeg_tree(str(tmp_path / "data"), 4, SPEC.student["image_resolution"])
    files = write_clip_files(SPEC, str(tmp_path))
    cpu = torch.device("cpu")
    for trainer_name, n_batches in (("PETR", 2), ("PromptKD", 1)):
        flops, teacher = {}, None
        for cache in (False, True):
            trainer, step = build_step(StepSetting(trainer_name, "fp32", cache=cache), SPEC, files, data,
                                       str(tmp_path / f"{trainer_name}{cache}"), cpu, batch=2)
            flops[cache] = count_flops(step)
            if not cache:
                images = [torch.randn(2, 3, 32, 32) for _ in range(n_batches)]
                teacher = count_flops(trainer.online_teacher_features, images)
        assert teacher > 0 and flops[False] - flops[True] == teacher, trainer_name


def test_train_part_prints_steps_projection_and_epochs(capsys, tmp_path):
    benchmark.main(["train", "--model", "tiny", "--classes", "4", "--train-batch", "2", "--train-iters", "1",
                    "--warmup", "0", "--precisions", "fp32", "amp", "--compile", "none", "--step-batch", "2",
                    "--epochs", "1", "--epoch-images-per-class", "8", "--workers", "0"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    step_rows = [line.split() for line in lines if line.startswith(("PETR", "PromptKD")) and len(line.split()) == 9]
    assert sorted((r[0], r[1], r[3]) for r in step_rows) == sorted(
        (step, prec, cache) for step in ("PETR", "PromptKD") for prec in ("fp32", "amp") for cache in ("off", "on"))
    # the projection is the measured step time times the steps of an ImageNet epoch (batch 2)
    ms = float(next(r for r in step_rows if r[0] == "PETR")[6])
    projected = [line for line in lines if line.startswith("PETR") and f"{IMAGENET_TRAIN // 4:,}" in line]
    assert len(projected) == 4
    days = int(projected[0].split(" day")[0].split()[-1]) if " day" in projected[0] else 0
    h, m, sec = projected[0].split()[-1].split(":")
    seconds = days * 86400 + int(h) * 3600 + int(m) * 60 + int(sec)
    assert seconds == pytest.approx(IMAGENET_TRAIN // 4 * ms / 1e3, abs=1.0)
    # two train.py epochs (persistent workers off / on) of 5 steps: 5 base classes x 4 train images / batch 8 -> 2
    epoch_rows = [line.split() for line in lines if line.split()[:2] == ["1", "0"]]
    assert [row[2] for row in epoch_rows] == ["off", "on"] and all(row[3] == "2" for row in epoch_rows)
    assert "Loading one training image" in out
    assert write_jpeg_tree(str(tmp_path), 1, size=40)  # the tree writer's layout
    assert (tmp_path / "eurosat" / "2750" / "SeaLake" / "SeaLake_1.jpg").is_file()


def test_step_report_frees_each_trainer_before_the_next_row():
    """A PETR trainer and its router refer to each other, so dropping it frees nothing until the cycle collector
    runs: the next row's peak memory would count it. With automatic collection off, none may be left."""
    from trainers.petr import PETR

    gc.disable()
    try:
        rows, _ = step_report(SPEC, torch.device("cpu"), [StepSetting("PETR", "fp32")], 2, 1, 0)
        alive = sum(type(obj) is PETR for obj in gc.get_objects())
    finally:
        gc.enable()
    assert len(rows) == 1 and alive == 0


@pytest.mark.slow
def test_loader_part_prints_per_core_rates_the_cost_models_block_and_epochs(capsys):
    """``benchmark.py loader`` on one small size: a row per loading path with x pil = its rate over the pil row's;
    the printed LOADER_RATES block holds those rates under the paths runner/costs.py projects with; one train.py
    epoch per trainer and setting, whose images are its steps times the images a step loads (PETR 8 + 8)."""
    from bench.loader import EPOCH_SETTINGS, RATE_KEYS
    from runner import costs

    benchmark.main(["loader", "--model", "tiny", "--threads", "1", "--loader-sizes", "64x48", "--loader-images", "2",
                    "--loader-rounds", "1", "--epochs", "1", "--epoch-images-per-class", "4", "--epoch-size", "64x48",
                    "--workers", "0"])
    out = capsys.readouterr().out
    rows = {line[len("64x48"):].rsplit(None, 3)[0].strip(): line.rsplit(None, 3)[1:]
            for line in out.splitlines() if line.startswith("64x48 ")}
    assert set(RATE_KEYS) <= set(rows) and "PIL decode only" in rows and "tensor, no draft" in rows
    pil = float(rows["pil"][0])
    for rate, _, ratio in rows.values():
        assert float(ratio) == pytest.approx(float(rate) / pil, abs=0.01 + 0.01 * float(ratio))
    block = out.split("Paste over runner/costs.py's loader block:\n")[1].split("\n\n")[0]
    names: dict = {}
    exec(block, names)  # noqa: S102 - the block the benchmark printed, as a user pastes it
    assert set(names["LOADER_RATES"]["64x48"]) == set(costs.LOADER_RATES["64x64"]) == set(RATE_KEYS.values())
    for name, key in RATE_KEYS.items():
        assert names["LOADER_RATES"]["64x48"][key] == pytest.approx(float(rows[name][0]), abs=0.5)
    epochs = [line.split() for line in out.splitlines() if line.startswith(("PETR ", "PromptKD "))
              and len(line.split()) == 13]  # the table (the rows printed as measured are indented)
    assert [(r[0], r[1], r[2], r[3]) for r in epochs] == [
        (t, s.cache, s.decoder, "yes" if s.images else "no") for t in ("PETR", "PromptKD") for s in EPOCH_SETTINGS]
    for trainer, cache, *_, build, epoch, steps, images in (r[:8] for r in epochs):
        assert int(images) == int(steps) * (16 if trainer == "PETR" else 8) and int(steps) >= 1
        assert (build == "-") == (cache == "none") and epoch == "1"


def test_photo_like_jpegs_cost_what_photos_cost():
    """The loader benchmark's images: at quality 90 a 500 x 375 one takes 3 to 5 bits per pixel (photos of that size:
    3 to 6), where the smooth images of the step benchmark's tree take under 1."""
    import io

    import numpy as np
    from PIL import Image

    from bench.benchmark_train import photo_like

    def bits_per_pixel(image: Image.Image) -> float:
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=90)
        return 8 * len(buffer.getvalue()) / (image.width * image.height)

    rng = np.random.default_rng(0)
    assert 3 < bits_per_pixel(photo_like(500, 375, rng)) < 5
    smooth = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize((500, 375), Image.BICUBIC)
    assert bits_per_pixel(smooth) < 1
