"""IVLP against the paper's equations on a tiny CLIP (open_clip forwards with independent deep prompts written by
hand), its loss against NumPy (cross-entropy alone: no PromptSRC term), its parameter count against upstream's
construction, and upstream checkpoints (the whole CLIP wrapper's state) evaluated."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import clip
import train
from tests.helpers_baselines import (
    BASE,
    NEW,
    accuracy,
    argv,
    frozen_clip_entries,
    numpy_cross_entropy,
    shipped_options,
    train_batch,
    trainable,
    vit_b16_shell,
)
from tests.helpers_clip import reference_encode_image, reference_encode_text, rel_err
from tests.helpers_datasets import load_images, write_tree
from tests.helpers_upstream import write_dassl_checkpoint
from trainers.ivlp import IVLPPromptLearner

CONFIG = "vit_b16_c2_ep20_batch8_4+4ctx"


def upstream_parameter_count(n_text: int, n_vision: int, depth_text: int, depth_vision: int,
                             text_width: int = 512, vision_width: int = 768) -> int:
    """Upstream IVLP: ``prompt_learner.ctx`` [n_text, 512] + a ``VPT_shallow`` [n_text, 512] in text blocks
    1..depth_text−1; ``image_encoder.VPT`` [n_vision, 768] + a ``VPT_shallow`` [n_vision, 768] in vision blocks
    1..depth_vision−1 (the parameters its trainer leaves trainable: names with "prompt_learner" or "VPT")."""
    return depth_text * n_text * text_width + depth_vision * n_vision * vision_width


@pytest.mark.parametrize("config", ["vit_b16_c2_ep20_batch8_4+4ctx", "vit_b16_c2_ep20_batch4_4+4ctx"])
def test_trainable_parameters_of_the_vit_b16_configs_equal_upstreams(config):
    assert upstream_parameter_count(4, 4, 9, 9) == 46_080
    _, opts = shipped_options("IVLP", config)
    learner = IVLPPromptLearner.build(vit_b16_shell(), opts.N_CTX_TEXT, opts.N_CTX_VISION, opts.PROMPT_DEPTH_TEXT,
                                      opts.PROMPT_DEPTH_VISION, opts.CTX_INIT)
    assert trainable(learner) == 46_080


@torch.no_grad()
def reference_logits(model, learner: IVLPPromptLearner, classnames: list[str], images: torch.Tensor):
    """τ·cos(image, text) with the text prompts at positions 1..n after SOS (blocks 0..J_t−1) and the vision prompts
    appended after the patch tokens (blocks 0..J_v−1), each tower its own prompts."""
    text_prompts = [p.detach() for p in learner.text_prompts()]
    vision_prompts = [p.detach() for p in learner.vision_prompts()]
    tokens = clip.tokenize([f"a photo of a {name}." for name in classnames])
    text = F.normalize(reference_encode_text(model, tokens, text_prompts), dim=-1)
    image = F.normalize(reference_encode_image(model, images, vision_prompts), dim=-1)
    return model.logit_scale.exp() * image @ text.t()


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_clip_file):
    """A tiny EuroSAT tree and an IVLP trainer (depth 9/9 on the tiny CLIP's 9/9 blocks) built on its base classes."""
    root = tmp_path_factory.mktemp("ivlp")
    tree = write_tree("EuroSAT", root / "data", mode="json")
    trainer = train.main(argv(root / "data", root / "run", "IVLP", CONFIG, tiny_clip_file, "base",
                              flags=("--no-train",)))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in trainer.prompt_learner.parameters():
            p.normal_(std=0.3)
    return tree, trainer


def test_logits_equal_the_papers_equations_over_any_class_list(built, tiny_openclip_model):
    tree, trainer = built
    images, _ = load_images(tree, "test", BASE + NEW)
    learner = trainer.prompt_learner
    with torch.no_grad():
        every_class = trainer.class_scorer(tree.classnames)(images)
        dataset_classes = trainer.model_inference(images)
    assert rel_err(every_class, reference_logits(tiny_openclip_model, learner, tree.classnames, images)) < 1e-5
    assert rel_err(dataset_classes, reference_logits(tiny_openclip_model, learner, tree.classnames[:3], images)) < 1e-5


def test_loss_is_cross_entropy_alone_and_only_the_prompts_train(built, tiny_openclip_model):
    tree, trainer = built
    images, labels = load_images(tree, "train", BASE)
    expected = numpy_cross_entropy(reference_logits(tiny_openclip_model, trainer.prompt_learner, tree.classnames[:3],
                                                    images), labels)
    before = [p.detach().clone() for p in trainer.prompt_learner.parameters()]
    trainer.batch_idx, trainer.num_batches = 0, 2
    summary = trainer.forward_backward(train_batch(images, labels))
    assert summary["loss"] == pytest.approx(expected, rel=1e-5) and set(summary) == {"loss", "acc"}
    assert all(not torch.equal(b, p) for b, p in zip(before, trainer.prompt_learner.parameters()))
    assert not any(p.requires_grad for p in trainer.clip_model.parameters())
    assert trainer.prompt_learner.gpa is None  # no prompt aggregation either


def upstream_state(learner: IVLPPromptLearner, model) -> tuple[dict, dict]:
    """Random fp16 prompts in upstream IVLP's key layout (its CLIP wrapper's state: prompts, class-token buffers,
    frozen weights) and the same prompts in ours."""
    torch.manual_seed(1)
    text = [(torch.randn_like(p) * 0.2).half() for p in learner.text_prompts()]
    vision = [(torch.randn_like(p) * 0.2).half() for p in learner.vision_prompts()]
    state = {"prompt_learner.ctx": text[0], "image_encoder.VPT": vision[0],
             **{f"text_encoder.transformer.resblocks.{i}.VPT_shallow": p for i, p in enumerate(text) if i},
             **{f"image_encoder.transformer.resblocks.{i}.VPT_shallow": p for i, p in enumerate(vision) if i},
             "prompt_learner.token_prefix": torch.zeros(3, 1, text[0].shape[1]).half(),
             **frozen_clip_entries(model.visual, "image_encoder."), "logit_scale": model.logit_scale.detach().half()}
    ours = {**{f"text_prompts.prompts.{i}": p.float() for i, p in enumerate(text)},
            **{f"vision_prompts.prompts.{i}": p.float() for i, p in enumerate(vision)}}
    return state, ours


def test_upstream_checkpoint_evaluates_with_eval_only(built, tmp_path, tiny_clip_file, tiny_openclip_model, capsys):
    tree, trainer = built
    state, ours = upstream_state(trainer.prompt_learner, tiny_openclip_model)
    marker = tmp_path / "pickled_code_ran"
    write_dassl_checkpoint(str(tmp_path / "upstream" / "VLPromptLearner"), state, 20, None, str(marker))
    out = tmp_path / "eval_new"
    evaluated = train.main(argv(tree.root, out, "IVLP", CONFIG, tiny_clip_file, "new",
                                flags=("--eval-only", "--model-dir", str(tmp_path / "upstream"), "--load-epoch", "20")))
    assert not marker.exists()
    loaded = evaluated.prompt_learner.state_dict()
    for key, value in ours.items():
        assert torch.equal(loaded[key], value), key
    assert loaded["_extra_state"]["classnames"] == tree.classnames[3:]  # the run's own metadata is kept
    images, labels = load_images(tree, "test", NEW)
    logits = reference_logits(tiny_openclip_model, evaluated.prompt_learner, tree.classnames[3:], images)
    assert json.loads((out / "results.json").read_text())["accuracy"] == pytest.approx(accuracy(logits, labels, NEW))
    assert "IVLP prompt learner: upstream checkpoint, left out" in capsys.readouterr().out

    code = train.cli(argv(tree.root, tmp_path / "eval_wide", "IVLP", CONFIG, tiny_clip_file, "new",
                          "TRAINER.IVLP.N_CTX_VISION", "2",
                          flags=("--eval-only", "--model-dir", str(tmp_path / "upstream"), "--load-epoch", "20")))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'vision_prompts.prompts.0' has shape (4, 64)" in err
