"""PETR+X: routing on finished CoOp and PromptSRC runs (ours and upstream's layout) through scripts/petr_x, checked
against routed evaluations recomputed from open_clip forwards written in the test; the tools and parse_test_res.py
on its run folders; the routed-trainer requirements and the lifecycle a plug-in shares with a trained run."""
from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import clip
import train
from engine import TrainerX, load_checkpoint
from engine.errors import ConfigError, InvalidInputError
from tests.helpers_clip import reference_encode_image, reference_encode_text
from tests.helpers_datasets import load_images, write_tree
from tests.helpers_petr import write_eurosat
from tests.helpers_routed import (
    TINY,
    check_analyses,
    check_petr_x_run,
    coop_branch,
    ensemble_reference,
    petr_x_dirs,
    run_argv,
    script_runner,
    upstream_promptsrc_state,
)
from tests.helpers_run import train_argv
from tests.helpers_upstream import write_dassl_checkpoint
from trainers.petr_coop import PETRCoOp
from trainers.petr_x import PETRX
from trainers.routing.routed import RoutedTrainerMixin


def promptsrc_branch(text: list[torch.Tensor], vision: list[torch.Tensor]):
    """θ_s of PromptSRC prompts from open_clip: deep text prompts on 'X X X X <name>.', deep vision prompts."""

    @torch.no_grad()
    def logits(model, classnames: list[str], images: torch.Tensor) -> torch.Tensor:
        tokens = clip.tokenize([f"{' '.join(['X'] * text[0].shape[0])} {name}." for name in classnames])
        text_features = F.normalize(reference_encode_text(model, tokens, text), dim=-1)
        image = F.normalize(reference_encode_image(model, images, vision), dim=-1)
        return model.logit_scale.exp() * image @ text_features.t()

    return logits


def promptsrc_prompts(run) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Text and vision prompt layers of our PromptSRC run's last checkpoint."""
    state = load_checkpoint(str(run / "VLPromptLearner" / "model.pth.tar-2"))["state_dict"]
    layers = [[state[f"{kind}_prompts.prompts.{i}"] for i in range(3)] for kind in ("text", "vision")]
    return layers[0], layers[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_clip_file):
    """A tiny EuroSAT tree, finished 2-epoch CoOp and PromptSRC runs on its base classes, and PETR+X's base-to-novel
    script run on both (its train.py commands replayed in-process)."""
    root = tmp_path_factory.mktemp("petr_x")
    tree = write_eurosat(root / "data")  # 6 train images per class: a full-rank router fit
    coop, promptsrc = root / "coop", root / "promptsrc"
    train.main(run_argv(tree.root, coop, "CoOp", tiny_clip_file, "base"))
    train.main(run_argv(tree.root, promptsrc, "PromptSRC", tiny_clip_file, "base",
                        "TRAINER.PROMPTSRC.PROMPT_DEPTH_TEXT", "3", "TRAINER.PROMPTSRC.PROMPT_DEPTH_VISION", "3",
                        config="vit_b16_c2_ep20_batch4_4+4ctx"))
    runner = script_runner(root, tree, tiny_clip_file)
    scripts = {x: runner.run("petr_x/base2new.sh", x, "eurosat", "1", str(run))
               for x, run in (("coop", coop), ("promptsrc", promptsrc))}
    return SimpleNamespace(root=root, tree=tree, coop=coop, promptsrc=promptsrc, scripts=scripts)


def test_petr_x_on_our_coop_run(runs, tiny_openclip_model):
    done, commands = runs.scripts["coop"]
    assert done.returncode == 0, done.stderr
    assert len(commands) == 2 and "--eval-only" in commands[1] and "TRAINER.PETRX.TUNED_MODEL_DIR" in commands[1]
    base, new = petr_x_dirs(runs.root, "coop")
    ctx = load_checkpoint(str(runs.coop / "prompt_learner" / "model.pth.tar-2"))["state_dict"]["ctx"]
    check_petr_x_run(base, new, runs.tree, tiny_openclip_model, coop_branch(ctx), "CoOp",
                     str(runs.coop / "prompt_learner" / "model.pth.tar-2"))
    assert "Training-free plug-in" in (base / "log.txt").read_text()


def test_petr_x_on_our_promptsrc_run(runs, tiny_openclip_model, tiny_clip_file):
    done, _ = runs.scripts["promptsrc"]
    assert done.returncode == 0, done.stderr
    base, new = petr_x_dirs(runs.root, "promptsrc")
    check_petr_x_run(base, new, runs.tree, tiny_openclip_model, promptsrc_branch(*promptsrc_prompts(runs.promptsrc)),
                     "PromptSRC", str(runs.promptsrc / "VLPromptLearner" / "model.pth.tar-2"))
    runner = script_runner(runs.root, runs.tree, tiny_clip_file)
    done, _ = runner.run("petr_x/base2new.sh", "promptsrc", "eurosat", "1", str(runs.promptsrc))
    assert done.returncode == 0 and runner.skipped == [True, True]


