"""Ctrl-C (SIGINT) and kill -9 (SIGKILL) during training, around checkpoint writing and during the final evaluation,
each followed by a rerun of the same ``python train.py`` command: the run ends with the same weights and
results.json as an uninterrupted one, and log.txt keeps every attempt. The moments are picked by the output line
the kill waits for. Also scripts/petr/reproduce_base2new.sh killed between two runs; reruns of a killed run with
another config (each stops with one line, nothing in the folder changes, the same command then resumes); and the
same command started twice (a scheduler's retry): the second stops at once, the first ends as if alone.

Run with ``-s`` to see the kill/resume table.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest
import torch
from tabulate import tabulate

from tests.helpers_datasets import write_image
from tests.helpers_petr import write_eurosat
from tests.helpers_run import HANG_GUARD_S, run_until, train_argv
from tests.test_petr_scripts import CFG
from tests.test_petr_scripts import EXTRA as SCRIPT_OPTS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPOCHS = 2
TABLE: list[list] = []
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny models: one thread is faster, and the same in every run
# (moment, the output line the kill waits for): the second epoch's training, the last epoch's checkpoint writing
# (the Dassl file is written, the resume state is being written), the final evaluation.
MOMENTS = [("training", f"epoch [{EPOCHS}/{EPOCHS}] batch [2/"), ("checkpoint writing", "Checkpoint saved to"),
           ("evaluation", "Evaluate on the *test* set")]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Tiny EuroSAT with 6 train and 12 test images per class (an evaluation long enough to be hit)."""
    root = tmp_path_factory.mktemp("kill") / "data"
    tree = write_eurosat(root)
    with open(tree.split_file) as f:
        split = json.load(f)
    for label, name in enumerate(tree.classnames):
        key = sorted({item[0].split("/")[0] for item in split["test"] if item[1] == label})[0]
        for i in range(10):
            rel = f"{key}/xtest_{i}.jpg"
            write_image(os.path.join(tree.dataset_dir, "2750", rel), seed=5000 + 100 * label + i)
            split["test"].append([rel, label, name])
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    return str(root)


