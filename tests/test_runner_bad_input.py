"""Bad arguments to the runner are one ``error:`` line (exit status 2) before anything starts: no plan printed, no
job launched, nothing written under the output root. One row per case: its arguments, the exit status and the
first words of the line; some cases first place a file, link or FIFO where the runner writes (``PLACED``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from runner.arguments import check_opts_keys
from runner.cli import build_parser, make_sweep
from runner.protocols import Planner
from tests.helpers_run import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASET_NAMES = " ".join(sorted(f[:-5] for f in os.listdir(os.path.join(REPO, "configs", "datasets"))
                                if f.endswith(".yaml")))

CASES = {
    "unknown dataset": (["--datasets", "nosuch"], 2, f"error: unknown dataset 'nosuch'; use one of: {DATASET_NAMES}"),
    "unknown xd source": (["--protocol", "xd", "--datasets", "dtd", "--source", "nosuch"], 2,
                          "error: unknown dataset 'nosuch'; use one of: caltech101 "),
    "negative shots": (["--protocol", "xd", "--shots", "-3"], 2,
                       "error: --shots -3: give 0 (every train image) or a number of images"),
    "odd extra-opts": (["--extra-opts", "OPTIM.MAX_EPOCH 2 OPTIM.LR"], 2,
                       "error: --extra-opts 'OPTIM.MAX_EPOCH 2 OPTIM.LR': an odd number of words (3); it takes KEY "
                       "VALUE pairs"),
    "unknown extra-opts key": (["--extra-opts", "OPTIM.MAX_EPOCHS 2"], 2,
                               "error: --extra-opts: CoOp: unknown config key 'OPTIM.MAX_EPOCHS'"),
    "extra-opts OUTPUT_DIR": (["--extra-opts", "OUTPUT_DIR {tmp}/elsewhere/run"], 2,
                              "error: --extra-opts: OUTPUT_DIR is set by the runner for each job: leave it out and "
                              "choose the output root with --output-root"),
    "extra-opts SEED": (["--extra-opts", "OPTIM.MAX_EPOCH 2 SEED 5"], 2,
                        "error: --extra-opts: SEED is set by the runner for each job: leave it out and give the seeds "
                        "with --seeds"),
    "extra-opts DATASET.ROOT": (["--extra-opts", "DATASET.ROOT {tmp}/elsewhere"], 2,
                                "error: --extra-opts: DATASET.ROOT is set by the runner for each job: leave it out and "
                                "give the datasets folder with --data"),
    "extra-opts DATASET.NAME": (["--extra-opts", "DATASET.NAME DescribableTextures"], 2,
                                "error: --extra-opts: DATASET.NAME is set by the runner for each job: leave it out and "
                                "name the datasets with --datasets"),
    "extra-opts DATASET.NUM_SHOTS": (["--extra-opts", "DATASET.NUM_SHOTS 4"], 2,
                                     "error: --extra-opts: DATASET.NUM_SHOTS is set by the runner for each job: "),
    "extra-opts DATASET.SUBSAMPLE_CLASSES": (["--extra-opts", "DATASET.SUBSAMPLE_CLASSES all"], 2,
                                             "error: --extra-opts: DATASET.SUBSAMPLE_CLASSES is set by the runner for "
                                             "each job: leave it out and choose the protocol"),
    "extra-opts TRAINER.NAME": (["--extra-opts", "TRAINER.NAME PETR"], 2,
                                "error: --extra-opts: TRAINER.NAME is set by the runner for each job: leave it out and "
                                "name the methods with --methods"),
    "extra-opts a student's teacher": (["--protocol", "xd", "--extra-opts", "TRAINER.PROMPTKD.TEACHER_CKPT /x"], 2,
                                       "error: --extra-opts: TRAINER.PROMPTKD.TEACHER_CKPT is set by the runner for "
                                       "each job: leave it out and set TEACHER_CKPT=PATH"),
    "extra-opts the xd source": (["--protocol", "xd", "--methods", "PETR", "--extra-opts",
                                  "DATASET.SOURCE_DATASET ImageNet"], 2,
                                 "error: --extra-opts: DATASET.SOURCE_DATASET is set by the runner for each job: "
                                 "leave it out and name the cross-dataset source with --source"),
    "output under a file": (["--output-root", "{tmp}/file/out"], 2,
                            "error: --output-root {tmp}/file/out: {tmp}/file is a file, not a folder"),
    "read-only output (--output, the former name)": (["--output", "{tmp}/read-only/out"], 2,
                                                     "error: --output-root {tmp}/read-only/out: {tmp}/read-only is not "
                                                     "writable"),
    "SLURM that does not answer": (["--executor", "slurm"], 2,
                                   "error: --executor slurm: SLURM does not answer here (`sinfo` exited 1: sinfo: "),
    "job log a symbolic link": ([], 2, "error: {tmp}/logs/CoOp_train_dtd_seed1.log is a symbolic link, not a regular "
                                       "file: the runner appends the output of job 'CoOp train dtd seed1' to this log"),
    "job log a FIFO": ([], 2, "error: {tmp}/logs/CoOp_train_dtd_seed1.log is a FIFO, not a regular file: "),
    "logs folder a symbolic link": (["--log-dir", ""], 2,
                                    "error: {tmp}/out/logs is a symbolic link, not a folder: the runner writes its "
                                    "logs and tables under {tmp}/out and follows no link there"),
    "table folder a symbolic link": ([], 2, "error: {tmp}/out/base2new is a symbolic link, not a folder: "),
}
PLACED = {
    "job log a symbolic link": {"logs/CoOp_train_dtd_seed1.log": "link"},
    "job log a FIFO": {"logs/CoOp_train_dtd_seed1.log": "fifo"},
    "logs folder a symbolic link": {"out/logs": "link"},
    "table folder a symbolic link": {"out/base2new": "link"},
    "SLURM that does not answer": {"no-cluster/slurm.conf": "empty"},
}
"""What a case places before the runner starts (relative to the test's folder): a symbolic link to ``elsewhere``
(a file outside the output), a FIFO or an empty file."""
ENV = {"SLURM that does not answer": {"SLURM_CONF": "{tmp}/no-cluster/slurm.conf"}}
"""Environment a case sets: SLURM's own binaries, pointed at a slurm.conf that configures no cluster (they fail at
once; with no slurm.conf at all they retry for a minute first, then fail alike)."""


def place(tmp_path, placed: dict[str, str]) -> None:
    for rel, kind in placed.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "link":
            path.symlink_to(tmp_path / "elsewhere")
        elif kind == "empty":
            path.write_text("")
        else:
            os.mkfifo(path)


def tree(root) -> dict[str, tuple[str, int]]:
    """Every path under ``root`` (links not followed) with its kind and size."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            info = os.lstat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), root)] = (oct(info.st_mode >> 12), info.st_size)
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_bad_arguments_stop_before_anything_starts(tmp_path, case):
    args, status, first = CASES[case]
    if case.startswith("read-only output") and os.geteuid() == 0:
        pytest.skip("root may write into a read-only folder")
    if case in ENV and shutil.which("sinfo") is None:
        pytest.skip("SLURM's client binaries are not installed (test_runner_slurm_unit.py covers a machine without)")
    (tmp_path / "data").mkdir()
    (tmp_path / "file").write_text("")
    (tmp_path / "read-only").mkdir(mode=0o555)
    (tmp_path / "elsewhere").mkdir()
    place(tmp_path, PLACED.get(case, {}))
    before = tree(tmp_path)
    protocol = args[1] if args[:1] == ["--protocol"] else "base2new"
    args = args[2:] if args[:1] == ["--protocol"] else args
    argv = ["--methods", "PromptKD" if protocol == "xd" else "CoOp", "--datasets", "dtd", "--seeds", "1", "--data",
            str(tmp_path / "data"), "--output-root", str(tmp_path / "out"), "--log-dir", str(tmp_path / "logs"),
            *[a.format(tmp=tmp_path) for a in args]]
    env = {**os.environ, **{k: v.format(tmp=tmp_path) for k, v in ENV.get(case, {}).items()}}
    done = subprocess.run([sys.executable, "-m", "runner", protocol, *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert done.returncode == status, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.startswith(first.format(tmp=tmp_path)) and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stdout == "" and tree(tmp_path) == before  # nothing written, nothing through a link either


VALUE_CASES = {
    "of the wrong type": ("OPTIM.LR fast", "--extra-opts: CoOp: Type mismatch"),
    "out of its range": ("OPTIM.LR -1", "--extra-opts: CoOp: OPTIM.LR is -1.0; it must be a number > 0"),
}
"""--extra-opts values the config schema refuses: the line the runner prints after ``error:``. The check is the one
the command line makes (``check_opts_keys`` on the sweep's planned jobs), run in this process, which holds torch
already, instead of a runner's warm worker that imports it for each case; "unknown extra-opts key" above runs the
same check through the command line."""


@pytest.mark.parametrize("case", list(VALUE_CASES))
def test_an_extra_opts_value_the_schema_refuses_is_one_line(tmp_path, case):
    opts, line = VALUE_CASES[case]
    args = build_parser().parse_args(["base2new", "--methods", "CoOp", "--datasets", "dtd", "--seeds", "1", "--data",
                                      str(tmp_path), "--extra-opts", opts])
    sweep = make_sweep(args)
    with pytest.raises(ValueError) as error:
        check_opts_keys(sweep.extra_opts, Planner(sweep).plan(), lambda fn, *fn_args: fn(*fn_args))
    assert str(error.value).startswith(line) and "\n" not in str(error.value)


def test_the_runner_does_not_import_torch():
    """The runner process plans, checks its arguments and schedules without torch (the checks that need the config
    schema, and the report, run in a warm worker or a child process)."""
    done = subprocess.run([sys.executable, "-c", "import sys, runner.cli, runner.schedule, runner.local, "
                           "runner.tables, runner.arguments; print('torch' in sys.modules)"], cwd=REPO,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.stdout.strip() == "False", done.stderr
