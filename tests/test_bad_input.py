"""Bad input through train.py: for each user mistake the exact first line of the message, the exit status and
what is left on disk (nothing half-written: no checkpoint, no results.json, no few-shot file before training).

Run with ``-s`` to see the matrix as a table.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from tabulate import tabulate

import clip.clip as clip_module
import train
from tests.helpers_datasets import write_image
from tests.helpers_petr import write_eurosat
from tests.helpers_run import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATRIX: list[list[str]] = []


def coop_argv(data, out, clip_file: str, *opts: str, flags: tuple = ()) -> list[str]:
    """A tiny CoOp run on the EuroSAT tree (2 shots, so a run that gets to sampling writes a few-shot file)."""
    return ["--root", str(data), "--seed", "1", "--trainer", "CoOp", *flags,
            "--dataset-config-file", "configs/datasets/eurosat.yaml",
            "--config-file", "configs/trainers/CoOp/vit_b16_ctxv1.yaml", "--output-dir", str(out),
            "MODEL.BACKBONE.NAME", clip_file, "INPUT.SIZE", "(32, 32)", "DATALOADER.NUM_WORKERS", "0",
            "DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TEST.BATCH_SIZE", "8", "USE_CUDA", "False",
            "OPTIM.MAX_EPOCH", "1", "DATASET.NUM_SHOTS", "2", "DATASET.SUBSAMPLE_CLASSES", "base", *opts]


def train_images(tree) -> list[str]:
    with open(tree.split_file) as f:
        return [os.path.join(tree.dataset_dir, "2750", rel) for rel, _, _ in json.load(f)["train"]]


def truncate(path: str) -> None:
    torch.save({"state_dict": {"w": torch.zeros(256)}, "epoch": 1}, path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


# name -> (setup(tmp, data, tree, clip_file, monkeypatch) -> (argv, expected first line), what stays on disk)
# An expected line ending in "..." is a prefix (the rest quotes torch or the OS, or lists the registry).
def _unknown_trainer(tmp, data, tree, clip_file, mp):
    argv = coop_argv(data, tmp / "run", clip_file)
    argv[argv.index("CoOp")] = "CoOpp"
    return argv, "error: Unknown trainer (TRAINER.NAME / --trainer) 'CoOpp'. Did you mean 'CoOp'..."


def _unknown_dataset(tmp, data, tree, clip_file, mp):
    return (coop_argv(data, tmp / "run", clip_file, "DATASET.NAME", "EuroSet"),
            "error: Unknown dataset (DATASET.NAME) 'EuroSet'. Did you mean 'EuroSAT'...")


def _unknown_key(tmp, data, tree, clip_file, mp):
    return (coop_argv(data, tmp / "run", clip_file, "OPTIM.LRR", "0.1"),
            "error: command-line opts: unknown config key 'OPTIM.LRR' (declare it in trainers/config.py extend_cfg "
            "or fix the typo)")


def _missing_config(tmp, data, tree, clip_file, mp):
    argv = coop_argv(data, tmp / "run", clip_file)
    argv[argv.index("configs/trainers/CoOp/vit_b16_ctxv1.yaml")] = "configs/trainers/CoOp/vit_b16_ctxv9.yaml"
    return argv, "error: trainer config file not found: configs/trainers/CoOp/vit_b16_ctxv9.yaml"


def _missing_dataset(tmp, data, tree, clip_file, mp):
    (tmp / "empty").mkdir()
    return (coop_argv(tmp / "empty", tmp / "run", clip_file),
            f"error: Dataset folder not found: {tmp / 'empty' / 'eurosat'} (expected layout for EuroSAT: see "
            "DATASETS.md#eurosat)")


def _missing_image(tmp, data, tree, clip_file, mp):
    gone = train_images(tree)[0]
    os.remove(gone)
    return coop_argv(data, tmp / "run", clip_file), f"error: Image not found: {gone} (listed in {tree.split_file}; ..."


def _corrupt_image(tmp, data, tree, clip_file, mp, workers: str = "0"):
    images = train_images(tree)
    for path in images:
        write_image(path, corrupt=True)
    return (coop_argv(data, tmp / "run", clip_file, "DATALOADER.NUM_WORKERS", workers, "DATASET.NUM_SHOTS", "0"),
            f"error: Cannot read image {tree.dataset_dir}...")


def _corrupt_image_worker(tmp, data, tree, clip_file, mp):
    return _corrupt_image(tmp, data, tree, clip_file, mp, workers="1")


def _clip_offline(tmp, data, tree, clip_file, mp):
    mp.setitem(clip_module._MODELS, "ViT-B/16", "http://127.0.0.1:9/x/ViT-B-16.pt")
    mp.setenv("CLIP_WEIGHTS_DIR", str(tmp / "weights"))
    mp.setenv("HOME", str(tmp / "home"))
    return (coop_argv(data, tmp / "run", clip_file, "MODEL.BACKBONE.NAME", "ViT-B/16"),
            "error: CLIP weights for ViT-B/16 not found (tried ...")


def _truncated_checkpoint(tmp, data, tree, clip_file, mp):
    ckpt = tmp / "trained" / "prompt_learner" / "model.pth.tar-1"
    ckpt.parent.mkdir(parents=True)
    truncate(str(ckpt))
    return (coop_argv(data, tmp / "run", clip_file, flags=("--eval-only", "--model-dir", str(tmp / "trained"),
                                                           "--load-epoch", "1")),
            f"error: {ckpt} is truncated or corrupt (...")


def _truncated_resume_state(tmp, data, tree, clip_file, mp):
    (tmp / "run").mkdir()
    truncate(str(tmp / "run" / "resume.pth.tar"))
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: {tmp / 'run' / 'resume.pth.tar'} is truncated or corrupt (...")


def _unknown_protocol(tmp, data, tree, clip_file, mp):
    return (coop_argv(data, tmp / "run", clip_file, "TRAINER.MODAL", "base2new"),
            "error: TRAINER.MODAL is 'base2new'; it must be one of base2novel, cross, dg")


def _bad_split_file(tmp, data, tree, clip_file, mp):
    with open(tree.split_file, "w") as f:
        json.dump({"train": []}, f)
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: Split file {tree.split_file} must hold a JSON object with keys train, val and test; ...")


def _value(key: str, value: str, rule: str):
    def setup(tmp, data, tree, clip_file, mp):
        return coop_argv(data, tmp / "run", clip_file, key, value), f"error: {key} is {value}; it must be {rule}"
    return setup


# case -> (setup, files left in the output folder, few-shot file written)
CASES = {
    "unknown trainer": (_unknown_trainer, ["log.txt"], False),
    "unknown dataset": (_unknown_dataset, ["log.txt"], False),
    "unknown config key": (_unknown_key, [], False),
    "missing config file": (_missing_config, [], False),
    "missing dataset folder": (_missing_dataset, ["log.txt"], False),
    "missing image": (_missing_image, ["log.txt"], False),
    "corrupt image": (_corrupt_image, ["log.txt"], False),
    "corrupt image (loader worker)": (_corrupt_image_worker, ["log.txt"], False),
    "CLIP weights offline": (_clip_offline, ["log.txt"], False),
    "truncated checkpoint": (_truncated_checkpoint, ["log.txt"], True),
    "truncated resume state": (_truncated_resume_state, ["log.txt", "resume.pth.tar"], True),
    "unknown protocol": (_unknown_protocol, ["log.txt"], False),
    "split file without val/test": (_bad_split_file, ["log.txt"], False),
    "batch size 0": (_value("DATALOADER.TRAIN_X.BATCH_SIZE", "0", "an integer >= 1"), ["log.txt"], False),
    "batch size -1": (_value("DATALOADER.TRAIN_X.BATCH_SIZE", "-1", "an integer >= 1"), ["log.txt"], False),
    "test batch size 0": (_value("DATALOADER.TEST.BATCH_SIZE", "0", "an integer >= 1"), ["log.txt"], False),
    "epochs -1": (_value("OPTIM.MAX_EPOCH", "-1", "an integer >= 0"), ["log.txt"], False),
    "shots -3": (_value("DATASET.NUM_SHOTS", "-3", "an integer >= -1 (images per class; 0 or -1: every image)"),
                 ["log.txt"], False),
    "learning rate 0": (_value("OPTIM.LR", "0.0", "a number > 0"), ["log.txt"], False),
    "λ -1.4": (_value("TRAINER.PETR.LAMBDA", "-1.4", "a number > 0"), ["log.txt"], False),
    "percentile 150": (_value("TRAINER.PETR.PERCENTILE", "150.0", "a number in (0, 100]"), ["log.txt"], False),
    "temperature 0": (_value("TRAINER.PROMPTKD.TEMPERATURE", "0.0", "a number > 0"), ["log.txt"], False),
    "KD weight -1": (_value("TRAINER.PETR.KD_WEIGHT", "-1.0", "a number >= 0"), ["log.txt"], False),
}


def _files(folder) -> list[str]:
    """Files under ``folder``, except tensorboard's event logs (written like log.txt where tensorboard is installed)."""
    if not os.path.isdir(folder):
        return []
    paths = (os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder) for f in files)
    return sorted(p for p in paths if not p.startswith(f"tensorboard{os.sep}"))


