"""The runner's preflight: the paper's base-to-novel plan on a data root with 10 of its 11 datasets, with and without
``--skip-missing``; counts against the published sizes; CLIP weights offline; a teacher checkpoint that is not there.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers_datasets import write_tree
from tests.helpers_run import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESENT = {"imagenet": ("ImageNet", "native"), "caltech101": ("Caltech101", "json"),
           "oxford_pets": ("OxfordPets", "json"), "stanford_cars": ("StanfordCars", "json"),
           "oxford_flowers": ("OxfordFlowers", "json"), "food101": ("Food101", "json"),
           "fgvc_aircraft": ("FGVCAircraft", "native"), "sun397": ("SUN397", "json"),
           "dtd": ("DescribableTextures", "json"), "eurosat": ("EuroSAT", "json")}
"""The paper's base-to-novel datasets but UCF101, as tiny trees."""
JOBS_PER_DATASET = 23
"""The paper's base-to-novel plan per dataset, by hand: its teacher, zero-shot CLIP, PETR, PromptKD and CoOp trained
and tested on 3 seeds (18), PETR+CoOp's plug-in on 3 seeds."""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A data root with 10 of the 11 datasets, CLIP weight files in a $CLIP_WEIGHTS_DIR, an empty home."""
    tmp = tmp_path_factory.mktemp("preflight")
    for name, mode in PRESENT.values():
        write_tree(name, str(tmp / "data"), mode=mode)
    (tmp / "weights").mkdir()
    for file in ("ViT-B-16.pt", "ViT-L-14.pt"):  # the preflight looks for the files; it does not load them
        (tmp / "weights" / file).touch()
    (tmp / "home").mkdir()
    return tmp


def runner(root, *args: str, weights: bool = True, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("DATA", "TEACHER_DIR", "TEACHER_CKPT", "EXTRA_OPTS",
                                                             "BACKBONE", "TEACHER_NAME", "CLIP_WEIGHTS_DIR")}
    base.update(HOME=str(root / "home"), PETR_OFFLINE="1", **env)
    if weights:
        base["CLIP_WEIGHTS_DIR"] = str(root / "weights")
    argv = [sys.executable, "-m", "runner", "base2new", "--data", str(root / "data"), "--output", str(root / "out"),
            "--teacher-dir", str(root / "teachers"), "--dry-run", *args]
    return subprocess.run(argv, cwd=REPO, env=base, capture_output=True, text=True, timeout=HANG_GUARD_S)


def table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """The preflight table: (input, name) -> [status words..., jobs]."""
    lines = stdout.split("Preflight (", 1)[1].splitlines()[3:]
    rows = {}
    for line in lines:
        cells = line.split()
        if not cells or cells[0] not in ("dataset", "weights", "teacher"):
            break
        rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_ten_of_eleven_datasets_stop_the_sweep(root):
    done = runner(root, "--other-splits")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr
    rows = table(done.stdout)
    assert rows[("dataset", "ucf101")] == ["missing", str(JOBS_PER_DATASET)]
    assert all(rows[("dataset", short)] == ["ok", str(JOBS_PER_DATASET)] for short in PRESENT)
    assert rows[("weights", "ViT-B/16")][0] == "cached" and rows[("weights", "ViT-L/14")][0] == "cached"
    assert rows[("weights", "ViT-L/14")][-1] == str(11 * (1 + 6))  # the teachers and the distilled students' training
    assert rows[("teacher", "eurosat")] == ["trained", "by", "this", "sweep", str(2 * 3)]  # PETR's, PromptKD's train
    assert rows[("teacher", "ucf101")] == ["not", "trainable", "here", "(dataset", "ucf101:", "missing)", str(2 * 3)]
    assert done.stderr.splitlines() == [
        f"error: UCF101: {root}/data/ucf101: dataset folder missing; put UCF101 there (see DATASETS.md#ucf101)",
        "error: 1 problem(s) with the sweep's inputs; fix them, or pass --skip-missing to run only the jobs whose "
        "inputs are present"]
    total = next(line.split() for line in done.stdout.splitlines() if line.startswith("total"))
    assert total[1] == str(11 * JOBS_PER_DATASET + 1)  # the dry run still prints the whole plan (+ the tables step)


def test_skip_missing_leaves_out_the_jobs_of_the_missing_dataset(root):
    done = runner(root, "--other-splits", "--skip-missing", "--verbose")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert f"Left out ({JOBS_PER_DATASET} of {11 * JOBS_PER_DATASET} jobs, --skip-missing):" in done.stdout
    assert "  teacher ucf101: lacks dataset ucf101" in done.stdout
    assert "  PETR train ucf101 seed1: lacks dataset ucf101" in done.stdout
    assert "  CoOp test ucf101 seed1: lacks dataset ucf101" in done.stdout
    total = next(line.split() for line in done.stdout.splitlines() if line.startswith("total"))
    assert total[1] == str(10 * JOBS_PER_DATASET + 1)
    kept = 10 * JOBS_PER_DATASET
    assert f"Summary: {kept} jobs ({kept} new); {kept} to run" in done.stdout
    commands = done.stdout.split("Every job runs in the repository root", 1)[1].split("Preflight (data root", 1)[0]
    assert " ucf101 " not in commands
    assert done.stdout.rstrip().splitlines()[-1] == "  ZeroshotCLIP zero-shot ucf101: lacks dataset ucf101"  # last


def test_counts_are_compared_with_the_published_ones(root):
    done = runner(root, "--datasets", "eurosat", "--methods", "CoOp")
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        f"error: EuroSAT: {root}/data/eurosat/split_zhou_EuroSAT.json: not the published split: classes 5 (published "
        "10), train 15 (published 13,500), val 10 (published 5,400), test 10 (published 8,100); put the published "
        "split_zhou_EuroSAT.json in place (see DATASETS.md#eurosat)")


def test_weights_missing_offline_and_a_missing_teacher_checkpoint(root):
    done = runner(root, "--datasets", "eurosat", "--methods", "CoOp", "--other-splits", weights=False)
    assert done.returncode == 2
    assert table(done.stdout)[("weights", "ViT-B/16")] == ["missing", "(offline)", "6"]  # CoOp: 3 train, 3 test
    url = "https://openaipublic.azureedge.net/clip/models/5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85e4ecb61988df416f"
    assert done.stderr.splitlines()[0] == (
        f"error: {root}/home/.cache/clip/ViT-B-16.pt: CLIP weights ViT-B/16 missing and this node cannot download "
        f"them; download {url}/ViT-B-16.pt into $CLIP_WEIGHTS_DIR or ~/.cache/clip")
    done = runner(root, "--datasets", "eurosat", "--methods", "CoOp", "--other-splits", "--skip-missing",
                  weights=False)
    assert done.returncode == 2 and done.stderr == "error: no job has all its inputs; fix the problems above\n"
    nowhere = str(root / "no-teacher")
    done = runner(root, "--datasets", "eurosat", "--methods", "PETR", "--other-splits", TEACHER_CKPT=nowhere)
    assert done.returncode == 2
    assert table(done.stdout)[("teacher", nowhere)] == ["missing", "3"]
    assert done.stderr.splitlines()[0] == (f"error: {nowhere}: TEACHER_CKPT not found; set it to a teacher "
                                           "checkpoint or PromptSRC run folder, or unset it so that the sweep trains "
                                           "the teacher")


def test_the_preflight_resolves_each_jobs_clips_as_the_job_will(root):
    """``--config demo`` names no backbone: the jobs would fail on an empty MODEL.BACKBONE.NAME, so the preflight
    says so instead of assuming ViT-B/16; with ``--backbone`` and ``--teacher-name`` files (flags, or the knobs) every
    job's runs resolve them, the teacher job's backbone included."""
    done = runner(root, "--other-splits", "--datasets", "eurosat", "--config", "demo")
    rows = table(done.stdout)
    assert rows[("weights", "no")] == ["backbone", str(JOBS_PER_DATASET)]  # the teacher's demo config too
    assert done.returncode == 2 and "error: no CLIP named: the jobs' config names no MODEL.BACKBONE.NAME" in done.stderr
    student, teacher = root / "weights" / "ViT-B-16.pt", root / "weights" / "ViT-L-14.pt"
    for how in (("--backbone", str(student), "--teacher-name", str(teacher)), ()):
        env = {} if how else {"BACKBONE": str(student), "TEACHER_NAME": str(teacher)}
        done = runner(root, "--other-splits", "--datasets", "eurosat", "--config", "demo", *how, **env)
        rows = table(done.stdout)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
        assert rows[(("weights", str(student)))] == ["cached", f"({student})", str(JOBS_PER_DATASET - 1)]
        assert rows[(("weights", str(teacher)))] == ["cached", f"({teacher})", str(1 + 6)]  # teacher; PETR, PromptKD


def test_the_default_teacher_clip_is_the_trainers():
    from runner.preflight import DEFAULT_TEACHER
    from trainers.distillation.distill import TEACHER_KEYS

    assert TEACHER_KEYS["TEACHER_NAME"][0] == DEFAULT_TEACHER
