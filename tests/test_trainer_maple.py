"""MaPLe against the paper's equations on a tiny CLIP (open_clip forwards with the coupled prompts written by hand),
its loss against NumPy, its parameter count against upstream's construction, and upstream checkpoints (the whole
CLIP wrapper's state) evaluated."""
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
from trainers.maple import MultiModalPromptLearner

CONFIG = "vit_b16_c2_ep5_batch4_2ctx"


def upstream_parameter_count(n_ctx: int, depth: int, text_width: int = 512, vision_width: int = 768) -> int:
    """Upstream's MultiModalPromptLearner: ``ctx`` [n_ctx, 512], ``proj`` Linear(512, 768), depth−1
    ``compound_prompts_text`` [n_ctx, 512] and depth−1 ``compound_prompt_projections`` Linear(512, 768); nothing
    else of its CLIP wrapper is trainable."""
    linear = text_width * vision_width + vision_width
    return n_ctx * text_width + linear + (depth - 1) * (n_ctx * text_width + linear)


@pytest.mark.parametrize("config,depth,expected", [
    ("vit_b16_c2_ep5_batch4_2ctx", 9, 3_555_072), ("vit_b16_c2_ep20_batch8_2ctx", 9, 3_555_072),
    ("vit_b16_c2_ep5_batch4_2ctx_cross_datasets", 3, 1_185_024)])
def test_trainable_parameters_of_the_vit_b16_configs_equal_upstreams(config, depth, expected):
    assert upstream_parameter_count(2, depth) == expected
    _, opts = shipped_options("MaPLe", config)
    learner = MultiModalPromptLearner(vit_b16_shell(), opts.N_CTX, opts.PROMPT_DEPTH, opts.CTX_INIT)
    assert learner.depth == depth and trainable(learner) == expected


def prompts_by_hand(learner: MultiModalPromptLearner) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The paper's coupling: text prompts P_j, vision prompts F_j(P_j) = W_j P_j + b_j, for j = 0..J-1."""
    text = [learner.ctx.detach(), *[p.detach() for p in learner.compound_prompts_text]]
    maps = [learner.proj, *learner.compound_prompt_projections]
    vision = [p @ m.weight.detach().t() + m.bias.detach() for p, m in zip(text, maps)]
    return text, vision


