"""MaPLe against the paper's equations on a tiny CLIP (open_clip forwards with the coupled prompts written by hand),
its loss against NumPy, its parameter count against upstream's construction, and upstream checkpoints (the whole
CLIP wrapper's state) evaluated, with the words and depth their run records."""
from __future__ import annotations

import pytest
import torch

import clip
import train
from tests.helpers_baselines import (
    MARKER,
    NEW,
    built_trainer,
    check_cross_entropy_step,
    check_scores,
    check_upstream_accuracy,
    eval_only,
    frozen_clip_entries,
    maple_reference,
    shipped_options,
    trainable,
    upstream_run,
    vit_b16_shell,
)
from tests.helpers_clip import rel_err
from tests.helpers_datasets import load_images
from tests.helpers_upstream import DEPTH, upstream_maple_run
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


def reference(model, learner: MultiModalPromptLearner):
    """MaPLe's coupling with the learner's prompts and projections (``maple_reference``)."""
    text_prompts = [learner.ctx.detach(), *[p.detach() for p in learner.compound_prompts_text]]
    maps = [learner.proj, *learner.compound_prompt_projections]
    return maple_reference(model, text_prompts, [(m.weight.detach(), m.bias.detach()) for m in maps])


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_clip_file):
    """MaPLe at depth 9, every block of the tiny CLIP's 9 prompted."""
    return built_trainer(tmp_path_factory.mktemp("maple"), "MaPLe", CONFIG, tiny_clip_file)


def test_logits_equal_the_papers_equations_over_any_class_list(built, tiny_openclip_model):
    tree, trainer = built
    learner = trainer.prompt_learner
    assert learner.n_ctx == 2 and learner.depth == 9 and learner.prompt_prefix == "a photo of a"
    check_scores(tree, trainer, reference(tiny_openclip_model, learner))


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
    before = check_cross_entropy_step(tree, trainer, reference(tiny_openclip_model, trainer.prompt_learner))
    after = trainer.prompt_learner.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before)  # every prompt and projection moved


def test_upstream_checkpoint_evaluates_with_eval_only(built, tmp_path, tiny_clip_file, tiny_openclip_model, capsys):
    """Upstream saves its whole CLIP wrapper: prompts under ``prompt_learner.``, class-token buffers, frozen CLIP
    weights (fp16)."""
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
    run = upstream_run(tmp_path, "upstream", "MultiModalPromptLearner", state, 5)
    out = tmp_path / "eval_new"
    evaluated = train.main(eval_only(tree, out, "MaPLe", CONFIG, tiny_clip_file, run, 5))
    for key, value in learned.items():
        assert torch.equal(evaluated.prompt_learner.state_dict()[key], value.float()), key
    check_upstream_accuracy(tree, out, reference(tiny_openclip_model, evaluated.prompt_learner))
    assert "left out 2 class-token buffer(s) (rebuilt from this run's class names) and 5 frozen CLIP weight(s)" in \
        capsys.readouterr().out

    shallow = eval_only(tree, tmp_path / "eval_shallow", "MaPLe", CONFIG, tiny_clip_file, run, 5,
                        "TRAINER.MAPLE.PROMPT_DEPTH", "3")
    assert train.cli(shallow) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected keys ['compound_prompt_projections.2.bias'" in err
    assert "PROMPT_DEPTH" in err and not (tmp_path / MARKER).exists()


def test_an_upstream_run_trained_from_other_words_evaluates_with_them(built, tmp_path, tiny_clip_file,
                                                                      tiny_openclip_model):
    """An upstream MaPLe run trained from "a satellite photo of" (depth 3) evaluates with the shipped config ("a photo
    of a", depth 9): the class prompt is "a satellite photo of <class>." with its first 2 tokens learned, as the
    run's log records, named in one line."""
    tree, _ = built
    text, maps, _ = upstream_maple_run(tmp_path / "upstream", tiny_clip_file, "a satellite photo of")
    out = tmp_path / "eval_new"
    evaluated = train.main(eval_only(tree, out, "MaPLe", CONFIG, tiny_clip_file, str(tmp_path / "upstream"), 5))
    expected = maple_reference(tiny_openclip_model, text, maps, "a satellite photo of {}.")
    images, _ = load_images(tree, "test", NEW)
    with torch.no_grad():
        logits = evaluated.class_scorer(tree.classnames[3:])(images)
    assert rel_err(logits, expected(tree.classnames[3:], images)) < 1e-5
    check_upstream_accuracy(tree, out, expected)
    log = (out / "log.txt").read_text()
    assert (f"Note: {tmp_path / 'upstream'} records TRAINER.MAPLE.CTX_INIT 'a satellite photo of' (this config: 'a "
            f"photo of a'); TRAINER.MAPLE.PROMPT_DEPTH {DEPTH} (this config: 9) in") in log
    assert "MaPLe: 2 context tokens, prompt 'a satellite photo of {}.'" in log