def test_petr_x_on_upstream_run_folders(runs, tmp_path, tiny_clip_file, tiny_openclip_model):
    marker = str(tmp_path / "pickled_code_ran")
    text, vision = promptsrc_prompts(runs.promptsrc)
    upstream_src = tmp_path / "upstream" / "PromptSRC"
    write_dassl_checkpoint(str(upstream_src / "VLPromptLearner"),
                           upstream_promptsrc_state(text, vision, text[0].shape[1]), 20, None, marker)
    shutil.copy(runs.promptsrc / "log.txt", upstream_src / "log.txt")  # Dassl's log: the config dump at its top
    coop = load_checkpoint(str(runs.coop / "prompt_learner" / "model.pth.tar-2"))
    ctx = coop["state_dict"]["ctx"].half()
    upstream_coop = tmp_path / "upstream" / "CoOp"
    write_dassl_checkpoint(str(upstream_coop / "prompt_learner"),
                           {"ctx": ctx, "token_prefix": torch.zeros(3, 1, ctx.shape[1]).half(),
                            "token_suffix": torch.zeros(3, 72, ctx.shape[1]).half()}, 2, coop["optimizer"], marker)
    runner = script_runner(tmp_path, runs.tree, tiny_clip_file)
    for x, folder, model_name, branch in (
            ("promptsrc", upstream_src, "VLPromptLearner",
             promptsrc_branch([t.half().float() for t in text], [v.half().float() for v in vision])),
            ("coop", upstream_coop, "prompt_learner", coop_branch(ctx.float()))):
        done, _ = runner.run("petr_x/base2new.sh", x, "eurosat", "1", str(folder))
        assert done.returncode == 0, done.stderr
        base, new = petr_x_dirs(tmp_path, x)
        checkpoint = str(folder / model_name / ("model.pth.tar-20" if x == "promptsrc" else "model.pth.tar-2"))
        check_petr_x_run(base, new, runs.tree, tiny_openclip_model, branch, "PromptSRC" if x == "promptsrc" else "CoOp",
                         checkpoint)
        assert "ignored scheduler (" in (base / "log.txt").read_text()
    assert not os.path.exists(marker)
    assert "Upstream teacher" in (petr_x_dirs(tmp_path, "promptsrc")[0] / "log.txt").read_text()


def test_petr_x_bad_input_gives_one_clear_error(runs, tmp_path, tiny_clip_file):
    tree = runs.tree

    def petr_x(out, *opts, flags=()):
        return train.main(run_argv(tree.root, tmp_path / out, "PETRX", tiny_clip_file, "base", *opts, flags=flags,
                                   config="vit_b16"))

    with pytest.raises(ConfigError, match=r"TRAINER.PETRX.TUNED_MODEL_DIR is empty"):
        petr_x("empty")
    with pytest.raises(ValueError, match=r"TUNED_TRAINER.*PromptSRC"):
        petr_x("unknown", "TRAINER.PETRX.TUNED_TRAINER", "PromptSCR", "TRAINER.PETRX.TUNED_MODEL_DIR", str(runs.coop))
    with pytest.raises(FileNotFoundError, match=r"has no VLPromptLearner/ folder \(not a PromptSRC run directory\)"):
        petr_x("wrong", "TRAINER.PETRX.TUNED_TRAINER", "PromptSRC", "TRAINER.PETRX.TUNED_MODEL_DIR", str(runs.coop))
    csc = tmp_path / "csc"
    write_dassl_checkpoint(str(csc / "prompt_learner"), {"ctx": torch.zeros(5, 4, 64)}, 1, None, str(tmp_path / "m"))
    with pytest.raises(InvalidInputError, match=r"class-specific context.*CSC False"):
        petr_x("csc_run", "TRAINER.PETRX.TUNED_MODEL_DIR", str(csc))
    # a router fit set other than the tuned run's training images (another seed) is said in a note
    petr_x("seed2", "TRAINER.PETRX.TUNED_MODEL_DIR", str(runs.coop), "SEED", "2", flags=("--no-train",))
    assert "seed 1 there, 2 here): the router is fitted on other images" in (tmp_path / "seed2/log.txt").read_text()
    # the novel evaluation must use the router fitted for the same θ_s: another CoOp checkpoint is refused
    other = tmp_path / "other_coop"
    write_dassl_checkpoint(str(other / "prompt_learner"), {"ctx": torch.zeros(4, 64)}, 1, None, str(tmp_path / "m"))
    base, _ = petr_x_dirs(runs.root, "coop")
    with pytest.raises(InvalidInputError, match=r"fitted for other inputs \(tuned_checkpoint_sha256.*REFIT_ROUTER"):
        petr_x("mismatch", "TRAINER.PETRX.TUNED_MODEL_DIR", str(other), "DATASET.SUBSAMPLE_CLASSES", "new",
               flags=("--eval-only", "--model-dir", str(base)))


