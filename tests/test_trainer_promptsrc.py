"""PromptSRC teacher: train.main end to end + eval-only (of its own run and of an upstream run), GPA vs SciPy, loss
terms vs NumPy, teacher feature file."""
from __future__ import annotations

import json
import os
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.special import logsumexp
from scipy.stats import norm

import clip
import train
from engine import TRAINER_REGISTRY
from tests.helpers_baselines import deep_prompt_reference
from tests.helpers_clip import reference_encode_image, reference_encode_text, rel_err
from tests.helpers_datasets import write_tree
from tests.helpers_routed import upstream_promptsrc_state
from tests.helpers_run import train_argv
from tests.helpers_upstream import cfg_of, write_dassl_checkpoint, write_dassl_log
from trainers.distillation.teacher import build_teacher
from trainers.prompting.deep_prompts import VLPromptCLIP, VLPromptLearner, gpa_weights
from trainers.prompting.templates import IMAGENET_TEMPLATES
from trainers.promptsrc import PROMPTSRC_TEMPLATES, PromptSRC

EPOCHS, GPA_MEAN, GPA_STD = 2, 2.0, 1.0
TEXT_W, IMAGE_W = 25.0, 10.0


class RecordingPromptSRC(PromptSRC):
    """PromptSRC that copies the prompts at the end of every epoch, before GPA or checkpointing touch them."""

    def before_train(self) -> None:
        self.snapshots = []
        super().before_train()

    def after_epoch(self) -> None:
        self.snapshots.append([p.detach().clone() for p in self.prompt_learner.parameters()])
        super().after_epoch()


TRAINER_REGISTRY.register(RecordingPromptSRC, force=True)


def _args(root: str, out: str, trainer: str, clip_file: str, flags: tuple = ()) -> list[str]:
    return train_argv(trainer, None, root, out, "DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TEST.BATCH_SIZE", "8",
                      "DATASET.NUM_SHOTS", "2", "DATASET.SUBSAMPLE_CLASSES", "base", "OPTIM.MAX_EPOCH", str(EPOCHS),
                      "OPTIM.LR", "0.05", "TRAINER.PROMPTSRC.PROMPT_DEPTH_TEXT", "3",
                      "TRAINER.PROMPTSRC.PROMPT_DEPTH_VISION", "3", "TRAINER.PROMPTSRC.GPA_MEAN", str(GPA_MEAN),
                      "TRAINER.PROMPTSRC.GPA_STD", str(GPA_STD), "TRAINER.PROMPTSRC.TEXT_LOSS_WEIGHT", str(TEXT_W),
                      "TRAINER.PROMPTSRC.IMAGE_LOSS_WEIGHT", str(IMAGE_W), flags=flags, backbone=clip_file)


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_teacher_clip_file):
    """One 2-epoch base-class training run (recording per-epoch prompts) and its --eval-only reload."""
    tmp = tmp_path_factory.mktemp("promptsrc")
    tree = write_tree("EuroSAT", str(tmp / "data"))
    out, eval_out = str(tmp / "train"), str(tmp / "eval")
    trained = train.main(_args(tree.root, out, "RecordingPromptSRC", tiny_teacher_clip_file))
    evaluated = train.main(_args(tree.root, eval_out, "PromptSRC", tiny_teacher_clip_file,
                                 flags=("--eval-only", "--model-dir", out, "--load-epoch", str(EPOCHS))))
    return SimpleNamespace(tree=tree, out=out, eval_out=eval_out, trained=trained, evaluated=evaluated,
                           clip_file=tiny_teacher_clip_file)


def _results(directory: str) -> dict:
    with open(os.path.join(directory, "results.json")) as f:
        return json.load(f)


def _prompts(trainer) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    learner = trainer.prompt_learner
    return [p.detach() for p in learner.text_prompts()], [p.detach() for p in learner.vision_prompts()]


def test_end_to_end_and_eval_only_reproduces_accuracy(run):
    trained, evaluated = _results(run.out), _results(run.eval_out)
    assert trained["trainer"] == "RecordingPromptSRC" and evaluated["trainer"] == "PromptSRC"
    assert evaluated["accuracy"] == trained["accuracy"]
    batch = next(iter(run.trained.test_loader))
    with torch.no_grad():
        torch.testing.assert_close(run.evaluated.model_inference(batch["img"]),
                                   run.trained.model_inference(batch["img"]), rtol=0, atol=1e-5)
    # the checkpoint holds prompts (+ GPA sums, metadata) only, no CLIP weights
    checkpoint = torch.load(os.path.join(run.out, "VLPromptLearner", f"model.pth.tar-{EPOCHS}"), weights_only=True)
    keys = set(checkpoint["state_dict"])
    assert keys == ({f"text_prompts.prompts.{i}" for i in range(3)} | {f"vision_prompts.prompts.{i}" for i in range(3)}
                    | {f"gpa.sum{i}" for i in range(6)} | {"_extra_state"})
    meta = checkpoint["state_dict"]["_extra_state"]
    assert meta["classnames"] == run.tree.classnames[:3] and meta["dataset"] == "EuroSAT"
    # the frozen CLIP did not move
    frozen = clip.load_model(run.clip_file)
    for name, p in frozen.state_dict().items():
        assert torch.equal(p, run.trained.clip_model.state_dict()[name]), name


