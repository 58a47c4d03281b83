"""KgCoOp against its paper's loss done by hand (open_clip forwards, NumPy), its parameter count against upstream's
construction, its upstream recipe, and an upstream checkpoint (with the entries KgCoOp never trains) evaluated."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import clip
import train
from tests.helpers_baselines import (
    BASE,
    EUROSAT_PROMPT,
    MARKER,
    argv,
    built_trainer,
    check_upstream_accuracy,
    eval_only,
    numpy_cross_entropy,
    shipped_options,
    train_batch,
    trainable,
    upstream_run,
    vit_b16_shell,
)
from tests.helpers_clip import reference_encode_text
from tests.helpers_datasets import load_images, write_tree
from trainers.kgcoop import KgCoOpPromptLearner

CONFIG = "vit_b16_ep100_ctxv1"


def reference(model, ctx: torch.Tensor):
    """(class names, images) → τ·cos(image, text) with the context written over "a photo of a" in
    "a photo of a <class>." on open_clip, and the prompts' normalised text features."""

    @torch.no_grad()
    def logits(classnames: list[str], images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = clip.tokenize([f"a photo of a {name}." for name in classnames])
        text = F.normalize(reference_encode_text(model, tokens, [ctx]), dim=-1)
        image = F.normalize(model.encode_image(images), dim=-1)
        return model.logit_scale.exp() * image @ text.t(), text

    return logits


def test_upstream_recipe_and_trainable_parameters_of_vit_b16():
    """Upstream trains ``ctx`` alone (4 × 512 from "a photo of a"); its bias vector and meta-net stay frozen."""
    cfg, opts = shipped_options("KgCoOp", CONFIG)
    assert (opts.N_CTX, opts.CSC, opts.CTX_INIT, opts.CLASS_TOKEN_POSITION, opts.W) == (4, False, "a photo of a",
                                                                                      "end", 8.0)
    assert (cfg.OPTIM.NAME, cfg.OPTIM.LR, cfg.OPTIM.MAX_EPOCH, cfg.DATALOADER.TRAIN_X.BATCH_SIZE) == ("sgd", 0.002,
                                                                                                    100, 128)
    learner = KgCoOpPromptLearner(vit_b16_shell(), ["cat", "dog"], opts.N_CTX, opts.CTX_INIT, opts.CSC)
    assert trainable(learner) == 4 * 512 == 2048


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_clip_file):
    return built_trainer(tmp_path_factory.mktemp("kgcoop"), "KgCoOp", CONFIG, tiny_clip_file)


def test_loss_is_cross_entropy_plus_w_times_the_distance_to_the_hand_crafted_prompt(built, tiny_openclip_model):
    tree, trainer = built
    names = tree.classnames[:3]
    with torch.no_grad():
        hand = F.normalize(tiny_openclip_model.encode_text(clip.tokenize([EUROSAT_PROMPT.format(n.replace("_", " "))
                                                                          for n in names])), dim=-1)
    trainer.hand_crafted = trainer.hand_crafted_features()
    assert torch.allclose(trainer.hand_crafted, hand, atol=1e-6)
    images, labels = load_images(tree, "train", BASE)
    logits, text = reference(tiny_openclip_model, trainer.prompt_learner.ctx.detach())(names, images)
    cosines = np.einsum("cd,cd->c", text.double().numpy(), hand.double().numpy())
    ce, kg = numpy_cross_entropy(logits, labels), 1.0 - cosines.mean()
    assert kg > 0.05  # the drawn context is far from the hand-crafted prompt: the term matters
    before = trainer.prompt_learner.ctx.detach().clone()
    trainer.batch_idx, trainer.num_batches = 0, 2
    summary = trainer.forward_backward(train_batch(images, labels))
    assert summary["ce"] == pytest.approx(ce, rel=1e-5) and summary["kg"] == pytest.approx(kg, rel=1e-5)
    assert summary["loss"] == pytest.approx(ce + 8.0 * kg, rel=1e-5)
    assert not torch.equal(trainer.prompt_learner.ctx.detach(), before)
    assert [p for p in trainer.clip_model.parameters() if p.requires_grad] == []


def test_trained_run_records_w_and_logs_both_terms(tmp_path, tiny_clip_file):
    tree = write_tree("EuroSAT", tmp_path / "data", mode="json")
    out = tmp_path / "run"
    train.main(argv(tree.root, out, "KgCoOp", CONFIG, tiny_clip_file, "base", "TRAINER.KGCOOP.W", "2.5"))
    results = json.loads((out / "results.json").read_text())
    assert results["w"] == 2.5
    log = (out / "log.txt").read_text()
    assert "Knowledge-guided targets: 'a centered satellite photo of {}.' on the frozen CLIP, W 2.5" in log
    assert " ce " in log and " kg " in log


def test_upstream_checkpoint_evaluates_with_eval_only(built, tmp_path, tiny_clip_file, tiny_openclip_model, capsys):
    """A checkpoint as upstream KgCoOp saves it: fp16 ``ctx``, the class-token buffers, and the bias vector and
    meta-net its training never touches (left out, with a line saying so)."""
    tree, trainer = built
    torch.manual_seed(1)
    width = trainer.prompt_learner.ctx.shape[1]
    ctx = (torch.randn(4, width) * 0.2).half()
    state = {"ctx": ctx, "bias_vectors": torch.randn(1, 512).half(), "meta_net.linear1.weight": torch.randn(512, 512),
             "meta_net.linear1.bias": torch.randn(512), "token_prefix": torch.zeros(3, 1, width).half(),
             "token_suffix": torch.zeros(3, 72, width).half()}
    run = upstream_run(tmp_path, "upstream", "prompt_learner", state, 100)
    out = tmp_path / "eval_new"
    evaluated = train.main(eval_only(tree, out, "KgCoOp", CONFIG, tiny_clip_file, run, 100))
    assert torch.equal(evaluated.prompt_learner.ctx.detach(), ctx.float())
    logits = reference(tiny_openclip_model, ctx.float())
    check_upstream_accuracy(tree, out, lambda names, images: logits(names, images)[0])
    assert ("TRAINER.KGCOOP: left out the checkpoint's bias_vectors, meta_net.linear1.bias, meta_net.linear1.weight"
            in capsys.readouterr().out)
    assert not (tmp_path / MARKER).exists()


def test_upstreams_namespace_on_the_command_line_names_ours(tmp_path, tiny_clip_file, capsys):
    """Upstream KgCoOp's scripts set its keys under TRAINER.COOP; here each is refused in one line naming ours."""
    for key, fix in (("TRAINER.COOP.W", "KgCoOp reads TRAINER.KGCOOP.W: set that instead"),
                     ("TRAINER.COOP.N_CTX", "set TRAINER.KGCOOP.N_CTX instead")):
        assert train.cli(argv(tmp_path / "data", tmp_path / "run", "KgCoOp", CONFIG, tiny_clip_file, "base", key,
                              "8")) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and key in err and fix in err
