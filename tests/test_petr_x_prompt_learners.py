"""PETR+X on finished CoCoOp, MaPLe, IVLP and CLIP-Adapter runs: the runs of their base-to-novel scripts, PETR+X's
script on each, routed evaluations equal to ones recomputed in the test (θ_s from the papers' equations on open_clip
with the run's checkpoint tensors, θ_u the template ensemble, the Mahalanobis rule); upstream-layout checkpoints of
each scored as ours; parse_test_res.py and the tools on all these run folders."""
from __future__ import annotations

import shutil
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

import train
from engine import load_checkpoint
from tests.helpers_baselines import (
    adapter_reference,
    cocoop_reference,
    deep_prompt_reference,
    frozen_clip_entries,
    maple_reference,
)
from tests.helpers_clip import rel_err
from tests.helpers_datasets import load_images
from tests.helpers_petr import write_eurosat
from tests.helpers_routed import (
    BASE,
    NEW,
    check_analyses,
    check_petr_x_run,
    petr_x_dirs,
    script_runner,
    upstream_promptsrc_state,
)
from tests.helpers_upstream import write_dassl_checkpoint
from trainers.catalog import method_name
from trainers.routing.tuned import tuned_trainer

LEARNERS = {"cocoop": ("CoCoOp", "vit_b16_c4_ep10_batch1_ctxv1"), "maple": ("MaPLe", "vit_b16_c2_ep5_batch4_2ctx"),
            "ivlp": ("IVLP", "vit_b16_c2_ep20_batch4_4+4ctx"), "clip_adapter": ("CLIPAdapter", "vit_b16")}
"""Each learner's script name: its trainer and the default config of scripts/<x>/base2new_train.sh."""


def x_run(x: str) -> str:
    """The folder of X's base-to-novel run (scripts/<x>/base2new_train.sh, SHOTS 0) relative to the test's root."""
    trainer, config = LEARNERS[x]
    return f"output/base2new/train_base/eurosat/shots_0/{trainer}/{config}/seed1"


def x_checkpoint(root, x: str) -> str:
    """X's last checkpoint (epoch 2 of the tiny runs)."""
    return str(root / x_run(x) / tuned_trainer(LEARNERS[x][0]).TUNED_MODEL / "model.pth.tar-2")


def layers(state: dict, prefix: str) -> list[torch.Tensor]:
    """``<prefix>0``, ``<prefix>1``, ... of a state dict, in order."""
    count = sum(1 for k in state if k.startswith(prefix) and k[len(prefix):].isdigit())
    return [state[f"{prefix}{i}"].float() for i in range(count)]


def reference(x: str, state: dict):
    """(open_clip model) -> (class names, images) -> X's logits from the paper's equations with ``state``'s tensors
    (ours: keys as our learners save them)."""
    state = {k: v.float() for k, v in state.items() if torch.is_tensor(v)}
    if x == "clip_adapter":
        return lambda model: adapter_reference(model, state["fc.0.weight"], state["fc.2.weight"], 0.2)
    if x == "cocoop":
        meta_net = [(state[f"meta_net.{n}.weight"], state[f"meta_net.{n}.bias"]) for n in ("linear1", "linear2")]
        return lambda model: cocoop_reference(model, state["ctx"], meta_net)
    if x == "maple":
        text = [state["ctx"], *layers(state, "compound_prompts_text.")]
        maps = [(state["proj.weight"], state["proj.bias"])] + [
            (state[f"compound_prompt_projections.{i}.weight"], state[f"compound_prompt_projections.{i}.bias"])
            for i in range(len(text) - 1)]
        return lambda model: maple_reference(model, text, maps)
    text, vision = layers(state, "text_prompts.prompts."), layers(state, "vision_prompts.prompts.")
    return lambda model: deep_prompt_reference(model, text, vision)


def seen_branch(x: str, state: dict):
    """θ_s as ``reference_routing`` calls it: (model, class names, images) -> logits."""
    make = reference(x, state)
    return lambda model, classnames, images: make(model)(classnames, images)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_clip_file):
    """A tiny EuroSAT tree, CoCoOp, MaPLe and IVLP trained (2 epochs) and tested by their base-to-novel scripts, and
    PETR+X's base-to-novel script on each finished run (train.py commands replayed in-process)."""
    root = tmp_path_factory.mktemp("petr_x_learners")
    tree = write_eurosat(root / "data")
    runner = script_runner(root, tree, tiny_clip_file)
    scripts = {}
    for x in LEARNERS:
        for script in ("base2new_train.sh", "base2new_test.sh"):
            done, _ = runner.run(f"{x}/{script}", "eurosat", "1")
            assert done.returncode == 0, done.stderr
        scripts[x] = runner.run("petr_x/base2new.sh", x, "eurosat", "1")
    return SimpleNamespace(root=root, tree=tree, scripts=scripts)


