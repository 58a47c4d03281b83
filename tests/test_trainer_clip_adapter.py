"""CLIP-Adapter against its paper's equations done by hand (open_clip forwards, NumPy adapter), its recipe and
parameter count, one cross-entropy step, an upstream checkpoint evaluated on the novel classes, and its residual ratio
read from the run's record."""
from __future__ import annotations

import json

import pytest
import torch

import train
from engine import load_checkpoint
from tests.helpers_baselines import (
    adapter_reference,
    argv,
    check_cross_entropy_step,
    check_scores,
    check_upstream_accuracy,
    eval_only,
    shipped_options,
    upstream_run,
)
from tests.helpers_datasets import write_tree
from trainers.clip_adapter import FeatureAdapter

CONFIG = "vit_b16"
def test_upstream_recipe_and_trainable_parameters_of_vit_b16():
    """CoOp's ViT-B/16 schedule (upstream runs CLIP-Adapter with CoOp's configs), reduction 4, ratio 0.2: on
    ViT-B/16's 512-wide features the adapter learns 512·128 + 128·512 values, no biases."""
    cfg, opts = shipped_options("CLIPAdapter", CONFIG)
    assert (opts.REDUCTION, opts.RATIO, opts.PREC) == (4, 0.2, "fp32")
    assert (cfg.OPTIM.NAME, cfg.OPTIM.LR, cfg.OPTIM.MAX_EPOCH, cfg.DATALOADER.TRAIN_X.BATCH_SIZE) == ("sgd", 0.002,
                                                                                                    200, 32)
    adapter = FeatureAdapter(512, opts.REDUCTION, opts.RATIO)
    assert {k: tuple(v.shape) for k, v in adapter.state_dict().items()} == {"fc.0.weight": (128, 512),
                                                                            "fc.2.weight": (512, 128)}
    assert sum(p.numel() for p in adapter.parameters()) == 131072


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_clip_file):
    """A tiny EuroSAT tree and CLIP-Adapter built on its base classes (not trained), its weights drawn far from
    their start."""
    root = tmp_path_factory.mktemp("clip_adapter")
    tree = write_tree("EuroSAT", root / "data", mode="json")
    trainer = train.main(argv(root / "data", root / "run", "CLIPAdapter", CONFIG, tiny_clip_file, "base",
                              flags=("--no-train",)))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in trainer.adapter.parameters():
            p.normal_(std=0.3)
    return tree, trainer


def test_scores_and_one_step_equal_the_papers_equations(built, tiny_openclip_model):
    tree, trainer = built
    adapter = trainer.adapter
    reference = adapter_reference(tiny_openclip_model, adapter.fc[0].weight, adapter.fc[2].weight, 0.2)
    check_scores(tree, trainer, reference)
    before = check_cross_entropy_step(tree, trainer, reference)
    assert all(not torch.equal(before[k], v) for k, v in adapter.state_dict().items())  # both layers learned


def test_an_upstream_checkpoint_scores_the_novel_classes(tmp_path, tiny_clip_file, tiny_openclip_model):
    """Upstream's layout (``clip_adapter/``, fc.0 / fc.2, a pickled scheduler that must not run) read by --eval-only
    on the novel classes; the run records no ratio, so the config's 0.2 is used."""
    tree = write_tree("EuroSAT", tmp_path / "data", mode="json")
    torch.manual_seed(1)
    state = {"fc.0.weight": torch.randn(8, 32) * 0.3, "fc.2.weight": torch.randn(32, 8) * 0.3}
    model_dir = upstream_run(tmp_path, "upstream", "clip_adapter", state, 5)
    train.main(eval_only(tree, tmp_path / "out", "CLIPAdapter", CONFIG, tiny_clip_file, model_dir, 5))
    check_upstream_accuracy(tree, tmp_path / "out",
                            adapter_reference(tiny_openclip_model, state["fc.0.weight"], state["fc.2.weight"], 0.2))
    assert not (tmp_path / "pickled_code_ran").exists()


def test_eval_only_takes_the_ratio_the_run_records(tmp_path, tiny_clip_file, tiny_openclip_model, capsys):
    """A run trained with RATIO 0.5 is evaluated with 0.5 under a config saying 0.2 (its RECORDED_KEYS), with a
    note naming both."""
    tree = write_tree("EuroSAT", tmp_path / "data", mode="json")
    run = tmp_path / "run"
    train.main(argv(tmp_path / "data", run, "CLIPAdapter", CONFIG, tiny_clip_file, "base",
                    "TRAINER.CLIPADAPTER.RATIO", "0.5"))
    state = load_checkpoint(str(run / "clip_adapter" / "model.pth.tar-1"))["state_dict"]
    capsys.readouterr()
    train.main(eval_only(tree, tmp_path / "out", "CLIPAdapter", CONFIG, tiny_clip_file, str(run), 1))
    assert "TRAINER.CLIPADAPTER.RATIO 0.5 (this config: 0.2)" in capsys.readouterr().out
    check_upstream_accuracy(tree, tmp_path / "out",
                            adapter_reference(tiny_openclip_model, state["fc.0.weight"], state["fc.2.weight"], 0.5))
    with open(tmp_path / "out" / "results.json") as f:
        assert json.load(f)["ratio"] == 0.5