def test_tools_and_parse_test_res_read_petr_x_folders(runs, tmp_path, capsys):
    # PETR+X on CoOp or on the teacher is no method of the catalog's (PETR+CoOp is PETRCoOp): the trainer labels them
    check_analyses(runs.root, tmp_path, capsys, {"coop": "PETRX/vit_b16_coop", "promptsrc": "PETRX/vit_b16_promptsrc"})


def test_petr_x_cross_dataset(runs, tmp_path, tiny_clip_file, tiny_openclip_model):
    imagenet = write_tree("ImageNet", runs.tree.root)
    source_run = tmp_path / "coop_imagenet"
    train.main(train_argv("CoOp", "vit_b16_ep50_ctxv1", runs.tree.root, source_run, *TINY, dataset="imagenet",
                          backbone=tiny_clip_file, tiny=False))
    done, _ = script_runner(tmp_path, runs.tree, tiny_clip_file).run("petr_x/xd.sh", "coop", "eurosat", "1",
                                                                     str(source_run))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "output/xd/train/eurosat/shots_0/PETRX/vit_b16_coop/seed1"
    result = json.loads((out / "results.json").read_text())
    ctx = load_checkpoint(str(source_run / "prompt_learner" / "model.pth.tar-2"))["state_dict"]["ctx"]
    images, labels = load_images(runs.tree, "test", list(range(5)))
    names = runs.tree.classnames
    q_s = coop_branch(ctx)(tiny_openclip_model, names, images)
    q_u = ensemble_reference(tiny_openclip_model, names, images)
    for key, logits in (("acc_seen_branch", q_s), ("acc_unseen_branch", q_u)):
        assert result[key] == pytest.approx(100 * (logits.argmax(1) == labels).double().mean().item()), key
    fit = torch.load(out / "router_fit_logits.pt", weights_only=True)["q"]
    n_source = sum(1 for _, tag in imagenet.truth.values() if tag == "train")
    assert fit.shape == (n_source, 10)  # the source's training images, scored over the 5 target classes
    assert result["protocol"] == "cross" and result["n_seen"] == 0 and result["num_eval_classes"] == 5


def test_a_routed_trainer_must_provide_branch_scorer_and_router_keys(runs, tmp_path, tiny_clip_file):
    class NoScorer(RoutedTrainerMixin, TrainerX):
        NS = "PETRX"

    class NoRouterKeys(RoutedTrainerMixin, TrainerX):
        NS = "COOP"

        def branch_scorer(self):
            return lambda images: (images, images)

    cfg = train.setup_cfg(train.build_parser().parse_args(run_argv(runs.tree.root, tmp_path, "PETRX",
                                                                   tiny_clip_file, "base", config="vit_b16")))
    with pytest.raises(TypeError, match=r"NoScorer cannot be routed: it lacks branch_scorer\(\)"):
        NoScorer(cfg)
    with pytest.raises(ConfigError, match=r"TRAINER.COOP lacks the router keys \['ROUTER', 'LAMBDA'"):
        NoRouterKeys(cfg)
    assert not os.listdir(tmp_path)  # refused before any data or output was touched


def recorded(cls):
    """``cls`` logging its lifecycle hooks and router fits in ``events``."""

    class Recorded(cls):
        def __init__(self, cfg):
            self.events = []
            super().__init__(cfg)
            fit = self.routing.fit

            def recorded_fit(save_dir):
                self.events.append("router fit")
                return fit(save_dir)

            self.routing.fit = recorded_fit

        def before_train(self):
            self.events.append("before_train")
            super().before_train()

        def run_epoch(self):
            self.events.append("epoch")
            super().run_epoch()

        def after_train(self):
            self.events.append("after_train")
            super().after_train()

        def deploy(self):
            self.events.append("deploy")
            super().deploy()
            self.events.append("deployed")

        def test(self, split=None):
            self.events.append("test")
            return super().test(split)

    return Recorded


def test_plugins_go_through_the_lifecycle_of_a_trained_run(runs, tmp_path, tiny_clip_file):
    train.register_project()

    def events(cls, trainer: str, out: str, *opts: str, config: str = "vit_b16_ctxv1") -> list[str]:
        args = train.build_parser().parse_args(run_argv(runs.tree.root, tmp_path / out, trainer, tiny_clip_file,
                                                        "base", *opts, config=config))
        trainer = recorded(cls)(train.setup_cfg(args))
        trainer.train()
        return trainer.events

    trained = events(PETRCoOp, "PETRCoOp", "trained")
    plugin = events(PETRCoOp, "PETRCoOp", "plugin", "TRAINER.PETRCOOP.COOP_MODEL_DIR", str(runs.coop))
    petr_x = events(PETRX, "PETRX", "petr_x", "TRAINER.PETRX.TUNED_MODEL_DIR", str(runs.coop), config="vit_b16")
    lifecycle = ["before_train", "after_train", "deploy", "router fit", "deployed", "test"]
    assert trained == ["before_train", "epoch", "epoch", *lifecycle[1:]]
    assert plugin == lifecycle and petr_x == lifecycle
