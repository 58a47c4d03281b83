"""Bad input through train.py: for each user mistake the exact first line of the message, the exit status and
what is left on disk (nothing half-written: no checkpoint, no results.json, no few-shot file before training).

Run with ``-s`` to see the matrix as a table.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing
import os
import pickle
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from huggingface_hub import constants as hub_constants
from PIL import Image
from tabulate import tabulate

import clip.clip as clip_module
import engine.utils
import train
from engine.checkpoint import get_rng_state, save_checkpoint
from tests.helpers_baselines import argv as baseline_argv
from tests.helpers_datasets import write_huge_png, write_image
from tests.helpers_petr import petr_argv, write_eurosat
from tests.helpers_run import HANG_GUARD_S, full_disk, read_only, train_argv
from tests.helpers_upstream import write_dassl_checkpoint
from tests.test_engine_checkpoint import nested_pickle, write_zip_bomb
from trainers.catalog import PETR_X_LEARNERS, TRAINERS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATRIX: list[list[str]] = []


def coop_argv(data, out, clip_file: str, *opts: str, flags: tuple = ()) -> list[str]:
    """A tiny CoOp run on the EuroSAT tree (2 shots, so a run that gets to sampling writes a few-shot file)."""
    return train_argv("CoOp", "vit_b16_ctxv1", data, out, "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
                      "DATALOADER.TEST.BATCH_SIZE", "8", "OPTIM.MAX_EPOCH", "1", "DATASET.NUM_SHOTS", "2",
                      "DATASET.SUBSAMPLE_CLASSES", "base", *opts, flags=flags, backbone=clip_file)


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
            "error: command-line opts: unknown config key 'OPTIM.LRR' (declare it with its rule in its trainer's "
            "CONFIG_KEYS or fix the typo)")


def _other_trainers_key(tmp, data, tree, clip_file, mp):
    return (coop_argv(data, tmp / "run", clip_file, "TRAINER.MAPLE.N_CTX", "4"),
            "error: command-line opts: TRAINER.MAPLE.N_CTX is a key of MaPLe, but CoOp reads TRAINER.COOP and would "
            "ignore it: set TRAINER.COOP.N_CTX instead, or run --trainer MaPLe")


def _upstream_kgcoop_yaml(tmp, data, tree, clip_file, mp):
    # upstream KgCoOp's trainer yaml keeps CoOp's namespace and says CTX_INIT: True for "a photo of a"
    yaml = tmp / "upstream_kgcoop.yaml"
    yaml.write_text("OPTIM:\n  NAME: \"sgd\"\n  MAX_EPOCH: 1\nTRAINER:\n  COOP:\n    CTX_INIT: True\n")
    argv = train_argv("KgCoOp", None, data, tmp / "run", "DATASET.NUM_SHOTS", "2", backbone=clip_file)
    return ([*argv[:argv.index("--output-dir")], "--config-file", str(yaml), *argv[argv.index("--output-dir"):]],
            f"error: {yaml}: TRAINER.COOP.CTX_INIT is a key of CoOp, but KgCoOp reads TRAINER.KGCOOP and would ignore "
            "it: set TRAINER.KGCOOP.CTX_INIT instead, or run --trainer CoOp (upstream's CTX_INIT True stands for its "
            "words \"a photo of a\": give the words)")


def _words_given_as_true(tmp, data, tree, clip_file, mp):
    argv = train_argv("KgCoOp", "vit_b16_ep100_ctxv1", data, tmp / "run", "TRAINER.KGCOOP.CTX_INIT", "True",
                      backbone=clip_file)
    return argv, ("error: command-line opts: TRAINER.KGCOOP.CTX_INIT takes the words that start the prompt (str), not "
                  "True (upstream's CTX_INIT True stands for its words \"a photo of a\": give the words)")


def _adapter_without_bottleneck(tmp, data, tree, clip_file, mp):
    argv = train_argv("CLIPAdapter", "vit_b16", data, tmp / "run", "TRAINER.CLIPADAPTER.REDUCTION", "64",
                      backbone=clip_file)
    return argv, ("error: TRAINER.CLIPADAPTER.REDUCTION is 64, more than the CLIP's feature width 32; use a reduction "
                  "that leaves a bottleneck (upstream: 4)")


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


def _huge_image(tmp, data, tree, clip_file, mp):
    """A test image that declares 15,000 x 15,000 pixels (225 Mpixels: past Pillow's limit, a decompression bomb),
    read by a zero-shot evaluation of every test image."""
    with open(tree.split_file) as f:
        huge = os.path.join(tree.dataset_dir, "2750", json.load(f)["test"][0][0])
    write_huge_png(huge)
    return (zeroshot_argv(data, tmp / "run", clip_file),
            f"error: Cannot read image {huge} (DecompressionBombError: Image size (225000000 pixels) exceeds limit ...")


OUTSIDE = "has a path that is absolute or climbs with '..' (listed paths are relative, inside the dataset's folder)"


def _split_entry(split: str, entry_of, problem: str):
    """The first ``split`` entry of the split file replaced by ``entry_of(tmp, entry)``; an image lies outside the
    data root (``<tmp>/outside.jpg``) for an entry to point to. The line names the file, the split, the entry and
    ``problem``."""
    def setup(tmp, data, tree, clip_file, mp):
        write_image(str(tmp / "outside.jpg"), seed=7)
        with open(tree.split_file) as f:
            split_data = json.load(f)
        entry = split_data[split][0] = entry_of(tmp, split_data[split][0])
        with open(tree.split_file, "w") as f:
            json.dump(split_data, f)
        return (coop_argv(data, tmp / "run", clip_file, "DATASET.NUM_SHOTS", "0"),
                f"error: Split file {tree.split_file}: the {split} entry {entry!r} {problem}; fix it or download the "
                "split file again (expected layout for EuroSAT: see DATASETS.md#eurosat)")
    return setup


def _corrupt_image_worker(tmp, data, tree, clip_file, mp):
    return _corrupt_image(tmp, data, tree, clip_file, mp, workers="1")


def _clip_offline(tmp, data, tree, clip_file, mp):
    mp.setitem(clip_module._MODELS, "ViT-B/16", "http://127.0.0.1:9/x/ViT-B-16.pt")
    mp.setenv("CLIP_WEIGHTS_DIR", str(tmp / "weights"))
    mp.setenv("HOME", str(tmp / "home"))
    return (coop_argv(data, tmp / "run", clip_file, "MODEL.BACKBONE.NAME", "ViT-B/16"),
            "error: CLIP weights for ViT-B/16 not found (tried ...")


OPEN_CLIP_TAG = "open_clip:ViT-B-16/laion2b_s34b_b88k"


def _open_clip_offline(tmp, data, tree, clip_file, mp):
    mp.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    mp.setenv("HF_HUB_CACHE", str(tmp / "hub"))
    mp.setenv("CLIP_WEIGHTS_DIR", str(tmp / "weights"))
    return (coop_argv(data, tmp / "run", clip_file, "MODEL.BACKBONE.NAME", OPEN_CLIP_TAG),  # conftest: PETR_OFFLINE=1
            f"error: {OPEN_CLIP_TAG}: open_clip weights not in the hub cache nor placed by hand, and they cannot be "
            "downloaded here (PETR_OFFLINE=1 is set: this node does not download); on a machine with internet run "
            f"`python -m clip.download "
            f"{OPEN_CLIP_TAG}` and copy {tmp / 'hub'}/models--laion--CLIP-ViT-B-16-laion2B-s34B-b88K to the same "
            "place here, or download ...")


def _open_clip_siglip(tmp, data, tree, clip_file, mp):
    return (coop_argv(data, tmp / "run", clip_file, "MODEL.BACKBONE.NAME", "open_clip:ViT-B-16-SigLIP/webli"),
            "error: open_clip:ViT-B-16-SigLIP/webli: open_clip model ViT-B-16-SigLIP does not fit the prompt-aware "
            "CLIP: it is a SigLIP model (sigmoid loss with a logit bias); use an open_clip ViT of OpenAI's structure "
            "(`python -m clip.openclip` lists them)")


def _mean_against_the_backbone(tmp, data, tree, clip_file, mp):
    return (coop_argv(data, tmp / "run", clip_file, "MODEL.BACKBONE.NAME", "open_clip:ViT-L-14/laion2b_s32b_b82k",
                      "INPUT.PIXEL_MEAN", "[0.48145466, 0.4578275, 0.40821073]"),
            "error: command-line opts: INPUT.PIXEL_MEAN is [0.48145466, 0.4578275, 0.40821073], but "
            "MODEL.BACKBONE.NAME open_clip:ViT-L-14/laion2b_s32b_b82k was trained on images normalised with [0.5, "
            "0.5, 0.5]: leave INPUT.PIXEL_MEAN out (it follows the backbone)")


def _teacher_normalised_otherwise(tmp, data, tree, clip_file, mp):
    from tests.helpers_clip import OPENCLIP_CFG, make_local_dir

    make_local_dir(tmp / "teacher", OPENCLIP_CFG, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    teacher = f"open_clip:local-dir:{tmp / 'teacher'}"
    return (promptkd_argv(data, tmp / "run", clip_file, "TRAINER.PROMPTKD.TEACHER_NAME", teacher),
            f"error: the CLIP {teacher} was trained on images normalised with mean [0.5, 0.5, 0.5], std [0.5, 0.5, "
            "0.5], but this run's are normalised with INPUT.PIXEL_MEAN [0.48145466, 0.4578275, 0.40821073], "
            "INPUT.PIXEL_STD [0.26862954, 0.26130258, 0.27577711] (those of MODEL.BACKBONE.NAME): give it a CLIP of "
            "the same normalisation")


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


def _other_config(tmp, data, tree, clip_file, mp):
    """A finished run in the folder, then the same command with another learning rate."""
    assert train.cli(coop_argv(data, tmp / "run", clip_file)) == 0
    return (coop_argv(data, tmp / "run", clip_file, "OPTIM.LR", "0.01"),
            f"error: {tmp / 'run'} holds a finished run that differs from this one: OPTIM.LR 0.002 → 0.01. Nothing "
            "was changed: give this run another --output-dir (scripts: OUTPUT_ROOT), or add --move-aside (scripts: "
            f"MOVE_ASIDE=1) to move that run to {tmp / '.run.old-1'} and start this one")


def _changed_split(tmp, data, tree, clip_file, mp):
    """A finished run, then two train images moved to the test split: the split file the run read (its inputs ledger)
    holds other bytes, so the run is not skipped, though the few-shot file it used no longer fits the split."""
    assert train.cli(coop_argv(data, tmp / "run", clip_file)) == 0
    old = sha256(tree.split_file)
    with open(tree.split_file) as f:
        split = json.load(f)
    split["test"] += split["train"][:2]
    split["train"] = split["train"][2:]
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: {tmp / 'run'} holds a finished run that differs from this one: split {tree.split_file} content "
            f"sha256 {old[:12]} → {sha256(tree.split_file)[:12]}. Nothing was changed: give this run another "
            "--output-dir (scripts: OUTPUT_ROOT), or add --move-aside (scripts: MOVE_ASIDE=1) to move that run to "
            f"{tmp / '.run.old-1'} and start this one")


def zeroshot_argv(data, out, clip_file: str) -> list[str]:
    """A tiny zero-shot CLIP evaluation on the EuroSAT tree."""
    return train_argv("ZeroshotCLIP", "vit_b16", data, out, "DATALOADER.TEST.BATCH_SIZE", "8", flags=("--eval-only",),
                      backbone=clip_file)


def sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _replaced_clip_weights(tmp, data, tree, clip_file, mp):
    """A finished zero-shot run, then other bytes written to its CLIP weight file (same path)."""
    weights = tmp / "clip.pt"
    shutil.copyfile(clip_file, weights)
    argv = zeroshot_argv(data, tmp / "run", str(weights))
    assert train.cli(argv) == 0
    old = sha256(weights)
    state = torch.load(weights, weights_only=True)
    state["text_projection"] = state["text_projection"] + 1.0
    torch.save(state, weights)
    new = sha256(weights)
    return (argv, f"error: {tmp / 'run'} holds a finished run that differs from this one: clip {weights} "
            f"content sha256 {old[:12]} → {new[:12]}. Nothing was changed: give this run "
            "another --output-dir (scripts: OUTPUT_ROOT), or add --move-aside (scripts: MOVE_ASIDE=1) to move that "
            f"run to {tmp / '.run.old-1'} and start this one")


def _linked(name: str):
    """The run folder's ``name`` is a symbolic link to a file outside it (which must stay untouched)."""
    def setup(tmp, data, tree, clip_file, mp):
        (tmp / "run").mkdir()
        (tmp / "outside.txt").write_text("a file outside the run folder\n")
        os.symlink(tmp / "outside.txt", tmp / "run" / name)
        path = tmp / "run" / name
        return coop_argv(data, tmp / "run", clip_file), f"error: {path} " + NOT_REGULAR.format(kind="a symbolic link",
                                                                                                path=path)
    return setup


NOT_REGULAR = ("is {kind}, not a regular file; a run reads and writes only regular files in its folder (nothing "
               "outside it is followed): remove it (rm {path}) and rerun")


HELD_LOCKS: list[int] = []
"""Lock files held by a case's stand-in for another live run (closed after each test)."""


def _in_use(tmp, data, tree, clip_file, mp):
    """The output folder is locked by another live run (this process plays it: flock is per open file)."""
    (tmp / "run").mkdir()
    fd = os.open(tmp / "run" / "run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, json.dumps({"pid": 4242, "host": "node7", "started": "2025-01-01 00:00:00",
                             "command": "train.py --output-dir run"}).encode())
    HELD_LOCKS.append(fd)
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: {tmp / 'run'} is in use by another run (pid 4242 on node7, started 2025-01-01 00:00:00: "
            "train.py --output-dir run); wait for it to end or stop it, or give this run another --output-dir")


