"""PromptKD student trainer: parameter count, KD wiring, loss decrease, end-to-end run and exact eval-only reload."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import train
from clip.model import CLIP
from engine import load_checkpoint
from tests.helpers_datasets import write_tree
from tests.helpers_run import train_argv
from trainers.distillation.student import VisualPromptStudent

COLOURS = [(220, 30, 30), (30, 200, 40), (40, 50, 210), (230, 220, 40), (200, 40, 220)]


def write_colour_eurosat(root) -> object:
    """Tiny EuroSAT tree (5 classes, 3 train / 2 val / 2 test each) whose images are noisy class colours."""
    tree = write_tree("EuroSAT", root, mode="json")
    rng = np.random.default_rng(0)
    for path, (label, _) in tree.truth.items():
        pixels = np.clip(np.array(COLOURS[label])[None, None] + rng.integers(-20, 21, (8, 8, 3)), 0, 255)
        Image.fromarray(pixels.astype(np.uint8)).save(path, format="JPEG")
    return tree


def promptkd_argv(root, out, student_file: str, teacher_file: str, *extra: str, flags: tuple = ()) -> list[str]:
    """train.py arguments of a tiny PromptKD run (``flags`` such as --eval-only go before the KEY VALUE opts)."""
    return train_argv("PromptKD", "vit_b16_c2_ep20_batch8_4+4ctx", root, out, "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
                      "DATALOADER.TEST.BATCH_SIZE", "8", "OPTIM.MAX_EPOCH", "2", "TRAINER.PROMPTKD.TEACHER_NAME",
                      teacher_file, "TRAINER.PROMPTKD.KD_WEIGHT", "1000.0", "DATASET.NUM_SHOTS", "0", *extra,
                      flags=flags, backbone=student_file)


@pytest.mark.parametrize("depth,expected", [(9, 1_013_760), (3, 995_328)])
def test_vit_b16_student_has_promptkd_parameter_count(depth, expected):
    # ViT-B/16 sizes (OpenAI), built on the meta device: shapes only, no weights.
    with torch.device("meta"):
        clip_model = CLIP(embed_dim=512, image_resolution=224, vision_layers=12, vision_width=768, vision_patch_size=16,
                          context_length=77, vocab_size=49408, transformer_width=512, transformer_heads=8,
                          transformer_layers=12)
        student = VisualPromptStudent(clip_model, n_ctx=4, depth=depth, out_dim=768)  # ViT-L/14 teacher width
    assert sum(p.numel() for p in student.parameters() if p.requires_grad) == expected  # PromptKD's count


def test_promptkd_first_step_loss_is_kd_of_teacher_and_student_logits(tmp_path, tiny_clip_file,
                                                                      tiny_teacher_clip_file):
    write_colour_eurosat(tmp_path / "data")
    trainer = train.main(promptkd_argv(tmp_path / "data", tmp_path / "out", tiny_clip_file, tiny_teacher_clip_file,
                                       "TRAINER.PROMPTKD.TEMPERATURE", "2.0", flags=("--no-train",)))
    # the frozen CLIP and the teacher have no trainable parameters; the optimiser holds exactly the student's
    assert not any(p.requires_grad for p in trainer.clip_model.parameters())
    assert not any(p.requires_grad for p in trainer.teacher.parameters())
    optim_params = {id(p) for g in trainer.get_optimizer("VLPromptLearner").param_groups for p in g["params"]}
    assert optim_params == {id(p) for p in trainer.student.parameters()}
    assert trainer.dm.dataset.splits.role == "distill_all" and len(trainer.dm.dataset.train_x) == 15  # all 5 classes

    batch = next(iter(trainer.train_loader_x))
    images = batch["img"]
    trainer.set_model_mode("train")
    with torch.no_grad():
        teacher_logits = trainer.teacher(images)  # the teacher's own forward over all classes
        prompts = trainer.student.prompt()
        features = trainer.clip_model.encode_image(images, prompts=prompts)
        student = F.normalize(trainer.student.projector(features), dim=-1)
        student_logits = trainer.clip_model.logit_scale.exp() * student @ trainer.teacher.text_features.t()
    tau = 2.0
    p_t = torch.softmax(teacher_logits / tau, dim=1)
    kl = (p_t * (torch.log(p_t) - torch.log_softmax(student_logits / tau, dim=1))).sum()
    expected = 1000.0 * kl * tau**2 / student_logits.numel()

    # the teacher's text tower must not run during training (its text features were computed once)
    def no_text(*args, **kwargs):
        raise AssertionError("teacher text features recomputed during a training step")

    trainer.teacher.clip_model.encode_text = no_text
    trainer.batch_idx, trainer.num_batches = 0, len(trainer.train_loader_x)
    summary = trainer.forward_backward(batch)
    assert summary["loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_promptkd_loss_decreases_on_separable_task(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    write_colour_eurosat(tmp_path / "data")
    trainer = train.main(promptkd_argv(
        tmp_path / "data", tmp_path / "out", tiny_clip_file, tiny_teacher_clip_file,
        "INPUT.TRANSFORMS", "['normalize']", "DATALOADER.TRAIN_X.BATCH_SIZE", "16", "OPTIM.WARMUP_EPOCH", "0",
        flags=("--no-train",)))
    batch = next(iter(trainer.train_loader_x))  # all 15 images, no random augmentation
    trainer.set_model_mode("train")
    trainer.batch_idx, trainer.num_batches = 0, 2  # not the last batch: the lr stays at 0.005
    losses = [trainer.forward_backward(batch)["loss"] for _ in range(8)]
    assert max(losses[-3:]) < 0.3 * losses[0], losses


def test_promptkd_trains_evaluates_and_reloads_exactly(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    write_colour_eurosat(tmp_path / "data")
    out = tmp_path / "out"
    trainer = train.main(promptkd_argv(tmp_path / "data", out, tiny_clip_file, tiny_teacher_clip_file,
                                       "DATASET.SUBSAMPLE_CLASSES", "base"))
    base_ids = [0, 1, 2]
    assert trainer.dm.dataset.splits.eval_labels == base_ids
    assert set(trainer.evaluator.y_pred) <= set(base_ids)  # argmax restricted to the evaluated classes
    results = json.loads((out / "results.json").read_text())
    assert results["trainer"] == "PromptKD" and results["subsample_classes"] == "base"
    log = (out / "log.txt").read_text()
    assert "Finish training" in log and f"* accuracy: {results['accuracy']:.2f}%" in log
    ckpt = load_checkpoint(str(out / "VLPromptLearner" / "model.pth.tar-2"))
    assert all(k.startswith(("prompt.", "projector.")) for k in ckpt["state_dict"])  # student only, no CLIP

    reloaded = train.main(promptkd_argv(tmp_path / "data", tmp_path / "eval", tiny_clip_file, tiny_teacher_clip_file,
                                        "DATASET.SUBSAMPLE_CLASSES", "base",
                                        flags=("--eval-only", "--model-dir", str(out), "--load-epoch", "2")))
    again = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert again["accuracy"] == results["accuracy"] and again["macro_f1"] == results["macro_f1"]
    assert reloaded.evaluator.y_pred == trainer.evaluator.y_pred

    novel = train.main(promptkd_argv(tmp_path / "data", tmp_path / "new", tiny_clip_file, tiny_teacher_clip_file,
                                     "DATASET.SUBSAMPLE_CLASSES", "new",
                                     flags=("--eval-only", "--model-dir", str(out), "--load-epoch", "2")))
    assert set(novel.evaluator.y_true) == {3, 4} and set(novel.evaluator.y_pred) <= {3, 4}
    assert os.path.isfile(tmp_path / "new" / "results.json")
