"""The local executor's jobs (``python train.py ...`` or a unit command, each a call run in a warm worker process of
its slot) give the same results whichever worker runs them, with their logs; the fast profile end to end."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid

import pytest

from engine.preemption import held
from engine.runs import run_state
from runner.jobs import Job, command_line
from runner.local import HELD_SIGNALS, LocalExecutor
from runner.schedule import run_plan
from tests.helpers_datasets import write_tree
from tests.helpers_jobs import Toy
from tests.helpers_petr import write_eurosat
from tests.helpers_run import HANG_GUARD_S, TREE_ENV, alive, default_sigint, left_behind, train_argv
from units.call import TrainCall, UnitCall

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ("INPUT.SIZE (32,32) OPTIM.MAX_EPOCH 1 DATALOADER.NUM_WORKERS 0 DATALOADER.TRAIN_X.BATCH_SIZE 8 "
         "DATALOADER.TEST.BATCH_SIZE 8 USE_CUDA False")
"""Tiny runs of the shipped configs (as tests/test_petr_scripts.py)."""


@pytest.mark.slow  # four tiny runs in warm workers: 13 s
def test_train_py_and_a_unit_give_the_same_run_in_any_warm_worker(tmp_path, tiny_clip_file, monkeypatch):
    """All start in the repository root whatever the runner's working folder (the configs' paths are relative); the
    same train.py run in two slots' workers, and as a unit command (``scripts/zsclip/zeroshot.sh``, with its knobs),
    gives the same results; a user error in the warm worker comes back as train.py's exit status 2 with its
    ``error:`` line in the tail."""
    monkeypatch.chdir(tmp_path)
    write_tree("EuroSAT", tmp_path / "data", mode="json")
    opts = ("MODEL.BACKBONE.NAME", tiny_clip_file, "INPUT.SIZE", "(32, 32)", "DATALOADER.NUM_WORKERS", "0",
            "USE_CUDA", "False")

    def job(name: str) -> Job:
        out = tmp_path / name
        args = train_argv("ZeroshotCLIP", "vit_b16", tmp_path / "data", out, flags=("--eval-only",),
                          backbone=tiny_clip_file)
        return Job(name=name, kind="zero-shot", method="ZeroshotCLIP", dataset="eurosat", call=TrainCall(tuple(args)),
                   runs=(str(out),))

    warm, other = job("warm"), job("other")
    unit_run = tmp_path / "unit" / "ZeroshotCLIP" / "vit_b16" / "eurosat"
    knobs = {"DATA": str(tmp_path / "data"), "OUTPUT_ROOT": str(tmp_path / "unit"),
             "EXTRA_OPTS": " ".join(("INPUT.SIZE", "(32,32)", *opts[4:])), "BACKBONE": tiny_clip_file}
    unit = Job(name="unit", kind="zero-shot", method="ZeroshotCLIP", dataset="eurosat", runs=(str(unit_run),),
               call=UnitCall("zsclip", "zeroshot", ("eurosat", "vit_b16"), knobs))
    bad = Job(name="bad", kind="train", method="M", dataset="eurosat", runs=(str(tmp_path / "bad"),),
              call=TrainCall(("--trainer", "NoSuchTrainer", "--output-dir", str(tmp_path / "bad"))))
    assert command_line(bad) == f"python train.py --trainer NoSuchTrainer --output-dir {tmp_path / 'bad'}"
    assert command_line(unit) == " ".join(f"{k}={shlex.quote(v)}" for k, v in knobs.items()) + \
        " bash scripts/zsclip/zeroshot.sh eurosat vit_b16"  # the line a user pastes
    executor = LocalExecutor([], cpu_jobs=2, threads=1)
    report = run_plan([warm, other, unit, bad], executor, str(tmp_path / "logs"))
    executor.close()
    assert sorted(report.done) == ["other", "unit", "warm"] and list(report.failed) == ["bad"]
    assert report.failed["bad"].startswith("exit status 2; ") and "error: Unknown trainer" in report.failed["bad"]
    outs = {"warm": tmp_path / "warm", "other": tmp_path / "other", "unit": unit_run}
    results = {name: json.loads((out / "results.json").read_text()) for name, out in outs.items()}
    assert results["warm"]["accuracy"] == results["other"]["accuracy"] == results["unit"]["accuracy"]
    assert results["warm"]["macro_f1"] == results["other"]["macro_f1"] == results["unit"]["macro_f1"]
    for name in outs:
        log = (tmp_path / "logs" / f"{name}.log").read_text()
        assert log.splitlines()[0].endswith("local CPU slot, warm worker")
        assert f"* accuracy: {results[name]['accuracy']:.2f}%" in log  # train.py's own output, fds included
    assert f"-> {unit_run}" in (tmp_path / "logs" / "unit.log").read_text()  # the unit's own line


def fast_sweep(tmp_path, tiny_clip_file, tiny_teacher_clip_file, marker: str, workers: int,
               *opts: str) -> tuple[list[str], dict[str, str]]:
    """``python -m runner`` of PETR's base-to-novel jobs on a tiny EuroSAT under ``--profile fast`` (compilation left
    out: it is tested in test_compile.py and takes minutes on a CPU) with ``workers`` persistent loader workers per
    loader, then ``opts``: its command and environment, marked ``marker`` (``processes_marked``)."""
    write_eurosat(tmp_path / "data", train_per_class=6)
    env = {k: v for k, v in os.environ.items() if k not in ("DATA", "TEACHER_DIR", "EXTRA_OPTS")}
    env.update(BACKBONE=tiny_clip_file, TEACHER_NAME=tiny_teacher_clip_file, TEACHER_CKPT="none")
    env[TREE_ENV] = marker
    return [sys.executable, "-m", "runner", "base2new", "--methods", "PETR", "--datasets", "eurosat", "--seeds", "1",
            "--profile", "fast", "--data", str(tmp_path / "data"), "--output", str(tmp_path / "out"), "--threads",
            "1", "--other-splits", "--extra-opts",
            " ".join([SMALL, f"TRAIN.COMPILE none DATALOADER.NUM_WORKERS {workers}", *opts])], env


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_fast_profile_runs_end_to_end(tmp_path, tiny_clip_file, tiny_teacher_clip_file, workers):
    """PETR's base-to-novel jobs under ``--profile fast``: the runs use the shared views cache and persistent loader
    workers (with one worker per loader: each a process), and the runner ends with its table, leaving no process
    behind (a routed trainer, which its router refers to, outlives its run in the warm worker: its loaders' workers
    must end with the run all the same)."""
    marker = uuid.uuid4().hex
    argv, env = fast_sweep(tmp_path, tiny_clip_file, tiny_teacher_clip_file, marker, workers)
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    log = (out / "base2new/train_base/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1/log.txt").read_text()
    assert re.search(r"TEACHER_CACHE: views\b", log) and re.search(r"PERSISTENT_WORKERS: True\b", log)
    assert re.search(r"COMPILE: none\b", log) and re.search(rf"NUM_WORKERS: {workers}\b", log)  # the user's last
    assert [p.suffix for p in sorted((out / "teacher_cache").iterdir())].count(".pt") >= 1  # the sweep's shared cache
    assert re.search(r"^eurosat +PETR ", done.stdout, re.MULTILINE), done.stdout[-2000:]
    assert left_behind(marker) == []


@pytest.mark.slow
def test_killing_the_runner_ends_every_process_it_started(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    """SIGKILL to the runner of a fast-profile sweep in the middle of PETR's training (as a job scheduler or the
    OOM killer ends it): its warm worker stops train.py as the runner's own stop would (the run saves its state:
    resumable) and ends with its loader workers; no process the runner started is left."""
    marker = uuid.uuid4().hex
    argv, env = fast_sweep(tmp_path, tiny_clip_file, tiny_teacher_clip_file, marker, 2, "OPTIM.MAX_EPOCH 100000")
    run = tmp_path / "out/base2new/train_base/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1"
    output = tmp_path / "runner.txt"
    with open(output, "w") as out:
        runner = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while runner.poll() is None and time.monotonic() < deadline and not (
                (run / "log.txt").exists() and "epoch [2/" in (run / "log.txt").read_text()):
            time.sleep(0.2)
        assert runner.poll() is None, f"the runner ended before its job trained:\n{output.read_text()[-3000:]}"
    finally:
        runner.kill()
        runner.wait()
    assert left_behind(marker) == []
    assert run_state(str(run)) == "resumable"


LEAVING_RUNNER = """
import sys
from runner.jobs import Job
from runner.local import HELD_SIGNALS, LocalExecutor
from runner.schedule import run_plan
from tests.helpers_jobs import Sleeper, Toy