@pytest.fixture(scope="module", autouse=True)
def print_matrix():
    yield
    print("\n" + tabulate(MATRIX, headers=["case", "first line of the message", "exit", "left in the output folder",
                                           "few-shot file"], tablefmt="github"))


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_matrix(case, tmp_path, tiny_clip_file, monkeypatch, capsys):
    setup, left, fewshot = CASES[case]
    tree = write_eurosat(tmp_path / "data", train_per_class=3)
    argv, expected = setup(tmp_path, tmp_path / "data", tree, tiny_clip_file, monkeypatch)
    capsys.readouterr()
    status = train.cli(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert status == train.EXIT_USER_ERROR and len(lines) == 1, err[-3000:]
    assert err.rstrip().endswith(lines[0]) and "Traceback" not in err
    line = lines[0]
    assert line.startswith(expected[:-3]) if expected.endswith("...") else line == expected
    out = tmp_path / "run"
    assert _files(out) == left
    if "log.txt" in left:  # the error reaches the run's log too
        assert open(out / "log.txt").read().rstrip().endswith(line)
    has_fewshot = os.path.isdir(os.path.join(tree.dataset_dir, "split_fewshot"))
    assert has_fewshot == fewshot
    MATRIX.append([case, line if len(line) < 110 else line[:107] + "...", status, ", ".join(left) or "(nothing)",
                   "written (valid)" if has_fewshot else "none"])


def test_debug_shows_the_traceback(tmp_path, tiny_clip_file, capsys, monkeypatch):
    write_eurosat(tmp_path / "data", train_per_class=3)
    argv = coop_argv(tmp_path / "data", tmp_path / "run", tiny_clip_file, "DATASET.NAME", "EuroSet")
    assert train.cli(["--debug", *argv]) == train.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.rstrip().splitlines()[-1].startswith("error: Unknown")
    monkeypatch.setenv(train.DEBUG_ENV, "1")
    assert train.cli(argv) == train.EXIT_USER_ERROR and "Traceback" in capsys.readouterr().err


def test_too_many_shots_warns_naming_the_classes(tmp_path, tiny_clip_file, capsys):
    tree = write_eurosat(tmp_path / "data", train_per_class=3)
    train.main(coop_argv(tmp_path / "data", tmp_path / "run", tiny_clip_file, "DATASET.NUM_SHOTS", "4",
                         flags=("--no-train",)))
    warning = f"warning: DATASET.NUM_SHOTS is 4, but 5 of 5 classes have fewer train images in {tree.split_file}"
    log = open(tmp_path / "run" / "log.txt").read()
    assert warning in log and all(f"{name} (3)" in log for name in tree.classnames)


def test_python_train_py_exits_2_with_one_line_and_help_is_light(tmp_path):
    done = subprocess.run([sys.executable, "train.py", "--output-dir", str(tmp_path / "run"), "--trainer", "CoOp",
                           "DATALOADER.TRAIN_X.BATCH_SIZE", "0"], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 2
    assert done.stderr == "error: DATALOADER.TRAIN_X.BATCH_SIZE is 0; it must be an integer >= 1\n"
    light = subprocess.run([sys.executable, "-c", "import sys, train; train.build_parser().format_help(); "
                            "print(sorted(m for m in ('torch', 'numpy', 'engine') if m in sys.modules))"],
                           cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert light.stdout.strip() == "[]"
    help_text = subprocess.run([sys.executable, "train.py", "--help"], cwd=REPO, capture_output=True, text=True,
                               timeout=HANG_GUARD_S).stdout
    assert "trainers: CoOp, PETR, PETRCoOp, PromptKD, PromptSRC, ZeroshotCLIP" in help_text
    assert "EuroSAT" in help_text and "DemoShapesHard" in help_text


def test_every_shipped_config_passes_the_value_checks():
    """The range checks reject no yaml the project ships (trainer and dataset configs merged as the scripts do)."""
    from engine.schema import check_config
    from trainers.config import config_schema

    trainers = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(REPO, "configs", "trainers"))
                      for f in fs if f.endswith(".yaml"))
    datasets = sorted(os.path.join(REPO, "configs", "datasets", f)
                      for f in os.listdir(os.path.join(REPO, "configs", "datasets")))
    assert len(trainers) >= 25 and len(datasets) >= 15
    for trainer_yaml in trainers:
        for dataset_yaml in (datasets[0], datasets[-1]):
            args = train.build_parser().parse_args(["--config-file", trainer_yaml, "--dataset-config-file",
                                                    dataset_yaml])
            check_config(train.setup_cfg(args), config_schema())
