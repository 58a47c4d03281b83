"""CoCoOp against the paper's equations on a tiny CLIP (open_clip forwards, one text forward per image as upstream),
its loss against NumPy, its parameter count against upstream's construction, and upstream checkpoints evaluated."""
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
    numpy_cross_entropy,
    shipped_options,
    train_batch,
    trainable,
    vit_b16_shell,
)
from tests.helpers_clip import reference_encode_text, rel_err
from tests.helpers_datasets import load_images, write_tree
from tests.helpers_upstream import write_dassl_checkpoint
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


@torch.no_grad()
def reference_logits(model, learner: CoCoOpPromptLearner, classnames: list[str], images: torch.Tensor):
    """The paper's CoCoOp, image by image: f̂ = f(x)/|f(x)|, π = W2·ReLU(W1·f̂ + b1) + b2, prompt tokens
    ctx_m + π after SOS, logits τ·cos(f(x), g(prompt_c))."""
    ctx = learner.ctx.detach()
    (w1, b1), (w2, b2) = [(layer.weight.detach(), layer.bias.detach())
                          for layer in (learner.meta_net.linear1, learner.meta_net.linear2)]
    tokens = clip.tokenize([f"a photo of a {name}." for name in classnames])
    image = F.normalize(model.encode_image(images), dim=-1)
    rows = []
    for f in image:
        shift = w2 @ torch.relu(w1 @ f + b1) + b2
        text = F.normalize(reference_encode_text(model, tokens, [ctx + shift]), dim=-1)
        rows.append(model.logit_scale.exp() * f @ text.t())
    return torch.stack(rows)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_clip_file):
    """A tiny EuroSAT tree and a CoCoOp trainer built on its base classes (not trained), context randomised."""
    root = tmp_path_factory.mktemp("cocoop")
    tree = write_tree("EuroSAT", root / "data", mode="json")
    trainer = train.main(argv(root / "data", root / "run", "CoCoOp", CONFIG, tiny_clip_file, "base",
                              flags=("--no-train",)))
    torch.manual_seed(0)
    with torch.no_grad():
        trainer.prompt_learner.ctx.normal_(std=0.5)
    return tree, trainer


def test_logits_equal_the_papers_equations_over_any_class_list(built, tiny_openclip_model):
    tree, trainer = built
    images, _ = load_images(tree, "test", BASE + NEW)
    learner = trainer.prompt_learner
    with torch.no_grad():
        every_class = trainer.class_scorer(tree.classnames)(images)
        dataset_classes = trainer.model_inference(images)
        image = F.normalize(trainer.clip_model.encode_image(images), dim=-1)
        one_image_per_forward = conditional_logits(trainer.clip_model, learner, learner.prompt_tokens(tree.classnames),
                                                   image, rows=len(tree.classnames))
    assert every_class.shape == (len(images), 5) and dataset_classes.shape == (len(images), 3)
    assert rel_err(every_class, reference_logits(tiny_openclip_model, learner, tree.classnames, images)) < 1e-5
    assert rel_err(dataset_classes, reference_logits(tiny_openclip_model, learner, tree.classnames[:3], images)) < 1e-5
    assert rel_err(one_image_per_forward, every_class) < 1e-6
    assert every_class.std(dim=0).min() > 0  # the shift depends on the image: rows differ


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
    assert {"ctx", "meta_net.linear2.bias"} <= {k for k in before if not torch.equal(before[k], after[k])}
    assert not any(p.requires_grad for p in trainer.clip_model.parameters())
    optimised = {id(p) for group in trainer.get_optimizer("prompt_learner").param_groups for p in group["params"]}
    assert optimised == {id(p) for p in trainer.prompt_learner.parameters()}


def test_upstream_checkpoint_evaluates_with_eval_only(built, tmp_path, tiny_clip_file, tiny_openclip_model, capsys):
    """A checkpoint as upstream CoCoOp saves it (fp16 tensors, class-token buffers, pickled scheduler objects)."""
    tree, trainer = built
    torch.manual_seed(1)
    learned = {k: (torch.randn_like(v) * 0.2).half() for k, v in trainer.prompt_learner.state_dict().items()}
    width = learned["ctx"].shape[1]
    state = {**learned, "token_prefix": torch.zeros(3, 1, width).half(),
             "token_suffix": torch.zeros(3, 77 - 1 - 4, width).half()}
    marker = tmp_path / "pickled_code_ran"
    write_dassl_checkpoint(str(tmp_path / "upstream" / "prompt_learner"), state, 10, None, str(marker))
    out = tmp_path / "eval_new"
    evaluated = train.main(argv(tree.root, out, "CoCoOp", CONFIG, tiny_clip_file, "new",
                                flags=("--eval-only", "--model-dir", str(tmp_path / "upstream"), "--load-epoch", "10")))
    assert not marker.exists()
    for key, value in learned.items():
        assert torch.equal(evaluated.prompt_learner.state_dict()[key], value.float()), key
    images, labels = load_images(tree, "test", NEW)
    logits = reference_logits(tiny_openclip_model, evaluated.prompt_learner, tree.classnames[3:], images)
    assert json.loads((out / "results.json").read_text())["accuracy"] == pytest.approx(accuracy(logits, labels, NEW))
    assert "left out 2 class-token buffer(s)" in capsys.readouterr().out

    wrong = tmp_path / "wrong"  # a context of another length is refused with one line naming the key
    write_dassl_checkpoint(str(wrong / "prompt_learner"), {**state, "ctx": torch.zeros(8, width).half()}, 10, None,
                           str(marker))
    code = train.cli(argv(tree.root, tmp_path / "eval_wrong", "CoCoOp", CONFIG, tiny_clip_file, "new",
                          flags=("--eval-only", "--model-dir", str(wrong), "--load-epoch", "10")))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'ctx' has shape (8, 64)" in err and "N_CTX" in err