@pytest.mark.parametrize("x", list(LEARNERS))
def test_petr_x_routes_on_a_finished_run(runs, x, tiny_openclip_model):
    done, commands = runs.scripts[x]
    assert done.returncode == 0, done.stderr
    assert len(commands) == 2 and "--eval-only" in commands[1]
    checkpoint = x_checkpoint(runs.root, x)
    base, new = petr_x_dirs(runs.root, x)
    state = load_checkpoint(checkpoint)["state_dict"]
    check_petr_x_run(base, new, runs.tree, tiny_openclip_model, seen_branch(x, state), LEARNERS[x][0], checkpoint)


def upstream_state(x: str, state: dict, model) -> tuple[dict, str]:
    """Our run's learned tensors in upstream's checkpoint layout of X (fp16, class-token buffers, frozen CLIP weights
    for the wrapper layouts) and the folder upstream saves it in."""
    learned = {k: v.half() for k, v in state.items() if torch.is_tensor(v)}
    if x == "clip_adapter":
        return learned, "clip_adapter"
    if x == "ivlp":
        text, vision = layers(state, "text_prompts.prompts."), layers(state, "vision_prompts.prompts.")
        return upstream_promptsrc_state(text, vision, text[0].shape[1]), "VLPromptLearner"
    width, n_ctx = learned["ctx"].shape[1], learned["ctx"].shape[0]
    buffers = {"token_prefix": torch.zeros(5, 1, width).half(),
               "token_suffix": torch.zeros(5, 76 - n_ctx, width).half()}
    if x == "cocoop":
        return {**learned, **buffers}, "prompt_learner"
    return ({**{f"prompt_learner.{k}": v for k, v in {**learned, **buffers}.items()},
             **frozen_clip_entries(model.visual, "image_encoder."), "logit_scale": model.logit_scale.detach().half()},
            "MultiModalPromptLearner")


@pytest.mark.parametrize("x", list(LEARNERS))
def test_upstream_checkpoints_score_as_the_papers_equations(runs, x, tmp_path, tiny_clip, tiny_clip_file,
                                                             tiny_openclip_model):
    """PETR+X's loader of X reads upstream's layout (through the restricted loader) and scores any class list."""
    trainer = LEARNERS[x][0]
    state = load_checkpoint(x_checkpoint(runs.root, x))["state_dict"]
    upstream, folder = upstream_state(x, state, tiny_openclip_model)
    marker = tmp_path / "pickled_code_ran"
    write_dassl_checkpoint(str(tmp_path / "upstream" / folder), upstream, 5, None, str(marker))
    shutil.copy(runs.root / x_run(x) / "log.txt", tmp_path / "upstream")  # Dassl's log: the config dump at its top
    args = train.build_parser().parse_args(["--trainer", "PETRX", "--config-file",
                                            "configs/trainers/PETRX/vit_b16.yaml", "MODEL.BACKBONE.NAME",
                                            tiny_clip_file, "TRAINER.PETRX.TUNED_TRAINER", trainer, "DATASET.NAME",
                                            "EuroSAT"])
    model = tuned_trainer(trainer).tuned_model(tiny_clip, train.setup_cfg(args), str(tmp_path / "upstream" / folder /
                                                                            "model.pth.tar-5"), nullcontext)
    images, _ = load_images(runs.tree, "test", BASE + NEW)
    with torch.no_grad():
        logits = model.class_scorer(runs.tree.classnames)(images)
    rounded = {k: v.half().float() for k, v in state.items() if torch.is_tensor(v)}
    expected = reference(x, rounded)(tiny_openclip_model)(runs.tree.classnames, images)
    assert logits.shape == (len(images), 5) and rel_err(logits, expected) < 1e-5
    assert not marker.exists()


def test_tools_and_parse_test_res_read_the_prompt_learners_folders(runs, tmp_path, capsys):
    # one run per method: the table names each row by its method alone
    check_analyses(runs.root, tmp_path, capsys, {"cocoop": "PETR+CoCoOp", "maple": "PETR+MaPLe", "ivlp": "PETR+IVLP",
                                                  "clip_adapter": "PETR+CLIP-Adapter"},
                   plain=tuple((method_name(LEARNERS[x][0]), x_run(x)) for x in LEARNERS))