def _eval_without_model(tmp, data, tree, clip_file, mp):
    return (coop_argv(data, tmp / "run", clip_file, flags=("--eval-only",)),
            "error: --eval-only without --model-dir would evaluate the untrained prompt_learner of CoOp: pass "
            "--model-dir <its training run folder> (and --load-epoch N or last when that run kept no "
            "model-best.pth.tar)")


def _value(key: str, value: str, rule: str):
    """``key value`` given to a run of the trainer that reads ``key``: PETR or PromptKD for their namespaces, else
    CoOp."""
    def setup(tmp, data, tree, clip_file, mp):
        if key.startswith("TRAINER.PETR."):
            argv = petr_argv(data, tmp / "run", clip_file, clip_file, key, value)
        elif key.startswith("TRAINER.PROMPTKD."):
            argv = promptkd_argv(data, tmp / "run", clip_file, key, value)
        else:
            argv = coop_argv(data, tmp / "run", clip_file, key, value)
        return argv, f"error: {key} is {value}; it must be {rule}"
    return setup


def _choice(key: str, value: str, choices: str):
    return _value(key, repr(value), f"one of {choices}")


def _opts(*opts: str, expected: str):
    def setup(tmp, data, tree, clip_file, mp):
        return coop_argv(data, tmp / "run", clip_file, *opts), expected
    return setup


def _config_file(text: str, expected: str):
    """A trainer config yaml holding ``text``; ``expected`` with {path} for the file."""
    def setup(tmp, data, tree, clip_file, mp):
        path = tmp / "bad.yaml"
        path.write_text(text)
        argv = coop_argv(data, tmp / "run", clip_file)
        argv[argv.index("configs/trainers/CoOp/vit_b16_ctxv1.yaml")] = str(path)
        return argv, expected.format(path=path)
    return setup


def _output_is_a_file(tmp, data, tree, clip_file, mp):
    (tmp / "run").write_text("a file, not a folder\n")
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: OUTPUT_DIR {tmp / 'run'} is a file; choose another --output-dir")


def _output_under_a_file(tmp, data, tree, clip_file, mp):
    (tmp / "run").write_text("a file, not a folder\n")
    return (coop_argv(data, tmp / "run" / "seed1", clip_file),
            f"error: OUTPUT_DIR {tmp / 'run' / 'seed1'} lies under the file {tmp / 'run'}; choose another --output-dir")


def promptkd_argv(data, out, clip_file: str, *opts: str) -> list[str]:
    """A tiny PromptKD run (2 shots, the tiny CLIP as student and teacher)."""
    return train_argv("PromptKD", "vit_b16_c2_ep20_batch8_4+4ctx", data, out, "TRAINER.PROMPTKD.TEACHER_NAME",
                      clip_file, "OPTIM.MAX_EPOCH", "1", "DATASET.NUM_SHOTS", "2", *opts, backbone=clip_file)


NO_PROMPTS = ("holds no PromptSRC prompts (keys text_prompts.prompts.N and vision_prompts.prompts.N); give a "
              "PromptSRC checkpoint or a file written by tools/import_promptkd_teacher.py")