def test_an_upstream_promptsrc_run_evaluates_with_eval_only(run, tmp_path, tiny_teacher_openclip_model):
    """Upstream PromptSRC's run folder (its CLIP wrapper's keys, a scheduler entry that must not run, its log's config
    dump: depth 2, where this run's options say 3) evaluates as the prompts written by hand score."""
    torch.manual_seed(7)
    text = [(torch.randn(4, 128) * 0.3).half().float() for _ in range(2)]
    vision = [(torch.randn(4, 128) * 0.3).half().float() for _ in range(2)]
    state = upstream_promptsrc_state(text, vision, 128)
    upstream = tmp_path / "upstream"
    write_dassl_checkpoint(str(upstream / "VLPromptLearner"), state, 20, None, str(tmp_path / "pickled_code_ran"))
    write_dassl_log(str(upstream), cfg_of("PromptSRC", "DATASET.NAME", "EuroSAT", "MODEL.BACKBONE.NAME", run.clip_file,
                                          "TRAINER.PROMPTSRC.PROMPT_DEPTH_TEXT", "2",
                                          "TRAINER.PROMPTSRC.PROMPT_DEPTH_VISION", "2"))
    out = str(tmp_path / "eval")
    evaluated = train.main(_args(run.tree.root, out, "PromptSRC", run.clip_file,
                                 flags=("--eval-only", "--model-dir", str(upstream), "--load-epoch", "20")))
    batches = list(evaluated.test_loader)  # the images the evaluation scored
    images, labels = torch.cat([b["img"] for b in batches]), torch.cat([b["label"] for b in batches])
    expected = deep_prompt_reference(tiny_teacher_openclip_model, text, vision)(run.tree.classnames[:3], images)
    with torch.no_grad():
        logits = evaluated.class_scorer(run.tree.classnames[:3])(images)
    assert rel_err(logits, expected) < 1e-5 and not (tmp_path / "pickled_code_ran").exists()
    accuracy = 100.0 * (expected.argmax(dim=1) == labels).double().mean().item()
    assert _results(out)["accuracy"] == pytest.approx(accuracy)


def test_gpa_aggregates_the_epochs_prompts(run):
    snapshots = run.trained.snapshots
    assert len(snapshots) == EPOCHS
    assert not torch.allclose(snapshots[0][0], snapshots[1][0])  # training moved the prompts between epochs
    w = norm.pdf(np.arange(1, EPOCHS + 1), GPA_MEAN, GPA_STD)
    w = w / w.sum()
    expected = [sum(float(w[e]) * snapshots[e][i] for e in range(EPOCHS)) for i in range(len(snapshots[0]))]
    final = [p.detach() for p in run.trained.prompt_learner.parameters()]
    saved = torch.load(os.path.join(run.out, "VLPromptLearner", f"model.pth.tar-{EPOCHS}"), weights_only=True)
    names = [n for n, _ in run.trained.prompt_learner.named_parameters()]
    for i, name in enumerate(names):
        torch.testing.assert_close(final[i], expected[i], rtol=0, atol=1e-6)
        torch.testing.assert_close(saved["state_dict"][name], expected[i], rtol=0, atol=1e-6)


@pytest.mark.parametrize("max_epoch,mean,std", [(20, 15.0, 1.0), (20, 6.0, 10.0), (50, 30.0, 30.0), (5, 2.5, 0.7)])
def test_gpa_weights_match_scipy(max_epoch, mean, std):
    expected = norm.pdf(np.arange(1, max_epoch + 1), mean, std)
    np.testing.assert_allclose(gpa_weights(max_epoch, mean, std), expected / expected.sum(), rtol=1e-12, atol=1e-15)


def test_gpa_weights_far_from_the_run_do_not_underflow():
    weights = np.array(gpa_weights(20, 200.0, 1.0))  # N(e; 200, 1) underflows to 0 for every e in float64
    assert np.isfinite(weights).all() and weights.sum() == pytest.approx(1.0) and weights.argmax() == 19
    with pytest.raises(ValueError, match="GPA_STD"):
        gpa_weights(20, 15.0, 0.0)


def test_teacher_text_features_file_holds_all_classes(run, tiny_teacher_openclip_model):
    for directory in (run.out, run.eval_out):
        record = torch.load(os.path.join(directory, "teacher_text_features.pt"), weights_only=True)
        assert record["classnames"] == run.tree.classnames and len(record["classnames"]) == 5  # base + novel
        assert (record["clip"], record["n_ctx_text"], record["n_ctx_vision"]) == (run.clip_file, 4, 4)
        assert (record["depth_text"], record["depth_vision"]) == (3, 3)
    text_prompts, _ = _prompts(run.trained)
    tokens = clip.tokenize([f"X X X X {name}." for name in run.tree.classnames])
    with torch.no_grad():
        expected = F.normalize(reference_encode_text(tiny_teacher_openclip_model, tokens, text_prompts), dim=-1)
    torch.testing.assert_close(record["text_features"], expected, rtol=0, atol=2e-5)
    teacher = build_teacher(run.clip_file, run.out, run.tree.classnames, "cpu", dataset_name="EuroSAT")
    torch.testing.assert_close(teacher.text_features, expected, rtol=0, atol=2e-5)