logs, run, *sleeper = sys.argv[1:]
call = Sleeper(*sleeper, loader_workers=2) if sleeper else Toy(finish=run, loader_workers=2)
executor = LocalExecutor([], threads=1)
report = run_plan([Job(name="j", kind="train", method="M", dataset="d", call=call, runs=(run,))], executor, logs)
executor.close()
print("done" if report.ok else "failed")
"""
"""A runner with one job in a warm worker that leaves two persistent loader workers behind: a Toy that finishes its
run, or (given a pid and a got file) a Sleeper that runs until a signal stops it."""


def test_loader_workers_a_job_leaves_do_not_keep_the_runner(tmp_path):
    """A job whose loader, in a reference cycle, keeps two persistent workers (which ignore SIGTERM, as the engine's
    do): the runner still ends with the job done, and no process it started is left."""
    marker = uuid.uuid4().hex
    done = subprocess.run([sys.executable, "-c", LEAVING_RUNNER, str(tmp_path / "logs"), str(tmp_path / "run")],
                          cwd=REPO, env={**os.environ, TREE_ENV: marker}, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0 and done.stdout.endswith("\ndone\n"), done.stdout[-3000:] + done.stderr[-3000:]
    assert left_behind(marker) == []


def test_killing_the_runner_ends_its_warm_worker_and_loader_workers(tmp_path):
    """SIGKILL to the runner while a job runs (with two loader workers): the warm worker gives the job SIGTERM, as
    the runner's own stop does, and then ends with the loader workers; no process the runner started is left."""
    marker = uuid.uuid4().hex
    pid_file, got = tmp_path / "pid", tmp_path / "got"
    runner = subprocess.Popen([sys.executable, "-c", LEAVING_RUNNER, str(tmp_path / "logs"), str(tmp_path / "run"),
                               str(pid_file), str(got)], cwd=REPO, env={**os.environ, TREE_ENV: marker},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not pid_file.exists() and runner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runner.poll() is None and pid_file.exists()
    finally:
        runner.kill()
        runner.wait()
    assert left_behind(marker) == []
    assert got.read_text() == str(int(signal.SIGTERM))


def test_a_rerun_with_another_config_is_not_skipped(tmp_path, tiny_clip_file):
    """A finished run is skipped only for the job that made it with the same command; run again with another opt,
    train.py compares the run's recorded config and stops with the difference (the results stay), and with an opt
    that cannot change the result it skips the run and the new command is recorded."""
    write_tree("EuroSAT", tmp_path / "data", mode="json")
    out = tmp_path / "zs"

    def job(*opts: str) -> Job:
        args = train_argv("ZeroshotCLIP", "vit_b16", tmp_path / "data", out, *opts, flags=("--eval-only",),
                          backbone=tiny_clip_file)
        return Job(name="zs", kind="zero-shot", method="ZeroshotCLIP", dataset="eurosat", call=TrainCall(tuple(args)),
                   runs=(str(out),))

    executor = LocalExecutor([], cpu_jobs=1, threads=1)
    try:
        assert run_plan([job()], executor, str(tmp_path / "logs")).done == ["zs"]
        results = (out / "results.json").read_text()
        assert run_plan([job()], executor, str(tmp_path / "logs")).finished_before == ["zs"]
        report = run_plan([job("INPUT.INTERPOLATION", "bilinear")], executor, str(tmp_path / "logs"))
        why = report.failed.get("zs", "")
        assert "holds a finished run that differs from this one" in why and "INPUT.INTERPOLATION" in why
        assert (out / "results.json").read_text() == results
        quieter = job("TRAIN.PRINT_FREQ", "7")
        assert run_plan([quieter], executor, str(tmp_path / "logs")).done == ["zs"]
        assert "Run finished, skipping" in (tmp_path / "logs" / "zs.log").read_text()
        assert run_plan([quieter], executor, str(tmp_path / "logs")).finished_before == ["zs"]
    finally:
        executor.close()
    assert (out / "results.json").read_text() == results


@pytest.mark.slow
def test_a_sweep_whose_jobs_were_refused_publishes_no_stale_table(tmp_path, tiny_clip_file):
    """The same sweep rerun with another option: train.py refuses each finished run (it differs); the runner exits 1
    naming the refused job, prints no "Table written" and leaves the first sweep's table files as they were."""
    write_tree("EuroSAT", tmp_path / "data", mode="json")
    env = {k: v for k, v in os.environ.items() if k not in ("DATA", "TEACHER_DIR", "EXTRA_OPTS")}
    env["BACKBONE"] = tiny_clip_file
    out = tmp_path / "out"

    def sweep(*opts: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "runner", "base2new", "--methods", "ZeroshotCLIP", "--datasets", "eurosat",
             "--seeds", "1", "--data", str(tmp_path / "data"), "--output", str(out), "--threads", "1",
             "--other-splits", "--extra-opts", " ".join([SMALL, *opts])], cwd=REPO, env=env, capture_output=True,
            text=True, timeout=HANG_GUARD_S)

    first = sweep()
    assert first.returncode == 0 and "Table written to" in first.stdout, first.stdout[-3000:] + first.stderr[-3000:]
    tables = {ext: (out / "base2new" / f"b2n_table.{ext}").read_text() for ext in ("txt", "csv")}
    refused = sweep("INPUT.INTERPOLATION", "bilinear")
    assert refused.returncode == 1, refused.stdout[-3000:]
    assert "Table written" not in refused.stdout and "No table written: no run of this sweep was verified; " in \
        refused.stdout and "parse_test_res" not in refused.stdout + refused.stderr
    left = refused.stdout.split("Left out of the table", 1)[1].splitlines()
    assert left[1].startswith("  ZeroshotCLIP zero-shot eurosat: error: ") and "differs from this one" in left[1]
    assert {ext: (out / "base2new" / f"b2n_table.{ext}").read_text() for ext in ("txt", "csv")} == tables