def _teacher_is_clip_weights(tmp, data, tree, clip_file, mp):
    return (promptkd_argv(data, tmp / "run", clip_file, "TRAINER.PROMPTKD.TEACHER_CKPT", clip_file),
            f"error: {clip_file} {NO_PROMPTS}")


def _teacher_is_a_student(tmp, data, tree, clip_file, mp):
    student = save_checkpoint({"state_dict": {"ctx": torch.zeros(16, 64)}, "epoch": 1}, str(tmp / "coop"))
    return (promptkd_argv(data, tmp / "run", clip_file, "TRAINER.PROMPTKD.TEACHER_CKPT", student),
            f"error: {student} {NO_PROMPTS}")


def _teacher_is_random_bytes(tmp, data, tree, clip_file, mp):
    path = tmp / "teacher.pth"
    path.write_bytes(random.Random(0).randbytes(4096))
    return (promptkd_argv(data, tmp / "run", clip_file, "TRAINER.PROMPTKD.TEACHER_CKPT", str(path)),
            f"error: {path} cannot be read as a checkpoint (...")


def _model_dir(tmp, state) -> str:
    """A run folder whose prompt_learner/model.pth.tar-1 holds ``state`` (torch.save), for --eval-only."""
    folder = tmp / "trained" / "prompt_learner"
    folder.mkdir(parents=True)
    torch.save(state, folder / "model.pth.tar-1")
    return str(folder / "model.pth.tar-1")


def _eval_argv(data, tmp, clip_file):
    return coop_argv(data, tmp / "run", clip_file, flags=("--eval-only", "--model-dir", str(tmp / "trained"),
                                                         "--load-epoch", "1"))


def _checkpoint_other_backbone(tmp, data, tree, clip_file, mp):
    path = _model_dir(tmp, {"state_dict": {"ctx": torch.zeros(16, 48)}, "epoch": 1})
    return (_eval_argv(data, tmp, clip_file),
            f"error: {path}: CoOp checkpoint 'ctx' is a generic context of 16 tokens of width 48, but this run builds "
            "a generic context of 4 tokens of width 64; use the N_CTX / CTX_INIT / CSC settings the context was "
            "trained with")


def _checkpoint_other_trainer(tmp, data, tree, clip_file, mp):
    path = _model_dir(tmp, {"state_dict": {"prompts.0": torch.zeros(4, 64)}, "epoch": 1})
    return (_eval_argv(data, tmp, clip_file),
            f"error: {path}: CoOp prompt-learner checkpoint has keys ['prompts.0']; expected only 'ctx'")


def _resume_state(tmp, models: dict) -> str:
    (tmp / "run").mkdir()
    path = tmp / "run" / "resume.pth.tar"
    torch.save({"epoch": 1, "models": models, "scaler": None, "rng_state": get_rng_state(), "best_result": None},
               path)
    return str(path)


def _resume_other_trainer(tmp, data, tree, clip_file, mp):
    path = _resume_state(tmp, {"seen_student": {"state_dict": {}, "optimizer": None, "scheduler": None}})
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: {path} holds the models ['seen_student'], this trainer has ['prompt_learner']; use another "
            "OUTPUT_DIR or move the file away")


def _resume_other_backbone(tmp, data, tree, clip_file, mp):
    path = _resume_state(tmp, {"prompt_learner": {"state_dict": {"ctx": torch.zeros(16, 48)}, "optimizer": None,
                                                  "scheduler": None}})
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: {path} (prompt_learner): CoOp checkpoint 'ctx' is a generic context of 16 tokens of width 48, "
            "but this run builds ...")


class SystemCall:
    """Pickles as ``os.system(command)``: what a hostile checkpoint holds."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _pickled_os_system(tmp, data, tree, clip_file, mp):
    path = _model_dir(tmp, {"state_dict": {"ctx": SystemCall(f"touch {tmp / 'ran'}")}, "epoch": 1})
    return (_eval_argv(data, tmp, clip_file),
            f"error: {path}: its state_dict holds pickled objects ({os.system.__module__}.system), not only tensors; "
            "refused, nothing was run")


def _raw_pickle(tmp, data, tree, clip_file, mp):
    folder = tmp / "trained" / "prompt_learner"
    folder.mkdir(parents=True)
    path = folder / "model.pth.tar-1"
    path.write_bytes(pickle.dumps({"state_dict": {"ctx": SystemCall(f"touch {tmp / 'ran'}")}, "epoch": 1}))
    return (_eval_argv(data, tmp, clip_file),
            f"error: {path} cannot be read as a checkpoint (RuntimeError: Invalid magic number; corrupt file?); "
            "nothing in it was run: restore a good copy or point to another file")


def _petr_x_argv(data, tmp, clip_file: str, tuned: str, x: str = "coop") -> list[str]:
    """A tiny PETR+X run on the tuned run folder ``tuned`` (prompt learner ``x``)."""
    return train_argv("PETRX", "vit_b16", data, tmp / "run", "DATASET.NUM_SHOTS", "2", "DATASET.SUBSAMPLE_CLASSES",
                      "base", "TRAINER.PETRX.TUNED_MODEL_DIR", tuned, "TRAINER.PETRX.TUNED_TRAINER",
                      PETR_X_LEARNERS[x].trainer, backbone=clip_file)


def _coop_tuned_run(tmp, **results) -> str:
    """A CoOp run folder (a context of 4 tokens) whose results.json holds ``results``."""
    folder = tmp / "tuned"
    write_dassl_checkpoint(str(folder / "prompt_learner"), {"ctx": torch.zeros(4, 64)}, 1, None, str(tmp / "ran"))
    (folder / "results.json").write_text(json.dumps({"trainer": "CoOp", "seed": 1, "num_shots": 2, **results}))
    return str(folder)


def _tuned_other_dataset(tmp, data, tree, clip_file, mp):
    tuned = _coop_tuned_run(tmp, dataset="DescribableTextures", backbone=clip_file)
    return (_petr_x_argv(data, tmp, clip_file, tuned),
            f"error: TRAINER.PETRX.TUNED_MODEL_DIR {tuned} was trained on DescribableTextures, but this run's "
            "DATASET.NAME is EuroSAT; give a CoOp run of EuroSAT")


def _tuned_other_clip(tmp, data, tree, clip_file, mp):
    other = tmp / "other-clip.pt"
    other.write_bytes(open(clip_file, "rb").read() + b"another file")  # not the weights this run loads
    tuned = _coop_tuned_run(tmp, dataset="EuroSAT", backbone=str(other))
    return (_petr_x_argv(data, tmp, clip_file, tuned),
            f"error: TRAINER.PETRX.TUNED_MODEL_DIR {tuned} was trained on the CLIP {other}, but this run's "
            f"MODEL.BACKBONE.NAME is {clip_file}; set MODEL.BACKBONE.NAME to the tuned run's CLIP")


def _tuned_other_trainer(tmp, data, tree, clip_file, mp):
    tuned = _coop_tuned_run(tmp, dataset="EuroSAT", backbone=clip_file, trainer="CoCoOp")
    return (_petr_x_argv(data, tmp, clip_file, tuned),
            f"error: TRAINER.PETRX.TUNED_MODEL_DIR {tuned} is a CoCoOp run, but TRAINER.PETRX.TUNED_TRAINER is CoOp; "
            "set TUNED_TRAINER CoCoOp or give a CoOp run")


def _tuned_words_unknown(tmp, data, tree, clip_file, mp):
    """An upstream IVLP run folder without its log.txt: its 2 text tokens may stand before kept words."""
    folder = tmp / "tuned"
    state = {"prompt_learner.ctx": torch.zeros(2, 64).half(), "image_encoder.VPT": torch.zeros(2, 64).half()}
    path = write_dassl_checkpoint(str(folder / "VLPromptLearner"), state, 5, None, str(tmp / "ran"))
    return (_petr_x_argv(data, tmp, clip_file, str(folder), x="ivlp"),
            f"error: cannot tell the words of the class prompts of {path}: {folder} records no TRAINER.IVLP.CTX_INIT "
            "(run.json, or the config dump of log.txt), and its 2 text tokens may have been initialised from words "
            f"that stay in the prompt; put the run's log.txt (Dassl writes the config at its top) back in {folder}")


FINISHED = ["log.txt", "prompt_learner/checkpoint", "prompt_learner/model.pth.tar-1", "results.json", "run.json"]
"""What a finished tiny CoOp run leaves in its folder."""

def _zip_bomb(tmp, data, tree, clip_file, mp):
    folder = tmp / "trained" / "prompt_learner"
    folder.mkdir(parents=True)
    write_zip_bomb(folder / "model.pth.tar-1", 32)
    return _eval_argv(data, tmp, clip_file), f"error: {folder / 'model.pth.tar-1'} is a zip archive whose records ..."


def _nested_tuples(tmp, data, tree, clip_file, mp):
    folder = tmp / "trained" / "prompt_learner"
    folder.mkdir(parents=True)
    path = folder / "model.pth.tar-1"
    path.write_bytes(nested_pickle(100_000))
    return _eval_argv(data, tmp, clip_file), f"error: {path} nests ..."


def _nested_lists(tmp, data, tree, clip_file, mp):
    folder = tmp / "trained" / "prompt_learner"
    folder.mkdir(parents=True)
    path = folder / "model.pth.tar-1"
    path.write_bytes(nested_pickle(100_000, "list", top=True))
    return _eval_argv(data, tmp, clip_file), f"error: {path} nests ..."


def _model_folder_linked(tmp, data, tree, clip_file, mp):
    """The run folder (the log of an attempt in it) has its prompt_learner/ as a symbolic link to a folder outside it
    (which must stay empty)."""
    (tmp / "run").mkdir()
    (tmp / "run" / "log.txt").write_text("an attempt that saved nothing\n")
    (tmp / "outside").mkdir()
    path = tmp / "run" / "prompt_learner"
    os.symlink(tmp / "outside", path)
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: {path} is a symbolic link, not a folder; a run writes only inside its own folder (a link there is "
            f"not followed): remove it (rm {path}) and rerun")


def _baseline(trainer: str, config: str, *opts: str, expected: str):
    """A tiny run of ``trainer`` with its shipped ``config`` and ``opts``; {clip} in ``expected``: the CLIP file."""
    def setup(tmp, data, tree, clip_file, mp):
        return baseline_argv(data, tmp / "run", trainer, config, clip_file, "base", *opts), expected.format(
            clip=clip_file)
    return setup


WEIGHTS_FIX = ("point MODEL.BACKBONE.NAME (or the teacher's TEACHER_NAME) to CLIP weights: a model name such as "
               "ViT-B/16 or open_clip:ViT-B-16/laion2b_s34b_b88k, or an OpenAI-format weight file")


def _promptkd(*opts: str, expected: str):
    def setup(tmp, data, tree, clip_file, mp):
        return promptkd_argv(data, tmp / "run", clip_file, *opts), expected
    return setup


def _petr(*opts: str, expected: str):
    def setup(tmp, data, tree, clip_file, mp):
        return petr_argv(data, tmp / "run", clip_file, clip_file, "DATASET.SUBSAMPLE_CLASSES", "base", *opts), expected
    return setup


def _backbone_file(expected: str, content: bytes = b"", obj=None):
    """MODEL.BACKBONE.NAME a file holding ``content`` (or ``obj`` saved with torch.save); {path} in ``expected``: the
    file."""
    def setup(tmp, data, tree, clip_file, mp):
        path = tmp / "weights.pt"
        if obj is None:
            path.write_bytes(content)
        else:
            torch.save(obj, path)
        return coop_argv(data, tmp / "run", clip_file, "MODEL.BACKBONE.NAME", str(path)), expected.format(path=path)
    return setup


DEEP_JSON = "[" * 100_000 + "]" * 100_000
"""A JSON text nesting 100,000 lists: the parser's recursion limit is far below."""
DEEP = "is no readable JSON (its arrays or objects nest deeper than ..."
HUGE = "99999999999999999999"
"""More than any C integer holds."""
AT_MOST = "and at most 2147483647 in size"
WORKER_LIMIT = max(8, 4 * len(os.sched_getaffinity(0)))
"""What this machine lets a run start: 4 loader processes per CPU, 8 at least."""


