"""IVLP against the paper's equations on a tiny CLIP (open_clip forwards with independent deep prompts written by
hand), its loss against NumPy (cross-entropy alone: no PromptSRC term), its parameter count against upstream's
construction, and upstream checkpoints (the whole CLIP wrapper's state) evaluated, with the prompt sizes and words
their run records."""
from __future__ import annotations

import pytest
import torch

import train
from tests.helpers_baselines import (
    MARKER,
    NEW,
    built_trainer,
    check_cross_entropy_step,
    check_scores,
    check_upstream_accuracy,
    deep_prompt_reference,
    eval_only,
    frozen_clip_entries,
    shipped_options,
    trainable,
    upstream_run,
    vit_b16_shell,
)
from tests.helpers_clip import rel_err
from tests.helpers_datasets import load_images
from tests.helpers_upstream import upstream_ivlp_run
from trainers.prompting.deep_prompts import VLPromptLearner

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
    learner = VLPromptLearner.build(vit_b16_shell(), opts.N_CTX_TEXT, opts.N_CTX_VISION, opts.PROMPT_DEPTH_TEXT,
                                      opts.PROMPT_DEPTH_VISION, opts.CTX_INIT)
    assert trainable(learner) == 46_080


def reference(model, learner: VLPromptLearner):
    """τ·cos(image, text), each tower with its own prompts: the text ones at positions 1..n after SOS of "a photo of
    a <class>." (blocks 0..J_t−1), the vision ones appended after the patch tokens (blocks 0..J_v−1)."""
    text_prompts = [p.detach() for p in learner.text_prompts()]
    vision_prompts = [p.detach() for p in learner.vision_prompts()]
    return deep_prompt_reference(model, text_prompts, vision_prompts)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_clip_file):
    """IVLP at depth 9/9, every block of the tiny CLIP's 9/9 prompted."""
    return built_trainer(tmp_path_factory.mktemp("ivlp"), "IVLP", CONFIG, tiny_clip_file)


def test_logits_equal_the_papers_equations_over_any_class_list(built, tiny_openclip_model):
    tree, trainer = built
    check_scores(tree, trainer, reference(tiny_openclip_model, trainer.prompt_learner))


def test_loss_is_cross_entropy_alone_and_only_the_prompts_train(built, tiny_openclip_model):
    tree, trainer = built
    before = check_cross_entropy_step(tree, trainer, reference(tiny_openclip_model, trainer.prompt_learner))
    after = trainer.prompt_learner.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before)
    assert trainer.prompt_learner.gpa is None  # no prompt aggregation either


def upstream_state(learner: VLPromptLearner, model) -> tuple[dict, dict]:
    """Random fp16 prompts in upstream IVLP's key layout (its CLIP wrapper's state: prompts, a class-token buffer,
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
    run = upstream_run(tmp_path, "upstream", "VLPromptLearner", state, 20)
    out = tmp_path / "eval_new"
    evaluated = train.main(eval_only(tree, out, "IVLP", CONFIG, tiny_clip_file, run, 20))
    loaded = evaluated.prompt_learner.state_dict()
    for key, value in ours.items():
        assert torch.equal(loaded[key], value), key
    assert loaded["_extra_state"]["classnames"] == tree.classnames[3:]  # the run's own metadata is kept
    check_upstream_accuracy(tree, out, reference(tiny_openclip_model, evaluated.prompt_learner))
    out = capsys.readouterr().out
    assert "TRAINER.IVLP prompt learner: upstream checkpoint, left out" in out
    assert (f"Note: {run} records no config (run.json, or the config dump of log.txt): its prompts are read with this "
            "config's TRAINER.IVLP N_CTX_TEXT, N_CTX_VISION, CTX_INIT, PROMPT_DEPTH_TEXT, PROMPT_DEPTH_VISION") in out

    narrow = eval_only(tree, tmp_path / "eval_narrow", "IVLP", CONFIG, tiny_clip_file, run, 20,
                       "TRAINER.IVLP.N_CTX_VISION", "2")
    assert train.cli(narrow) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'vision_prompts.prompts.0' has shape (4, 64)" in err
    assert not (tmp_path / MARKER).exists()


def test_an_upstream_run_with_upstreams_two_text_tokens_evaluates_as_it_records(built, tmp_path, tiny_clip_file,
                                                                                 tiny_openclip_model):
    """Upstream IVLP's defaults (2 text and 2 vision tokens from "a photo of a": the class prompt keeps "of a"; depth
    3 here) evaluate with the shipped 4 + 4 token config: the sizes and words come from the run's log, named in one
    line. The settings an earlier error suggested (N_CTX_TEXT 2, CTX_INIT '') give the same prompt."""
    tree, _ = built
    text, vision, _ = upstream_ivlp_run(tmp_path / "upstream", tiny_clip_file)
    expected = deep_prompt_reference(tiny_openclip_model, text, vision)
    images, _ = load_images(tree, "test", NEW)
    for name, opts in (("shipped", ()), ("suggested", ("TRAINER.IVLP.N_CTX_TEXT", "2", "TRAINER.IVLP.CTX_INIT", ""))):
        out = tmp_path / name
        evaluated = train.main(eval_only(tree, out, "IVLP", CONFIG, tiny_clip_file, str(tmp_path / "upstream"), 5,
                                         *opts))
        with torch.no_grad():
            logits = evaluated.class_scorer(tree.classnames[3:])(images)
        assert rel_err(logits, expected(tree.classnames[3:], images)) < 1e-5, name
        check_upstream_accuracy(tree, out, expected)
        log = (out / "log.txt").read_text()
        assert "IVLP: class prompt 'a photo of a {}.', its first 2 tokens learned" in log
        notes = [line for line in log.splitlines() if line.startswith("Note: ") and " records TRAINER." in line]
        assert len(notes) == 1 and "TRAINER.IVLP.N_CTX_VISION 2 (this config: 4)" in notes[0], notes
    assert "TRAINER.IVLP.CTX_INIT 'a photo of a' (this config: '')" in notes[0]