WARM_RUNNER = """
import sys
from runner.jobs import Job
from runner.local import HELD_SIGNALS, LocalExecutor
from runner.schedule import run_plan, stop_signal
from units.call import TrainCall

job = Job(name="coop", kind="train", method="CoOp", dataset="eurosat", call=TrainCall(tuple(sys.argv[3:])),
          runs=(sys.argv[2],))
try:
    run_plan([job], LocalExecutor([], threads=1), sys.argv[1])
except KeyboardInterrupt as e:
    sys.exit(128 + stop_signal(e))
"""
"""A runner (as runner.cli runs it) with one train.py job, run in a warm worker."""


def own_group_children(pid: int) -> list[int]:
    """The child processes of ``pid`` that lead a process group of their own (the runner's warm workers); /proc."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and int(fields[2]) == int(entry):
            found.append(int(entry))
    return found


@pytest.mark.slow
def test_sigterm_stops_train_py_in_a_warm_worker(tmp_path, tiny_clip_file):
    """SIGTERM to the runner reaches train.py in its warm worker, which saves its state (a resumable run) and ends;
    the runner exits 143 and leaves no worker behind."""
    write_tree("EuroSAT", tmp_path / "data", mode="json")
    out = tmp_path / "coop"
    args = train_argv("CoOp", "vit_b16_ctxv1", tmp_path / "data", out, *SMALL.split(), "OPTIM.MAX_EPOCH", "100000",
                      "DATASET.NUM_SHOTS", "2", backbone=tiny_clip_file, tiny=False)
    runner = subprocess.Popen([sys.executable, "-c", WARM_RUNNER, str(tmp_path / "logs"), str(out), *args], cwd=REPO,
                              preexec_fn=default_sigint, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        log = out / "log.txt"
        while runner.poll() is None and time.monotonic() < deadline and not (
                log.exists() and "epoch [2/" in log.read_text()):
            time.sleep(0.2)
        workers = own_group_children(runner.pid)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=HANG_GUARD_S) == 143
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert len(workers) == 1 and not any(alive(pid) for pid in workers)
    assert run_state(str(out)) == "resumable"


def test_a_job_log_that_is_a_link_or_a_fifo_fails_its_job(tmp_path):
    """A job's log that is a symbolic link (to a file outside the output) or a FIFO when the job starts (the command
    line refuses both before anything starts; here they appear behind its back): the job fails at once with one
    line naming the log, the link's target is left as it was, and the other job runs."""
    logs = tmp_path / "logs"
    logs.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("kept\n")
    (logs / "linked.log").symlink_to(outside)
    os.mkfifo(logs / "fifo.log")
    jobs = [Job(name=name, kind="train", method="M", dataset="d", runs=(str(tmp_path / name),),
                call=Toy(say=name, finish=str(tmp_path / name))) for name in ("linked", "fifo", "plain")]
    executor = LocalExecutor([], threads=1)
    try:
        report = run_plan(jobs, executor, str(logs))
    finally:
        executor.close()
    assert report.done == ["plain"] and outside.read_text() == "kept\n"
    assert report.failed["linked"].startswith(f"{logs / 'linked.log'} is a symbolic link, not a regular file; ")
    assert report.failed["fifo"].startswith(f"{logs / 'fifo.log'} is a FIFO, not a regular file; ")
    assert "kept" not in report.failed["linked"]  # its tail is not read through the link either