def _split_bytes(content: bytes, expected: str):
    """The split file replaced by ``content``; ``expected`` with {split} for its path."""
    def setup(tmp, data, tree, clip_file, mp):
        with open(tree.split_file, "wb") as f:
            f.write(content)
        return coop_argv(data, tmp / "run", clip_file), expected.format(split=tree.split_file)
    return setup


def _deep_fewshot(tmp, data, tree, clip_file, mp):
    path = os.path.join(tree.dataset_dir, "split_fewshot", "shot_2-seed_1.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write(DEEP_JSON)
    return coop_argv(data, tmp / "run", clip_file), f"error: Malformed JSON in {path} (its arrays or objects nest ..."


def _deep_run_json(tmp, data, tree, clip_file, mp):
    """A finished run's folder whose run.json nests 100,000 lists."""
    (tmp / "run").mkdir()
    (tmp / "run" / "run.json").write_text(DEEP_JSON)
    (tmp / "run" / "results.json").write_text("{}")
    return (coop_argv(data, tmp / "run", clip_file),
            f"error: {tmp / 'run' / 'run.json'} is not valid JSON (its arrays or objects nest deeper than ...")


def _deep_model_record(tmp, data, tree, clip_file, mp):
    """--eval-only of a run folder whose run.json (the record its prompt settings are read from) nests 100,000 lists."""
    _model_dir(tmp, {"state_dict": {"ctx": torch.zeros(4, 64)}, "epoch": 1})
    (tmp / "trained" / "run.json").write_text(DEEP_JSON)
    return (_eval_argv(data, tmp, clip_file),
            f"error: {tmp / 'trained' / 'run.json'} is not valid JSON (its arrays or objects nest deeper than ...")


def _huge_seed(tmp, data, tree, clip_file, mp):
    argv = coop_argv(data, tmp / "run", clip_file)
    argv[argv.index("--seed") + 1] = HUGE
    return argv, f"error: SEED is {HUGE}; it must be an integer >= -1 (-1: not seeded) {AT_MOST}"

# case -> (setup, files left in the output folder, few-shot file written)
CASES = {
    "unknown trainer": (_unknown_trainer, ["log.txt"], False),
    "unknown dataset": (_unknown_dataset, ["log.txt"], False),
    "unknown config key": (_unknown_key, [], False),
    "key of another trainer": (_other_trainers_key, [], False),
    "upstream KgCoOp's yaml (TRAINER.COOP.CTX_INIT True)": (_upstream_kgcoop_yaml, [], False),
    "prompt words given as True": (_words_given_as_true, [], False),
    "CLIP-Adapter reduction wider than the features": (_adapter_without_bottleneck, ["log.txt"], False),
    "missing config file": (_missing_config, [], False),
    "missing dataset folder": (_missing_dataset, ["log.txt"], False),
    "missing image": (_missing_image, ["log.txt"], False),
    "corrupt image": (_corrupt_image, ["log.txt", "run.json"], False),
    "corrupt image (loader worker)": (_corrupt_image_worker, ["log.txt", "run.json"], False),
    "CLIP weights offline": (_clip_offline, ["log.txt"], False),
    "open_clip tag offline": (_open_clip_offline, ["log.txt"], False),
    "open_clip SigLIP backbone": (_open_clip_siglip, [], False),
    "INPUT.PIXEL_MEAN against the backbone's": (_mean_against_the_backbone, [], False),
    "teacher CLIP normalised otherwise": (_teacher_normalised_otherwise, ["log.txt"], False),
    "truncated checkpoint": (_truncated_checkpoint, ["log.txt", "run.json"], True),
    "truncated resume state": (_truncated_resume_state, ["log.txt", "resume.pth.tar", "run.json"], True),
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
    "rerun with another config (finished run)": (_other_config, FINISHED, True),
    "split changed under a finished run (stale few-shot file)": (_changed_split, FINISHED, True),
    "CLIP weights replaced under a finished run": (_replaced_clip_weights, ["log.txt", "results.json", "run.json"],
                                                   False),
    "run.lock is a symbolic link": (_linked("run.lock"), ["run.lock"], False),
    "log.txt is a symbolic link": (_linked("log.txt"), ["log.txt"], False),
    "output folder in use by a live run": (_in_use, ["run.lock"], False),
    "--eval-only without --model-dir": (_eval_without_model, ["log.txt"], True),
    "PREC fp8": (_choice("TRAINER.COOP.PREC", "fp8", "fp32, amp, fp16, bf16"), ["log.txt"], False),
    "OPTIM.NAME adamw2": (_choice("OPTIM.NAME", "adamw2", "adam, amsgrad, sgd, rmsprop, radam, adamw"), ["log.txt"],
                          False),
    "OPTIM.LR_SCHEDULER bogus": (_choice("OPTIM.LR_SCHEDULER", "bogus", "single_step, multi_step, cosine"),
                                 ["log.txt"], False),
    "unknown INPUT.TRANSFORMS name": (_opts("INPUT.TRANSFORMS", "['random_flip', 'normalise']", expected=(
        "error: INPUT.TRANSFORMS is ('random_flip', 'normalise'); it must be a list, each one of random_flip, "
        "random_resized_crop, ...")), ["log.txt"], False),
    "TEACHER_CACHE bogus": (_choice("TRAINER.PETR.TEACHER_CACHE", "bogus", "none, fixed, views"), ["log.txt"], False),
    "TRAIN.COMPILE bogus": (_choice("TRAIN.COMPILE", "bogus", "none, compile, cudagraphs"), ["log.txt"], False),
    "INPUT.DECODER bogus": (_choice("INPUT.DECODER", "bogus", "pil, tensor"), ["log.txt"], False),
    "INPUT.DECODER tensor with colorjitter": (_opts(
        "INPUT.DECODER", "tensor", "INPUT.TRANSFORMS", "['random_flip', 'colorjitter']", expected=(
            "error: INPUT.DECODER tensor runs the transforms ['random_resized_crop', 'random_flip', 'resize', "
            "'center_crop', 'normalize', 'instance_norm'], but INPUT.TRANSFORMS has ['colorjitter']; drop them or use "
            "INPUT.DECODER pil")), ["log.txt"], False),
    "IMAGE_CACHE_SIDE -1": (_value("DATALOADER.IMAGE_CACHE_SIDE", "-1", "an integer >= 0 (0: off)"), ["log.txt"],
                            False),
    "IMAGE_CACHE_SIDE with a teacher cache": (_petr(
        "DATALOADER.IMAGE_CACHE_SIDE", "256", "TRAINER.PETR.TEACHER_CACHE", "views", expected=(
            "error: DATALOADER.IMAGE_CACHE_SIDE 256 would decode the training images for loaders that "
            "TRAINER.PETR.TEACHER_CACHE views replaces; set it to 0 (TRAINER.PETR.TEACHER_CACHE_IMAGES True stores "
            "the cache's own views decoded)")), ["log.txt"], False),
    "TEACHER_CACHE_IMAGES without a teacher cache": (_petr("TRAINER.PETR.TEACHER_CACHE_IMAGES", "True", expected=(
        "error: TRAINER.PETR.TEACHER_CACHE_IMAGES True stores the teacher cache's views decoded, but "
        "TRAINER.PETR.TEACHER_CACHE is none; set it to fixed or views, or the images to False")), ["log.txt"],
        False),
    "TEST.FINAL_MODEL bogus": (_choice("TEST.FINAL_MODEL", "bogus", "last_step, best_val"), ["log.txt"], False),
    "router name typo": (_choice("TRAINER.PETR.ROUTER", "mahalanobis2", "mahalanobis, average, max_conf, entropy, "
                                 "energy, iforest, lof, ocsvm, oracle"), ["log.txt"], False),
    "sampler bogus": (_choice("DATALOADER.TRAIN_X.SAMPLER", "bogus", "RandomSampler, SequentialSampler"),
                      ["log.txt"], False),
    "INPUT.SIZE (32,)": (_opts("INPUT.SIZE", "(32,)", expected=(
        "error: INPUT.SIZE is (32,); it must be two equal integers from 1 to 4096, e.g. (224, 224) (height, width: "
        "CLIP takes square images)")), ["log.txt"], False),
    "INPUT.SIZE (32, 48)": (_opts("INPUT.SIZE", "(32, 48)", expected=(
        "error: INPUT.SIZE is (32, 48); it must be two equal integers from 1 to 4096, e.g. (224, 224) (height, "
        "width: CLIP takes square images)")), ["log.txt"], False),
    "INPUT.SIZE (48, 48) on a 32 px CLIP": (_opts("INPUT.SIZE", "(48, 48)", expected=(
        "error: images of size (48, 48) give 36 patches; this CLIP expects 32x32 inputs: set INPUT.SIZE (32, 32)")),
        ["log.txt", "run.json"], True),
    "yaml with a tab": (_config_file("OPTIM:\n\tLR: 0.1\n", "error: trainer config file {path}: line 2, column 1: "
                                     "found character '\\t' that cannot start any token; indent with spaces, not "
                                     "tabs"), [], False),
    "yaml syntax error": (_config_file("OPTIM:\n  LR: [0.1\n", "error: trainer config file {path}: line 3, column 1: "
                                       "expected ',' or ']', but got '<stream end>'; fix the YAML syntax"), [], False),
    "yaml list at the top": (_config_file("- OPTIM\n- LR\n", "error: trainer config file {path} holds a list at the "
                                          "top; a config file is a mapping of KEY: value lines"), [], False),
    "empty yaml": (_config_file("# nothing yet\n", "error: trainer config file {path} is empty; give its KEY: value "
                                "lines (see configs/) or leave it out"), [], False),
    "output folder is a file": (_output_is_a_file, [], False),
    "output folder under a file": (_output_under_a_file, [], False),
    "TEACHER_CKPT = CLIP weights": (_teacher_is_clip_weights, ["log.txt"], True),
    "TEACHER_CKPT = a student checkpoint": (_teacher_is_a_student, ["log.txt"], True),
    "TEACHER_CKPT = random bytes": (_teacher_is_random_bytes, ["log.txt"], True),
    "checkpoint of another backbone": (_checkpoint_other_backbone, ["log.txt", "run.json"], True),
    "checkpoint of another trainer": (_checkpoint_other_trainer, ["log.txt", "run.json"], True),
    "resume state of another trainer": (_resume_other_trainer, ["log.txt", "resume.pth.tar", "run.json"], True),
    "resume state of another backbone": (_resume_other_backbone, ["log.txt", "resume.pth.tar", "run.json"], True),
    "checkpoint with a pickled os.system": (_pickled_os_system, ["log.txt", "run.json"], True),
    "raw pickle as checkpoint": (_raw_pickle, ["log.txt", "run.json"], True),
    "PETR+X on a run of another dataset": (_tuned_other_dataset, ["log.txt"], True),
    "PETR+X on a run of another CLIP": (_tuned_other_clip, ["log.txt"], True),
    "PETR+X on a run of another trainer": (_tuned_other_trainer, ["log.txt"], True),
    "PETR+X on IVLP prompts of unknown words": (_tuned_words_unknown, ["log.txt"], True),
    "zip bomb as checkpoint": (_zip_bomb, ["log.txt", "run.json"], True),
    "IVLP vision prompt depth 20 on a 9-layer CLIP": (_baseline(
        "IVLP", "vit_b16_c2_ep20_batch8_4+4ctx", "TRAINER.IVLP.PROMPT_DEPTH_VISION", "20",
        expected="error: TRAINER.IVLP.PROMPT_DEPTH_VISION is 20, but this CLIP's vision transformer has 9 blocks; use "
        "1 to 9 (MODEL.BACKBONE.NAME decides the CLIP)"), ["log.txt"], False),
    "IVLP text prompt depth 12 on a 9-layer CLIP": (_baseline(
        "IVLP", "vit_b16_c2_ep20_batch8_4+4ctx", "TRAINER.IVLP.PROMPT_DEPTH_TEXT", "12",
        expected="error: TRAINER.IVLP.PROMPT_DEPTH_TEXT is 12, but this CLIP's text transformer has 9 blocks; use 1 "
        "to 9 (MODEL.BACKBONE.NAME decides the CLIP)"), ["log.txt"], False),
    "PromptKD student prompt depth 10 on a 9-layer CLIP": (_promptkd(
        "TRAINER.PROMPTKD.PROMPT_DEPTH_VISION", "10", expected="error: TRAINER.PROMPTKD.PROMPT_DEPTH_VISION is 10, but "
        "this CLIP's vision transformer has 9 blocks; use 1 to 9 (MODEL.BACKBONE.NAME decides the CLIP)"),
        ["log.txt"], True),
    "PETR batch size 1": (_petr("DATALOADER.TRAIN_X.BATCH_SIZE", "1", expected=(
        "error: DATALOADER.TRAIN_X.BATCH_SIZE is 1; PETR's students normalise their projector's input over the batch "
        "(BatchNorm), which takes at least 2 images per training batch: use 2 or more")), ["log.txt"], False),
    "PromptKD batch size 1": (_promptkd("DATALOADER.TRAIN_X.BATCH_SIZE", "1", expected=(
        "error: DATALOADER.TRAIN_X.BATCH_SIZE is 1; PromptKD's students normalise their projector's input over the "
        "batch (BatchNorm), which takes at least 2 images per training batch: use 2 or more")), ["log.txt"], False),
    "CoCoOp N_CTX 76": (_baseline("CoCoOp", "vit_b16_c4_ep10_batch1", "TRAINER.COCOOP.N_CTX", "76", expected=(
        "error: TRAINER.COCOOP.N_CTX is 76: the prompt of the longest class name ('Herbaceous Vegetation Land') then "
        "takes 83 tokens, more than this CLIP's context length 77; use at most 70 context tokens")), ["log.txt"],
        False),
    "CoOp N_CTX 76": (_baseline("CoOp", "vit_b16", "TRAINER.COOP.N_CTX", "76", expected=(
        "error: TRAINER.COOP.N_CTX is 76: the prompt of the longest class name ('Herbaceous Vegetation Land') then "
        "takes 83 tokens, more than this CLIP's context length 77; use at most 70 context tokens")), ["log.txt"],
        False),
    "IVLP N_CTX_TEXT 76": (_baseline("IVLP", "vit_b16_c2_ep20_batch8_4+4ctx", "TRAINER.IVLP.N_CTX_TEXT", "76",
                                     "TRAINER.IVLP.CTX_INIT", "''", expected=(
        "error: TRAINER.IVLP.N_CTX_TEXT is 76: the prompt of the longest class name ('Herbaceous Vegetation Land') "
        "then takes 83 tokens, more than this CLIP's context length 77; use at most 70 context tokens")),
        ["log.txt"], False),
    "MaPLe N_CTX 76": (_baseline("MaPLe", "vit_b16_c2_ep5_batch4_2ctx", "TRAINER.MAPLE.N_CTX", "76",
                                 "TRAINER.MAPLE.CTX_INIT", "''", expected=(
        "error: TRAINER.MAPLE.N_CTX is 76: the prompt of the longest class name ('Herbaceous Vegetation Land') then "
        "takes 83 tokens, more than this CLIP's context length 77; use at most 70 context tokens")), ["log.txt"],
        False),
    "CLIP weights a text file": (_backbone_file(
        "error: cannot read CLIP weights from {path}: it is no torch weight file (or it pickles objects, which are "
        "never loaded); " + WEIGHTS_FIX, content=b"not weights\n"), ["log.txt"], True),
    "CLIP weights a non-CLIP dict": (_backbone_file(
        "error: {path}: not an OpenAI-format CLIP state dict (no 'visual.proj' or 'visual.attnpool.*' key); expected "
        "CLIPs in OpenAI's format: ViT (ViT-B/32, ViT-B/16, ViT-L/14, ViT-L/14@336px) or ResNet (RN50, RN101, RN50x4, "
        "RN50x16, RN50x64), of any size; " + WEIGHTS_FIX, obj={"state_dict": {"ctx": torch.zeros(4)}}), ["log.txt"],
        True),
    "checkpoint nesting 100,000 tuples": (_nested_tuples, ["log.txt", "run.json"], True),
    "checkpoint nesting 100,000 lists": (_nested_lists, ["log.txt", "run.json"], True),
    "split entry with an absolute path": (_split_entry("test", lambda tmp, e: [str(tmp / "outside.jpg"), *e[1:]],
                                                       OUTSIDE), ["log.txt"], False),
    "split entry with a '..' path": (_split_entry("test", lambda tmp, e: ["../../../outside.jpg", *e[1:]], OUTSIDE),
                                     ["log.txt"], False),
    "split entry with label 'abc'": (_split_entry("train", lambda tmp, e: [e[0], "abc", e[2]],
                                                  "has the label 'abc', which is no integer"), ["log.txt"], False),
    "split entry with path 5": (_split_entry("train", lambda tmp, e: [5, *e[1:]], "has a path that is no file name"),
                                ["log.txt"], False),
    "225-Mpixel PNG in a split": (_huge_image, ["log.txt", "run.json"], False),
    "prompt_learner/ is a symbolic link": (_model_folder_linked, ["log.txt", "run.json"], True),
    "DATALOADER.NUM_WORKERS 100000": (_opts("DATALOADER.NUM_WORKERS", "100000", expected=(
        f"error: DATALOADER.NUM_WORKERS is 100000; this machine runs at most {WORKER_LIMIT} loader processes for a run "
        "(4 per CPU this process may use, 8 at least): set it to at most that (0 loads in the run's own process)")),
        ["log.txt"], False),
    f"OPTIM.MAX_EPOCH {HUGE}000": (_opts("OPTIM.MAX_EPOCH", HUGE + "000", expected=(
        f"error: OPTIM.MAX_EPOCH is {HUGE}000; it must be an integer >= 0 {AT_MOST}")), ["log.txt"], False),
    f"DATALOADER.TRAIN_X.BATCH_SIZE {HUGE}": (_opts("DATALOADER.TRAIN_X.BATCH_SIZE", HUGE, expected=(
        f"error: DATALOADER.TRAIN_X.BATCH_SIZE is {HUGE}; it must be an integer >= 1 {AT_MOST}")), ["log.txt"], False),
    f"DATALOADER.TEST.BATCH_SIZE {HUGE}": (_opts("DATALOADER.TEST.BATCH_SIZE", HUGE, expected=(
        f"error: DATALOADER.TEST.BATCH_SIZE is {HUGE}; it must be an integer >= 1 {AT_MOST}")), ["log.txt"], False),
    f"--seed {HUGE}": (_huge_seed, ["log.txt"], False),
    f"INPUT.SIZE ({HUGE}, {HUGE})": (_opts("INPUT.SIZE", f"({HUGE}, {HUGE})", expected=(
        f"error: INPUT.SIZE is ({HUGE}, {HUGE}); it must be two equal integers from 1 to 4096, e.g. (224, 224) "
        "(height, width: CLIP takes square images)")), ["log.txt"], False),
    "split file not UTF-8": (_split_bytes(b'{"train": [["a\xff.png", 0, "x"]]}', (
        "error: Split file {split} is no readable JSON ('utf-8' codec can't decode byte 0xff in position ...")),
        ["log.txt"], False),
    "split file nesting 100,000 lists": (_split_bytes(DEEP_JSON.encode(), "error: Split file {split} " + DEEP),
                                         ["log.txt"], False),
    "few-shot file nesting 100,000 lists": (_deep_fewshot, ["log.txt"], True),
    "run.json nesting 100,000 lists": (_deep_run_json, ["results.json", "run.json"], False),
    "--model-dir run.json nesting 100,000 lists": (_deep_model_record, [], False),
}
UNTOUCHED = {"rerun with another config (finished run)", "output folder in use by a live run",
             "split changed under a finished run (stale few-shot file)", "CLIP weights replaced under a finished run",
             "run.lock is a symbolic link", "log.txt is a symbolic link", "run.json nesting 100,000 lists"}
"""Cases that stop before the run's log opens: what the folder held stays byte for byte (its log included)."""


def _files(folder) -> list[str]:
    """Files under ``folder``, except tensorboard's event logs (written like log.txt where tensorboard is installed)."""
    if not os.path.isdir(folder):
        return []
    paths = (os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder) for f in files)
    return sorted(p for p in paths if not p.startswith(f"tensorboard{os.sep}"))


