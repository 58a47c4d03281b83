"""The scripts and run states: for every state of a run folder (``python -m engine.runs state``), what a unit script
does with it (the decision is train.py's, the scripts only compose its command); sweeps into a folder of another
config; how scripts/unit.sh finds a Python with torch; publishing a teacher.

Run with ``-s`` to see the table of states.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from tabulate import tabulate

from engine.run_identity import RunMismatchError
from engine.run_lock import RunLockedError
from tests.helpers_petr import write_eurosat
from tests.helpers_run import HANG_GUARD_S, ScriptRunner, lock_held_elsewhere
from tests.helpers_upstream import UPSTREAM_EVAL_LOG, UPSTREAM_TRAIN_LOG
from trainers.catalog import TEACHER
from units.commands import publish_teacher
from units.unit import Unit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = ("INPUT.SIZE (32,32) OPTIM.MAX_EPOCH 1 DATALOADER.NUM_WORKERS 0 DATALOADER.TRAIN_X.BATCH_SIZE 4 "
        "DATALOADER.TEST.BATCH_SIZE 8 USE_CUDA False")
TABLE: list[list[str]] = []


@pytest.fixture(scope="module", autouse=True)
def print_table():
    yield
    print("\n" + tabulate(TABLE, headers=["folder", "python -m engine.runs state", "what the script did"],
                          tablefmt="github"))


def cli_state(path: str) -> str:
    """What the scripts ask: ``python -m engine.runs state DIR``."""
    return subprocess.run([sys.executable, "-m", "engine.runs", "state", path], cwd=REPO, capture_output=True,
                          text=True, check=True, timeout=HANG_GUARD_S).stdout.strip()


def test_every_run_state_and_what_the_scripts_do(tmp_path, tiny_clip_file, capsys):
    """For each state of a run folder, what ``python -m engine.runs state`` says and what the unit script (its
    train.py command, replayed in-process) then does: new → trains; finished → skips; interrupted → resumes;
    failed → says so and starts again; running → stops naming the holder; upstream (training or eval-only) → skips."""
    write_eurosat(tmp_path / "data", train_per_class=3)
    out = tmp_path / "output"
    runner = ScriptRunner(tmp_path, {"DATA": str(tmp_path / "data"), "OUTPUT_ROOT": str(out), "SHOTS": "2",
                                     "BACKBONE": tiny_clip_file, "EXTRA_OPTS": TINY})

    def run_dir(role: str, seed: int) -> str:
        return str(out / "base2new" / role / "eurosat" / "shots_2" / "CoOp" / "vit_b16_ctxv1" / f"seed{seed}")

    def script(name: str, seed: int) -> str:
        capsys.readouterr()
        done, commands = runner.run(f"coop/{name}", "eurosat", str(seed))
        assert done.returncode == 0 and len(commands) == 1, done.stderr
        return capsys.readouterr().out

    def row(label: str, state: str, did: str) -> None:
        TABLE.append([label, state, did])

    run = run_dir("train_base", 1)
    assert cli_state(run) == "new"
    output = script("base2new_train.sh", 1)
    assert runner.skipped == [False] and "epoch [1/1]" in output and "Resuming" not in output
    row("empty", "new", "trains from scratch")

    assert cli_state(run) == "finished"
    log = open(os.path.join(run, "log.txt")).read()
    output = script("base2new_train.sh", 1)
    assert runner.skipped == [True] and output == f"Run finished, skipping: {run}\n"
    assert open(os.path.join(run, "log.txt")).read() == log  # not even a new attempt in the log
    row("finished (same config)", "finished", "skips: 'Run finished, skipping: DIR', status 0")

    results = open(os.path.join(run, "results.json")).read()
    os.remove(os.path.join(run, "results.json"))  # killed in its final evaluation
    assert cli_state(run) == "resumable"
    output = script("base2new_train.sh", 1)
    assert runner.skipped == [False] and f"Resuming the interrupted run in {run}" in output
    assert "Previous epoch: 1" in output and "epoch [1/1]" not in output  # nothing is trained again
    assert open(os.path.join(run, "results.json")).read() == results
    row("killed during its final evaluation", "resumable", "resumes (trains nothing again), same results")

    failed = run_dir("train_base", 2)
    os.makedirs(failed)
    with open(os.path.join(failed, "log.txt"), "w") as f:
        f.write("error: Dataset folder not found: /data/eurosat\n")
    assert cli_state(failed) == "failed"
    output = script("base2new_train.sh", 2)
    assert f"note: {failed} holds only the log of an attempt that stopped before saving" in output
    assert "epoch [1/1]" in output and cli_state(failed) == "finished"
    row("only the log of a failed attempt", "failed", "says so, trains from scratch")

    busy = run_dir("train_base", 3)
    os.makedirs(busy)
    with lock_held_elsewhere(busy) as pid:
        assert cli_state(busy) == "running"
        with pytest.raises(RunLockedError, match=f"^{busy} is in use by another run \\(pid {pid} on h"):
            runner.run("coop/base2new_train.sh", "eurosat", "3")
        assert os.listdir(busy) == ["run.lock"]
    row("locked by a live run", "running", "stops: one error naming the holder (train.py: status 2)")

    upstream = run_dir("train_base", 4)
    os.makedirs(os.path.join(upstream, "prompt_learner"))
    for name, text in (("log.txt", UPSTREAM_TRAIN_LOG), ("prompt_learner/checkpoint", "model.pth.tar-5\n")):
        with open(os.path.join(upstream, name), "w") as f:
            f.write(text)
    assert cli_state(upstream) == "finished-upstream"
    output = script("base2new_train.sh", 4)
    assert runner.skipped == [True]
    assert output == f"Run finished (upstream log.txt, no results.json), skipping: {upstream}\n"
    row("upstream Dassl training run", "finished-upstream", "skips")

    evaluated = run_dir("test_new", 1)  # an upstream --eval-only folder of the (finished) model run 1
    os.makedirs(evaluated)
    with open(os.path.join(evaluated, "log.txt"), "w") as f:
        f.write(UPSTREAM_EVAL_LOG)
    assert cli_state(evaluated) == "finished-upstream"
    output = script("base2new_test.sh", 1)
    assert runner.skipped == [True] and "skipping: " + evaluated in output
    assert open(os.path.join(evaluated, "log.txt")).read() == UPSTREAM_EVAL_LOG  # nothing appended
    row("upstream Dassl --eval-only run (test_new)", "finished-upstream", "skips, its log untouched")


def test_script_sweeps_stop_on_another_config(tmp_path, tiny_clip_file, tiny_teacher_clip_file, capsys):
    """An EXTRA_OPTS or KD_WEIGHT sweep into the scripts' folder of another config stops with one line naming the
    key (it used to report "Run finished, skipping" and repeat one result under several names); MOVE_ASIDE=1 moves
    the old run aside and runs the new one."""
    write_eurosat(tmp_path / "data", train_per_class=3)
    out = tmp_path / "output"
    env = {"DATA": str(tmp_path / "data"), "OUTPUT_ROOT": str(out), "BACKBONE": tiny_clip_file,
           "TEACHER_NAME": tiny_teacher_clip_file, "TEACHER_CKPT": "none", "EXTRA_OPTS": TINY}
    coop = str(out / "base2new/train_base/eurosat/shots_2/CoOp/vit_b16_ctxv1/seed1")
    runner = ScriptRunner(tmp_path, {**env, "SHOTS": "2"})
    runner.run("coop/base2new_train.sh", "eurosat", "1")
    sweep = ScriptRunner(tmp_path, {**env, "SHOTS": "2", "EXTRA_OPTS": TINY + " OPTIM.LR 0.01"})
    with pytest.raises(RunMismatchError, match=f"^{coop} holds a finished run that differs from this one: "
                       "OPTIM.LR 0.002 → 0.01. Nothing was changed"):
        sweep.run("coop/base2new_train.sh", "eurosat", "1")
    TABLE.append(["CoOp run, rerun with EXTRA_OPTS+='OPTIM.LR 0.01'", "finished", "stops naming OPTIM.LR"])

    kd = str(out / "base2new/train_base/eurosat/shots_0/PromptKD/vit_b16_c2_ep20_batch8_4+4ctx/seed1")
    ScriptRunner(tmp_path, env).run("promptkd/base2new_train.sh", "eurosat", "1")
    results = open(os.path.join(kd, "results.json")).read()
    alpha = ScriptRunner(tmp_path, {**env, "KD_WEIGHT": "200.0"})
    with pytest.raises(RunMismatchError, match="TRAINER.PROMPTKD.KD_WEIGHT 1000.0 → 200.0. Nothing was changed"):
        alpha.run("promptkd/base2new_train.sh", "eurosat", "1")
    TABLE.append(["PromptKD run, rerun with KD_WEIGHT=200.0", "finished", "stops naming TRAINER.PROMPTKD.KD_WEIGHT"])
    capsys.readouterr()
    moved = ScriptRunner(tmp_path, {**env, "KD_WEIGHT": "200.0", "MOVE_ASIDE": "1"})
    moved.run("promptkd/base2new_train.sh", "eurosat", "1")
    aside = os.path.join(os.path.dirname(kd), ".seed1.old-1")
    assert f"Moved a finished run that differed from this one (TRAINER.PROMPTKD.KD_WEIGHT 1000.0 → 200.0) to {aside}" \
        in capsys.readouterr().out
    assert open(os.path.join(aside, "results.json")).read() == results  # kept, byte for byte
    assert json.load(open(os.path.join(kd, "run.json")))["config"]["TRAINER.PROMPTKD.KD_WEIGHT"] == 200.0
    TABLE.append(["the same with MOVE_ASIDE=1", "finished", "moves the old run to .seed1.old-1, trains α=200"])


def test_a_changed_split_stops_the_script_instead_of_skipping(tmp_path, tiny_clip_file):
    """base2new_train.sh finished, then two train images moved to the test split: the rerun stops naming the split
    file the run read (its inputs ledger), though the run's config is the same."""
    tree = write_eurosat(tmp_path / "data", train_per_class=3)
    out = tmp_path / "output"
    runner = ScriptRunner(tmp_path, {"DATA": str(tmp_path / "data"), "OUTPUT_ROOT": str(out), "SHOTS": "2",
                                     "BACKBONE": tiny_clip_file, "EXTRA_OPTS": TINY})
    runner.run("coop/base2new_train.sh", "eurosat", "1")
    with open(tree.split_file) as f:
        split = json.load(f)
    split["test"], split["train"] = split["test"] + split["train"][:2], split["train"][2:]
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    coop = str(out / "base2new/train_base/eurosat/shots_2/CoOp/vit_b16_ctxv1/seed1")
    with pytest.raises(RunMismatchError, match=f"^{coop} holds a finished run that differs from this one: split "
                       f"{tree.split_file} content sha256 [0-9a-f]{{12}} → [0-9a-f]{{12}}. Nothing was changed"):
        runner.run("coop/base2new_train.sh", "eurosat", "1")
    TABLE.append(["CoOp run, then 2 train images moved to test in the split file", "finished",
                  "stops naming the data (test, train_x, val)"])


