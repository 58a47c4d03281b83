"""CoCoOp against the paper's equations on a tiny CLIP (open_clip forwards, one text forward per image as upstream),
its loss against NumPy, its parameter count against upstream's construction, and upstream checkpoints evaluated."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import train
from tests.helpers_baselines import (
    MARKER,
    built_trainer,
    check_cross_entropy_step,
    check_scores,
    check_upstream_accuracy,
    cocoop_reference,
    eval_only,
    shipped_options,
    trainable,
    upstream_run,
    vit_b16_shell,
)
from tests.helpers_clip import rel_err
from tests.helpers_datasets import load_images
from trainers.cocoop import CoCoOpPromptLearner, conditional_logits

CONFIG = "vit_b16_c4_ep10_batch1_ctxv1"


def upstream_parameter_count(n_ctx: int, text_width: int = 512, vis_dim: int = 512) -> int:
    """Upstream's PromptLearner: ``ctx`` [n_ctx, 512] and meta_net Linear(vis_dim, vis_dim // 16) → ReLU →
    Linear(vis_dim // 16, 512), vis_dim = ViT-B/16's output dim (its trainer optimises the prompt learner only)."""
    hidden = vis_dim // 16
    return n_ctx * text_width + (vis_dim * hidden + hidden) + (hidden * text_width + text_width)


@pytest.mark.parametrize("config,n_ctx,expected", [
    ("vit_b16_c4_ep10_batch1_ctxv1", 4, 35_360), ("vit_b16_c4_ep10_batch1", 4, 35_360),
    ("vit_b16_c8_ep10_batch1", 8, 37_408), ("vit_b16_c16_ep10_batch1", 16, 41_504)])
def test_trainable_parameters_of_the_vit_b16_configs_equal_upstreams(config, n_ctx, expected):
    assert upstream_parameter_count(n_ctx) == expected
    _, opts = shipped_options("CoCoOp", config)
    learner = CoCoOpPromptLearner(vit_b16_shell(), opts.N_CTX, opts.CTX_INIT)
    assert learner.n_ctx == n_ctx and trainable(learner) == expected


def reference(model, learner: CoCoOpPromptLearner):
    """The paper's CoCoOp with the learner's context and meta-net (``cocoop_reference``)."""
    meta_net = [(layer.weight.detach(), layer.bias.detach())
                for layer in (learner.meta_net.linear1, learner.meta_net.linear2)]
    return cocoop_reference(model, learner.ctx.detach(), meta_net)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_clip_file):
    return built_trainer(tmp_path_factory.mktemp("cocoop"), "CoCoOp", CONFIG, tiny_clip_file)


def test_logits_equal_the_papers_equations_over_any_class_list(built, tiny_openclip_model):
    tree, trainer = built
    check_scores(tree, trainer, reference(tiny_openclip_model, trainer.prompt_learner))
    learner = trainer.prompt_learner
    images, _ = load_images(tree, "test", [0, 1, 2, 3, 4])
    with torch.no_grad():
        image = F.normalize(trainer.clip_model.encode_image(images), dim=-1)
        tokens = learner.prompt_tokens(tree.classnames)
        batched = conditional_logits(trainer.clip_model, learner, tokens, image)
        one_image_per_forward = conditional_logits(trainer.clip_model, learner, tokens, image, rows=5)
    assert rel_err(one_image_per_forward, batched) < 1e-6
    assert batched.std(dim=0).min() > 0  # the shift depends on the image: rows differ


def test_loss_is_cross_entropy_and_only_the_learner_trains(built, tiny_openclip_model):
    tree, trainer = built
    before = check_cross_entropy_step(tree, trainer, reference(tiny_openclip_model, trainer.prompt_learner))
    after = trainer.prompt_learner.state_dict()
    assert {"ctx", "meta_net.linear2.bias"} <= {k for k in before if not torch.equal(before[k], after[k])}


def test_upstream_checkpoint_evaluates_with_eval_only(built, tmp_path, tiny_clip_file, tiny_openclip_model, capsys):
    """A checkpoint as upstream CoCoOp saves it: fp16 tensors and the class-token buffers."""
    tree, trainer = built
    torch.manual_seed(1)
    learned = {k: (torch.randn_like(v) * 0.2).half() for k, v in trainer.prompt_learner.state_dict().items()}
    width = learned["ctx"].shape[1]
    state = {**learned, "token_prefix": torch.zeros(3, 1, width).half(),
             "token_suffix": torch.zeros(3, 77 - 1 - 4, width).half()}
    run = upstream_run(tmp_path, "upstream", "prompt_learner", state, 10)
    out = tmp_path / "eval_new"
    evaluated = train.main(eval_only(tree, out, "CoCoOp", CONFIG, tiny_clip_file, run, 10))
    for key, value in learned.items():
        assert torch.equal(evaluated.prompt_learner.state_dict()[key], value.float()), key
    check_upstream_accuracy(tree, out, reference(tiny_openclip_model, evaluated.prompt_learner))
    assert "left out 2 class-token buffer(s)" in capsys.readouterr().out

    wrong = upstream_run(tmp_path, "wrong", "prompt_learner", {**state, "ctx": torch.zeros(8, width).half()}, 10)
    assert train.cli(eval_only(tree, tmp_path / "eval_wrong", "CoCoOp", CONFIG, tiny_clip_file, wrong, 10)) == 2
    err = capsys.readouterr().err  # a context of another length is refused with one line naming the key
    assert err.count("\n") == 1 and "'ctx' has shape (8, 64)" in err and "N_CTX" in err
    assert not (tmp_path / MARKER).exists()