def _snapshot(folder) -> dict[str, bytes]:
    return {rel: open(os.path.join(folder, rel), "rb").read() for rel in _files(folder)}


@pytest.fixture(autouse=True)
def release_held_locks():
    yield
    while HELD_LOCKS:
        os.close(HELD_LOCKS.pop())


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
    before = _snapshot(tmp_path / "run")
    placed = _snapshot(os.path.join(tree.dataset_dir, "split_fewshot"))  # a few-shot file the case put there
    capsys.readouterr()
    status = train.cli(argv)
    terminal = capsys.readouterr()
    err = terminal.err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert status == train.EXIT_USER_ERROR and len(lines) == 1, err[-3000:]
    assert err.rstrip().endswith(lines[0]) and "Traceback" not in err
    assert "** Config **" not in terminal.out  # the config dump goes to the run's log, not above the error line
    line = lines[0]
    assert line.startswith(expected[:-3]) if expected.endswith("...") else line == expected, line
    out = tmp_path / "run"
    assert _files(out) == left
    after = _snapshot(out)
    for rel, content in before.items():  # nothing there before is changed (a log only grows)
        assert after[rel] == content or (rel == "log.txt" and case not in UNTOUCHED and after[rel].startswith(content))
    if "log.txt" in left and case not in UNTOUCHED:  # the error reaches the run's log too
        assert open(out / "log.txt").read().rstrip().endswith(line)
    has_fewshot = os.path.isdir(os.path.join(tree.dataset_dir, "split_fewshot"))
    assert has_fewshot == fewshot
    assert not (tmp_path / "ran").exists()  # no pickled command ran
    assert not os.path.isdir(tmp_path / "outside") or os.listdir(tmp_path / "outside") == []  # nothing written there
    assert not placed or _snapshot(os.path.join(tree.dataset_dir, "split_fewshot")) == placed
    _row(case, status, line, out, "left as it was" if placed else "written (valid)" if has_fewshot else "none")


