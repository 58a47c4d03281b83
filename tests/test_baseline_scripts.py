"""The CoCoOp, MaPLe and IVLP scripts (base-to-novel, cross-dataset, DG) on tiny CLIPs and trees, their clear
refusals, and parse_test_res.py / the routing tools on these methods' run folders (ours and upstream's logs)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import parse_test_res as ptr
from demo.shapes import GenParams, generate
from tests.helpers_petr import write_eurosat
from tests.helpers_results import make_b2n_tree
from tests.helpers_run import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = {"cocoop": ("CoCoOp", "vit_b16_c4_ep10_batch1_ctxv1"), "maple": ("MaPLe", "vit_b16_c2_ep5_batch4_2ctx"),
           "ivlp": ("IVLP", "vit_b16_c2_ep20_batch4_4+4ctx")}
DEMO_WORLD = GenParams(train_per_class=1, val_per_class=1, test_per_class=1, xd_train_per_class=1, xd_val_per_class=1,
                       xd_test_per_class=1)
"""A tiny demo world: DemoNet (the source), DemoCool (a cross-dataset target), DemoNetA (a DG target)."""
EXTRA = ("INPUT.SIZE (32,32) OPTIM.MAX_EPOCH 1 DATALOADER.NUM_WORKERS 0 DATALOADER.TRAIN_X.BATCH_SIZE 4 "
         "DATALOADER.TEST.BATCH_SIZE 8 USE_CUDA False")


def run_script(script: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", f"scripts/{script}", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def hm(base: float, novel: float) -> float:
    return 2 * base * novel / (base + novel)


@pytest.fixture
def user_env(tmp_path, tiny_clip_file) -> dict:
    """A user's environment: DATA, OUTPUT_ROOT, a tiny CLIP, every train image (SHOTS 0), tiny settings."""
    write_eurosat(tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k not in ("SOURCE", "CFG", "LOAD_EPOCH")}
    return {**env, "DATA": str(tmp_path / "data"), "PYTHON": sys.executable, "OUTPUT_ROOT": str(tmp_path / "output"),
            "BACKBONE": tiny_clip_file, "SHOTS": "0", "EXTRA_OPTS": EXTRA}


def test_scripts_refuse_bad_calls_with_one_line(user_env):
    for short in METHODS:
        done = run_script(f"{short}/base2new_train.sh", "eurosat", env=user_env)
        assert done.returncode != 0 and done.stderr == \
            f"error: usage: bash scripts/{short}/base2new_train.sh <dataset> <seed>\n"
    done = run_script("maple/base2new_test.sh", "eurosat", "1", env=user_env)
    assert done.returncode != 0 and done.stderr.count("\n") == 1
    assert done.stderr.endswith("run bash scripts/maple/base2new_train.sh eurosat 1\n")
    done = run_script("cocoop/dg_test.sh", "eurosat", "1", env=user_env)
    assert done.returncode != 0 and done.stderr == (
        "error: usage: SOURCE=imagenet bash scripts/cocoop/dg_test.sh <imagenetv2|imagenet_sketch|imagenet_a|"
        "imagenet_r> <seed> ('eurosat' is not a DG target of it)\n")
    done = run_script("ivlp/xd_test.sh", "eurosat", "1", env={**user_env, "SOURCE": "eurosat"})
    assert done.returncode != 0 and done.stderr.count("\n") == 1
    assert done.stderr.endswith("run SOURCE=eurosat bash scripts/ivlp/xd_train.sh 1\n")
    done = run_script("maple/base2new_train.sh", "eurosatt", "1", env=user_env)
    assert done.returncode != 0 and "unknown dataset 'eurosatt'" in done.stderr
    assert not os.path.exists(user_env["OUTPUT_ROOT"])


def test_parse_test_res_on_upstream_logs_of_the_baselines(tmp_path, capsys):
    """Upstream CoCoOp / MaPLe / IVLP trees (training logs for base, eval-only logs for novel) next to the paper."""
    results = {"CoCoOp": ([80.0, 81.0], [70.0, 73.0]), "MaPLe": ([82.0, 83.0], [75.0, 74.0]),
               "IVLP": ([84.0, 85.0], [71.0, 72.0])}
    for trainer, accs in results.items():
        make_b2n_tree(str(tmp_path), trainer, METHODS[trainer.lower()][1], {"eurosat": accs}, fmt="log")
    assert ptr.main(["b2n", str(tmp_path), "--paper", "--format", "csv"]) == 0
    rows = [line.split(",") for line in capsys.readouterr().out.strip().splitlines()]
    for trainer, (base, novel) in results.items():
        b, n = np.mean(base), np.mean(novel)
        assert ["eurosat", trainer, "2/2", f"{b:.2f}", f"{n:.2f}", f"{hm(b, n):.2f}"] in rows
    paper = {r[1]: r[3:6] for r in rows if r[1].endswith("(paper)")}  # the papers' averages, as published
    assert paper == {"CoCoOp (paper)": ["80.47", "71.69", "75.83"], "IVLP (paper)": ["84.21", "71.79", "77.51"],
                     "MaPLe (paper)": ["82.28", "75.14", "78.55"]}


