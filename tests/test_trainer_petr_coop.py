"""PETRCoOp: the training-free plug-in on a CoOp run directory and the trained variant, checked against routed
accuracies recomputed in the test from open_clip forwards (CoOp prompt by hand, template ensemble, router)."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

import clip
import train
from engine import load_checkpoint
from tests.helpers_datasets import write_tree
from tests.helpers_routed import (
    BASE,
    NEW,
    check_against_reference,
    coop_branch,
    reference_routing,
    run_argv,
    script_runner,
)
from tests.helpers_run import refused_line
from tests.helpers_upstream import write_dassl_checkpoint
from trainers.petr_coop import coop_checkpoint_path


@pytest.fixture(scope="module")
def coop_run(tmp_path_factory, tiny_clip_file):
    """A tiny EuroSAT tree and a finished 2-epoch CoOp run on its base classes (the plug-in's input)."""
    root = tmp_path_factory.mktemp("petr_coop")
    tree = write_tree("EuroSAT", root / "data", mode="json")
    run = root / "coop"
    train.main(run_argv(root / "data", run, "CoOp", tiny_clip_file, "base"))
    return tree, run


def test_plugin_script_on_a_coop_run_routes_without_training(tmp_path, coop_run, tiny_clip_file,
                                                             tiny_openclip_model):
    tree, coop_dir = coop_run
    ctx = load_checkpoint(str(coop_dir / "prompt_learner" / "model.pth.tar-2"))["state_dict"]["ctx"]
    runner = script_runner(tmp_path, tree, tiny_clip_file)
    # the novel step stops: base was not run yet
    done, commands = runner.run("petr_coop/plugin.sh", "eurosat", "1", str(coop_dir))
    assert done.returncode == 2 and "no finished run" in done.stderr and len(commands) == 1
    assert "--eval-only" not in commands[0] and "TRAINER.PETRCOOP.COOP_MODEL_DIR" in commands[0]
    # base is finished; the novel evaluation runs now
    done, commands = runner.run("petr_coop/plugin.sh", "eurosat", "1", str(coop_dir))
    assert done.returncode == 0 and len(commands) == 2 and runner.skipped == [True, False]
    assert "--eval-only" in commands[1] and commands[1][commands[1].index("--load-epoch") + 1] == "last"
    base = tmp_path / "output/base2new/train_base/eurosat/shots_0/PETRCoOp/vit_b16_ctxv1_plugin/seed1"
    new = tmp_path / "output/base2new/test_new/eurosat/shots_0/PETRCoOp/vit_b16_ctxv1_plugin/seed1"

    # No optimiser step: the run folder's θ_s is the CoOp checkpoint's context bit for bit; no epoch was logged.
    log = (base / "log.txt").read_text()
    assert "epoch [" not in log and "Training-free plug-in" in log
    assert torch.equal(load_checkpoint(str(base / "prompt_learner" / "model.pth.tar-2"))["state_dict"]["ctx"], ctx)
    result = check_against_reference(base, reference_routing(tree, tiny_openclip_model, coop_branch(ctx), BASE))
    assert result["plugin"] is True and result["trainer"] == "PETRCoOp" and result["num_templates"] == 3
    assert result["router"] == "mahalanobis" and result["num_classes"] == 5 and result["num_eval_classes"] == 3
    assert json.loads((base / "router.json").read_text())["threshold"] == pytest.approx(result["threshold"])

    # Novel classes: context and router reloaded from the plug-in's folder, nothing refitted or trained.
    new_result = check_against_reference(new, reference_routing(tree, tiny_openclip_model, coop_branch(ctx), NEW))
    assert new_result["threshold"] == pytest.approx(result["threshold"])
    assert not os.path.exists(new / "router.pth.tar") and "epoch [" not in (new / "log.txt").read_text()
    done, commands = runner.run("petr_coop/plugin.sh", "eurosat", "1", str(coop_dir))
    assert done.returncode == 0 and runner.skipped == [True, True]


def test_trained_in_the_same_run_then_novel_from_its_folder(tmp_path, coop_run, tiny_clip_file,
                                                            tiny_openclip_model):
    tree, _ = coop_run
    runner = script_runner(tmp_path, tree, tiny_clip_file)
    done, _ = runner.run("petr_coop/base2new_train.sh", "eurosat", "1")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "output/base2new/train_base/eurosat/shots_0/PETRCoOp/vit_b16_ctxv1/seed1"
    assert "epoch [2/2]" in (out / "log.txt").read_text()
    checkpoint = load_checkpoint(str(out / "prompt_learner" / "model.pth.tar-2"))
    ctx = checkpoint["state_dict"]["ctx"]
    init = clip.load_model(tiny_clip_file).token_embedding(clip.tokenize("a photo of a"))[0, 1:5]
    assert not torch.allclose(ctx, init)  # θ_s was trained
    assert set(checkpoint["state_dict"]) == {"ctx"}  # CoOp's checkpoint layout
    result = check_against_reference(out, reference_routing(tree, tiny_openclip_model, coop_branch(ctx), BASE))
    assert result["plugin"] is False and os.path.isfile(out / "router.pth.tar")

    done, commands = runner.run("petr_coop/base2new_test.sh", "eurosat", "1")
    assert done.returncode == 0 and "--eval-only" in commands[0]
    new = tmp_path / "output/base2new/test_new/eurosat/shots_0/PETRCoOp/vit_b16_ctxv1/seed1"
    check_against_reference(new, reference_routing(tree, tiny_openclip_model, coop_branch(ctx), NEW))


def test_bad_input_gives_one_clear_error(tmp_path, coop_run, tiny_clip_file):
    tree, coop_dir = coop_run
    with pytest.raises(ValueError, match=r"TRAINER.COOP.CSC False"):
        train.main(run_argv(tree.root, tmp_path / "csc", "PETRCoOp", tiny_clip_file, "base",
                            "TRAINER.COOP.CSC", "True"))
    with pytest.raises(FileNotFoundError, match=r"no prompt_learner/ folder.*train CoOp first"):
        coop_checkpoint_path(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"model.pth.tar-7.*saved there: \['model.pth.tar-2'\]"):
        coop_checkpoint_path(str(coop_dir), 7)
    assert coop_checkpoint_path(str(coop_dir)) == coop_checkpoint_path(str(coop_dir), 2)
    unrecorded = tmp_path / "unrecorded"  # its checkpoints alone: the config's prompt settings must fit them
    shutil.copytree(coop_dir / "prompt_learner", unrecorded / "prompt_learner")
    with pytest.raises(ValueError, match=r"use the N_CTX / CTX_INIT / CSC settings"):
        train.main(run_argv(tree.root, tmp_path / "nctx", "PETRCoOp", tiny_clip_file, "base",
                        "TRAINER.COOP.CTX_INIT", "a", "TRAINER.PETRCOOP.COOP_MODEL_DIR", str(unrecorded)))
    with pytest.raises(FileNotFoundError, match=r"No router in .*REFIT_ROUTER True"):
        train.main(run_argv(tree.root, tmp_path / "norouter", "PETRCoOp", tiny_clip_file, "new",
                        flags=("--eval-only", "--model-dir", str(coop_dir), "--load-epoch", "2")))



def test_plugin_builds_its_branch_with_the_coop_runs_recorded_settings(tmp_path, coop_run, tiny_clip_file,
                                                                      tiny_openclip_model, capsys):
    """A CoOp run whose record (run.json) says CLASS_TOKEN_POSITION middle: the plug-in's θ_s puts the class token in
    the middle (the routed accuracies of the hand-written "ctx[:n/2] <name> ctx[n/2:]." prompts), with one Note as
    PETR+X gives, and its identity holds the value; the record changed to end afterwards, a rerun is refused, not
    skipped."""
    tree, coop_dir = coop_run
    middle = tmp_path / "coop"
    shutil.copytree(coop_dir, middle)
    identity = json.loads((middle / "run.json").read_text())
    identity["config"]["TRAINER.COOP.CLASS_TOKEN_POSITION"] = "middle"
    (middle / "run.json").write_text(json.dumps(identity))
    ctx = load_checkpoint(str(middle / "prompt_learner" / "model.pth.tar-2"))["state_dict"]["ctx"]
    out = tmp_path / "petr_coop"
    argv = run_argv(tree.root, out, "PETRCoOp", tiny_clip_file, "base", "TRAINER.PETRCOOP.COOP_MODEL_DIR", str(middle))
    assert train.cli(argv) == 0
    check_against_reference(out, reference_routing(tree, tiny_openclip_model, coop_branch(ctx, "middle"), BASE))
    note = (f"Note: {middle} records TRAINER.COOP.CLASS_TOKEN_POSITION 'middle' (this config: 'end') in "
            f"{middle / 'run.json'}: its prompts are read with the recorded values")
    assert note in (out / "log.txt").read_text().splitlines()
    assert json.loads((out / "run.json").read_text())["config"]["TRAINER.COOP.CLASS_TOKEN_POSITION"] == "middle"
    identity["config"]["TRAINER.COOP.CLASS_TOKEN_POSITION"] = "end"
    (middle / "run.json").write_text(json.dumps(identity))
    capsys.readouterr()
    assert train.cli(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        refused_line(out, 'TRAINER.COOP.CLASS_TOKEN_POSITION "middle" → "end"')]

def upstream_coop_run(coop_dir, dest, marker: str) -> torch.Tensor:
    """The CoOp run rewritten as upstream Dassl saves it (fp16 ctx + class-token buffers, optimiser, pickled
    scheduler objects); returns the context as the plug-in must see it."""
    ours = load_checkpoint(str(coop_dir / "prompt_learner" / "model.pth.tar-2"))
    ctx = ours["state_dict"]["ctx"].half()
    width = ctx.shape[-1]
    state = {"ctx": ctx, "token_prefix": torch.zeros(3, 1, width).half(),
             "token_suffix": torch.zeros(3, 77 - 1 - ctx.shape[0], width).half()}
    write_dassl_checkpoint(str(dest / "prompt_learner"), state, 2, ours["optimizer"], marker)
    return ctx.float()


def test_plugin_eval_only_and_resume_on_an_upstream_coop_run(tmp_path, coop_run, tiny_clip_file, tiny_openclip_model,
                                                              capsys):
    tree, coop_dir = coop_run
    marker = str(tmp_path / "pickled_code_ran")
    upstream = tmp_path / "upstream_coop"
    ctx = upstream_coop_run(coop_dir, upstream, marker)
    runner = script_runner(tmp_path, tree, tiny_clip_file)
    runner.run("petr_coop/plugin.sh", "eurosat", "1", str(upstream))
    done, _ = runner.run("petr_coop/plugin.sh", "eurosat", "1", str(upstream))
    assert done.returncode == 0 and not os.path.exists(marker)
    base = tmp_path / "output/base2new/train_base/eurosat/shots_0/PETRCoOp/vit_b16_ctxv1_plugin/seed1"
    new = tmp_path / "output/base2new/test_new/eurosat/shots_0/PETRCoOp/vit_b16_ctxv1_plugin/seed1"
    check_against_reference(base, reference_routing(tree, tiny_openclip_model, coop_branch(ctx), BASE))
    check_against_reference(new, reference_routing(tree, tiny_openclip_model, coop_branch(ctx), NEW))
    assert "ignored scheduler (" in (base / "log.txt").read_text()

    out = tmp_path / "eval_new"  # CoOp --eval-only straight from the upstream run folder, on the novel classes
    train.main(run_argv(tree.root, out, "CoOp", tiny_clip_file, "new",
                    flags=("--eval-only", "--model-dir", str(upstream), "--load-epoch", "2")))
    expected = reference_routing(tree, tiny_openclip_model, coop_branch(ctx), NEW)["acc_seen_branch"]
    assert json.loads((out / "results.json").read_text())["accuracy"] == pytest.approx(expected, abs=1e-6)

    resumed = tmp_path / "resumed"  # --resume continues the upstream run at epoch 3 of 3
    train.main(run_argv(tree.root, resumed, "CoOp", tiny_clip_file, "base", "OPTIM.MAX_EPOCH", "3",
                    flags=("--resume", str(upstream))))
    log = (resumed / "log.txt").read_text()
    assert "epoch [3/3]" in log and "epoch [1/3]" not in log and "advanced the scheduler by 2 epoch(s)" in log
    assert load_checkpoint(str(resumed / "prompt_learner" / "model.pth.tar-3"))["epoch"] == 3
    assert not os.path.exists(marker)