def test_scripts_find_the_project_venv(tmp_path):
    """Without PYTHON or an active virtual environment, scripts/unit.sh runs the project's .venv python (here a
    stand-in that logs its arguments); with an active one, that environment's python, even when its bin/ is not on
    PATH; a PYTHON without torch is one error line, exit status 1."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(REPO, "scripts", "unit.sh"), tmp_path / "scripts" / "unit.sh")
    venv_python = tmp_path / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/calls"\n'  # stands in for the project's .venv
                           f'if [ "$1" = -c ]; then exec "{sys.executable}" "$@"; fi\n')
    venv_python.chmod(0o755)
    found = subprocess.run(["bash", str(tmp_path / "scripts" / "unit.sh"), "x.sh", "petr", "base2new_train", "a"],
                           cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert found.returncode == 0, found.stderr
    assert (tmp_path / "calls").read_text().splitlines()[-1] == "-m units petr base2new_train a"
    venv = tmp_path / "env"  # an active environment whose bin/ is not on PATH: its own python runs, not PATH's
    shutil.copytree(tmp_path / ".venv", venv)
    (tmp_path / "calls").write_text("")
    path_without_venv = os.pathsep.join(p for p in clean["PATH"].split(os.pathsep) if ".venv" not in p)
    found = subprocess.run(["bash", str(tmp_path / "scripts" / "unit.sh"), "x.sh", "petr", "base2new_train", "b"],
                           cwd=tmp_path, env={**clean, "VIRTUAL_ENV": str(venv), "PATH": path_without_venv},
                           capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert found.returncode == 0, found.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        "-c import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)",
        "-m units petr base2new_train b"]
    no_torch = subprocess.run(["bash", os.path.join(REPO, "scripts", "unit.sh"), "x.sh", "petr", "base2new_train"],
                              env={**clean, "PYTHON": "/bin/false"}, capture_output=True, text=True,
                              timeout=HANG_GUARD_S)
    assert no_torch.returncode == 2 and no_torch.stderr.count("\n") == 1
    assert no_torch.stderr.startswith("error: PYTHON=/bin/false has no torch: run 'make install'")


def test_publish_teacher_copies_the_checkpoint_the_pointer_names(tmp_path):
    run = tmp_path / "run"
    (run / "VLPromptLearner").mkdir(parents=True)
    for epoch in (1, 2):
        (run / "VLPromptLearner" / f"model.pth.tar-{epoch}").write_bytes(b"epoch %d" % epoch)
    (run / "VLPromptLearner" / "checkpoint").write_text("model.pth.tar-2\n")
    (run / "teacher_text_features.pt").write_bytes(b"features")
    unit = Unit(TEACHER, "scripts/teacher/base2new_train.sh", {"TEACHER_DIR": "teachers"}, str(tmp_path))
    publish_teacher(unit, str(run), "EuroSAT")
    dest = tmp_path / "teachers" / "EuroSAT"
    assert sorted(p.name for p in (dest / "VLPromptLearner").iterdir()) == ["checkpoint", "model.pth.tar-2"]
    assert (dest / "VLPromptLearner" / "model.pth.tar-2").read_bytes() == b"epoch 2"
    assert (dest / "teacher_text_features.pt").read_bytes() == b"features"


def test_data_unset_is_an_error_line_and_relative_paths_are_the_callers(tmp_path):
    """The scripts cd to the repository root; DATA and OUTPUT_ROOT given relative are still the caller's."""
    script = os.path.join(REPO, "scripts", "coop", "base2new_train.sh")
    env = {k: v for k, v in os.environ.items() if k not in ("DATA", "OUTPUT_ROOT", "TEACHER_DIR", "TEACHER_CKPT")}
    env["PYTHON"] = sys.executable  # the tests' interpreter, however pytest was started

    def run(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", script, "eurosat", "1"], cwd=tmp_path, env={**env, **extra},
                              capture_output=True, text=True, timeout=HANG_GUARD_S)

    done = run()
    assert (done.returncode, done.stderr) == (2, "error: DATA is not set: set DATA=/path/to/datasets (see "
                                                 "DATASETS.md)\n")
    done = run(DATA="datasets")
    assert done.stderr == (f"error: DATA={tmp_path}/datasets is not a folder (see DATASETS.md for the dataset "
                           "layout)\n")
    (tmp_path / "datasets").mkdir()
    done = run(DATA="datasets", OUTPUT_ROOT="out", PYTHON=ScriptRunner(tmp_path, {}).env["PYTHON"])  # records
    run_folder = tmp_path / "out" / "base2new" / "train_base" / "eurosat" / "shots_16" / "CoOp" / "vit_b16_ctxv1"
    assert f"-> {run_folder}/seed1\n" in done.stdout, done.stderr
    argv = json.loads(done.stdout.splitlines()[-1])["argv"]
    assert argv[argv.index("--data") + 1] == f"{tmp_path}/datasets"
    # a Python without site-packages (no torch): one line before anything runs
    bare = tmp_path / "bare_python.sh"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    done = run(DATA="datasets", OUTPUT_ROOT="out", PYTHON=str(bare))
    assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith(f"error: PYTHON={bare} has no torch")
