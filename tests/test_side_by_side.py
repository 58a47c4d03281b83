"""What the side-by-side benchmark needs of tools/benchmark_train.py: the class-count tree and the trainers'
arguments and build on the shared inputs (tools/side_by_side_inputs.py)."""
from __future__ import annotations

import os

import torch

from tests.helpers_run import REPO
from tools.bench_models import SPECS
from tools.benchmark_train import StepSetting, build_trainer, fixed_step, trainer_argv, tree_classes, write_jpeg_tree
from tools.side_by_side_inputs import write_inputs

SPEC = SPECS["tiny_upstream"]
CPU = torch.device("cpu")


def test_tree_has_the_asked_class_folders(tmp_path):
    assert tree_classes(3) == ["AnnualCrop", "Forest", "HerbaceousVegetation"]
    assert tree_classes(12)[9:] == ["SeaLake", "Class0010", "Class0011"]
    write_jpeg_tree(str(tmp_path), 4, size=32, classes=12)
    root = tmp_path / "eurosat" / "2750"
    assert sorted(os.listdir(root)) == sorted(["AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial",
                                               "Pasture", "PermanentCrop", "Residential", "River", "SeaLake",
                                               "Class0010", "Class0011"])
    assert sorted(os.listdir(root / "Class0011")) == [f"Class0011_{i}.jpg" for i in (1, 2, 3, 4)]


def test_trainer_argv_takes_the_shared_inputs(tmp_path):
    files = {"student": "/in/clip/ViT-B-16.pt", "teacher": "/in/clip/ViT-L-14.pt", "teacher_ckpt": "/in/t.pth.tar"}
    argv = trainer_argv("PETR", SPEC, files, "/data", "/out", CPU, "bf16", "K", "V", subsample="all")
    assert argv == [
        "--root", "/data", "--seed", "1", "--trainer", "PETR", "--no-train",
        "--dataset-config-file", f"{REPO}/configs/datasets/eurosat.yaml",
        "--config-file", f"{REPO}/configs/trainers/PETR/vit_b16_ep40_batch8_4ctx.yaml", "--output-dir", "/out",
        "INPUT.SIZE", "(32, 32)", "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "all",
        "MODEL.BACKBONE.NAME", "/in/clip/ViT-B-16.pt", "TRAINER.PETR.TEACHER_NAME", "/in/clip/ViT-L-14.pt",
        "TRAINER.PETR.TEACHER_CKPT", "/in/t.pth.tar", "TRAINER.PETR.N_CTX_VISION", "4",
        "TRAINER.PETR.PROMPT_DEPTH_VISION", "3", "TRAINER.PETR.PREC", "bf16", "USE_CUDA", "False", "K", "V"]
    without = trainer_argv("PromptKD", SPEC, {"student": "s", "teacher": "t"}, "/d", "/o", CPU, "fp32")
    assert "TRAINER.PROMPTKD.TEACHER_CKPT" not in without
    assert without[without.index("DATASET.SUBSAMPLE_CLASSES") + 1] == "base"


def test_trainer_on_the_shared_inputs_and_a_class_count(tmp_path):
    """PromptKD built on a 12-class tree and write_inputs' files: the teacher has 12 classes and the checkpoint's
    prompts; fixed_step steps the first images of one loader batch."""
    files = write_inputs(str(tmp_path / "in"), SPEC)
    data = write_jpeg_tree(str(tmp_path / "data"), 4, size=32, classes=12)
    trainer = build_trainer(StepSetting("PromptKD", "fp32"), SPEC, files, data, str(tmp_path / "out"), CPU, 6,
                            subsample="all")
    # the reader sorts the folders and renames EuroSAT's (CoOp's names)
    assert trainer.teacher.classnames[:4] == ["Annual Crop Land", "Class0010", "Class0011", "Forest"]
    assert len(trainer.teacher.classnames) == 12
    assert tuple(trainer.text_features.shape) == (12, 768)
    saved = torch.load(files["teacher_ckpt"], weights_only=True)["state_dict"]
    assert torch.equal(trainer.teacher.prompts.vision_prompts()[0], saved["image_encoder.VPT"].float())
    assert len(trainer.test_loader.dataset) == 12  # one test image per class of 4
    step = fixed_step(trainer, 2)
    full = fixed_step(trainer)
    assert step.args[0]["img"].shape[0] == 2 and full.args[0]["img"].shape[0] == 6
    assert {len(value) for value in step.args[0].values()} == {2}  # images, labels, indices, paths alike