def test_a_changed_split_moves_aside_then_names_the_stale_fewshot_file(tmp_path, tiny_clip_file, capsys):
    """--move-aside on a finished run whose split changed: the run is moved, then the stale few-shot file stops the
    new one in one line (it is left in place); once it is moved away the run finishes on a new sample."""
    tree = write_eurosat(tmp_path / "data", train_per_class=3)
    argv, _ = _changed_split(tmp_path, tmp_path / "data", tree, tiny_clip_file, None)
    fewshot = os.path.join(tree.dataset_dir, "split_fewshot", "shot_2-seed_1.json")
    stale = open(fewshot, "rb").read()
    capsys.readouterr()
    assert train.cli(["--move-aside", *argv]) == train.EXIT_USER_ERROR
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: Few-shot file {fewshot} was sampled from other data than "
                                               f"{tree.split_file} holds now")
    assert _files(tmp_path / ".run.old-1") == FINISHED and _files(tmp_path / "run") == ["log.txt"]
    assert open(fewshot, "rb").read() == stale
    os.rename(fewshot, fewshot + ".old")
    assert train.cli(argv) == 0 and "results.json" in _files(tmp_path / "run")


def test_touched_clip_weights_skip_the_finished_run(tmp_path, tiny_clip_file, capsys):
    """The same bytes with a new modification time: the run is the same (weights are compared by content)."""
    write_eurosat(tmp_path / "data", train_per_class=3)
    weights = tmp_path / "clip.pt"
    shutil.copyfile(tiny_clip_file, weights)
    argv = zeroshot_argv(tmp_path / "data", tmp_path / "run", str(weights))
    assert train.cli(argv) == 0
    recorded = json.load(open(tmp_path / "run" / "run.json"))["inputs"]
    assert recorded[str(weights)] == {"role": "clip", "sha256": sha256(weights)}
    mtime = os.stat(weights).st_mtime_ns
    os.utime(weights, ns=(mtime + 10**9, mtime + 10**9))
    capsys.readouterr()
    assert train.main(argv) is None
    assert capsys.readouterr().out.splitlines() == [f"Run finished, skipping: {tmp_path / 'run'}"]


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
    assert f"trainers: {', '.join(sorted(TRAINERS))}" in " ".join(help_text.split())
    assert "KgCoOp" in TRAINERS and "PETRX" in TRAINERS
    assert "EuroSAT" in help_text and "DemoShapesHard" in help_text