def command(data: str, out: str, clip_file: str, epochs: int = EPOCHS, seed: str = "1") -> list[str]:
    """A tiny CoOp run through the real train.py (shipped config: TRAIN.CHECKPOINT_FREQ 0)."""
    return [sys.executable, "train.py",
            *train_argv("CoOp", "vit_b16_ctxv1", data, out, "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
                        "DATALOADER.TEST.BATCH_SIZE", "1", "OPTIM.MAX_EPOCH", str(epochs), "TRAIN.PRINT_FREQ", "1",
                        "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "base", seed=seed, backbone=clip_file)]


def final_state(out: str) -> tuple[dict, dict]:
    weights = torch.load(os.path.join(out, "prompt_learner", f"model.pth.tar-{EPOCHS}"), weights_only=True)
    return weights["state_dict"], json.load(open(os.path.join(out, "results.json")))


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory, tiny_clip_file):
    out = str(tmp_path_factory.mktemp("kill") / "reference")
    status, output, _ = run_until(command(data, out, tiny_clip_file), None, signal.SIGINT, REPO, ENV)
    assert status == 0, output[-3000:]
    return final_state(out)


@pytest.fixture(scope="module", autouse=True)
def print_table():
    yield
    print("\n" + tabulate(TABLE, headers=["signal", "killed during", "exit", "left in the run folder",
                                          "the rerun", "final weights / results.json"], tablefmt="github"))


def _left(out: str) -> str:
    files = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
    return ", ".join(f for f in files if not f.startswith("tensorboard"))


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_killed_runs_resume_to_the_same_weights_and_results(sig, data, reference, tmp_path, tiny_clip_file):
    out = str(tmp_path / "run")
    cmd, env = command(data, out, tiny_clip_file), ENV
    rows = []
    for moment, marker in MOMENTS:
        status, output, sent = run_until(cmd, marker, sig, REPO, env)
        assert sent and status == -sig, (moment, status, output[-3000:])  # killed, not finished
        assert not os.path.exists(os.path.join(out, "results.json"))
        if sig == signal.SIGINT:  # Ctrl-C: one line on the console, the same line in the log
            assert "interrupted: rerun the same command to resume" in output and "Traceback" not in output
        rows.append([signal.Signals(sig).name, moment, status, _left(out)])
    status, output, _ = run_until(cmd, None, sig, REPO, env)
    assert status == 0, output[-3000:]
    weights, results = final_state(out)
    ref_weights, ref_results = reference
    assert weights.keys() == ref_weights.keys() and all(torch.equal(weights[k], ref_weights[k]) for k in weights)
    assert results == ref_results
    log = open(os.path.join(out, "log.txt")).read()
    attempts = log.split("new attempt (earlier ones above)")
    assert len(attempts) == len(MOMENTS) + 1 and "Finish training" in attempts[-1]
    resumed = [next((line for line in a.splitlines() if line.startswith("Previous epoch")), "from scratch")
               + ("; removed a cut-off write" if "left by a write that was cut off" in a else "") for a in attempts[1:]]
    assert resumed[-1].startswith(f"Previous epoch: {EPOCHS}")  # killed during evaluation: no epoch is trained again
    assert not [n for n in os.listdir(out) if n.startswith(".tmp-")] and "resume.pth.tar" not in os.listdir(out)
    for row, rerun in zip(rows, resumed):
        TABLE.append(row + [f"resumes: {rerun}", "equal to the uninterrupted run"])


@pytest.mark.slow
def test_reproduce_script_interrupted_between_runs_finishes_the_same(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    """Ctrl-C on reproduce_base2new.sh after the training run, as the novel-class test starts; the rerun skips the
    finished training run and prints the same Base / Novel / HM row as an uninterrupted run."""
    write_eurosat(tmp_path / "data")
    env = {**ENV, "DATA": str(tmp_path / "data"), "PYTHON": sys.executable, "BACKBONE": tiny_clip_file,
           "TEACHER_NAME": tiny_teacher_clip_file, "TEACHER_CKPT": "none", "EXTRA_OPTS": SCRIPT_OPTS,
           "DATASETS": "eurosat", "SEEDS": "1"}
    script = ["bash", "scripts/petr/reproduce_base2new.sh"]
    status, reference, _ = run_until(script, None, signal.SIGINT, REPO, {**env, "OUTPUT_ROOT": str(tmp_path / "ref")})
    assert status == 0, reference[-3000:]
    env["OUTPUT_ROOT"] = str(tmp_path / "out")
    status, output, sent = run_until(script, "Evaluating PETR on the novel classes", signal.SIGINT, REPO, env)
    assert sent and status == -signal.SIGINT and "Base" not in output  # the loop stopped: no table
    test_dir = os.path.join(env["OUTPUT_ROOT"], "base2new/test_new/eurosat/shots_0/PETR", CFG, "seed1")
    assert not os.path.exists(os.path.join(test_dir, "results.json"))
    left = ", ".join(sorted(os.listdir(test_dir))) if os.path.isdir(test_dir) else "(no folder)"
    status, rerun, _ = run_until(script, None, signal.SIGINT, REPO, env)
    assert status == 0, rerun[-3000:]
    assert "Run finished, skipping: " in rerun and "train_base" in rerun.split("Run finished, skipping: ")[1]

    def row(text: str) -> str:
        return next(line for line in text.splitlines() if line.lstrip().lower().startswith("eurosat"))

    assert row(rerun) == row(reference)
    results = [json.load(open(os.path.join(root, "base2new/test_new/eurosat/shots_0/PETR", CFG, "seed1",
                                           "results.json"))) for root in (str(tmp_path / "ref"), env["OUTPUT_ROOT"])]
    assert results[0] == results[1]
    TABLE.append(["SIGINT (process group)", "reproduce_base2new.sh between train and test", -signal.SIGINT,
                  f"test_new run: {left}", "skips the finished train run, runs the test", "same b2n row and results"])


def _snapshot(out: str) -> dict[str, bytes]:
    """The folder's files and their bytes, but for the lock file (a killed run leaves its file; the next claim of the
    folder, refused or not, replaces it and removes it when done)."""
    return {rel: open(os.path.join(out, rel), "rb").read() for rel in _left(out).split(", ") if rel != "run.lock"}


@pytest.mark.slow
def test_rerun_with_another_config_stops_and_loses_nothing(data, tmp_path, tiny_clip_file):
    """Killed in epoch 3 of 4, then rerun with a smaller or larger MAX_EPOCH, another LR or another seed: each rerun
    stops before training with one line naming the key (once, a smaller MAX_EPOCH trained nothing, deleted the
    resume state and left no checkpoint); the folder stays byte for byte; the original command then resumes."""
    out = str(tmp_path / "run")
    cmd = command(data, out, tiny_clip_file, epochs=4)
    status, output, sent = run_until(cmd, "epoch [3/4] batch [2/", signal.SIGKILL, REPO, ENV)
    assert sent and status == -signal.SIGKILL, output[-3000:]
    killed = _snapshot(out)
    assert "resume.pth.tar" in killed and "run.json" in killed and "results.json" not in killed
    reruns = [("OPTIM.MAX_EPOCH 2", command(data, out, tiny_clip_file, epochs=2), "OPTIM.MAX_EPOCH 4 → 2"),
              ("OPTIM.MAX_EPOCH 6", command(data, out, tiny_clip_file, epochs=6), "OPTIM.MAX_EPOCH 4 → 6"),
              ("OPTIM.LR 0.01", cmd + ["OPTIM.LR", "0.01"], "OPTIM.LR 0.002 → 0.01"),
              ("--seed 2", command(data, out, tiny_clip_file, epochs=4, seed="2"), "SEED 1 → 2")]
    for change, rerun, named in reruns:
        status, output, _ = run_until(rerun, None, signal.SIGINT, REPO, ENV)
        assert status == 2 and output.splitlines() == [
            f"error: {out} holds an interrupted run that differs from this one: {named}. Nothing was changed: give "
            "this run another --output-dir (scripts: OUTPUT_ROOT), or add --move-aside (scripts: MOVE_ASIDE=1) to "
            f"move that run to {tmp_path / '.run.old-1'} and start this one"], output[-3000:]
        assert _snapshot(out) == killed  # log, run.json, resume state: all as the kill left them
        TABLE.append(["SIGKILL", "epoch 3 of 4", -signal.SIGKILL, _left(out), f"with {change}: exit 2, "
                      f"'error: ... differs from this one: {named} ...'", "folder unchanged"])
    status, output, _ = run_until(cmd, None, signal.SIGINT, REPO, ENV)
    assert status == 0, output[-3000:]
    last = open(os.path.join(out, "log.txt")).read().split("new attempt (earlier ones above)")[-1]
    assert f"Resuming the interrupted run in {out}" in last and "Previous epoch: 2" in last
    assert "epoch [3/4]" in last and "epoch [1/4]" not in last and os.path.isfile(os.path.join(out, "results.json"))
    TABLE.append(["", "", "", "", "the same command again: resumes at epoch 3", "finishes (exit 0)"])


@pytest.mark.slow
def test_same_command_twice_the_second_stops_at_once(data, reference, tmp_path, tiny_clip_file):
    """A scheduler's retry: the same command starts while the first still runs (held still with SIGSTOP, so the
    overlap does not depend on timing). The second stops with one line naming the first; the first then ends with
    the weights and results of an undisturbed run, its log holding one attempt and nothing of the second."""
    out = str(tmp_path / "run")
    cmd = command(data, out, tiny_clip_file)
    first = subprocess.Popen(cmd, cwd=REPO, env={**ENV, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        for line in first.stdout:
            lines.append(line)
            if "epoch [1/2] batch [1/" in line:
                break
        os.killpg(first.pid, signal.SIGSTOP)
        left = _snapshot(out)
        second = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert _snapshot(out) == left  # nothing of the first was touched
        os.killpg(first.pid, signal.SIGCONT)
        lines += list(first.stdout)
        first.wait(timeout=HANG_GUARD_S)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert second.returncode == 2 and second.stdout == "" and len(second.stderr.splitlines()) == 1, second.stderr
    assert re.fullmatch(rf"error: {re.escape(out)} is in use by another run \(pid {first.pid} on "
                        rf"{re.escape(socket.gethostname())}, started \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d: "
                        r"train\.py --root \S+ --seed 1 --trainer CoOp .*\); wait for it to end or stop it, or give "
                        r"this run another --output-dir", second.stderr.strip()), second.stderr
    assert first.returncode == 0, "".join(lines)[-3000:]
    weights, results = final_state(out)
    ref_weights, ref_results = reference
    assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights) and results == ref_results
    log = open(os.path.join(out, "log.txt")).read()
    assert "new attempt" not in log and "\nerror:" not in log and log.count("** Arguments **") == 1
    assert not os.path.exists(os.path.join(out, "run.lock"))
    TABLE.append(["(none)", "the same command started again while the first trains", 2, "the first run's files",
                  "stops at once: 'error: ... is in use by another run (pid ..., command ...)'",
                  "the first: equal to the uninterrupted run, one attempt in its log"])