@pytest.mark.slow
def test_base2new_scripts_end_to_end_and_parse_test_res(user_env, capsys):
    out = user_env["OUTPUT_ROOT"]
    accuracies = {}
    for short, (trainer, cfg) in METHODS.items():
        for script, role, subsample in (("base2new_train.sh", "train_base", "base"),
                                        ("base2new_test.sh", "test_new", "new")):
            done = run_script(f"{short}/{script}", "eurosat", "1", env=user_env)
            assert done.returncode == 0, done.stderr[-3000:]
            result = json.loads(open(os.path.join(out, "base2new", role, "eurosat/shots_0", trainer, cfg,
                                                  "seed1", "results.json")).read())
            assert (result["trainer"], result["subsample_classes"], result["num_shots"]) == (trainer, subsample, 0)
            accuracies[trainer, role] = result["accuracy"]
        again = run_script(f"{short}/base2new_train.sh", "eurosat", "1", env=user_env)
        assert again.returncode == 0 and "Run finished, skipping: " in again.stdout
    assert ptr.main(["b2n", os.path.join(out, "base2new"), "--format", "csv"]) == 0
    rows = [line.split(",") for line in capsys.readouterr().out.strip().splitlines()]
    for trainer, _ in METHODS.values():
        b, n = accuracies[trainer, "train_base"], accuracies[trainer, "test_new"]
        assert ["eurosat", trainer, "1/1", f"{b:.2f}", f"{n:.2f}", f"{hm(b, n):.2f}"] in rows

    run = os.path.join(out, "base2new/train_base/eurosat/shots_0/MaPLe")  # no routing dumps: one clear line
    for tool, *flags in (("router_ablation",), ("lambda_sweep",), ("plot_routing_scores", "--out", out)):
        done = subprocess.run([sys.executable, "-m", f"tools.{tool}", run, *flags], cwd=REPO, capture_output=True,
                              text=True, timeout=HANG_GUARD_S)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no PETR logits dumps" in done.stderr


@pytest.mark.slow
def test_cross_dataset_and_dg_scripts_in_the_demo_world(tmp_path, tiny_clip_file, capsys):
    generate(str(tmp_path / "data"), DEMO_WORLD, verbose=False)
    env = {**{k: v for k, v in os.environ.items() if k not in ("CFG", "SHOTS", "LOAD_EPOCH")},
           "DATA": str(tmp_path / "data"), "PYTHON": sys.executable, "OUTPUT_ROOT": str(tmp_path / "output"),
           "BACKBONE": tiny_clip_file, "SOURCE": "demonet", "SHOTS": "1", "EXTRA_OPTS": EXTRA}
    trainer, cfg = "MaPLe", "vit_b16_c2_ep5_batch4_2ctx_cross_datasets"
    for script, *args in (("xd_train.sh", "1"), ("xd_test.sh", "democool", "1"), ("dg_test.sh", "demonet_a", "1")):
        done = run_script(f"maple/{script}", *args, env=env)
        assert done.returncode == 0, (script, done.stderr[-3000:])
    model = os.path.join(tmp_path, "output/xd/train/demonet/shots_1", trainer, cfg, "seed1")
    for rel, dataset in (("xd/train/demonet", "DemoNet"), ("xd/test/democool", "DemoCool"),
                         ("dg/test/demonet_a", "DemoNetA")):
        run = os.path.join(tmp_path, "output", rel, "shots_1", trainer, cfg, "seed1")
        result = json.loads(open(os.path.join(run, "results.json")).read())
        assert (result["dataset"], result["subsample_classes"]) == (dataset, "all")
        log = open(os.path.join(run, "log.txt")).read()
        assert "PROMPT_DEPTH: 3" in log and (rel.startswith("xd/train") or model in log)
    assert ptr.main([os.path.join(tmp_path, "output/dg/test/demonet_a/shots_1", trainer, cfg)]) == 0
    assert f"* accuracy: {result['accuracy']:.2f}% +- 0.00%" in capsys.readouterr().out