def test_every_shipped_config_passes_the_value_checks():
    """The schema rejects no yaml the project ships (trainer and dataset configs merged as the scripts do: every
    trainer config with two dataset configs, every dataset config with one trainer config)."""
    from engine.schema import check_config
    from trainers.config import config_schema

    trainers = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(REPO, "configs", "trainers"))
                      for f in fs if f.endswith(".yaml"))
    datasets = sorted(os.path.join(REPO, "configs", "datasets", f)
                      for f in os.listdir(os.path.join(REPO, "configs", "datasets")))
    assert len(trainers) >= 25 and len(datasets) >= 15
    pairs = [(t, d) for t in trainers for d in (datasets[0], datasets[-1])] + [(trainers[0], d) for d in datasets]
    for trainer_yaml, dataset_yaml in pairs:
        args = train.build_parser().parse_args(["--config-file", trainer_yaml, "--dataset-config-file", dataset_yaml])
        check_config(train.setup_cfg(args), config_schema())


def test_eval_only_without_model_dir_stops_every_trainer_with_learned_weights(tmp_path, tiny_clip_file,
                                                                              tiny_teacher_clip_file, capsys):
    """PETR too (CoOp is in the matrix); zero-shot CLIP, which learns nothing, evaluates without one
    (tests/test_trainer_zsclip.py)."""
    write_eurosat(tmp_path / "data")
    argv = petr_argv(tmp_path / "data", tmp_path / "run", tiny_clip_file, tiny_teacher_clip_file,
                     "DATASET.SUBSAMPLE_CLASSES", "new", flags=("--eval-only",))
    assert train.cli(argv) == train.EXIT_USER_ERROR
    assert capsys.readouterr().err.splitlines() == [
        "error: --eval-only without --model-dir would evaluate the untrained seen_student, unseen_student of PETR: "
        "pass --model-dir <its training run folder> (and --load-epoch N or last when that run kept no "
        "model-best.pth.tar)"]
    assert _files(tmp_path / "run") == ["log.txt"]


def _row(case: str, status: int, line: str, out, fewshot: str, left: list[str] | None = None) -> None:
    """A matrix row (``left``: the files left in ``out``, when it cannot be listed from here); paths under pytest's
    temporary folder are shown from <tmp>."""
    line = re.sub(r"/\S*/pytest-of-[^/]+/pytest-\d+/[^/\s]+", "<tmp>", line)
    MATRIX.append([case, line if len(line) < 150 else line[:147] + "...", status,
                   ", ".join(_files(out) if left is None else left) or "(nothing)", fewshot])


THREE_RUNS = """
import contextlib, io, json, sys
import train
answers = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = train.cli(argv)
    answers.append([status, out.getvalue(), err.getvalue()])
print(json.dumps(answers))
"""
"""train.py's command line (``train.cli``, what ``python train.py`` runs) on each argv in turn in one process: its exit
status, terminal output and error output."""


def test_read_only_folders(tmp_path, tiny_clip_file):
    """``train.py``'s command line with folders really read-only (a read-only mount, as on clusters), three runs in one
    process: the dataset folder (the few-shot file goes to the output folder, with a note, and the run finishes), an
    OUTPUT_DIR and a DATASET.FEWSHOT_DIR (one error line each, nothing written)."""
    tree = write_eurosat(tmp_path / "data", train_per_class=3)
    out, locked, shots = tmp_path / "run", tmp_path / "locked", tmp_path / "shots"
    locked.mkdir()
    shots.mkdir()
    runs = [coop_argv(tmp_path / "data", out, tiny_clip_file),
            coop_argv(tmp_path / "data", locked / "run", tiny_clip_file),
            coop_argv(tmp_path / "data", tmp_path / "run2", tiny_clip_file, "DATASET.FEWSHOT_DIR", str(shots))]
    with read_only(tree.dataset_dir, str(locked), str(shots)) as prefix:
        done = subprocess.run([*prefix, sys.executable, "-c", THREE_RUNS, json.dumps(runs)], cwd=REPO,
                              capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    (status, stdout, stderr), locked_run, shots_run = json.loads(done.stdout.splitlines()[-1])
    reason = "Read-only file system" if prefix else "Permission denied"  # chmod: the OS says so in its own words

    fallback = out / "split_fewshot" / "eurosat" / "shot_2-seed_1.json"
    note = (f"Note: {tree.dataset_dir}/split_fewshot is read-only; wrote the few-shot file to {fallback} instead (set "
            "DATASET.FEWSHOT_DIR to share one folder across runs)")
    assert status == 0 and note in stdout.splitlines(), stderr[-3000:]
    assert fallback.is_file() and "results.json" in _files(out) and not os.path.exists(
        os.path.join(tree.dataset_dir, "split_fewshot"))
    _row("read-only dataset folder", status, note, out, "in the output folder")

    line = f"error: OUTPUT_DIR {locked / 'run'} cannot be written ({reason}); choose another --output-dir"
    assert (locked_run[0], locked_run[2]) == (2, line + "\n") and _files(locked) == []
    _row("output folder not writable", locked_run[0], line, locked, "none")

    line = (f"error: Cannot write the few-shot file {shots}/eurosat/shot_2-seed_1.json ({reason}); set "
            "DATASET.FEWSHOT_DIR to a writable folder")
    assert (shots_run[0], shots_run[2]) == (2, line + "\n") and _files(tmp_path / "run2") == ["log.txt"]
    assert _files(shots) == [] and not os.path.exists(os.path.join(tree.dataset_dir, "split_fewshot"))
    _row("DATASET.FEWSHOT_DIR not writable", shots_run[0], line, tmp_path / "run2", "none")


def test_a_loader_workers_error_ends_its_workers_with_the_run(tmp_path, tiny_clip_file, monkeypatch):
    """A run that stops on a corrupt image read in a loader worker shuts that worker down before it returns (a runner's
    warm worker runs the next job in the same process): left to the garbage collector, the shutdown waited 5 s per
    worker at some later collection."""
    tree = write_eurosat(tmp_path / "data", train_per_class=3)
    argv, _ = _corrupt_image_worker(tmp_path, tmp_path / "data", tree, tiny_clip_file, monkeypatch)
    before = {p.pid for p in multiprocessing.active_children()}
    assert train.cli(argv) == train.EXIT_USER_ERROR
    assert [p.pid for p in multiprocessing.active_children() if p.pid not in before] == []


def test_a_fifo_as_checkpoint_is_refused_without_blocking(tmp_path, tiny_clip_file):
    """``python train.py --eval-only`` on a model folder whose checkpoint is a FIFO (no writer): one line, no hang
    (the subprocess timeout is the hang guard)."""
    write_eurosat(tmp_path / "data", train_per_class=3)
    fifo = tmp_path / "trained" / "prompt_learner" / "model.pth.tar-1"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "train.py", *_eval_argv(tmp_path / "data", tmp_path, tiny_clip_file)],
                          cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    line = f"error: {fifo} " + NOT_REGULAR.format(kind="a FIFO", path=fifo)
    assert (done.returncode, done.stderr) == (2, line + "\n")
    assert _files(tmp_path / "run") == ["log.txt", "run.json"]
    _row("checkpoint is a FIFO", done.returncode, line, tmp_path / "run", "written (valid)")


