"""The catalogs (``trainers/catalog.py``, ``datasets/catalog.py``): ``train.py --help`` lists exactly the names the
registries hold once every module of both packages is imported, and it does so without importing torch."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from datasets.demo_specs import DEMO_DATASETS
from engine.registry import DATASET_REGISTRY, Registry
from tests.helpers_run import HANG_GUARD_S
from trainers.catalog import find_method

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EVERY_MODULE = """
import importlib, json, pkgutil
import datasets, trainers
from engine.registry import DATASET_REGISTRY, TRAINER_REGISTRY
for package in (datasets, trainers):
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
print(json.dumps({"trainers": TRAINER_REGISTRY.registered_names(), "datasets": DATASET_REGISTRY.registered_names()}))
"""
"""Imports every module file of trainers/ and datasets/ (found on disk, not through the catalogs) in a fresh process
and prints what registered itself."""

HELP_WITHOUT_TORCH = """
import runpy, sys
sys.argv = ["train.py", "--help"]
try:
    runpy.run_path("train.py", run_name="__main__")
except SystemExit:
    pass
print("modules:", " ".join(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy", "torchvision"))))
"""


def python(code: str | None = None, *argv: str) -> str:
    cmd = [sys.executable, *(["-c", code] if code else []), *argv]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def help_lists() -> dict[str, list[str]]:
    """The ``trainers:`` and ``datasets:`` lines of ``python train.py --help``."""
    lines = dict(line.split(": ", 1) for line in python(None, "train.py", "--help").splitlines()
                 if line.startswith(("trainers: ", "datasets: ")))
    return {key: value.split(", ") for key, value in lines.items()}


def test_help_lists_exactly_what_the_registries_hold():
    listed = help_lists()
    registered = json.loads(python(EVERY_MODULE).splitlines()[-1])
    assert set(listed) == {"trainers", "datasets"}
    for kind in ("trainers", "datasets"):
        assert sorted(listed[kind]) == listed[kind]  # printed sorted, each name once
        assert listed[kind] == sorted(registered[kind]), kind
    assert {"PETR", "PETRCoOp", "PromptKD"} <= set(listed["trainers"])
    assert {"EuroSAT", "ImageNet", *DEMO_DATASETS} <= set(listed["datasets"])


def test_help_does_not_import_torch():
    out = python(HELP_WITHOUT_TORCH)
    assert "trainers: " in out
    assert out.splitlines()[-1].split() == ["modules:"]


def test_a_table_entry_its_module_does_not_register_is_refused():
    registry = Registry("TEST")
    with pytest.raises(ImportError, match=r"^trainers\.prompting\.templates did not register 'Missing' in the TEST "
                                          r"registry"):
        registry.load({"Missing": "trainers.prompting.templates"})


def test_demo_readers_are_made_from_their_table():
    from datasets import demo_shapes

    for name, spec in DEMO_DATASETS.items():
        cls = DATASET_REGISTRY.get(name)
        assert cls is getattr(demo_shapes, name) and cls.__name__ == name
        assert cls.dataset_dir == spec.folder and f"``{name}``" in cls.__doc__ and spec.folder in cls.__doc__
        assert pickle.loads(pickle.dumps(cls)) is cls
    assert len({cls.dataset_dir for cls in demo_shapes.DEMO_READERS.values()}) == len(DEMO_DATASETS)


def test_dataset_folders_without_torch_are_the_readers_folders(tmp_path):
    """``datasets.layouts`` (torch-free, for the data check and the runner's job records) names the folder each
    registered reader class reads, and ``datasets.files.split_files`` the split files found there."""
    from datasets.catalog import DATASETS, register_datasets
    from datasets.files import split_files
    from datasets.layouts import LAYOUTS

    register_datasets()
    folders = {layout.name: layout.folder for layout in LAYOUTS.values()}
    assert set(folders) == set(DATASETS)
    for name in DATASETS:
        assert folders[name] == DATASET_REGISTRY.get(name).dataset_dir, name
    folder = tmp_path / "eurosat"
    (folder / "2750").mkdir(parents=True)
    for rel in ("split_zhou_EuroSAT.json", "notes.md", "split_fewshot/shot_4-seed_2.json",
                "split_fewshot/shot_4-seed_1.json", "2750/list.txt"):
        (folder / rel).parent.mkdir(exist_ok=True)
        (folder / rel).write_text("{}")
    assert split_files(str(tmp_path), "eurosat", 4, 1) == [str(folder / "split_zhou_EuroSAT.json"),
                                                          str(folder / "split_fewshot/shot_4-seed_1.json")]
    assert split_files(str(tmp_path), "eurosat") == [str(folder / "split_zhou_EuroSAT.json")]
    light = subprocess.run([sys.executable, "-c", "import sys, datasets.files; "
                            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"],
                           cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert light.stdout.strip() == "[]", light.stderr


@pytest.mark.parametrize("name,method", [
    ("PETR+CoOp", "PETR+CoOp"), ("PETRCoOp", "PETR+CoOp"), ("petr_coop", "PETR+CoOp"), ("petr+kgcoop", "PETR+KgCoOp"),
    ("teacher", "PromptSRC"), ("zsclip", "ZeroshotCLIP"), ("clip", "ZeroshotCLIP")])
def test_a_method_is_found_by_every_name_the_tables_and_folders_give_it(name, method):
    """The name the tables print, its trainer, its scripts folder (where one method has them) and the aliases."""
    assert find_method(name).name == method


def test_a_trainer_of_several_methods_is_refused_naming_them():
    with pytest.raises(ValueError, match=r"^'PETRX' is the trainer of PETR\+KgCoOp, PETR\+CoCoOp, PETR\+MaPLe, "
                                         r"PETR\+IVLP, PETR\+CLIP-Adapter: name one of them$"):
        find_method("PETRX")
