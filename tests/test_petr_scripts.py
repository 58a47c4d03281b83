"""PETR's bash scripts end to end on tiny CLIPs and a tiny EuroSAT tree: base2new_train.sh, base2new_test.sh,
reproduce_base2new.sh (skip + parse_test_res table), the units tables (units/facts.py), and the scripts' clear
errors; the cross-dataset / DG scripts (PETR, PromptKD, teacher, zero-shot) with SOURCE=demonet on a tiny demo-world
tree."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from datasets.catalog import DATASETS
from demo.shapes import GenParams, generate
from tests.helpers_petr import numpy_mahalanobis_route, write_eurosat
from tests.helpers_run import HANG_GUARD_S
from units.facts import BASE2NEW_DATASETS, DG_TARGETS, XD_TARGETS, dataset_name, dataset_yaml, kd_weight

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG = "vit_b16_ep40_batch8_4ctx"
EXTRA = ("INPUT.SIZE (32,32) OPTIM.MAX_EPOCH 1 DATALOADER.NUM_WORKERS 0 DATALOADER.TRAIN_X.BATCH_SIZE 8 "
         "DATALOADER.TEST.BATCH_SIZE 8 USE_CUDA False")


def run_script(script: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", f"scripts/{script}", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


@pytest.fixture(scope="module")
def script_env(tmp_path_factory, tiny_clip_file, tiny_teacher_clip_file) -> dict:
    tmp = tmp_path_factory.mktemp("scripts")
    write_eurosat(tmp / "data", train_per_class=6)
    return {**os.environ, "DATA": str(tmp / "data"), "PYTHON": sys.executable, "OUTPUT_ROOT": str(tmp / "output"),
            "BACKBONE": tiny_clip_file, "TEACHER_NAME": tiny_teacher_clip_file, "TEACHER_CKPT": "none",
            "EXTRA_OPTS": EXTRA, "TEACHER_DIR": str(tmp / "no_teachers_here")}


@pytest.mark.slow
def test_base2new_scripts_end_to_end(script_env):
    out = script_env["OUTPUT_ROOT"]
    train_dir = os.path.join(out, "base2new/train_base/eurosat/shots_0/PETR", CFG, "seed1")
    test_dir = os.path.join(out, "base2new/test_new/eurosat/shots_0/PETR", CFG, "seed1")
    done = run_script("petr/base2new_train.sh", "eurosat", "1", env=script_env)
    assert done.returncode == 0, done.stderr[-3000:]
    done = run_script("petr/base2new_test.sh", "eurosat", "1", env=script_env)
    assert done.returncode == 0, done.stderr[-3000:]

    for directory, subsample in ((train_dir, "base"), (test_dir, "new")):
        log = open(os.path.join(directory, "log.txt")).read()
        results = json.load(open(os.path.join(directory, "results.json")))
        assert results["subsample_classes"] == subsample and results["trainer"] == "PETR"
        assert f"* accuracy: {results['accuracy']:.2f}%" in log and "=> routing (test)" in log
        assert re.search(r"KD_WEIGHT: 1000\.0", log)  # EuroSAT's α from the scripts' table
    assert os.path.isfile(os.path.join(train_dir, "seen_student", "model.pth.tar-1"))
    assert "Load router" in open(os.path.join(test_dir, "log.txt")).read()  # the novel test reuses the router

    # routing fields agree with the dumps, recomputed with a NumPy router fitted on the train run's fit dump
    fit = torch.load(os.path.join(train_dir, "router_fit_logits.pt"), weights_only=True)["q"].double().numpy()
    summary = {}
    for directory in (train_dir, test_dir):
        dump = torch.load(os.path.join(directory, "logits_test.pt"), weights_only=True)
        results = json.load(open(os.path.join(directory, "results.json")))
        q_s, q_u = dump["q_s"].double().numpy(), dump["q_u"].double().numpy()
        route, threshold, _, _ = numpy_mahalanobis_route(fit, np.concatenate([q_s, q_u], axis=1), 1.4, 99.0)
        is_seen, labels, ids = dump["is_seen"].numpy(), dump["labels"].numpy(), dump["eval_labels"].numpy()
        assert is_seen.all() if directory == train_dir else not is_seen.any()
        final = np.where(route[:, None], q_s, q_u)
        accuracy = 100.0 * np.mean(ids[final[:, ids].argmax(axis=1)] == labels)
        assert results["accuracy"] == pytest.approx(accuracy, abs=1e-9)
        assert results["route_acc"] == pytest.approx(100.0 * np.mean(route == is_seen), abs=1e-9)
        assert results["share_seen"] == pytest.approx(100.0 * route.mean(), abs=1e-9)
        assert results["threshold"] == pytest.approx(threshold, rel=1e-9)
        summary[directory] = results["accuracy"]

    # finished runs are skipped; the reproduce script then prints parse_test_res's base-to-novel table
    again = run_script("petr/base2new_train.sh", "eurosat", "1", env=script_env)
    assert again.returncode == 0 and "Run finished, skipping" in again.stdout
    table = run_script("petr/reproduce_base2new.sh", env={**script_env, "DATASETS": "eurosat", "SEEDS": "1"})
    assert table.returncode == 0, table.stderr[-3000:]
    assert table.stdout.count("Run finished, skipping") == 2
    base, novel = summary[train_dir], summary[test_dir]
    hm = 2 * base * novel / (base + novel) if base + novel else 0.0
    row = next(line for line in table.stdout.splitlines() if line.lstrip().lower().startswith("eurosat"))
    for value in (base, novel, hm):
        assert f"{value:.2f}" in row, (row, value)


def test_scripts_give_clear_errors(script_env):
    no_data = {k: v for k, v in script_env.items() if k != "DATA"}
    done = run_script("petr/base2new_train.sh", "eurosat", "1", env=no_data)
    assert done.returncode != 0 and "set DATA=" in done.stderr
    no_teacher = {k: v for k, v in script_env.items() if k != "TEACHER_CKPT"}
    done = run_script("petr/base2new_train.sh", "eurosat", "2", env=no_teacher)
    assert done.returncode != 0 and "no teacher at" in done.stderr and "TEACHER_CKPT=none" in done.stderr
    assert "train it with `bash scripts/teacher/base2new_train.sh eurosat 2`" in done.stderr
    done = run_script("petr/dg_train.sh", "demonet_sketch", "1", env={**no_teacher, "SOURCE": "demonet"})
    assert done.returncode == 2 and done.stderr.startswith(  # the source's teacher, trained by xd_train.sh
        f"error: no teacher at {no_teacher['TEACHER_DIR']}/DemoNet-xd: train it with "
        "`SOURCE=demonet bash scripts/teacher/xd_train.sh 1`"), done.stderr
    done = run_script("petr/base2new_train.sh", "eurosatt", "1", env=script_env)
    assert done.returncode != 0 and "unknown dataset 'eurosatt'" in done.stderr
    done = run_script("petr/base2new_test.sh", "dtd", "1", env=script_env)
    assert done.returncode != 0 and "no finished training run" in done.stderr


def test_unit_tables_match_dataset_configs():
    shorts = [*BASE2NEW_DATASETS, *DG_TARGETS["imagenet"]]
    assert len(shorts) == 15 and set(XD_TARGETS) == set(shorts[1:11])
    assert shorts[11:] == ["imagenetv2", "imagenet_sketch", "imagenet_a", "imagenet_r"]
    assert list(DG_TARGETS["demonet"]) == ["demonetv2", "demonet_sketch", "demonet_a", "demonet_r"]
    stems = sorted(name[:-len(".yaml")] for name in os.listdir(os.path.join(REPO, "configs", "datasets")))
    assert set(shorts) < set(stems) and {"demonet", "democool", "demonet_sketch"} < set(stems)
    for short in stems:  # every dataset config, the demo's included
        name = dataset_name(short)
        with open(os.path.join(REPO, dataset_yaml(short))) as f:
            assert yaml.safe_load(f)["DATASET"]["NAME"] == name
        assert name in DATASETS
    # PromptKD's per-dataset α (its base2new_train.sh comments); KD_WEIGHT overrides every dataset
    alphas = {short: kd_weight(short, {}) for short in shorts[:11]}
    assert {s for s, a in alphas.items() if a == "200.0"} == {"fgvc_aircraft", "oxford_flowers", "dtd"}
    assert {a for s, a in alphas.items()} == {"200.0", "1000.0"}
    assert kd_weight("dtd", {"KD_WEIGHT": "5.0"}) == "5.0"


DEMO_TINY = GenParams(train_per_class=1, val_per_class=1, test_per_class=1, xd_train_per_class=2, xd_val_per_class=1,
                      xd_test_per_class=1)
"""A tiny demo world: DemoNet 24 classes x (2 train, 1 val, 1 test); the DG targets 1 test image per class."""


@pytest.fixture(scope="module")
def demo_env(tmp_path_factory, tiny_clip_file, tiny_teacher_clip_file) -> dict:
    """The environment of a demo-world user: SOURCE=demonet, CFG=demo, teachers published under TEACHER_DIR."""
    tmp = tmp_path_factory.mktemp("demo_scripts")
    generate(str(tmp / "data"), DEMO_TINY, verbose=False)
    env = {k: v for k, v in os.environ.items() if k not in ("TEACHER_CKPT", "SHOTS", "SOURCE", "CFG")}
    return {**env, "DATA": str(tmp / "data"), "PYTHON": sys.executable, "OUTPUT_ROOT": str(tmp / "output"),
            "BACKBONE": tiny_clip_file, "TEACHER_NAME": tiny_teacher_clip_file, "TEACHER_DIR": str(tmp / "teachers"),
            "SOURCE": "demonet", "CFG": "demo",
            "EXTRA_OPTS": "OPTIM.MAX_EPOCH 1 DATALOADER.NUM_WORKERS 0 USE_CUDA False"}


def _finished(env: dict, rel: str, dataset: str) -> str:
    """The log of the finished run in OUTPUT_ROOT/rel, whose results.json names ``dataset``."""
    run = os.path.join(env["OUTPUT_ROOT"], rel)
    with open(os.path.join(run, "results.json")) as f:
        assert json.load(f)["dataset"] == dataset
    with open(os.path.join(run, "log.txt")) as f:
        return f.read()


@pytest.mark.slow
def test_cross_dataset_and_dg_scripts_in_the_demo_world(demo_env):
    steps = [("teacher/xd_train.sh", "1"), ("petr/xd_train.sh", "democool", "1"), ("petr/xd_test.sh", "democool", "1"),
             ("promptkd/xd_train.sh", "demonet", "1"), ("promptkd/xd_test.sh", "demonet_sketch", "1"),
             ("zsclip/zeroshot.sh", "demonet_r", "demo")]
    for script, *args in steps:
        done = run_script(script, *args, env=demo_env)
        assert done.returncode == 0, (script, done.stderr[-3000:])
    shots1 = {**demo_env, "SHOTS": "1"}
    for script in ("petr/dg_train.sh", "petr/dg_test.sh"):
        done = run_script(script, "demonet_a", "1", env=shots1)
        assert done.returncode == 0, (script, done.stderr[-3000:])

    teacher = os.path.join(demo_env["TEACHER_DIR"], "DemoNet-xd")
    assert os.path.isfile(os.path.join(teacher, "VLPromptLearner", "checkpoint"))
    log = _finished(demo_env, "xd/train/demonet/shots_16/PromptSRC/demo/seed1", "DemoNet")
    assert "Data role standard (cross, SUBSAMPLE_CLASSES all)" in log
    for rel in ("xd/train/democool/shots_0/PETR/demo/seed1", "xd/test/democool/shots_0/PETR/demo/seed1"):
        log = _finished(demo_env, rel, "DemoCool")
        assert "SOURCE_DATASET: DemoNet" in log and f"TEACHER_CKPT: {teacher}" in log
        assert "Data role seen_unseen (cross, SUBSAMPLE_CLASSES all): train_x 48, train_u 24" in log  # 24 x 2 source
    for rel in ("dg/train/demonet_a/shots_1/PETR/demo/seed1", "dg/test/demonet_a/shots_1/PETR/demo/seed1"):
        log = _finished(demo_env, rel, "DemoNetA")
        assert "SOURCE_DATASET: DemoNet" in log
        assert "Data role seen_unseen (dg, SUBSAMPLE_CLASSES all): train_x 24" in log  # 1 shot x 24 source classes
    log = _finished(demo_env, "xd/train/demonet/shots_0/PromptKD/demo/seed1", "DemoNet")
    assert f"TEACHER_CKPT: {teacher}" in log
    log = _finished(demo_env, "xd/test/demonet_sketch/shots_0/PromptKD/demo/seed1", "DemoNetSketch")
    assert "Data role distill_all (dg," in log  # a DG target of SOURCE is evaluated with MODAL dg
    assert os.path.join("xd/train/demonet/shots_0/PromptKD/demo/seed1") in log  # the DemoNet-distilled student
    _finished(demo_env, "ZeroshotCLIP/demo/demonet_r", "DemoNetR")


def test_cross_dataset_scripts_give_clear_errors(demo_env):
    done = run_script("petr/dg_train.sh", "imagenet_a", "1", env=demo_env)
    assert done.returncode != 0 and done.stderr.strip().splitlines() == [
        "error: usage: SOURCE=demonet bash scripts/petr/dg_train.sh "
        "<demonetv2|demonet_sketch|demonet_a|demonet_r> <seed> ('imagenet_a' is not a DG target of it)"]
    done = run_script("petr/dg_test.sh", "demonet_a", "1", env={**demo_env, "SOURCE": "imagenet"})
    assert done.returncode != 0 and "<imagenetv2|imagenet_sketch|imagenet_a|imagenet_r>" in done.stderr
    done = run_script("petr/dg_train.sh", "demonet_a", "1", env={**demo_env, "SOURCE": "democool"})
    assert done.returncode != 0 and "no domain-generalisation targets for source 'democool'" in done.stderr
    done = run_script("petr/xd_train.sh", "democool", "1", env={**demo_env, "SOURCE": "demonett"})
    assert done.returncode != 0 and "unknown dataset 'demonett'; use one of: caltech101 demo_shapes" in done.stderr
    assert " demonet " in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = run_script("promptkd/xd_test.sh", "democool", "7", env=demo_env)
    assert done.returncode != 0 and "no DemoNet-distilled student in" in done.stderr