_LIST_AFTER = '"$@"; status=$?; echo "--files--"; find "$FOLDER" -type f -printf "%P %s\\n" | sort; exit $status'


@pytest.mark.parametrize("free_kib", [0, 24], ids=["full", "almost full"])
def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path, tiny_clip_file, free_kib):
    """``python train.py`` with OUTPUT_DIR on a real filesystem that is full (ENOSPC at the lock) or fills up while the
    run writes (its log, run.json or a checkpoint): one error line naming the folder, exit 2, no empty run.lock and no
    temporary or half-written file left."""
    write_eurosat(tmp_path / "data", train_per_class=3)
    disk = tmp_path / "disk"
    disk.mkdir()
    with full_disk(str(disk), free_kib) as prefix:
        cmd = [*prefix, "sh", "-c", _LIST_AFTER, "sh", sys.executable, "train.py",
               *coop_argv(tmp_path / "data", disk / "run", tiny_clip_file)]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S,
                              env={**os.environ, "FOLDER": str(disk)})
    files = dict(line.rsplit(" ", 1) for line in done.stdout.split("--files--\n")[-1].splitlines())
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    if free_kib == 0:  # at the lock
        assert errors[0] == (f"error: OUTPUT_DIR {disk / 'run'} cannot be written (No space left on device); choose "
                             "another --output-dir")
    else:  # at whichever write found the disk full: the run's folder (or the one inside it written to) is named
        assert errors[0].startswith(f"error: {disk / 'run'}") and ": No space left on device; free space there" in \
            errors[0]
    left = sorted(rel for rel in files if rel != "filler")
    assert "run/run.lock" not in left and not any(os.path.basename(rel).startswith(".tmp-") for rel in left), left
    assert "run/results.json" not in left
    _row(f"disk {'full' if free_kib == 0 else 'filling up'} (ENOSPC)", done.returncode, errors[0], disk / "run",
         "written (valid)" if os.path.isdir(os.path.join(tmp_path, "data", "eurosat", "split_fewshot")) else "none",
         [os.path.relpath(rel, "run") for rel in left])


def test_repeated_split_entries_and_16_bit_images_are_handled_with_a_note(tmp_path, tiny_clip_file, capsys,
                                                                          monkeypatch):
    """A split listing images twice (each used once) and 16-bit grayscale images (scaled, not clipped): the run
    finishes and says so in one line each."""
    tree = write_eurosat(tmp_path / "data", train_per_class=3)
    with open(tree.split_file) as f:
        split = json.load(f)
    split["train"] += split["train"][:2]
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    for path in train_images(tree):
        Image.fromarray(np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000).save(path, format="PNG")
    monkeypatch.setattr(engine.utils, "_noted", set())
    capsys.readouterr()
    status = train.cli(coop_argv(tmp_path / "data", tmp_path / "run", tiny_clip_file))
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("Note: ")]
    repeated = next(line for line in notes if "more than once" in line)
    sixteen = next(line for line in notes if "16-bit" in line)
    assert status == 0 and repeated == (f"Note: {tree.split_file} lists 2 images (2750/{split['train'][0][0]}, "
                                        f"2750/{split['train'][1][0]}) more than once in its train split; each is "
                                        "used once")
    assert sixteen.endswith("is a 16-bit grayscale image: its values are scaled to 8 bits (v / 257); so are those of "
                            "any other (noted once)")
    fewshot = "written (valid)" if os.path.isdir(os.path.join(tree.dataset_dir, "split_fewshot")) else "none"
    _row("image listed twice in a split", status, repeated, tmp_path / "run", fewshot)
    _row("16-bit grayscale images", status, sixteen, tmp_path / "run", fewshot)


REFUSED_FOLDER = ("; a run writes only in a folder of its own (new, empty or holding that run): choose another "
                  "--output-dir")


def _no_run(folder) -> str:
    """Why ``folder``, holding files of no run, is refused (its non-hidden entries, the first three named)."""
    names = sorted(name for name in os.listdir(folder) if not name.startswith("."))
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"holds {len(names)} files or folders of no run ({shown}) and no log.txt or run.json of one"


def test_an_output_dir_that_holds_no_run_of_this_trainer_is_refused(tmp_path, tiny_clip_file, capsys):
    """--output-dir where the run would write into what is not its own: the file system's root, a dataset's folder, a
    finished run's model folder or a folder inside that run, an upstream run's model folder, a published teacher
    (which would otherwise be "resumed"), a finished run of another trainer: one error line each (exit 2), before
    anything is written; the folder stays as it was."""
    tree = write_eurosat(tmp_path / "data", train_per_class=3)
    coop = tmp_path / "coop"
    assert train.cli(coop_argv(tmp_path / "data", coop, tiny_clip_file)) == 0
    upstream = tmp_path / "upstream"
    (upstream / "prompt_learner").mkdir(parents=True)
    (upstream / "prompt_learner" / "checkpoint").write_text("model.pth.tar-1\n")
    (upstream / "log.txt").write_text("an upstream Dassl log\n")
    teacher = tmp_path / "teacher"
    (teacher / "VLPromptLearner").mkdir(parents=True)
    (teacher / "VLPromptLearner" / "checkpoint").write_text("model.pth.tar-1\n")
    (teacher / "teacher.json").write_text("{}")
    inside = f"lies inside the run folder {coop} (it holds results.json)"
    cases = {"output folder /": ("/", _no_run("/")),
             "output folder a dataset's folder": (tree.dataset_dir, _no_run(tree.dataset_dir)),
             "output folder a finished run's model folder": (coop / "prompt_learner", inside),
             "output folder inside a finished run": (coop / "prompt_learner" / "seed1", inside),
             "output folder an upstream run's model folder": (upstream / "prompt_learner", (
                 "is a model folder of a run (it holds the pointer file 'checkpoint')")),
             "output folder a published teacher's": (teacher, (
                 "is a published teacher's folder (it holds teacher.json)"))}
    for case, (folder, reason) in cases.items():
        before = sorted(os.listdir(folder)) if folder == "/" else _snapshot(tmp_path)
        capsys.readouterr()
        status = train.cli(coop_argv(tmp_path / "data", folder, tiny_clip_file))
        line = f"error: OUTPUT_DIR {folder} {reason}{REFUSED_FOLDER}"
        assert (status, capsys.readouterr().err.splitlines()) == (2, [line]), case
        assert (sorted(os.listdir(folder)) if folder == "/" else _snapshot(tmp_path)) == before, case
        _row(case, status, line, folder, "none", ["(as it was)"])
    before = _snapshot(coop)
    argv = zeroshot_argv(tmp_path / "data", coop, tiny_clip_file)
    assert train.cli(argv) == 2 and _snapshot(coop) == before
    line = (f'error: {coop} holds a finished run that differs from this one: TRAINER.NAME "CoOp" → "ZeroshotCLIP". '
            "Nothing was changed: give this run another --output-dir (scripts: OUTPUT_ROOT), or add --move-aside "
            f"(scripts: MOVE_ASIDE=1) to move that run to {tmp_path / '.coop.old-1'} and start this one")
    assert capsys.readouterr().err.splitlines() == [line]
    _row("output folder a finished run of another trainer", 2, line, coop, "none", ["(as it was)"])