def test_stop_signals_wait_until_a_warm_worker_has_started():
    """A stop signal that arrives while the runner starts a warm worker reaches the runner's handler only after the
    start (a start it interrupted left the new process without its start-up data: an EOFError traceback), and it is
    not lost."""
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest-xdist's workers ignore it
    try:
        with pytest.raises(KeyboardInterrupt):  # SIGINT's own handler, as the block ends
            with held(HELD_SIGNALS):
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # a handler runs at the next bytecode boundary: here, were the signals not held
                assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


TORCH_FIRST = """
import torch  # a main module that imports torch, as the demo's does: spawn imports it again in each warm worker
torch.set_num_threads(3)

from runner.local import LocalExecutor


def threads() -> int:
    return torch.get_num_threads()


if __name__ == "__main__":
    executor = LocalExecutor([], threads=1)
    print(executor.call(threads))
    executor.close()
"""


def test_a_slots_thread_count_holds_when_the_main_module_imported_torch(tmp_path):
    """A warm worker of a program whose main module imports torch (spawn imports it again there, before the worker's
    set-up) runs its slot's thread count: torch had read OMP_NUM_THREADS as it loaded (the demo's runs had a thread
    per core, and the digits of another float order, unless the caller's environment set the variable)."""
    script = tmp_path / "torch_first.py"
    script.write_text(TORCH_FIRST)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, env={**env, "PYTHONPATH": REPO},
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr[-3000:]
