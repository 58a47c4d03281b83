"""Every trainer the project registers, through train.py on a tiny CLIP and a tiny EuroSAT tree: one epoch of
training, save, reload into a fresh eval-only run, same weights and the same results (timm and open_clip
parametrise the same way over their model lists). Each runs on an OpenAI-format CLIP file and on an open_clip CLIP
(``open_clip:local-dir:``, GELU); the distilled students' teacher is the OpenAI-format teacher file either way."""
from __future__ import annotations

import json

import pytest
import torch

import train
from engine import TRAINER_REGISTRY, get_cfg_default
from tests.helpers_petr import write_eurosat
from tests.helpers_run import train_argv
from trainers.catalog import TRAINERS, register_trainers
from trainers.config import extend_cfg

register_trainers()

PROJECT_TRAINERS = sorted(name for name in TRAINER_REGISTRY.registered_names()
                          if TRAINER_REGISTRY.get(name).__module__.startswith("trainers."))


TRAINS_NOTHING = {"PETRX"}
"""Trainers that route a finished run (tested on such runs in tests/test_trainer_petr_x.py)."""


def test_the_project_registers_exactly_the_catalogs_trainers():
    """What the modules register is what the catalog lists, so the smoke tests below run every method's trainer."""
    assert PROJECT_TRAINERS == sorted(TRAINERS)


def smoke_argv(name: str, root, out, clip_file: str, teacher_file: str, *flags: str) -> list[str]:
    """A one-epoch run of ``name`` with its demo config (tiny batches; plain-CLIP teacher for the students)."""
    ns = TRAINER_REGISTRY.get(name).NS
    opts = ["DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TEST.BATCH_SIZE", "8", "OPTIM.MAX_EPOCH", "1",
            "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "base"]
    if "TEACHER_NAME" in extend_cfg(get_cfg_default()).TRAINER[ns]:
        opts += [f"TRAINER.{ns}.TEACHER_NAME", teacher_file, f"TRAINER.{ns}.TEACHER_CKPT", ""]
    return train_argv(name, "demo", root, out, *opts, flags=flags, backbone=clip_file, tiny=False)


@pytest.mark.parametrize("backbone", ["openai", "open_clip"])
@pytest.mark.parametrize("name", [name for name in PROJECT_TRAINERS if name not in TRAINS_NOTHING])
def test_train_save_reload(tmp_path, tiny_clip_file, tiny_teacher_clip_file, tiny_openclip_name, name, backbone):
    write_eurosat(tmp_path / "data")
    run = tmp_path / "run"
    student = tiny_clip_file if backbone == "openai" else tiny_openclip_name
    args = (tmp_path / "data", run, student, tiny_teacher_clip_file)
    fresh = train.main(smoke_argv(name, *args[:1], tmp_path / "fresh", *args[2:], "--no-train"))
    trained = train.main(smoke_argv(name, *args))
    reloaded = train.main(smoke_argv(name, args[0], tmp_path / "eval", *args[2:], "--eval-only", "--model-dir",
                                     str(run), "--load-epoch", "last"))
    names = trained.get_model_names()
    assert names == reloaded.get_model_names() == fresh.get_model_names()
    for model in names:
        trained_state = trained.get_model(model).state_dict()
        assert trained_state.keys() == reloaded.get_model(model).state_dict().keys()
        for key, value in reloaded.get_model(model).state_dict().items():
            same = torch.equal(value, trained_state[key]) if torch.is_tensor(value) else value == trained_state[key]
            assert same, f"{model}.{key} differs after the reload"
        changed = [k for k, v in fresh.get_model(model).state_dict().items()
                   if torch.is_tensor(v) and v.is_floating_point() and not torch.equal(v, trained_state[k])]
        assert changed, f"{model}: the training epoch changed no weight"
    result = json.loads((run / "results.json").read_text())
    assert json.loads((tmp_path / "eval" / "results.json").read_text()) == result
    assert result["trainer"] == name and 0.0 <= result["accuracy"] <= 100.0
    assert json.loads((run / "run.json").read_text())["config"]["MODEL.BACKBONE.NAME"] == student