def test_loss_terms_match_a_hand_computation(run, tiny_teacher_openclip_model):
    trainer, oc = run.trained, tiny_teacher_openclip_model
    batch = next(iter(trainer.train_loader_x))
    images, labels = batch["img"], batch["label"]
    with torch.no_grad():
        terms, _ = trainer.loss_terms(images, labels)
        text_prompts, vision_prompts = _prompts(trainer)
        names = run.tree.classnames[:3]
        img = F.normalize(reference_encode_image(oc, images, vision_prompts), dim=-1).double().numpy()
        tokens = clip.tokenize([f"X X X X {name}." for name in names])
        txt = F.normalize(reference_encode_text(oc, tokens, text_prompts), dim=-1).double().numpy()
        frozen_img = F.normalize(oc.encode_image(images), dim=-1).double().numpy()
        # frozen targets: the 60-template ensemble, one template at a time (our plain CLIP equals open_clip's, see
        # tests/test_clip_model.py; causal attention lets the tokens after EOT be dropped, which keeps this fast)
        tokens = clip.tokenize([t.format(n) for t in PROMPTSRC_TEMPLATES for n in names])
        tokens = tokens[:, : int(tokens.argmax(-1).max()) + 1]
        per_text = F.normalize(trainer.clip_model.encode_text(tokens), dim=-1).view(60, len(names), -1)
        frozen_txt = F.normalize(per_text.mean(0), dim=-1).double().numpy()
        scale = float(oc.logit_scale.exp())
    y = labels.numpy()
    logits, zs = scale * img @ txt.T, scale * frozen_img @ frozen_txt.T
    log_p = logits - logsumexp(logits, axis=1, keepdims=True)
    log_q = zs - logsumexp(zs, axis=1, keepdims=True)
    expected = {
        "ce": -log_p[np.arange(len(y)), y].mean(),
        "scl_text": TEXT_W * np.abs(txt - frozen_txt).mean(),
        "scl_image": IMAGE_W * np.abs(img - frozen_img).mean(),
        "scl_kl": (np.exp(log_q) * (log_q - log_p)).sum() / logits.size,
    }
    assert set(terms) == set(expected)
    for name, value in expected.items():
        assert float(terms[name]) == pytest.approx(value, rel=1e-4, abs=1e-7), name


def test_promptsrc_templates_are_promptkds_60():
    assert len(PROMPTSRC_TEMPLATES) == len(set(PROMPTSRC_TEMPLATES)) == 60
    assert PROMPTSRC_TEMPLATES[0] == "a photo of a {}."
    assert set(PROMPTSRC_TEMPLATES) == set(IMAGENET_TEMPLATES[:-20])  # CLIP's 80 without the last 20


def test_ctx_init_words_beyond_the_text_context_stay_in_the_prompt(tiny_teacher_clip):
    """Upstream's rule: 2 text tokens from "a photo of a" start as "a photo" and "of a" stays a word of every class
    prompt; a context of more than 4 tokens starts at random, its prompt all placeholders."""
    two = VLPromptLearner.build(tiny_teacher_clip, n_ctx_text=2, n_ctx_vision=4, depth_text=3, depth_vision=3,
                                ctx_init="a photo of a")
    ids = clip.tokenize("a photo of a")[0, 1:3]
    assert torch.equal(two.text_prompts.prompts[0].detach(), tiny_teacher_clip.token_embedding.weight[ids])
    tokens = VLPromptCLIP(tiny_teacher_clip, two, nullcontext).prompt_tokens(["cat"])
    assert tokens[0].tolist()[:8] == clip.tokenize("a photo of a cat.")[0].tolist()[:8]
    five = VLPromptLearner.build(tiny_teacher_clip, 5, 4, 3, 3, ctx_init="a photo of a")
    tokens = VLPromptCLIP(tiny_teacher_clip, five, nullcontext).prompt_tokens(["cat"])
    assert tokens[0].tolist()[:9] == clip.tokenize("X X X X X cat.")[0].tolist()[:9]


def test_checkpoints_without_gpa_sums_load(tiny_teacher_clip):
    """Imported teachers have no GPA sums; the trainer's learner (GPA enabled) still loads them for --eval-only."""
    source = VLPromptLearner.build(tiny_teacher_clip, 4, 4, 3, 3)
    target = VLPromptLearner.build(tiny_teacher_clip, 4, 4, 3, 3)
    target.enable_gpa(max_epoch=5, mean=3.0, std=1.0)
    target.load_state_dict(source.state_dict())
    for theirs, ours in zip(source.parameters(), target.parameters()):
        assert torch.equal(theirs, ours)
    assert all(not total.any() for total in target.gpa.buffers())