@torch.no_grad()
def reference_logits(model, learner: MultiModalPromptLearner, classnames: list[str], images: torch.Tensor):
    """τ·cos(image, text): "a photo of a <class>." with its first two tokens and the deeper text positions taken by
    the text prompts; the vision prompts appended to the patch tokens and replaced before each deeper block."""
    text_prompts, vision_prompts = prompts_by_hand(learner)
    tokens = clip.tokenize([f"a photo of a {name}." for name in classnames])
    text = F.normalize(reference_encode_text(model, tokens, text_prompts), dim=-1)
    image = F.normalize(reference_encode_image(model, images, vision_prompts), dim=-1)
    return model.logit_scale.exp() * image @ text.t()


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_clip_file):
    """A tiny EuroSAT tree and a MaPLe trainer (depth 9 of the tiny CLIP's 9 blocks) built on its base classes."""
    root = tmp_path_factory.mktemp("maple")
    tree = write_tree("EuroSAT", root / "data", mode="json")
    trainer = train.main(argv(root / "data", root / "run", "MaPLe", CONFIG, tiny_clip_file, "base",
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
    assert learner.n_ctx == 2 and learner.depth == 9 and learner.prompt_prefix == "a photo of a"
    with torch.no_grad():
        every_class = trainer.class_scorer(tree.classnames)(images)
        dataset_classes = trainer.model_inference(images)
    assert rel_err(every_class, reference_logits(tiny_openclip_model, learner, tree.classnames, images)) < 1e-5
    assert rel_err(dataset_classes, reference_logits(tiny_openclip_model, learner, tree.classnames[:3], images)) < 1e-5


def test_words_after_the_context_stay_in_every_prompt(built):
    """CTX_INIT "a photo of a" with N_CTX 2: the context starts as "a photo", "of a" stays a word of the prompt."""
    _, trainer = built
    fresh = MultiModalPromptLearner(trainer.clip_model, 2, 3, "a photo of a")
    ids = clip.tokenize("a photo of a")[0, 1:3]
    assert torch.equal(fresh.ctx.detach(), trainer.clip_model.token_embedding.weight[ids])
    assert fresh.prompt_tokens(["cat"])[0].tolist()[:7] == clip.tokenize("a photo of a cat.")[0].tolist()[:7]
    deeper = fresh.compound_prompt_projections  # upstream clones one initial projection for every deeper layer
    assert torch.equal(deeper[0].weight, deeper[1].weight) and not torch.equal(deeper[0].weight, fresh.proj.weight)


def test_loss_is_cross_entropy_and_only_the_learner_trains(built, tiny_openclip_model):
    tree, trainer = built
    images, labels = load_images(tree, "train", BASE)
    expected = numpy_cross_entropy(reference_logits(tiny_openclip_model, trainer.prompt_learner, tree.classnames[:3],
                                                    images), labels)
    before = {k: v.clone() for k, v in trainer.prompt_learner.state_dict().items()}
    trainer.batch_idx, trainer.num_batches = 0, 2
    summary = trainer.forward_backward(train_batch(images, labels))
    assert summary["loss"] == pytest.approx(expected, rel=1e-5)
    after = trainer.prompt_learner.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before)  # every prompt and projection moved
    assert not any(p.requires_grad for p in trainer.clip_model.parameters())
    optimised = {id(p) for group in trainer.get_optimizer("MultiModalPromptLearner").param_groups
                 for p in group["params"]}
    assert optimised == {id(p) for p in trainer.prompt_learner.parameters()}


def test_upstream_checkpoint_evaluates_with_eval_only(built, tmp_path, tiny_clip_file, tiny_openclip_model, capsys):
    """Upstream saves its whole CLIP wrapper: prompts under ``prompt_learner.``, class-token buffers, frozen CLIP
    weights (fp16), with pickled scheduler objects."""
    tree, trainer = built
    torch.manual_seed(1)
    learned = {k: (torch.randn_like(v) * 0.2).half() for k, v in trainer.prompt_learner.state_dict().items()}
    width = learned["ctx"].shape[1]
    state = {**{f"prompt_learner.{k}": v for k, v in learned.items()},
             "prompt_learner.token_prefix": torch.zeros(3, 1, width).half(),
             "prompt_learner.token_suffix": torch.zeros(3, 77 - 1 - 2, width).half(),
             **frozen_clip_entries(tiny_openclip_model.visual, "image_encoder."),
             "text_encoder.positional_embedding": tiny_openclip_model.positional_embedding.detach().half(),
             "logit_scale": tiny_openclip_model.logit_scale.detach().half()}
    marker = tmp_path / "pickled_code_ran"
    write_dassl_checkpoint(str(tmp_path / "upstream" / "MultiModalPromptLearner"), state, 5, None, str(marker))
    out = tmp_path / "eval_new"
    evaluated = train.main(argv(tree.root, out, "MaPLe", CONFIG, tiny_clip_file, "new",
                                flags=("--eval-only", "--model-dir", str(tmp_path / "upstream"), "--load-epoch", "5")))
    assert not marker.exists()
    for key, value in learned.items():
        assert torch.equal(evaluated.prompt_learner.state_dict()[key], value.float()), key
    images, labels = load_images(tree, "test", NEW)
    logits = reference_logits(tiny_openclip_model, evaluated.prompt_learner, tree.classnames[3:], images)
    assert json.loads((out / "results.json").read_text())["accuracy"] == pytest.approx(accuracy(logits, labels, NEW))
    assert "left out 2 class-token buffer(s) (rebuilt from this run's class names) and 5 frozen CLIP weight(s)" in \
        capsys.readouterr().out

    code = train.cli(argv(tree.root, tmp_path / "eval_shallow", "MaPLe", CONFIG, tiny_clip_file, "new",
                          "TRAINER.MAPLE.PROMPT_DEPTH", "3",
                          flags=("--eval-only", "--model-dir", str(tmp_path / "upstream"), "--load-epoch", "5")))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "unexpected keys ['compound_prompt_projections.2.bias'" in err
    assert "PROMPT_DEPTH" in err
