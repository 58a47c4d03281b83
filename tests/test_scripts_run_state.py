"""scripts/common.sh: the state of a run folder (finished, upstream-finished, resumable, failed, new), what the
scripts do with each, and how they find a Python with torch."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers_run import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The end of an upstream Dassl run's log.txt (CoOp / PromptKD layout), written from Dassl's print statements.
UPSTREAM_LOG = """epoch [5/5] batch [20/20] time 0.101 (0.120) data 0.000 (0.010) loss 0.4121 (0.4500) acc 87.5 (86.2)
Checkpoint saved to output/base2new/train_base/eurosat/shots_16/CoOp/vit_b16_ctxv1/seed1/prompt_learner/model.pth.tar-5
Finish training
Deploy the last-epoch model
Evaluate on the *test* set
=> result
* total: 4,200
* correct: 3,843
* accuracy: 91.5%
* error: 8.5%
* macro_f1: 91.4%
Elapsed: 0:03:12
"""


def bash(expr: str, cwd: str = REPO, **env: str) -> subprocess.CompletedProcess:
    """Run ``expr`` after sourcing scripts/common.sh in ``cwd``."""
    return subprocess.run(["bash", "-c", f"source {REPO}/scripts/common.sh && {expr}"], cwd=cwd,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=HANG_GUARD_S)


def make_run(root, state: str) -> str:
    """A run folder in ``state`` as the engine (or upstream Dassl) leaves it."""
    run = root / state
    (run / "prompt_learner").mkdir(parents=True)
    if state == "finished":
        (run / "results.json").write_text('{"accuracy": 91.5}')
        (run / "log.txt").write_text("...\n")
    elif state == "finished-upstream":
        (run / "log.txt").write_text(UPSTREAM_LOG)
        (run / "prompt_learner" / "checkpoint").write_text("model.pth.tar-5\n")
    elif state == "resumable":  # killed during the final evaluation: "Finish training" but no accuracy block
        (run / "log.txt").write_text(UPSTREAM_LOG.split("=> result")[0])
        (run / "resume.pth.tar").write_bytes(b"")
    elif state == "failed":
        (run / "log.txt").write_text("error: Unknown trainer (TRAINER.NAME / --trainer) 'PETRR'.\n")
    return str(run)


@pytest.mark.parametrize("state,message,runs_train_py", [
    ("finished", "Run finished, skipping: ", False),
    ("finished-upstream", "Run finished (upstream log.txt, no results.json), skipping: ", False),
    ("resumable", "Resuming the interrupted run in ", True),
    ("failed", "holds only the log.txt of an attempt that stopped before saving a checkpoint or results (failed "
               "or interrupted): not finished, not resumable; running it again from the start", True),
    ("new", "", True),
])
def test_run_state_and_what_the_scripts_do(tmp_path, state, message, runs_train_py):
    run = make_run(tmp_path, state) if state != "new" else str(tmp_path / "new")
    assert bash(f"run_state {run}").stdout.strip() == state
    done = bash(f"skip_if_finished {run}; echo WOULD_RUN_TRAIN_PY")
    assert done.returncode == 0 and message in done.stdout
    assert ("WOULD_RUN_TRAIN_PY" in done.stdout) == runs_train_py
    assert (bash(f"run_finished {run}").returncode == 0) == (state.startswith("finished"))


def test_scripts_find_the_project_venv(tmp_path):
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    venv_python = tmp_path / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # stands in for the project's .venv
    venv_python.chmod(0o755)
    found = subprocess.run(["bash", "-c", f"source {REPO}/scripts/common.sh && echo $PYTHON && require_python"],
                           cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert found.returncode == 0 and found.stdout.strip() == str(venv_python)
    no_torch = bash("require_python", PYTHON="/bin/false")
    assert no_torch.returncode == 1 and no_torch.stderr.count("\n") == 1
    assert no_torch.stderr.startswith("error: PYTHON=/bin/false has no torch: run 'make install'")


def test_publish_teacher_copies_the_checkpoint_the_pointer_names(tmp_path):
    run = tmp_path / "run"
    (run / "VLPromptLearner").mkdir(parents=True)
    for epoch in (1, 2):
        (run / "VLPromptLearner" / f"model.pth.tar-{epoch}").write_bytes(b"epoch %d" % epoch)
    (run / "VLPromptLearner" / "checkpoint").write_text("model.pth.tar-2\n")
    (run / "teacher_text_features.pt").write_bytes(b"features")
    done = bash(f"source {REPO}/scripts/teacher/publish.sh && publish_teacher {run} EuroSAT",
                PYTHON=sys.executable, TEACHER_DIR=str(tmp_path / "teachers"))
    assert done.returncode == 0, done.stderr
    dest = tmp_path / "teachers" / "EuroSAT"
    assert sorted(p.name for p in (dest / "VLPromptLearner").iterdir()) == ["checkpoint", "model.pth.tar-2"]
    assert (dest / "VLPromptLearner" / "model.pth.tar-2").read_bytes() == b"epoch 2"
    assert (dest / "teacher_text_features.pt").read_bytes() == b"features"


def test_data_unset_is_an_error_line_and_relative_paths_are_the_callers(tmp_path):
    """The scripts cd to the repository root; DATA and OUTPUT_ROOT given relative are still the caller's."""
    script = os.path.join(REPO, "scripts", "coop", "base2new_train.sh")
    env = {k: v for k, v in os.environ.items() if k not in ("DATA", "OUTPUT_ROOT", "TEACHER_DIR", "TEACHER_CKPT")}

    def run(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", script, "eurosat", "1"], cwd=tmp_path, env={**env, **extra},
                              capture_output=True, text=True, timeout=HANG_GUARD_S)

    done = run()
    assert (done.returncode, done.stderr) == (1, "error: DATA is not set: set DATA=/path/to/datasets (see "
                                                 "DATASETS.md)\n")
    done = run(DATA="datasets")
    assert done.stderr == (f"error: DATA={tmp_path}/datasets is not a folder (see DATASETS.md for the dataset "
                           "layout)\n")
    (tmp_path / "datasets").mkdir()
    done = run(DATA="datasets", OUTPUT_ROOT="out", PYTHON="false")  # stops at the Python check, after the paths
    run_folder = tmp_path / "out" / "base2new" / "train_base" / "eurosat" / "shots_16" / "CoOp" / "vit_b16_ctxv1"
    assert f"-> {run_folder}/seed1\n" in done.stdout and done.stderr.startswith("error: PYTHON=false has no torch")
